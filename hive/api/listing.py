"""The API's light path: a repository's hive opened as one command opens it, and its issues
listed — without the write path (pygit2) or anything else of `queue.py`, so that `git hive list`
(`--json`: what scripts and status bars run most) starts fast and stays small.

    from hive.api import listing

    project = listing.open_project()
    text = "".join(listing.issues_json(project, ["open"]))
    waiting = listing.blockers_left(project, listing.issues(project, ["open"]))
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Iterator

from hive.project import Project
from hive.state.issue_file import SATISFIED_BLOCKER_STATUSES, Issue

__all__ = ["Issue", "Project", "blockers_left", "issues", "issues_json", "open_project", "ready"]


def open_project(path: Path | str | None = None) -> Project:
    """The hive of the repository at `path` (default: the current directory), caught up with the
    person's saved `.hive/` edits and the branch, as every command starts; `Hive(project)` wraps it."""
    project = Project.open(path)
    project.checkout.predict_next_scan = True   # one command, then the process ends
    project.sync()
    return project


def issues_json(project: Project, statuses: Collection[str] | None = None,
                parent: str | None = None) -> Iterator[str]:
    """`git hive list --json [--status S] [--parent ID]`: the issues (every status unless
    `statuses`; the children of `parent`) as one compact JSON array, in consecutive parts of a
    bounded number of issues each (what is held at once stays flat however many there are)."""
    return project.index.list_json_parts(statuses or None, parent=parent)


def issues(project: Project, statuses: Collection[str] | None = None, parent: str | None = None) -> list[Issue]:
    """The issues of `statuses` (every status unless given; the children of `parent`), without
    their descriptions (`body` is "")."""
    return project.index.list(statuses or None, parent=parent, with_body=False)


def ready(project: Project, statuses: Collection[str] | None = None) -> list[Issue]:
    """The issues an agent could take now, in the order it would take them (those of `statuses`),
    without their descriptions (`body` is "")."""
    return [i for i in project.index.ready(with_body=False) if not statuses or i.status in statuses]


def blockers_left(project: Project, listed: list[Issue]) -> dict[str, list[str]]:
    """Each listed issue's blockers that are not finished yet (done, finalized or canceled)."""
    status = {i.id: i.status for i in listed}
    others = {b for i in listed for b in i.depends_on if b not in status}
    status.update((issue_id, held[0]) for issue_id, held in project.index.assignments(others).items())
    return {i.id: [b for b in i.depends_on if status.get(b, "") not in SATISFIED_BLOCKER_STATUSES]
            for i in listed}
