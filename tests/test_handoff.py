"""The worker's port to the merge step: what a daemon does with done work."""

from __future__ import annotations

import asyncio
from typing import Any

from hive.orchestrator.handoff import Handoff


class FakeMerge:
    def __init__(self) -> None:
        self.queued: list[tuple[str, str, str]] = []

    def enqueue(self, issue_id: str, base_commit: str, test_command: str = "") -> None:
        self.queued.append((issue_id, base_commit, test_command))


class FakeShared:
    def __init__(self) -> None:
        self.pushed: list[str] = []
        self.push_requests = 0

    async def push_work_branch(self, issue_id: str) -> None:
        self.pushed.append(issue_id)

    def request_push(self) -> None:
        self.push_requests += 1


def test_done_work_is_queued_for_merge_and_the_daemon_woken():
    woken: list[bool] = []
    handoff = Handoff(None, lambda: woken.append(True))
    handoff.handoff("hv-000001", "abc123", "pytest -q")          # manual mode: nothing queued
    merge = FakeMerge()
    handoff.merge = merge  # type: ignore[assignment]
    handoff.handoff("hv-000002", "def456", "make test")
    assert merge.queued == [("hv-000002", "def456", "make test")]
    assert woken == [True, True]


def test_in_shared_mode_the_work_branch_is_pushed_too():
    shared = FakeShared()
    merge = FakeMerge()

    async def body() -> None:
        handoff = Handoff(shared, lambda: None)  # type: ignore[arg-type]
        handoff.merge = merge  # type: ignore[assignment]
        handoff.handoff("hv-000003", "abc", "")
        pending: Any = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]   # the push
        await asyncio.gather(*pending)

    asyncio.run(body())
    assert shared.pushed == ["hv-000003"] and shared.push_requests == 1
    assert merge.queued == [("hv-000003", "abc", "")]
