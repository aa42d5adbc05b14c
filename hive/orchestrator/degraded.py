"""Degraded mode: the provider keeps failing, so no new agent starts until a probe succeeds.

Provider failures do not burn issues' retry budgets nor feed the anomaly detector: the worker
asks for degraded mode and waits for `healthy`, its budget untouched.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from hive.backends.base import Backend, Event
from hive.runtime import Runtime

MAX_PROBE_DELAY = 60.0


class ProviderHealth:
    def __init__(self, backend: Backend, runtime: Runtime, stopping: asyncio.Event,
                 log: Callable[[str], None], on_healthy: Callable[[], None]):
        self.backend = backend
        self.runtime = runtime
        self.stopping = stopping
        self.log = log
        self.on_healthy = on_healthy
        self.healthy = asyncio.Event()
        self.healthy.set()
        self._probe_task: asyncio.Task[None] | None = None

    def enter(self, reason: str) -> None:
        """Pause spawning; probe the provider with exponential back-off until it answers again."""
        if not self.healthy.is_set():
            return
        self.healthy.clear()
        self.runtime.put("degraded", reason)
        self.log(f"degraded: {reason}; pausing new agents until the provider answers")
        self._probe_task = asyncio.create_task(self._probe())

    def provider_error(self, event: Event) -> None:
        """The backend's PROVIDER_ERROR event: degraded mode."""
        data = event.data if isinstance(event.data, dict) else {}
        status = data.get("status")
        self.enter(f"provider error{f' {status}' if status else ''}: {data.get('message', '')}"[:200])

    async def wait_healthy(self) -> None:
        await self.healthy.wait()

    def stop(self) -> None:
        self.runtime.delete("degraded")
        if self._probe_task is not None:
            self._probe_task.cancel()

    async def _probe(self) -> None:
        delay = 1.0
        while not self.stopping.is_set():
            self.runtime.put("degraded_retry_in", f"{delay:.0f}")
            try:
                await asyncio.wait_for(self.stopping.wait(), timeout=delay)
                return
            except asyncio.TimeoutError:
                pass
            try:
                healthy = await self.backend.health_check()
            except Exception:  # noqa: BLE001 - a probe that fails is an unhealthy provider
                healthy = False
            if healthy:
                self.runtime.delete("degraded")
                self.runtime.delete("degraded_retry_in")
                self.healthy.set()
                self.log("provider healthy again: resuming")
                self.on_healthy()
                return
            delay = min(MAX_PROBE_DELAY, delay * 2)
