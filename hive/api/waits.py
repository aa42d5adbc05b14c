"""Why a done issue's merge waits on this machine, often for a person (`show`); why a ready
issue waits for files: `hive.api.touching`."""

from __future__ import annotations

from hive.project import Project
from hive.runtime import Runtime
from hive.state.issue_file import Issue

__all__ = ["merge_waits"]


def merge_waits(project: Project, issue: Issue) -> str:
    """Why this machine's merge of a done issue waits (for a person, often: it says how), or ''."""
    if issue.status != "done" or not project.paths.runtime_db.exists():
        return ""
    runtime = Runtime(project.paths)
    try:
        entry = runtime.merge_queue.get(issue.id)
    finally:
        runtime.close()
    return entry.detail if entry is not None and entry.state == "waiting" else ""
