"""Claiming a ready issue for a new agent of this machine: in the local state, or on the remote
first when the queue is shared (a claim is valid only once pushed)."""

from __future__ import annotations

from typing import Callable

from hive import lifecycle
from hive.orchestrator.shared import SharedQueue
from hive.project import Project
from hive.state.issue_file import Issue

CLAIMED, TAKEN, OFFLINE = "claimed", "taken", "offline"   # OFFLINE: no claim can be made now


async def claim(project: Project, shared: SharedQueue | None, issue: Issue, agent_id: str, lease_seconds: int,
                log: Callable[[str], None]) -> str:
    """Claim `issue` for `agent_id`: CLAIMED, TAKEN (another holder won it) or OFFLINE."""
    if shared is None:
        return CLAIMED if lifecycle.claim(project, issue.id, agent_id, lease_seconds=lease_seconds) else TAKEN
    if await shared.claim(issue.id, agent_id, lease_seconds):   # pushed first, then it lands here
        project.update_index()
        return CLAIMED
    project.sync(warn=False)
    if not shared.online:
        news = shared.claims_trouble_news()
        if news:
            log(f"{issue.id} not claimed: {news}")
        return OFFLINE
    log(f"{issue.id} lost to another machine's claim")
    return TAKEN
