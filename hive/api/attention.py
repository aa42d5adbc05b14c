"""Why an escalated or failed issue needs a person, the worktree kept with its work, and the
commands that go on from there (README: "When hive asks for you"): `git hive show` tells it."""

from __future__ import annotations

from dataclasses import dataclass

from hive.api.detail import ASKING_A_PERSON
from hive.project import Project
from hive.state import history
from hive.state.issue_file import Issue
from hive.workspace import worktrees

__all__ = ["Attention", "attention"]


@dataclass(frozen=True)
class Attention:
    reason: str
    worktree: str | None        # its worktree, kept (the work a person may finish), or None
    branch: str | None
    next: list[str]             # the commands that go on from here


def attention(project: Project, issue: Issue) -> Attention | None:
    """Why the issue needs a person and how to go on; None unless it is escalated or failed."""
    if issue.status not in ASKING_A_PERSON:
        return None
    event = history.last_event(project.paths, issue.id, issue.status)
    worktree = worktrees.worktree_path(project.paths, issue.id)
    kept = worktree.exists()
    return Attention((event.trailers.get("Hive-Reason", "") if event else "") or "(no reason recorded)",
                     str(worktree) if kept else None, worktrees.branch_name(issue.id) if kept else None,
                     ([f"git hive update {issue.id} --status done"] if kept else [])
                     + [f"git hive retry {issue.id}", f"git hive cancel {issue.id}", f"git hive logs {issue.id}"])
