"""An issue's history through the API (`git hive log`): every commit of `hive/state` that touched
it, oldest first, then its kept attempts (`refs/hive/attempts/<id>/<n>`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pygit2

from hive.issues import resolve_id
from hive.project import Project
from hive.state import history as state_history
from hive.state.history import StateEvent
from hive.workspace import attempts, worktrees

__all__ = ["History", "StateEvent", "history"]


@dataclass(frozen=True)
class History:
    events: list[StateEvent]    # the commits of `hive/state` that touched the issue, oldest first
    kept: list[StateEvent]      # its kept attempts: event "kept", the ref in `summary` and `trailers`


def history(project: Project, issue_id: str) -> History:
    """The issue's (by id or unique prefix) state commits, then its kept attempts."""
    issue_id = resolve_id(project, issue_id)
    return History(list(state_history.events(project.paths, issue_id)), kept_attempts(project, issue_id))


def kept_attempts(project: Project, issue_id: str) -> list[StateEvent]:
    """The issue's kept attempts as events "kept": the head commit, when it was made and by whom,
    the ref in the summary."""
    found = attempts.kept(project.paths.common_dir, issue_id)
    if not found:
        return []
    repo = worktrees.open_repo(project.paths)
    rows = []
    for attempt in found:
        try:
            commit = repo[attempt.commit].peel(pygit2.Commit)
            subject, author = commit.message.split("\n", 1)[0], commit.author.name
        except (KeyError, ValueError, pygit2.GitError):
            subject, author = "(the commit is missing)", ""
        at = datetime.fromtimestamp(attempts.committed_at(repo, attempt.commit), timezone.utc)
        rows.append(StateEvent(commit=attempt.commit, at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), author=author,
                               summary=f"{attempt.ref}: {subject}", event="kept", issue=issue_id, agent="",
                               trailers={"Hive-Ref": attempt.ref}))
    return rows
