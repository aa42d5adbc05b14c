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
_LINE = re.compile(
    r'([A-Za-z0-9_-]+) = (?:'
    rf'(?P<string>{_PLAIN})'
    r'|(?P<integer>0|[1-9][0-9]{0,17})'
    r'|(?P<time>(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})T(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})Z)'
    rf'|(?P<array>\[\]|\[{_PLAIN}(?:, {_PLAIN})*\])'
    r')')
_ITEM = re.compile(_PLAIN)


def read(front: str) -> dict[str, Any] | None:
    """The front matter as tomllib would read it, if it has only the shapes hive writes; else None."""
    result: dict[str, Any] = {}
    if not front:
        return None
    for line in front.split("\n"):
        found = _LINE.fullmatch(line)
        if found is None:
            return None
        key = found.group(1)
        if key in result:
            return None          # a key set twice: tomllib's error to report
        value = _value(found)
        if value is None:
            return None
        result[key] = value
    return result


def _value(found: re.Match[str]) -> Any:
    if found.group("string") is not None:
        return found.group("string")[1:-1]
    if found.group("integer") is not None:
        return int(found.group("integer"))
    if found.group("time") is not None:
        try:
            return datetime(int(found.group("y")), int(found.group("mo")), int(found.group("d")),
                            int(found.group("h")), int(found.group("mi")), int(found.group("s")),
                            tzinfo=timezone.utc)
        except ValueError:
            return None           # not a real date (month 13, hour 25, second 60...): tomllib's to judge
    array = found.group("array")
    return [item[1:-1] for item in _ITEM.findall(array)]
