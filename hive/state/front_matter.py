"""A fast reader for the front matter hive itself writes; anything else is tomllib's to read.

Taking in a large queue parses every issue file, and tomllib spent ~0.5 ms on each (most of a
full index rebuild). The files hive writes (`issue_file.render`, tomlkit's layout) use a handful
of shapes: one `key = value` per line, the value a plain basic string, a small non-negative
integer, an offset date-time in UTC (`2026-11-30T10:00:00Z`) or an array of plain strings.
`read` parses exactly those and returns None for anything else — a comment, an escape, a float,
a table, a second `=` on a key, a blank line, a key set twice — so that `tomllib` reads it,
raising where the file is broken. `tests/test_front_matter.py` holds it equal to tomllib on a
corpus of generated, hand-written and mangled front matters.

Nothing here is a check of trust: the size and depth limits are applied before either reader
runs (`issue_file.parse`, `trust.py`).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

# A basic string without escapes: no quote, no backslash, no control character but tab (TOML).
_PLAIN = r'"[^"\\\x00-\x08\x0a-\x1f\x7f]*"'
_KEY = re.compile(r"[A-Za-z0-9_-]+").fullmatch
_STRING = re.compile(_PLAIN).fullmatch
_INTEGER = re.compile(r"0|[1-9][0-9]{0,17}").fullmatch
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z").fullmatch
_ARRAY = re.compile(rf"\[\]|\[{_PLAIN}(?:, {_PLAIN})*\]").fullmatch
_ITEMS = re.compile(_PLAIN).findall


def read(front: str) -> dict[str, Any] | None:
    """The front matter as tomllib would read it, if it has only the shapes hive writes; else None."""
    result: dict[str, Any] = {}
    if not front:
        return None
    for line in front.split("\n"):
        key, equals, text = line.partition(" = ")
        if not equals or not _KEY(key) or key in result:   # a key set twice: tomllib's error to report
            return None
        value = _value(text)
        if value is None:
            return None
        result[key] = value
    return result


def _value(text: str) -> Any:
    first = text[:1]
    if first == '"':
        return text[1:-1] if _STRING(text) else None
    if first == "[":
        return [item[1:-1] for item in _ITEMS(text)] if _ARRAY(text) else None
    if _INTEGER(text):
        return int(text)
    found = _TIME(text)
    if found is None:
        return None
    try:
        return datetime(*map(int, found.groups()), tzinfo=timezone.utc)   # type: ignore[misc]
    except ValueError:
        return None               # not a real date (month 13, hour 25, second 60...): tomllib's to judge
