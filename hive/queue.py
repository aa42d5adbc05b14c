"""The ready queue over the dependency DAG, and claims (DESIGN §3).

`ready()` is one SQL query on the index. `claim()` is a compare-and-swap commit on `hive/state`
that re-checks status, assignee and every blocker against the tip it builds on, so two claimers
— threads, processes, or a person's edit — can never both win.
"""

from __future__ import annotations

from hive.project import Project
from hive import issues
from hive.state import issue_file
from hive.state.issue_file import Issue
from hive.state.store import Refused, Snapshot


def ready(project: Project, limit: int | None = None) -> list[Issue]:
    project.update_index()
    return project.index.ready(limit)


def claim(project: Project, issue_id: str, agent_id: str, lease_seconds: int = 0) -> bool:
    """Take `issue_id` for `agent_id`: open → in_progress. False if anyone else got it first.

    With `lease_seconds` (a queue shared between machines) the claim carries `lease_expires`, so
    that another machine can reclaim the issue if this one dies.
    """

    def check(snap: Snapshot, current: Issue) -> None:
        if current.status != "open" or current.assignee or current.type == "epic":
            raise Refused(f"{issue_id} is no longer claimable")
        for blocker in current.depends_on:
            found = snap.read_issue(blocker)
            if found is None:
                raise Refused(f"{issue_id} is blocked by unknown issue {blocker}")
            status = issue_file.parse(found[1], blocker, found[0]).status
            if status not in issue_file.SATISFIED_BLOCKER_STATUSES:
                raise Refused(f"{issue_id} is blocked by {blocker} ({status})")

    fields: dict[str, object] = {"status": "in_progress", "assignee": agent_id}
    if lease_seconds:
        fields["lease_expires"] = lease_until(lease_seconds)
    result = issues.update(project, issue_id, fields,
                           event="claimed", agent=agent_id, summary=f"claim {issue_id} for {agent_id}",
                           check_snapshot=check)
    return result is not None


def lease_until(seconds: int) -> str:
    from datetime import timedelta

    return issue_file.format_time(issue_file.now() + timedelta(seconds=seconds))
