"""The worker protocol files (DESIGN §4), read defensively: agents write them, not hive.

`.hive-result.jsonl` — `{"status": "success|failure|blocked", "summary": "...", "test_command": "..."}`
(the last valid line counts). `.hive-notes.jsonl` — one note a line, appended while working.
Neither is ever committed (`git hive init` excludes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hive.lines import iter_lines

RESULT_FILE = ".hive-result.jsonl"
NOTES_FILE = ".hive-notes.jsonl"
RESULT_STATUSES = ("success", "failure", "blocked")
NOTE_CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")
MAX_LINE = 64 * 1024
MAX_RESULT_BYTES = 1 << 20


@dataclass
class WorkResult:
    status: str                    # success | failure | blocked | missing | garbage
    summary: str = ""
    test_command: str = ""
    problem: str = ""              # why the file could not be used, with file:line

    @property
    def ok(self) -> bool:
        return self.status == "success"


def read_result(worktree: Path, statuses: tuple[str, ...] = RESULT_STATUSES) -> WorkResult:
    """The last valid line of the result file; `statuses` are the ones this role may report."""
    path = worktree / RESULT_FILE
    if path.is_symlink():             # hive reads it outside the jail: never a file it points to
        return WorkResult("garbage", problem=f"{RESULT_FILE}: refused: a symbolic link, not a file")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return WorkResult("missing", problem=f"{RESULT_FILE}: the agent wrote no result")
    if size > MAX_RESULT_BYTES:
        return WorkResult("garbage", problem=f"{RESULT_FILE}: {size} bytes, more than a result can be")
    found: WorkResult | None = None
    problem = ""
    for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            problem = f"{RESULT_FILE}:{number}: not JSON ({str(exc).splitlines()[0][:80]})"
            continue
        if not isinstance(data, dict) or data.get("status") not in statuses:
            problem = (f"{RESULT_FILE}:{number}: 'status' must be one of {', '.join(statuses)}")
            continue
        summary, test_command = data.get("summary", ""), data.get("test_command", "")
        if not isinstance(summary, str) or not isinstance(test_command, str):
            problem = f"{RESULT_FILE}:{number}: 'summary' and 'test_command' must be strings"
            continue
        found = WorkResult(data["status"], summary[:4000], test_command[:1000])
    if found is None:
        return WorkResult("garbage", problem=problem or f"{RESULT_FILE}: empty")
    return found


@dataclass
class NoteBatch:
    notes: list[dict[str, str]]
    offset: int                    # where the next read starts
    problems: list[str]


def read_new_notes(worktree: Path, offset: int) -> NoteBatch:
    notes, problems = [], []
    end = offset
    path = worktree / NOTES_FILE
    if path.is_symlink():             # hive reads it outside the jail: never a file it points to
        return NoteBatch([], offset, [f"{NOTES_FILE}: refused: a symbolic link, not a file"])
    line_no = 0
    for end, line in iter_lines(path, offset, MAX_LINE):
        line_no += 1
        if not line.strip():
            if not line:
                problems.append(f"{NOTES_FILE}: a line longer than {MAX_LINE} bytes was skipped")
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict) or not isinstance(data.get("content"), str) or not data["content"].strip():
                raise ValueError("a note needs a non-empty string 'content'")
        except ValueError as exc:
            problems.append(f"{NOTES_FILE}: line at byte {end - len(line)}: {str(exc).splitlines()[0][:80]}")
            continue
        category = data.get("category") if data.get("category") in NOTE_CATEGORIES else "context"
        notes.append({"category": category, "content": data["content"].strip()[:2000]})
    return NoteBatch(notes, end, problems)
