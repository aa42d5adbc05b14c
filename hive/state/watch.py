"""Watching the state: wake on edits saved in `.hive/` and on ref updates, and act at once.

Used by `git hive watch` and by the daemon. Ref updates are seen in the `ref-events` file: the
installed `reference-transaction` hook appends to it for every branch git moves, and hive's own
writers (libgit2 runs no hooks) for theirs. Lines this process wrote itself are no news to it.
No polling: watchfiles wakes us. A ref moved by a writer that does neither (git with hooks turned
off) is seen at the caller's next safety tick.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Protocol

from hive import git

EDITOR_NOISE = (".swp", ".swx", ".swo", "~", ".tmp", ".hive-tmp")


class HasPaths(Protocol):
    """What watching needs of a project: where its files are (`hive.project.Project` has it)."""

    paths: git.RepoPaths


@dataclass
class Wakeup:
    checkout_paths: set[str]     # paths under .hive/ that changed (relative)
    refs_moved: bool             # a branch moved (ours or anyone's)
    other: set[str]              # other watched files that changed (absolute)


def _is_noise(name: str) -> bool:
    return name.startswith(".") or name.endswith(EDITOR_NOISE) or name.isdigit()


def watched_paths(project: HasPaths, extra: list[Path] | None = None) -> list[Path]:
    """The `.hive/` checkout (recursively) and the `ref-events` file.

    Not the rest of `<git-common-dir>/hive/`: the worker worktrees live there, and every file an
    agent, a checkout or a test writes in them would cost the watcher thread and wake the loop.
    Not `refs/`: every work branch hive creates, moves and deletes would wake it too.
    """
    paths = project.paths
    if paths.hive_dir.is_dir():
        paths.ref_events.touch(exist_ok=True)   # a file is watched only once it exists
    candidates = [paths.state_checkout, paths.ref_events, *(extra or [])]
    return [p for p in candidates if p.exists()]


class RefEvents:
    """Reads what was appended to `ref-events` since the last look."""

    def __init__(self, path: Path):
        self.path = path
        self.own = f" {os.getpid()}"
        try:
            self.offset = path.stat().st_size
        except FileNotFoundError:
            self.offset = 0

    def news(self) -> bool:
        """Whether a ref was moved by anyone but this process since the last call."""
        try:
            with open(self.path, "rb") as events:
                events.seek(0, os.SEEK_END)
                if events.tell() < self.offset:
                    self.offset = 0   # emptied by a person: read it all
                events.seek(self.offset)
                added = events.read()
        except FileNotFoundError:
            return True
        complete = added.rfind(b"\n") + 1   # a line being written is read next time
        self.offset += complete
        lines = added[:complete].decode("utf-8", "replace").splitlines()
        # hive's writers append "<time> <pid>", the hook "<old> <new> <ref>"
        return any(len(line.split()) != 2 or not line.endswith(self.own) for line in lines if line)


async def wakeups(project: HasPaths, extra: list[Path] | None = None,
                  stop: asyncio.Event | None = None, timeout_ms: int | None = None) -> AsyncIterator[Wakeup]:
    """Yield a Wakeup for every batch of relevant file changes (debounced ~50 ms)."""
    from watchfiles import awatch

    checkout = str(project.paths.state_checkout) + os.sep
    ref_events = RefEvents(project.paths.ref_events)
    events_path = str(ref_events.path)
    roots = watched_paths(project, extra)
    # watchfiles' thread takes the GIL every `step` ms to look at `stop`; a batch of changes is
    # handed over once a step passes without new ones: ~2 steps (40 ms) after a person's save
    async for changes in awatch(*roots, watch_filter=None, debounce=50, step=20, stop_event=stop,
                                rust_timeout=timeout_ms or 0, yield_on_timeout=bool(timeout_ms)):
        wake = Wakeup(set(), False, set())
        for _, path in changes:
            if path.startswith(checkout):
                rel = path[len(checkout):]
                if rel.startswith(".git") or _is_noise(os.path.basename(rel)):
                    continue
                wake.checkout_paths.add(rel)
            elif path == events_path:
                wake.refs_moved = wake.refs_moved or ref_events.news()
            elif not path.endswith((".lock", "-wal", "-shm", "-journal")):
                wake.other.add(path)
        if wake.checkout_paths or wake.refs_moved or wake.other or timeout_ms:
            yield wake
