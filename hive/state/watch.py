"""Watching the state: wake on edits saved in `.hive/` and on ref updates, and act at once.

Used by `git hive watch` and by the daemon. Ref updates are seen two ways: the loose ref files
under `refs/heads/` (libgit2 writers run no hooks) and the `ref-events` file that the installed
`reference-transaction` hook and hive's own writers append to. No polling: watchfiles wakes us.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

from hive.project import Project

EDITOR_NOISE = (".swp", ".swx", ".swo", "~", ".tmp", ".hive-tmp")


@dataclass
class Wakeup:
    checkout_paths: set[str]     # paths under .hive/ that changed (relative)
    refs_moved: bool             # a branch moved (ours or anyone's)
    other: set[str]              # other watched files that changed (absolute)


def _is_noise(name: str) -> bool:
    return name.startswith(".") or name.endswith(EDITOR_NOISE) or name.isdigit()


def watched_paths(project: Project, extra: list[Path] | None = None) -> list[Path]:
    paths = project.paths
    candidates = [paths.state_checkout, paths.common_dir / "refs" / "heads", paths.hive_dir, *(extra or [])]
    return [p for p in candidates if p.exists()]


async def wakeups(project: Project, extra: list[Path] | None = None,
                  stop: asyncio.Event | None = None, timeout_ms: int | None = None) -> AsyncIterator[Wakeup]:
    """Yield a Wakeup for every batch of relevant file changes (debounced ~50 ms)."""
    from watchfiles import awatch

    checkout = str(project.paths.state_checkout) + os.sep
    refs = str(project.paths.common_dir / "refs") + os.sep
    ref_events = str(project.paths.hive_dir / "ref-events")
    packed = str(project.paths.common_dir / "packed-refs")
    roots = watched_paths(project, extra)
    async for changes in awatch(*roots, watch_filter=None, debounce=50, step=5, stop_event=stop,
                                rust_timeout=timeout_ms or 0, yield_on_timeout=bool(timeout_ms)):
        wake = Wakeup(set(), False, set())
        for _, path in changes:
            if path.startswith(checkout):
                rel = path[len(checkout):]
                if rel.startswith(".git") or _is_noise(os.path.basename(rel)):
                    continue
                wake.checkout_paths.add(rel)
            elif path.startswith(refs) or path in (ref_events, packed):
                if not path.endswith(".lock"):
                    wake.refs_moved = True
            elif not path.endswith((".lock", "-wal", "-shm", "-journal")):
                wake.other.add(path)
        if wake.checkout_paths or wake.refs_moved or wake.other or timeout_ms:
            yield wake

