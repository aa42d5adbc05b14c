"""The worker protocol files (DESIGN §4), read defensively: agents write them, not hive.

`.hive-result.jsonl` — `{"status": "success|failure|blocked", "summary": "...", "test_command": "..."}`
(the last valid line counts). `.hive-notes.jsonl` — one note a line, appended while working.
Neither is ever committed (`git hive init` excludes them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hive.lines import NotAFile, iter_lines, json_line, read_regular

RESULT_FILE = ".hive-result.jsonl"
NOTES_FILE = ".hive-notes.jsonl"
RESULT_STATUSES = ("success", "failure", "blocked")
NOTE_CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")
MAX_LINE = 64 * 1024
MAX_RESULT_BYTES = 1 << 20
MAX_NOTES_BYTES = 256 << 20        # a notes file past this is refused: the attempt fails (read as a stream)


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
    try:   # an agent may have made it a FIFO (open() blocked the daemon), a socket, a link...
        data = read_regular(worktree / RESULT_FILE, MAX_RESULT_BYTES)
    except NotAFile as exc:
        return WorkResult("garbage", problem=str(exc))
    if data is None:
        return WorkResult("missing", problem=f"{RESULT_FILE}: the agent wrote no result")
    found: WorkResult | None = None
    problem = ""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json_line(line)
        except ValueError as exc:
            problem = f"{RESULT_FILE}:{number}: not JSON ({str(exc)[:80]})"
            continue
        if not isinstance(entry, dict) or entry.get("status") not in statuses:
            problem = (f"{RESULT_FILE}:{number}: 'status' must be one of {', '.join(statuses)}")
            continue
        summary, test_command = entry.get("summary", ""), entry.get("test_command", "")
        if not isinstance(summary, str) or not isinstance(test_command, str):
            problem = f"{RESULT_FILE}:{number}: 'summary' and 'test_command' must be strings"
            continue
        found = WorkResult(entry["status"], summary[:4000], test_command[:1000])
    if found is None:
        return WorkResult("garbage", problem=problem or f"{RESULT_FILE}: empty")
    return found


@dataclass
class NoteBatch:
    notes: list[dict[str, str]]
    offset: int                    # where the next read starts
    problems: list[str]
    refused: str = ""              # the file is not one hive reads (a FIFO, a link, too big): the attempt fails


def read_new_notes(worktree: Path, offset: int) -> NoteBatch:
    """The notes appended since `offset`. Opened without blocking or following a link
    (`lines.open_regular`); a file that is not a regular one, or past `MAX_NOTES_BYTES`, is
    `refused`. A file shorter than `offset` (or gone) was removed or cut short since: what it
    holds now is all new, and it is read from its start."""
    notes, problems = [], []
    try:
        if os.lstat(worktree / NOTES_FILE).st_size < offset:
            offset = 0
    except OSError:
        offset = 0
    end = offset
    line_no = 0
    try:
        for end, line in iter_lines(worktree / NOTES_FILE, offset, MAX_LINE, max_bytes=MAX_NOTES_BYTES):
            line_no += 1
            if not line.strip():
                if not line:
                    problems.append(f"{NOTES_FILE}: a line longer than {MAX_LINE} bytes was skipped")
                continue
            try:
                data = json_line(line)
                if not isinstance(data, dict) or not isinstance(data.get("content"), str) or not data["content"].strip():
                    raise ValueError("a note needs a non-empty string 'content'")
            except ValueError as exc:
                problems.append(f"{NOTES_FILE}: line at byte {end - len(line)}: {str(exc)[:80]}")
                continue
            category = data.get("category") if data.get("category") in NOTE_CATEGORIES else "context"
            notes.append({"category": category, "content": data["content"].strip()[:2000]})
    except NotAFile as exc:
        return NoteBatch(notes, end, problems, refused=str(exc))
    if end >= MAX_NOTES_BYTES:
        return NoteBatch(notes, end, problems, refused=f"{NOTES_FILE}: more than {MAX_NOTES_BYTES} bytes")
    return NoteBatch(notes, end, problems)
