"""Session transcripts and the daemon's log through the API (`git hive logs [ID] [-f]`): where
they are, their entries, and following them as they grow — woken by watchfiles when a transcript
grows or a new session starts (and by the state's ref events, to notice the issue is finished
with), never by a sleep loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

from hive.backends.transcripts import FOLDER, issue_transcripts, read_entries
from hive.lines import iter_lines
from hive.project import Project
from hive.runtime import DaemonLock

FINISHED = ("finalized", "canceled", "escalated", "failed")   # no session will work it again

__all__ = ["entries", "follow_file", "follow_issue", "lines", "transcripts"]


def transcripts(project: Project, issue_id: str) -> list[Path]:
    """The transcript files of every session that worked the issue, in order."""
    return issue_transcripts(project.paths.hive_dir, issue_id)


def entries(path: Path, offset: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """(end offset, entry) of each whole entry of a transcript after `offset`."""
    return read_entries(path, offset)


def lines(path: Path, offset: int = 0) -> Iterator[tuple[int, str]]:
    """(end offset, line) of each whole line of a log after `offset` (its words unescaped: an
    agent's are in it)."""
    for end, raw in iter_lines(path, offset):
        yield end, raw.decode("utf-8", "replace").rstrip("\n")


def _finished(project: Project, issue_id: str, sessions_ended: Callable[[], bool]) -> bool:
    """No session will write more: the issue is finished with, and each session seen has ended
    (or no daemon runs to end it: one killed leaves its sessions without their `end`)."""
    project.update_index()
    issue = project.index.get(issue_id)
    if issue is not None and issue.status not in FINISHED:
        return False
    return sessions_ended() or not DaemonLock(project.paths).holder()


def follow_issue(project: Project, issue_id: str, sessions_ended: Callable[[], bool]) -> Iterator[list[Path]]:
    """The issue's transcripts now, and again after each change, until it is finished with and
    `sessions_ended()` (what the caller read says every session ended) or no daemon runs."""
    from watchfiles import watch

    folder = project.paths.hive_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    project.paths.ref_events.touch(exist_ok=True)
    mine, events = str(folder / issue_id), str(project.paths.ref_events)
    yield transcripts(project, issue_id)
    if _finished(project, issue_id, sessions_ended):
        return
    for _ in watch(folder, events, debounce=50, step=50,
                   watch_filter=lambda _, path: path.startswith(mine) or path == events):
        yield transcripts(project, issue_id)
        if _finished(project, issue_id, sessions_ended):
            return


def follow_file(path: Path) -> Iterator[None]:
    """Once after each change of the file at `path` (created, grown), for ever."""
    from watchfiles import watch

    for _ in watch(path.parent, recursive=False, debounce=50, step=50,
                   watch_filter=lambda _, changed: changed == str(path)):
        yield None
