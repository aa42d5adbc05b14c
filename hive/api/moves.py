"""A person's moves of an issue through the API, under the lifecycle's rules: what `git hive
update`, `cancel` and `retry` decide, each one commit on `hive/state`. Functions of an open
project (`hive.api.listing.open_project`); `Hive` has them as methods.

    from hive.api import listing, moves

    project = listing.open_project()
    moves.update(project, "hv-1a2b3c", {"priority": 0}, add_labels=["auth"])
"""

from __future__ import annotations

from typing import Any, Iterable

from hive import lifecycle
from hive.api.issues import checked_title, checked_touches, resolve
from hive.errors import BadInput
from hive.project import Project
from hive.runtime import Runtime
from hive.state.issue_file import Issue

__all__ = ["cancel", "retry", "update"]


def update(project: Project, issue_id: str, fields: dict[str, Any], *, add_labels: Iterable[str] = (),
           remove_labels: Iterable[str] = (), description: str | None = None, force: bool = False) -> Issue:
    """Change fields of an issue as a person does (`git hive update`), in one commit: `fields` of
    an issue file (`parent` may be a prefix, "" clears it); labels added and removed on the issue
    as it is on the tip, so one added meanwhile is kept. A status or assignee change that would
    leave the issue where no daemon moves it again is refused unless `force`. Set done, it is a
    hand-off on this machine: its merge pipeline may take it."""
    issue_id = resolve(project, issue_id)
    changes = dict(fields)
    if "title" in changes:
        checked_title(changes["title"])
    if changes.get("parent"):
        changes["parent"] = resolve(project, changes["parent"])
    if "touches" in changes:
        changes["touches"] = checked_touches(changes["touches"])
    added, removed = list(add_labels), set(remove_labels)

    def labelled(issue: Issue) -> list[str]:
        return [label for label in dict.fromkeys([*issue.labels, *added]) if label not in removed]

    if added or removed:
        current = project.index.get(issue_id)
        changes["labels"] = labelled(current) if current is not None else added
    if not changes and description is None:
        raise BadInput("nothing to change: give at least one field")

    def on_tip(tip_issue: Issue) -> dict[str, Any]:
        return {**changes, "labels": labelled(tip_issue)} if "labels" in changes and (added or removed) else changes

    event, summary = lifecycle.edit_record(issue_id, changes)
    updated = lifecycle.edit(project, issue_id, on_tip, force=force, event=event, body=description,
                             summary=summary)
    if changes.get("status") == "done":
        runtime = Runtime(project.paths)
        try:
            runtime.record_handoff(issue_id)
        finally:
            runtime.close()
    return updated


def cancel(project: Project, issue_id: str) -> Issue:
    """Cancel an issue; a daemon working it stops its agent."""
    return lifecycle.cancel(project, resolve(project, issue_id))


def retry(project: Project, issue_id: str) -> Issue:
    """An escalated, failed or canceled issue back in the queue, with a fresh budget."""
    runtime = Runtime(project.paths)
    try:
        return lifecycle.retry(project, runtime, resolve(project, issue_id))
    finally:
        runtime.close()
