"""The daemon's `.hive/` checkout: brought up to date on each wake, batched while it writes.

Only the `.hive/` files the watcher saw change are looked at for a person's edits; all of them at
start and on every full sweep (`sweep`), in case an event was lost. The checkout follows the
branch at most every CHECKOUT_REFRESH_SECONDS while the daemon writes (three commits per issue):
each refresh rewrites the checkout's git index and records, and a file changed several times in
between is written once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from hive.project import Project

CHECKOUT_REFRESH_SECONDS = 0.5


class CheckoutFollower:
    def __init__(self, project: Project, log: Callable[[str], None], wake: Callable[[], None]):
        self.project = project
        self.log = log
        self.wake = wake
        self._changes: set[str] | None = None        # None: look at the whole checkout
        self._refreshed = float("-inf")              # time.monotonic() of the last refresh
        self._timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None   # while the daemon runs
        self._problems_seen: set[str] = set()
        project.defer_checkout = self.behind         # the loop refreshes `.hive/`, batched

    def refresh(self) -> None:
        """Sync the state with the branch and (when due) `.hive/`; each new problem logged once."""
        only, self._changes = self._changes, set()
        due = time.monotonic() - self._refreshed >= CHECKOUT_REFRESH_SECONDS
        if not due:
            self._schedule()
        problems = self.project.sync(warn=False, only=only, refresh=due)
        if due:
            self._refreshed = time.monotonic()
        for problem in problems:
            if str(problem) not in self._problems_seen:
                self._problems_seen.add(str(problem))
                self.log(f"warning: {problem}")

    def changed(self, checkout_paths: set[str]) -> None:
        """The watcher saw these `.hive/` files change."""
        if self._changes is not None:
            self._changes |= checkout_paths

    def sweep(self) -> None:
        """Look at the whole checkout at the next refresh."""
        self._changes = None

    def behind(self) -> None:
        """Called after each of this process's state commits (any thread): `.hive/` follows
        within CHECKOUT_REFRESH_SECONDS."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _schedule(self) -> None:
        if self._timer is None:
            wait = max(0.0, self._refreshed + CHECKOUT_REFRESH_SECONDS - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(wait, self._due)

    def _due(self) -> None:
        self._timer = None
        self.wake()
