"""A fast reader for the front matter hive itself writes; anything else is tomllib's to read.

Taking in a large queue parses every issue file, and tomllib spent ~0.5 ms on each (most of a
full index rebuild); this reads one in ~5-15 µs. The files hive writes (`issue_file.render`, tomlkit's layout) use a handful
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
from datetime import datetime
from functools import cache
from typing import Any, Callable

# A basic string without escapes: no quote, no backslash, no control character but tab (TOML).
_PLAIN = r'"[^"\\\x00-\x08\x0a-\x1f\x7f]*"'
# The values hive writes, each one group: a plain string (its text), a small non-negative
# integer, an offset date-time in UTC (without the `Z`), an array of plain strings.
_STRING_VALUE = r'"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"'
_INTEGER_VALUE = r"(0|[1-9][0-9]{0,17})"
_TIME_VALUE = r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})Z"
_ARRAY_VALUE = rf"(\[\]|\[{_PLAIN}(?:, {_PLAIN})*\])"
# One line: a bare key, ` = `, one of those values.
_LINE = rf"([A-Za-z0-9_-]+) = (?:{_STRING_VALUE}|{_INTEGER_VALUE}|{_TIME_VALUE}|{_ARRAY_VALUE})"
_UNGROUPED = _LINE.replace("(", "(?:").replace("(?:?:", "(?:")
# The whole front matter checked in one call, then its lines' values taken in one more: a Python
# step per line cost most of the time (~30 µs a file, 3 s of a 100k rebuild).
_WHOLE = rf"{_UNGROUPED}(?:\n{_UNGROUPED})*"
_LINES = _LINE + r"(?:\n|\Z)"


def _time(text: str) -> datetime:
    """`YYYY-MM-DDTHH:MM:SS` (the regex's) in UTC, with datetime()'s range checks (ValueError);
    the offset parsed, not `replace`d in: ~5× faster, and the same `timezone.utc`."""
    return datetime.fromisoformat(text + "+00:00")


# The very layout `issue_file.render` writes for an issue without extra keys, matched at once:
# the values go straight into the dict, no step per line (~3× faster than the general way).
_RENDERED = (
    rf"title = {_STRING_VALUE}\nstatus = {_STRING_VALUE}\npriority = {_INTEGER_VALUE}\n"
    rf"type = {_STRING_VALUE}\n(?:parent = {_STRING_VALUE}\n)?depends_on = {_ARRAY_VALUE}\n"
    rf"labels = {_ARRAY_VALUE}\n(?:touches = {_ARRAY_VALUE}\n)?assignee = {_STRING_VALUE}\ncreated = {_TIME_VALUE}\nupdated = {_TIME_VALUE}"
)


@cache
def _rendered_matchers() -> tuple[Callable[[str], re.Match[str] | None], Callable[[str], list[str]]]:
    """The regexes of the layout `render` writes, compiled when first used: a command whose index
    is current parses no file, and one that reads a file hive wrote needs no other."""
    return re.compile(_RENDERED).fullmatch, re.compile(_PLAIN).findall


@cache
def _general_matchers() -> tuple[Callable[[str], re.Match[str] | None], Callable[[str], list[Any]]]:
    """The regexes of any other front matter of the shapes hive writes (~2 ms to compile)."""
    return re.compile(_WHOLE).fullmatch, re.compile(_LINES).findall


def read(front: str) -> dict[str, Any] | None:
    """The front matter as tomllib would read it, if it has only the shapes hive writes; else None."""
    rendered_layout, items_of = _rendered_matchers()
    rendered = rendered_layout(front)
    if rendered is not None:
        return _read_rendered(rendered.groups(), items_of)
    whole, lines_of = _general_matchers()
    if not front or whole(front) is None:
        return None
    lines = lines_of(front)
    result: dict[str, Any] = {}
    for key, string, integer, time, array in lines:
        if integer:
            result[key] = int(integer)
        elif time:
            try:
                result[key] = _time(time)
            except ValueError:
                return None       # not a real date (month 13, hour 25, second 60...): tomllib's to judge
        elif array:
            result[key] = [item[1:-1] for item in items_of(array)]
        else:
            result[key] = string
    if len(result) != len(lines):
        return None               # a key set twice: tomllib's error to report
    return result


def _read_rendered(values: tuple[str | None, ...], items_of: Callable[[str], list[str]]) -> dict[str, Any] | None:
    title, status, priority, kind, parent, depends_on, labels, touches, assignee, created, updated = values
    try:
        created_at, updated_at = _time(created), _time(updated)   # type: ignore[arg-type]
    except ValueError:
        return None
    result: dict[str, Any] = {"title": title, "status": status, "priority": int(priority), "type": kind}   # type: ignore[arg-type]
    if parent is not None:
        result["parent"] = parent
    result["depends_on"] = [item[1:-1] for item in items_of(depends_on)] if depends_on != "[]" else []   # type: ignore[arg-type]
    result["labels"] = [item[1:-1] for item in items_of(labels)] if labels != "[]" else []   # type: ignore[arg-type]
    if touches is not None:
        result["touches"] = [item[1:-1] for item in items_of(touches)] if touches != "[]" else []
    result["assignee"] = assignee
    result["created"] = created_at
    result["updated"] = updated_at
    return result
