"""Done work handed on: the worker's port to the merge step, and the daemon's side of it.

A worker knows only `MergeQueue.handoff`; `Handoff` is what the daemon gives it: the work branch
pushed for people to see (shared mode), the issue queued in the merge pipeline (auto mode; in
manual mode a person merges), the daemon woken.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol

from hive.merge.pipeline import MergeProcessor
from hive.orchestrator.shared import SharedQueue


class MergeQueue(Protocol):
    def handoff(self, issue_id: str, base_commit: str, test_command: str) -> None:
        """The issue is done on its work branch from `base_commit`: merge it (or leave it to a person)."""


class Handoff:
    """`MergeQueue` for a daemon: its pipeline (None: manual mode), its shared queue, its wake."""

    def __init__(self, shared: SharedQueue | None, wake: Callable[[], None]):
        self.merge: MergeProcessor | None = None      # set when the daemon gets its pipeline
        self.shared = shared
        self.wake = wake

    def handoff(self, issue_id: str, base_commit: str, test_command: str) -> None:
        if self.shared is not None:
            asyncio.ensure_future(self.shared.push_work_branch(issue_id))
            self.shared.request_push()
        if self.merge is not None:
            self.merge.enqueue(issue_id, base_commit, test_command)
        self.wake()
