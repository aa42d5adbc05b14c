"""The `hive` merge driver: state files merge field by field, not line by line (DESIGN §2, §4).

Git runs it for the paths that `.gitattributes` on `hive/state` marks `merge=hive`
(`issues/**`, `notes/**`)::

    merge.hive.driver = /abs/path/to/python -P -m hive merge-driver %O %A %B %P   (what init registers)
    # or: python -m hive.state.merge_driver %O %A %B %P

%O is the base, %A ours (the result is written back there), %B theirs, %P the path in the tree.
Exit 0 means merged cleanly, exit 1 means a conflict was left in %A (git then reports the path
as conflicted and keeps all three versions in the index), exit 2 is bad usage. What a rule decided
(a field both sides changed) and any conflict left are told on stderr, one line each.

What each kind of path gets:

* ``issues/**/<id>.md``: the TOML front matter merges **field by field** (never any conflict
  marker there, so the file always parses); the Markdown body merges with a line-based 3-way
  merge whose real conflicts are marked in the body only. The result keeps ours' text layout and
  comments: the merged values are applied to ours with :func:`issue_file.update_text`.
* ``*.jsonl`` (``notes/<id>.jsonl``): a de-duplicated union; never a conflict.
* anything else: plain ``git merge-file`` semantics.

Every rule is symmetric (merging A into B gives the same field values as B into A) because two
clones sync through it and must converge.

The body merge is a small in-process diff3 rather than ``git merge-file``: :func:`merge_issue` is
also called in-process (sync, plan approval) for possibly hundreds of files, where spawning git
with three temp files per file would dominate, and a pure function needs no git, no repository
and no user config to behave the same everywhere. Only the fallback for unknown paths calls
``git merge-file`` (git is always present when a driver runs; those paths are rare).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from hive import lines
from hive.errors import BadInput
from hive.state import issue_file
from hive.state.trust import MAX_NOTES_BYTES

__all__ = ["main", "merge_issue", "merge_jsonl", "merge_text", "merge_file", "path_kind"]

SET_FIELDS = frozenset({"depends_on", "labels", "touches"})
MARKER_SIZE = 7
OURS_LABEL = "ours"
BASE_LABEL = "base"
THEIRS_LABEL = "theirs"
FUTURE_SKEW_SECONDS = 300


class _Missing:
    """A key that is not in the front matter at all (distinct from any TOML value)."""

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "MISSING"


MISSING: Any = _Missing()


# --------------------------------------------------------------------------------------------
# dispatch


def path_kind(path: str) -> str:
    """'issue', 'jsonl' or 'other': which merge a path in the `hive/state` tree gets."""
    p = PurePosixPath(path.replace("\\", "/"))
    if p.suffix == ".jsonl":
        return "jsonl"
    if p.suffix == ".md" and "issues" in p.parts[:-1] and issue_file.is_valid_id(p.stem):
        return "issue"
    return "other"


def merge_file(base: bytes | None, ours: bytes, theirs: bytes, path: str,
               *, problems: list[str] | None = None, decisions: list[str] | None = None) -> tuple[bytes, bool]:
    """Merge one file the way the driver does for `path`: returns (result, clean)."""
    kind = path_kind(path)
    if kind == "issue":
        return merge_issue(base, ours, theirs, path, problems=problems, decisions=decisions)
    if kind == "jsonl":
        return merge_jsonl(base, ours, theirs), True
    return _git_merge_file(base, ours, theirs)


# --------------------------------------------------------------------------------------------
# issue files


def merge_issue(base: bytes | None, ours: bytes, theirs: bytes, path: str,
                *, problems: list[str] | None = None, decisions: list[str] | None = None) -> tuple[bytes, bool]:
    """Merge three versions of an issue file. Returns (result bytes, clean).

    `base` is None (or empty) when both sides added the file. Not clean means a body conflict
    (markers in the body only; the front matter is merged and parses) or a side that is not a
    valid issue file (then both versions are kept whole between conflict markers, and a one-line
    reason is appended to `problems` when given). `decisions` gets one line per field that both
    sides changed, to different values, saying what a rule kept and why (`updated`, always the
    later time, is not told).
    """
    # Trivial cases, resolved the way git itself does before it ever calls a driver.
    if ours == theirs:
        return ours, True
    if base is not None and base == ours:
        return theirs, True
    if base is not None and base == theirs:
        return ours, True

    issue_id = PurePosixPath(path.replace("\\", "/")).stem
    sides: dict[str, tuple[issue_file.Issue, dict[str, Any]]] = {}
    for side, data in (("ours", ours), ("theirs", theirs)):
        try:
            sides[side] = _load(data, issue_id, path)
        except BadInput as exc:
            if problems is not None:
                problems.append(f"{path}: cannot merge field by field: {side} is not a valid "
                                f"issue file ({_reason(exc)}); both versions kept as a conflict")
            return _whole_conflict(ours, theirs), False
    try:
        base_loaded = _load(base, issue_id, path) if base else None
    except BadInput:
        base_loaded = None  # a broken base: every differing field counts as changed on both sides

    o_issue, o_meta = sides["ours"]
    t_issue, t_meta = sides["theirs"]
    o_fields = _fields(o_issue, o_meta)
    t_fields = _fields(t_issue, t_meta)
    b_fields = _fields(*base_loaded) if base_loaded else {}

    keys = list(dict.fromkeys([*o_fields, *t_fields, *b_fields]))
    changes: dict[str, Any] = {}
    for key in keys:
        b, o, t = b_fields.get(key, MISSING), o_fields.get(key, MISSING), t_fields.get(key, MISSING)
        merged, rule = _merge_field(key, b, o, t, o_issue, t_issue)
        if decisions is not None and rule and key != "updated":
            decisions.append(f"{issue_id}: {key} changed on both sides ({_shown(o)} here, {_shown(t)} "
                             f"there): kept {_shown(merged)}, {rule}")
        if merged is MISSING:
            if key in o_fields:
                changes[key] = None  # update_text deletes the key
        elif key not in o_fields or _canon(merged) != _canon(o_fields[key]):
            changes[key] = merged

    _apply_holder_rule(changes, o_issue, issue_id, decisions)
    base_body = _body_of(base, path) if base_loaded is None else base_loaded[0].body
    body, conflicts = merge_text_lines(base_body or "", o_issue.body, t_issue.body)
    body_changed = body != o_issue.body
    if not changes and not body_changed:
        return ours, True

    text = ours.decode("utf-8")
    try:
        result = issue_file.update_text(text, changes, path, body=body if body_changed else None)
        issue_file.parse(result, issue_id, path)  # the front matter must always parse
    except (BadInput, ValueError, TypeError) as exc:  # pragma: no cover - defensive
        if problems is not None:
            problems.append(f"{path}: merged front matter does not validate ({exc}); "
                            "both versions kept as a conflict")
        return _whole_conflict(ours, theirs), False
    return result.encode("utf-8"), conflicts == 0


def _load(data: bytes, issue_id: str, path: str) -> tuple[issue_file.Issue, dict[str, Any]]:
    # tomllib, difflib and tempfile load when a merge runs: every state write imports this module
    import tomllib

    issue = issue_file.parse(data, issue_id, path)
    front, _, _ = issue_file.split(data.decode("utf-8"), path)
    return issue, tomllib.loads(front)


def _apply_holder_rule(changes: dict[str, Any], ours: issue_file.Issue, issue_id: str,
                       decisions: list[str] | None) -> None:
    """A claim on one side and a cancel on the other must not merge into a canceled issue with
    an assignee: the merged fields keep the holder rule of every write (`issue_file.holder_after`)."""
    status = changes.get("status", ours.status)
    assignee = changes.get("assignee", ours.assignee) or ""
    kept = issue_file.holder_after(str(status), str(assignee))
    if kept != assignee:
        changes["assignee"] = kept
        if decisions is not None:
            decisions.append(f"{issue_id}: assignee {_shown(assignee)} dropped: a {status} issue has none")


def _fields(issue: issue_file.Issue, meta: dict[str, Any]) -> dict[str, Any]:
    """The keys a file has, in file order: known ones normalised by the parser, others as-is."""
    return {key: (getattr(issue, key) if key in issue_file.KNOWN_FIELDS else value)
            for key, value in meta.items()}


def _body_of(data: bytes | None, path: str) -> str | None:
    if not data:
        return None
    try:
        return issue_file.split(data.decode("utf-8"), path)[1]
    except (BadInput, UnicodeDecodeError):
        return None


def _merge_field(key: str, b: Any, o: Any, t: Any,
                 o_issue: issue_file.Issue, t_issue: issue_file.Issue) -> tuple[Any, str]:
    """The merged value, and the rule that chose it when both sides changed it ("" otherwise)."""
    if key == "updated":
        b, o, t = _clamped(b), _clamped(o), _clamped(t)
    if _canon(o) == _canon(t):
        return o, ""
    if _canon(o) == _canon(b):
        return t, ""
    if _canon(t) == _canon(b):
        return o, ""
    # Changed on both sides, to different values: deterministic and symmetric rules.
    if key in SET_FIELDS:
        return _merge_set(b, o, t), "what either side added, less what either removed"
    if key == "updated":
        return max(o, t, key=_order), "the later time"
    if key == "status":
        o_terminal = (o if o is not MISSING else "open") in issue_file.TERMINAL_STATUSES
        t_terminal = (t if t is not MISSING else "open") in issue_file.TERMINAL_STATUSES
        if o_terminal != t_terminal:
            return (o if o_terminal else t), "a finished or canceled issue stays so"
    o_updated, t_updated = _clamped(o_issue.updated), _clamped(t_issue.updated)
    if o_updated != t_updated:
        later_here = o_updated > t_updated
        return (o if later_here else t), (f"the later change ({'here' if later_here else 'there'}, "
                                          f"updated {max(o_updated, t_updated)})")
    return max(o, t, key=_order), "both updated at the same time: the greater value"


def _clamped(stamp: Any) -> Any:
    """An `updated` time no later than now (plus `FUTURE_SKEW_SECONDS` for clocks a little
    ahead): a side that claims to change in 2099 must not win every merge. All times beyond are
    equal, so the rule stays symmetric."""
    if not isinstance(stamp, str) or not stamp:
        return stamp
    horizon = issue_file.format_time(issue_file.now() + timedelta(seconds=FUTURE_SKEW_SECONDS))
    return min(stamp, horizon)


def _shown(value: Any, limit: int = 60) -> str:
    if value is MISSING:
        return "(none)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _merge_set(b: Any, o: Any, t: Any) -> Any:
    """(base ∪ added on either side) − removed on either side; ours' order, then theirs'."""
    base = [] if b is MISSING else list(b)
    ours = [] if o is MISSING else list(o)
    theirs = [] if t is MISSING else list(t)
    removed = (set(base) - set(ours)) | (set(base) - set(theirs))
    result = [v for v in dict.fromkeys(ours + theirs) if v not in removed]
    if not result and (o is MISSING or t is MISSING):
        return MISSING
    return result


def _canon(value: Any) -> str | None:
    if value is MISSING:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=lambda v: f"{type(v).__name__}:{v.isoformat()}"
                      if hasattr(v, "isoformat") else repr(v))


def _order(value: Any) -> tuple[int, str]:
    """A total order on field values (a missing key first) for deterministic tie breaks."""
    if value is MISSING:
        return (0, "")
    if isinstance(value, str):
        return (1, value)  # plain string order, so that ISO times compare by time
    return (2, _canon(value) or "")


def _reason(exc: BadInput) -> str:
    message = str(exc)
    if exc.where and message.startswith(exc.where + ": "):
        message = message[len(exc.where) + 2:]
        line = exc.where.rsplit(":", 1)[-1]
        if line.isdigit():
            message = f"line {line}: {message}"
    return message


def _whole_conflict(ours: bytes, theirs: bytes) -> bytes:
    """Both versions kept whole, between conflict markers (nothing invented, nothing lost)."""
    def ended(data: bytes) -> bytes:
        return data if not data or data.endswith(b"\n") else data + b"\n"

    return (b"<" * MARKER_SIZE + b" " + OURS_LABEL.encode() + b"\n" + ended(ours)
            + b"=" * MARKER_SIZE + b"\n" + ended(theirs)
            + b">" * MARKER_SIZE + b" " + THEIRS_LABEL.encode() + b"\n")


# --------------------------------------------------------------------------------------------
# line-based 3-way merge (diff3)


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _matching(a: list[str], b: list[str]) -> dict[int, int]:
    import difflib

    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    pairs: dict[int, int] = {}
    for i, j, size in matcher.get_matching_blocks():
        for offset in range(size):
            pairs[i + offset] = j + offset
    return pairs


def merge_text_lines(base: str, ours: str, theirs: str) -> tuple[str, int]:
    """A line-based 3-way merge of text. Returns (merged text, number of conflicts).

    Classic diff3: lines of the base matched in both sides are stable; between two stable lines a
    chunk changed on one side only takes that side, the same change on both sides is taken once,
    different changes conflict (with their common leading/trailing lines moved out of the
    markers, as git's "zealous" merge does).
    """
    if ours == theirs:
        return ours, 0
    if base == ours:
        return theirs, 0
    if base == theirs:
        return ours, 0
    b, o, t = _lines(base), _lines(ours), _lines(theirs)
    to_ours, to_theirs = _matching(b, o), _matching(b, t)
    out: list[str] = []
    conflicts = 0
    i = j = k = 0
    while True:
        p = i
        while p < len(b) and not (p in to_ours and p in to_theirs):
            p += 1
        j_end, k_end = (to_ours[p], to_theirs[p]) if p < len(b) else (len(o), len(t))
        b_chunk, o_chunk, t_chunk = b[i:p], o[j:j_end], t[k:k_end]
        if o_chunk == t_chunk or t_chunk == b_chunk:
            out.extend(o_chunk)
        elif o_chunk == b_chunk:
            out.extend(t_chunk)
        else:
            conflicts += 1
            out.extend(_conflict(o_chunk, t_chunk))
        if p >= len(b):
            break
        out.append(b[p])
        i, j, k = p + 1, j_end + 1, k_end + 1
    return "".join(out), conflicts


def _conflict(ours: list[str], theirs: list[str]) -> list[str]:
    head = 0
    while head < min(len(ours), len(theirs)) and ours[head] == theirs[head]:
        head += 1
    tail = 0
    while (tail < min(len(ours), len(theirs)) - head
           and ours[len(ours) - 1 - tail] == theirs[len(theirs) - 1 - tail]):
        tail += 1

    def ended(lines: list[str]) -> list[str]:
        if lines and not lines[-1].endswith("\n"):
            return [*lines[:-1], lines[-1] + "\n"]
        return lines

    middle_o = ours[head:len(ours) - tail]
    middle_t = theirs[head:len(theirs) - tail]
    return [*ours[:head],
            "<" * MARKER_SIZE + " " + OURS_LABEL + "\n", *ended(middle_o),
            "=" * MARKER_SIZE + "\n", *ended(middle_t),
            ">" * MARKER_SIZE + " " + THEIRS_LABEL + "\n",
            *ours[len(ours) - tail:]]


def merge_text(base: bytes | None, ours: bytes, theirs: bytes) -> tuple[bytes, bool]:
    """The in-process line merge on bytes (UTF-8 with surrogate escapes, so no byte is lost)."""
    def text(data: bytes | None) -> str:
        return (data or b"").decode("utf-8", "surrogateescape")

    merged, conflicts = merge_text_lines(text(base), text(ours), text(theirs))
    return merged.encode("utf-8", "surrogateescape"), conflicts == 0


def _git_merge_file(base: bytes | None, ours: bytes, theirs: bytes) -> tuple[bytes, bool]:
    """`git merge-file` semantics for paths hive does not know (binary files: ours, conflict)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hive-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base or b""), ("theirs", theirs)):
            file = Path(tmp) / name
            file.write_bytes(data)
            names.append(str(file))
        try:
            done = subprocess.run(
                ["git", "merge-file", "-p", "-L", OURS_LABEL, "-L", BASE_LABEL,
                 "-L", THEIRS_LABEL, *names],
                capture_output=True, cwd=tmp, check=False)
        except OSError:
            return merge_text(base, ours, theirs)
    if done.returncode < 0 or done.returncode >= 128 or (done.returncode and not done.stdout):
        return ours, False  # git refused (binary, unreadable): keep ours, report a conflict
    return done.stdout, done.returncode == 0


# --------------------------------------------------------------------------------------------
# JSONL (notes)


def merge_jsonl(base: bytes | None, ours: bytes, theirs: bytes, limit: int = MAX_NOTES_BYTES) -> bytes:
    """A de-duplicated union of JSON lines; never a conflict.

    Lines equal as JSON (compared as canonical JSON, sorted keys) are kept once. The base's lines
    keep base order; lines added on either side follow, sorted by their `at` then canonical JSON
    (so both merge directions give the same bytes). Unparseable lines are kept verbatim
    (de-duplicated as text), after the parseable additions. Blank lines are dropped. The additions
    stop where the file would pass `limit` bytes (a notes file another machine still takes in:
    `trust.MAX_NOTES_BYTES`); those left out stay in the two sides' commits.
    """
    if ours == theirs:
        return ours
    if base is not None and base == ours:
        return theirs
    if base is not None and base == theirs:
        return ours
    out: list[bytes] = []
    seen: set[bytes] = set()
    for raw in _jsonl_lines(base or b""):
        key, _ = _jsonl_identity(raw)
        if key not in seen:
            seen.add(key)
            out.append(raw)
    added: dict[bytes, tuple[tuple[int, str, bytes], bytes]] = {}
    for raw in _jsonl_lines(ours) + _jsonl_lines(theirs):
        key, sort_key = _jsonl_identity(raw)
        if key in seen:
            continue
        if key not in added or raw < added[key][1]:  # same object written two ways: pick one
            added[key] = (sort_key, raw)
    size = sum(len(raw) + 1 for raw in out)
    for _, raw in sorted(added.values()):
        if size + len(raw) + 1 > limit:
            break
        out.append(raw)
        size += len(raw) + 1
    return b"".join(line + b"\n" for line in out)


def _jsonl_lines(data: bytes) -> list[bytes]:
    lines = []
    for raw in data.split(b"\n"):
        raw = raw.removesuffix(b"\r")
        if raw.strip():
            lines.append(raw)
    return lines


def _jsonl_identity(raw: bytes) -> tuple[bytes, tuple[int, str, bytes]]:
    """(identity for de-duplication, sort key for added lines)."""
    try:
        value = lines.json_line(raw)
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False).encode("utf-8", "surrogatepass")
    except ValueError:
        key = b"t" + raw
        return key, (1, "", key)
    key = b"j" + canonical
    at = value.get("at") if isinstance(value, dict) else None
    if at is None:
        at = ""
    elif not isinstance(at, str):
        at = json.dumps(at, sort_keys=True)
    return key, (0, at, key)


# --------------------------------------------------------------------------------------------
# entry point


USAGE = "usage: python -m hive.state.merge_driver BASE OURS THEIRS PATH   (git: %O %A %B %P)"


def main(argv: list[str] | None = None) -> int:
    """Run as git's merge driver. Writes the result into OURS; 0 clean, 1 conflict, 2 usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print(USAGE, file=sys.stderr)
        return 2
    base_file, ours_file, theirs_file, path = args
    try:
        base = Path(base_file).read_bytes() if os.path.exists(base_file) else None
        ours = Path(ours_file).read_bytes()
        theirs = Path(theirs_file).read_bytes()
    except OSError as exc:
        print(f"hive merge-driver: {path}: cannot read an input: {exc}", file=sys.stderr)
        return 2
    problems: list[str] = []
    decisions: list[str] = []
    try:
        result, clean = merge_file(base, ours, theirs, path, problems=problems, decisions=decisions)
    except Exception as exc:  # never lose a side because of a bug here: keep both, conflict
        problems.append(f"{path}: merge failed ({type(exc).__name__}: {exc}); "
                        "both versions kept as a conflict")
        result, clean = _whole_conflict(ours, theirs), False
    for line in [*decisions, *problems]:
        print(f"hive merge-driver: {line}", file=sys.stderr)
    if not clean and not problems:
        print(f"hive merge-driver: {path}: both sides changed the same lines; "
              "kept both between conflict markers: resolve them by hand", file=sys.stderr)
    try:
        Path(ours_file).write_bytes(result)
    except OSError as exc:
        print(f"hive merge-driver: {path}: cannot write the result: {exc}", file=sys.stderr)
        return 1
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
