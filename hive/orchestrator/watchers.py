"""The daemon's wake sources on disk: the state (`.hive/` and ref events), a worker's result files.

Each is one asyncio task that calls back on change and ends quietly when what it watches goes away.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from watchfiles import awatch

from hive.agents import protocol
from hive.project import Project
from hive.state.watch import wakeups


async def watch_state(project: Project, stop: asyncio.Event, on_wake: Callable[[set[str]], None],
                      log: Callable[[str], None]) -> None:
    """`on_wake(changed .hive/ paths)` on every change of the state or the checkout."""
    try:
        async for wake in wakeups(project, stop=stop):
            on_wake(set(wake.checkout_paths))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the tick still keeps us going
        log(f"warning: state watcher stopped: {exc}")


async def watch_worker_files(root: Path, on_notes: Callable[[], None], on_result: Callable[[], None],
                             on_failure: Callable[[str], None]) -> None:
    """Calls back when a worker's notes file, or its result file, changes; `on_failure(why)`
    when the worktree cannot be watched (the user's inotify instances all taken, say)."""
    names = (protocol.NOTES_FILE, protocol.RESULT_FILE)
    try:
        # awatch sets its stop event when it ends: give it one of its own. Its thread takes
        # the GIL every `step` ms to look at that event: with eight agents, a 5 ms step cost
        # ~2 ms CPU per issue. Nothing here is latency-critical (completion comes from the
        # backend): a 50 ms step is plenty.
        async for changes in awatch(root, recursive=False, debounce=100, step=50,
                                    watch_filter=lambda _, path: path.endswith(names),
                                    stop_event=asyncio.Event()):
            if any(path.endswith(protocol.NOTES_FILE) for _, path in changes):
                on_notes()
            else:
                on_result()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the worktree went away, or cannot be watched
        if root.is_dir():
            on_failure(str(exc))
