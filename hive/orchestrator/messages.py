"""What reaches agents at work besides their prompt: a person's tells, siblings' notes."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from hive.agents.prompts import fyi_message
from hive.orchestrator.worker import Worker
from hive.runtime import Runtime
from hive.runtime.tells import Tell


async def deliver_tells(runtime: Runtime, running: Mapping[str, Worker], log: Callable[[str], None]) -> None:
    """A person's messages (`git hive tell`) to the sessions working their issues now; the
    others wait for their issue's next prompt (`Worker`)."""
    for issue_id, waiting in _by_issue(runtime.pending_tells()).items():
        worker = running.get(issue_id)
        if worker is not None and worker.in_turn and await worker.send_told(waiting):
            log(f"{issue_id}: {len(waiting)} message(s) from you passed to its agent")


def relay_notes(running: Mapping[str, Worker], source: Worker, notes: list[dict[str, Any]]) -> None:
    """FYI to running siblings: same epic; gotchas go to everyone."""
    for worker in list(running.values()):
        if worker is source or not worker.session_id or not worker.in_turn:
            continue
        same_epic = bool(source.parent) and worker.parent == source.parent
        for note in notes:
            if same_epic or note["category"] == "gotcha":
                asyncio.ensure_future(worker.send_fyi(fyi_message(note)))


def _by_issue(tells: list[Tell]) -> dict[str, list[Tell]]:
    grouped: dict[str, list[Tell]] = {}
    for tell in tells:
        grouped.setdefault(tell.issue_id, []).append(tell)
    return grouped
