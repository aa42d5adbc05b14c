"""Issue files: Markdown with TOML front matter between `+++` lines (DESIGN §2).

Reading uses `tomllib` (fast: the index parses thousands of these); writing uses `tomlkit`, which
keeps a person's comments, ordering and layout when hive changes a field.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import datetime, timezone
from typing import Any

from hive import lines
from hive.errors import BadInput
from hive.state import front_matter, globs

STATUSES = ("open", "in_progress", "done", "finalized", "failed", "escalated", "canceled")
TERMINAL_STATUSES = frozenset({"finalized", "canceled"})
SATISFIED_BLOCKER_STATUSES = frozenset({"done", "finalized", "canceled"})
TYPES = ("task", "bug", "feature", "chore", "epic")
PRIORITIES = range(0, 5)
DEFAULT_PRIORITY = 2

ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
# \Z, not $: `$` also matches before a trailing newline, and "hv-1a2b3c\n" is no id
ID_RE = re.compile(r"^[a-z][a-z0-9]{0,15}-[0-9a-z]{6}\Z")
DELIMITER = "+++"
# An issue is a page of text, not a data store; anything bigger is a mistake or an attack (it would
# be parsed on every index catch-up, stored in the index and sent in an agent's prompt).
MAX_ISSUE_BYTES = 1 << 20
MAX_TOML_DEPTH = 16   # arrays and inline tables in a front matter: tomllib recurses on each

# Front-matter keys hive knows, in the order a new file lists them.
KNOWN_FIELDS = ("title", "status", "priority", "type", "parent", "depends_on", "labels",
                "touches", "assignee", "created", "updated")
OPTIONAL_FIELDS = frozenset({"parent", "touches"})   # a new file leaves them out when empty
_KNOWN_KEYS = frozenset(KNOWN_FIELDS)


@dataclass
class Issue:
    id: str
    title: str
    status: str = "open"
    priority: int = DEFAULT_PRIORITY
    type: str = "task"
    parent: str = ""
    depends_on: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    touches: list[str] = field(default_factory=list)   # globs of the files the work should change
    assignee: str = ""
    created: str = ""
    updated: str = ""
    body: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # keys hive does not know, kept as-is

    def to_json(self, *, with_body: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id}
        for key in KNOWN_FIELDS:
            data[key] = getattr(self, key)
        data.update({k: _jsonable(v) for k, v in self.extra.items()})
        if with_body:
            data["body"] = self.body
        return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


UNASSIGNED_STATUSES = frozenset({"open", "escalated", "canceled", "failed", "finalized"})


def holder_after(status: str, assignee: str) -> str:
    """The holder rule (DESIGN §3): the assignee an issue keeps in `status` — none in a status
    nobody holds. Every write applies it (`issues.update`), and every merge (`merge_driver`)."""
    return "" if status in UNASSIGNED_STATUSES else assignee


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def format_time(value: datetime) -> str:
    if value.tzinfo is timezone.utc:   # tomllib's and the fast reader's `Z`: strftime's text, faster
        if value.year >= 1000 and not value.microsecond:
            return value.isoformat()[:19] + "Z"      # the same text, ~10× faster than formatting
        return (f"{value.year}-{value.month:02d}-{value.day:02d}T"
                f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}Z")
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_id(prefix: str = "hv") -> str:
    import secrets   # loaded when used: `git hive list` starts without it

    return prefix + "-" + "".join(secrets.choice(ID_ALPHABET) for _ in range(6))


def is_valid_id(value: str) -> bool:
    return bool(ID_RE.match(value))


def split(text: str, where: str) -> tuple[str, str, int]:
    """Split a file into (front matter, body, line number where the front matter starts)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if text.startswith(DELIMITER + "\n"):
        found = _split_fast(text)
        if found is not None:
            return found
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != DELIMITER:
        raise BadInput("missing front matter: the file must start with a '+++' line", f"{where}:1")
    for number in range(1, len(lines)):
        if lines[number].rstrip("\r") == DELIMITER:
            front = "\n".join(lines[1:number])
            body = "\n".join(lines[number + 1:])
            return front, body.lstrip("\n"), 2
    raise BadInput("front matter is not closed: no second '+++' line", f"{where}:1")


def _split_fast(text: str) -> tuple[str, str, int] | None:
    """`split` of a file whose first line is exactly `+++`, without splitting all of it into
    lines (the body is most of a file): the closing line is the first that is `+++` followed
    only by carriage returns. None if there is none (split's error to raise)."""
    at = 3
    while True:
        at = text.find("\n" + DELIMITER, at)
        if at < 0:
            return None
        end = text.find("\n", at + 4)
        rest = text[at + 4:] if end < 0 else text[at + 4:end]
        if not rest.strip("\r"):
            body = "" if end < 0 else text[end + 1:]
            return text[4:at], body.lstrip("\n"), 2
        at += 1


def human_size(size: int) -> str:
    """`size` bytes as a person reads it: 512 bytes, 1.5 KiB, 1 MiB."""
    if size < 1024:
        return f"{size} bytes"
    amount = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        amount /= 1024
        if amount < 1024 or unit == "GiB":
            return f"{amount:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def line_of(data: str | bytes, key: str) -> int:
    """The line of a file where front-matter `key` is set (the front matter's first line if it
    is not, or the file cannot be split)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        front, _, first_line = split(text, "")
    except BadInput:
        return 1
    return _line_of_key(front, key, first_line)


def conflict_line(data: str | bytes) -> int:
    """The line of the first conflict block (`<<<<<<<` … `=======` … `>>>>>>>`, as a merge of
    both sides' changes to the same lines leaves it) in an issue file's body; 0 if none."""
    # no line starts a block (the first line is the front matter's `+++`): nothing to split
    if isinstance(data, bytes):
        if b"\n<<<<<<<" not in data:
            return 0
        text = data.decode("utf-8", "replace")
    elif "\n<<<<<<<" not in data:
        return 0
    else:
        text = data
    try:
        _, body, _ = split(text, "")
    except BadInput:
        return 0
    offset = len(text[:len(text) - len(body)].splitlines())
    opened, middle = 0, False
    for number, line in enumerate(body.splitlines(), offset + 1):
        if line.startswith("<<<<<<<") and not opened:
            opened = number
        elif line.startswith("=======") and opened:
            middle = True
        elif line.startswith(">>>>>>>") and middle:
            return opened
    return 0


def key_hints(issue: Issue) -> list[str]:
    """A hint for each unknown front-matter key that looks like a misspelled known one."""
    import difflib   # only when there are unknown keys

    hints = []
    for key in issue.extra:
        near = difflib.get_close_matches(key, KNOWN_FIELDS, n=1, cutoff=0.75)
        if near:
            hints.append(f"unknown field {key!r} (did you mean {near[0]!r}?)")
    return hints


def _line_of_key(front: str, key: str, first_line: int) -> int:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for offset, line in enumerate(front.split("\n")):
        if pattern.match(line):
            return first_line + offset
    return first_line


@lru_cache(maxsize=512)
def _load_front(front: str) -> dict[str, Any]:
    """tomllib's reading of a front matter, remembered: one state commit reads the same front
    matter up to five times (the issue at the tip, the rewrite's check before and after, the
    new file, the index). The dict is shared: read it, never change it. What hive wrote itself
    is read by `front_matter.read` (~10× faster); anything else by tomllib."""
    fast = front_matter.read(front)
    if fast is not None:
        return fast
    import tomllib   # loaded when used: `git hive list` starts without it

    return tomllib.loads(front)


def toml_depth(text: str | bytes) -> int:
    """How deep arrays and inline tables nest in an issue file's front matter (up to its closing
    `+++`), as `lines.toml_depth` measures it. Bytes are read as UTF-8 with replacement, decoded
    only if they hold enough brackets to nest that deep (a replacement never swallows an ASCII byte: the counts are the same)."""
    if isinstance(text, bytes):
        end = text.find(b"\n+++", 3)
        head = text if end < 0 else text[:end]
        if head.count(b"[") + head.count(b"{") <= MAX_TOML_DEPTH:
            return 0
        text = text.decode("utf-8", "replace")
    end = text.find("\n+++", 3)
    text = text if end < 0 else text[:end]
    if text.count("[") + text.count("{") <= MAX_TOML_DEPTH:
        return 0   # cannot nest deeper than that: no need to scan
    return lines.toml_depth(text)


def parse(data: str | bytes, issue_id: str, where: str | None = None) -> Issue:
    """Parse and validate one issue file. Raises BadInput naming `where:line` on any problem."""
    where = where or f"issues/{issue_id}.md"
    if len(data) > MAX_ISSUE_BYTES:
        raise BadInput(f"larger than {human_size(MAX_ISSUE_BYTES)}: an issue file may hold at most "
                       f"{human_size(MAX_ISSUE_BYTES)}", f"{where}:1")
    if isinstance(data, bytes):
        raw = data
        if b"\0" in raw:
            raise BadInput("binary content, not an issue file", f"{where}:1")
        try:
            data = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise BadInput(f"invalid UTF-8 at byte {exc.start}", f"{where}:{line}") from None
    if not ID_RE.match(issue_id):
        raise BadInput(f"file name is not a valid issue id: {issue_id!r} (expected like hv-1a2b3c.md)",
                       f"{where}:1")
    if "\r\n" in data:            # saved by an editor that writes CRLF line endings
        data = data.replace("\r\n", "\n")
    front, body, first_line = split(data, where)
    if toml_depth(front) > MAX_TOML_DEPTH:
        raise BadInput(f"TOML nested deeper than {MAX_TOML_DEPTH}", f"{where}:{first_line}")
    try:
        meta = _load_front(front)
    except ValueError as exc:   # tomllib.TOMLDecodeError
        line = getattr(exc, "lineno", None) or _toml_error_line(str(exc), front)
        reason = getattr(exc, "msg", None) or re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise BadInput(f"broken TOML front matter: {reason}", f"{where}:{first_line + line - 1}") from None
    return from_meta(meta, body, issue_id, where, front, first_line)


def _toml_error_line(message: str, front: str = "") -> int:
    found = re.search(r"line (\d+)", message)
    if found:
        return int(found.group(1))
    if "end of document" in message:   # e.g. a key set twice, found on the last line
        return front.count("\n") + 1
    return 1


def from_meta(meta: dict[str, Any], body: str, issue_id: str, where: str,
              front: str = "", first_line: int = 2) -> Issue:
    # the field helpers are module functions, not closures made per call: a rebuild calls this
    # 100k times; `at` is only read to name the line of a problem
    at = (where, front, first_line)
    if "title" not in meta:
        raise BadInput("missing field 'title'", f"{where}:{first_line}")
    title = _text_field(meta, "title", "", at).strip()
    if not title:
        raise _fail(at, "title", "field 'title' is empty")
    if "\n" in title or "\r" in title:
        raise _fail(at, "title", "field 'title' must be one line")
    status = _text_field(meta, "status", "open", at)
    if status not in STATUSES:
        raise _fail(at, "status", f"bad status {status!r} (one of: {', '.join(STATUSES)})")
    priority = meta.get("priority", DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITIES:
        raise _fail(at, "priority", f"bad priority {priority!r} (an integer 0-4, 0 = highest)")
    kind = _text_field(meta, "type", "task", at)
    if kind not in TYPES:
        raise _fail(at, "type", f"bad type {kind!r} (one of: {', '.join(TYPES)})")
    parent = _text_field(meta, "parent", "", at)
    if parent and not ID_RE.match(parent):
        raise _fail(at, "parent", f"parent is not a valid issue id: {parent!r}")
    depends_on = _list_field(meta, "depends_on", at)
    for blocker in depends_on:
        if not ID_RE.match(blocker):
            raise _fail(at, "depends_on", f"depends_on holds an invalid issue id: {blocker!r}")
    if issue_id in depends_on:
        raise _fail(at, "depends_on", f"{issue_id} depends on itself")
    if parent == issue_id:
        raise _fail(at, "parent", f"{issue_id} is its own parent")
    extra = {} if _KNOWN_KEYS.issuperset(meta) else {   # meta is shared
        k: copy.deepcopy(v) for k, v in meta.items() if k not in KNOWN_FIELDS}
    return Issue(
        id=issue_id, title=title, status=status, priority=priority, type=kind, parent=parent,
        depends_on=list(dict.fromkeys(depends_on)) if depends_on else depends_on,
        labels=_unique(_list_field(meta, "labels", at)), touches=_touches_field(meta, at),
        assignee=_text_field(meta, "assignee", "", at), created=_time_field(meta, "created", at),
        updated=_time_field(meta, "updated", at), body=body, extra=extra,
    )


def _fail(at: tuple[str, str, int], key: str, message: str) -> BadInput:
    where, front, first_line = at
    return BadInput(message, f"{where}:{_line_of_key(front, key, first_line)}")


def _text_field(meta: dict[str, Any], key: str, default: str, at: tuple[str, str, int]) -> str:
    value = meta.get(key, default)
    if not isinstance(value, str):
        raise _fail(at, key, f"field '{key}' must be a string, not {type(value).__name__}")
    return value


def _list_field(meta: dict[str, Any], key: str, at: tuple[str, str, int]) -> list[str]:
    value = meta.get(key, [])
    if not isinstance(value, list) or (value and not all(isinstance(v, str) for v in value)):
        raise _fail(at, key, f"field '{key}' must be a list of strings")
    return list(value)


def _touches_field(meta: dict[str, Any], at: tuple[str, str, int]) -> list[str]:
    if "touches" not in meta:
        return []
    touches = _list_field(meta, "touches", at)
    found = globs.problems(touches)
    if found:
        raise _fail(at, "touches", f"bad touches: {found}")
    return _unique(touches)


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values)) if len(values) > 1 else values


def _time_field(meta: dict[str, Any], key: str, at: tuple[str, str, int]) -> str:
    value = meta.get(key, "")
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str):
        if value:
            try:
                return format_time(datetime.fromisoformat(value.replace("Z", "+00:00")))
            except ValueError:
                raise _fail(at, key, f"field '{key}' is not a date-time: {value!r}") from None
        return ""
    raise _fail(at, key, f"field '{key}' must be a date-time like 2026-11-30T10:00:00Z")


def _toml_value(key: str, value: Any) -> Any:
    import tomlkit

    if key in ("created", "updated") and isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(value)
        return array
    return value


def render(issue: Issue) -> str:
    """A new issue file, laid out the way DESIGN §2 shows it."""
    plain = _render_plain(issue)
    if plain is not None:
        return plain
    import tomlkit

    doc = tomlkit.document()
    for key in KNOWN_FIELDS:
        value = getattr(issue, key)
        if key in OPTIONAL_FIELDS and not value:
            continue
        doc[key] = _toml_value(key, value)
    for key, value in issue.extra.items():
        doc[key] = value
    body = issue.body if issue.body.endswith("\n") or not issue.body else issue.body + "\n"
    return f"{DELIMITER}\n{tomlkit.dumps(doc)}{DELIMITER}\n\n{body}"


def _render_plain(issue: Issue) -> str | None:
    """`render`'s text without tomlkit (an import a `git hive create` would pay for nothing) when
    every value is plain — strings that need no escape, an int, lists of such strings, times
    in hive's own form — and there are no other keys; None otherwise (tomlkit renders it)."""
    if issue.extra or isinstance(issue.priority, bool) or not isinstance(issue.priority, int):
        return None
    rows = [DELIMITER]
    for key in KNOWN_FIELDS:
        value = getattr(issue, key)
        if key in OPTIONAL_FIELDS and not value:
            continue
        if key in ("created", "updated"):
            if not (isinstance(value, str) and _TIME_TEXT.fullmatch(value)):
                return None
            text = value
        elif key == "priority":
            text = str(value)
        elif isinstance(value, list):
            if not all(isinstance(item, str) and _PLAIN_STRING.fullmatch(item) for item in value):
                return None
            text = "[" + ", ".join(f'"{item}"' for item in value) + "]"
        elif isinstance(value, str) and _PLAIN_STRING.fullmatch(value):
            text = f'"{value}"'
        else:
            return None
        rows.append(f"{key} = {text}")
    body = issue.body if issue.body.endswith("\n") or not issue.body else issue.body + "\n"
    return "\n".join(rows) + f"\n{DELIMITER}\n\n{body}"


def update_text(text: str, changes: dict[str, Any], where: str, body: str | None = None) -> str:
    """Apply field changes to an existing file with tomlkit, keeping everything else as written
    (CRLF line endings included)."""
    if "\r\n" in text:
        lf = update_text(text.replace("\r\n", "\n"), changes, where,
                         None if body is None else body.replace("\r\n", "\n"))
        return lf.replace("\n", "\r\n")
    front, old_body, _ = split(text, where)
    front_text = _replace_in_place(front, changes)
    if front_text is None:
        import tomlkit

        doc = tomlkit.parse(front)
        for key, value in changes.items():
            if value is None or (key in OPTIONAL_FIELDS and not value):
                if key in doc:
                    del doc[key]
                continue
            doc[key] = _toml_value(key, value)
        front_text = tomlkit.dumps(doc)
    new_body = old_body if body is None else body
    if new_body and not new_body.endswith("\n"):
        new_body += "\n"
    if front_text and not front_text.endswith("\n"):
        front_text += "\n"
    return f"{DELIMITER}\n{front_text}{DELIMITER}\n\n{new_body}"


# The fast path of `update_text` for the daemon's own writes (status, assignee, updated: three
# commits per issue). tomlkit parses and re-renders the whole front matter (~1.2 ms a file); when
# every change is a plain scalar whose key already sits on a line of its own, replacing the value
# on that line gives the text tomlkit would give (it keeps the key's spacing and a trailing comment
# the same way) in ~0.1 ms. A new key (a finalize's `merged`) goes after the last line when there
# is no table, a deleted one that is not there changes nothing. The result is checked with tomllib
# against the intended values; anything else — a key to delete that is there, a list, a string
# needing escapes, a key written twice or inside a multi-line string — goes through tomlkit.
_PLAIN_STRING = re.compile(r'[^"\\\x00-\x1f\x7f]*')
_TIME_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_SCALAR = r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|[0-9A-Za-z:+._-]+'


def _replace_in_place(front: str, changes: dict[str, Any]) -> str | None:
    expected: dict[str, Any] = {}
    rendered: dict[str, str] = {}
    absent: list[str] = []     # keys deleted (None): in place only when the front matter has none
    for key, value in changes.items():
        if isinstance(value, bool) or not re.fullmatch(r"[A-Za-z0-9_-]+", key):
            return None
        if value is None:
            absent.append(key)
            continue
        if key in OPTIONAL_FIELDS and not value:
            return None
        if key in ("created", "updated") and isinstance(value, str) and _TIME_TEXT.fullmatch(value):
            rendered[key] = value
            expected[key] = datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif key not in ("created", "updated", "parent") and isinstance(value, str) and \
                _PLAIN_STRING.fullmatch(value):
            rendered[key] = f'"{value}"'
            expected[key] = value
        elif isinstance(value, int) and key not in ("created", "updated"):
            rendered[key] = str(value)
            expected[key] = value
        else:
            return None
    lines = front.split("\n")
    for key, value_text in rendered.items():
        pattern = re.compile(rf"^({re.escape(key)}[ \t]*=[ \t]*)(?:{_SCALAR})([ \t]*(?:#.*)?)$")
        hits = [n for n, line in enumerate(lines) if pattern.match(line)]
        if not hits and not any(line.lstrip().startswith("[") for line in lines):
            # a new key (the `merged` of a finalize) goes after the last line, as tomlkit puts it
            last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
            lines.insert(last + 1, f"{key} = {value_text}")
            continue
        if len(hits) != 1:
            return None
        lines[hits[0]] = pattern.sub(lambda m: m.group(1) + value_text + m.group(2), lines[hits[0]])
    new_front = "\n".join(lines)
    try:
        before, after = _load_front(front), _load_front(new_front)
    except ValueError:   # tomllib.TOMLDecodeError
        return None
    if any(key in before for key in absent):
        return None
    if after != {**before, **expected} or any(type(after[k]) is not type(v) for k, v in expected.items()):
        return None
    return new_front
