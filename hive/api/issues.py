"""Writing issues through the API: what `git hive create`, `dep` and `edit` decide, each write one
commit on `hive/state`, checked like a person's edit of `.hive/` (the moves through the lifecycle:
`hive.api.moves`). Functions of an open project (`hive.api.listing.open_project`), so a command
loads no more than it writes with (`create` is run often: no lifecycle, no runtime database);
`Hive` has them as methods.

    from hive.api import issues, listing

    project = listing.open_project()
    login = issues.create(project, "Add JWT login", priority=1)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hive import issues as changes_of
from hive.errors import BadInput, HiveError
from hive.project import Project
from hive.state import globs, layout
from hive.state.issue_file import Issue

__all__ = ["Editing", "checked_title", "checked_touches", "create", "depend", "finish_edit", "resolve",
           "start_edit", "undepend"]


@dataclass(frozen=True)
class Editing:
    """An issue's file opened for a person's editor (`start_edit`)."""
    issue_id: str
    path: Path          # the file to edit, in `.hive/`
    relative: str       # its path on `hive/state`


def resolve(project: Project, given: str) -> str:
    """The id of an exact id or a unique prefix of one (`hv-1a` for `hv-1a2b3c`); BadInput otherwise."""
    return changes_of.resolve_id(project, given)


def checked_title(title: str) -> str:
    """A title, refused (BadInput) if empty or not one line."""
    if not title.strip():
        raise BadInput("the title is empty")
    if "\n" in title.strip() or "\r" in title.strip():
        raise BadInput("the title must be one line (put the details in the description: -d TEXT)")
    return title


def checked_touches(given: Iterable[str]) -> list[str]:
    """Globs of the files the work will change (an empty one is dropped), refused if one is invalid."""
    touches = [glob for glob in given if glob]
    problem = globs.problems(touches)
    if problem:
        raise BadInput(f"--touches: {problem}")
    return touches


def create(project: Project, title: str, *, description: str = "", parent: str = "",
           depends_on: Iterable[str] = (), touches: Iterable[str] = (), **fields: Any) -> Issue:
    """A new open issue. `parent` and `depends_on` may be unique prefixes; `fields`: priority,
    type, labels."""
    return changes_of.create(project, checked_title(title), description=description,
                             parent=resolve(project, parent) if parent else "",
                             depends_on=[resolve(project, d) for d in depends_on],
                             touches=checked_touches(touches), **fields)


def depend(project: Project, issue_id: str, blocker: str) -> Issue:
    """`issue_id` waits for `blocker` (refused where it would make a cycle)."""
    return changes_of.add_dependency(project, resolve(project, issue_id), resolve(project, blocker))


def undepend(project: Project, issue_id: str, blocker: str) -> Issue:
    """`issue_id` no longer waits for `blocker`."""
    return changes_of.remove_dependency(project, resolve(project, issue_id), resolve(project, blocker))


def start_edit(project: Project, issue_id: str) -> Editing:
    """The issue's file in `.hive/`, ready for a person's editor: a finished issue's (the archive,
    not checked out) is checked out first, and stays."""
    issue_id = resolve(project, issue_id)
    if not project.checkout.exists:
        raise HiveError("the .hive/ checkout is missing: run `git hive doctor --fix`")
    relative = project.index.path_of(issue_id)
    if relative is None:
        raise HiveError(f"no issue {issue_id}")
    if layout.is_archived(relative):
        return Editing(issue_id, project.checkout.check_out(relative), relative)
    return Editing(issue_id, project.paths.state_checkout / relative, relative)


def finish_edit(project: Project, editing: Editing) -> BadInput | None:
    """Commit the person's saved file: None once it is on `hive/state`, else the first problem of
    it (file:line), the file left exactly as written."""
    problems = project.absorb(only=[editing.relative]).problems
    mine = [p for p in problems if (p.where or "").startswith(f".hive/{editing.relative}")]
    if mine:
        return mine[0]
    project.checkout.refresh()
    return None
