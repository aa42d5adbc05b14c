"""Agents being started go first: merges wait while one starts.

Starting an agent (worktree, session, prompt) is on the critical path — its issue's dependents
wait for it — and a merge is not (dependents start from their blockers' unmerged work). Both are
mostly pygit2 calls holding the GIL, so a merge running beside a start-up doubled its latency.
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Iterator


class StartGate:
    def __init__(self) -> None:
        self._starting = 0
        self._none_starting = asyncio.Event()
        self._none_starting.set()

    @contextmanager
    def starting(self) -> Iterator[None]:
        """Held while an agent is being started."""
        self._starting += 1
        self._none_starting.clear()
        try:
            yield
        finally:
            self._starting -= 1
            if not self._starting:
                self._none_starting.set()

    async def wait(self, at_most: float) -> None:
        """Until no agent is being started, `at_most` seconds."""
        try:
            await asyncio.wait_for(self._none_starting.wait(), at_most)
        except asyncio.TimeoutError:
            pass
