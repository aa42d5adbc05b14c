"""Agent processes: each runs in its own process group, which is ended whole.

Shared by every backend that starts agent CLIs (through `agent_process.AgentProcess`) and by the
daemon's crash recovery. An agent may leave children behind (a test run in
the background, a fork bomb); ending the group ends them all. Orphans are reparented to init,
which may reap them late (in some containers never), so a group counts as gone when no *live*
process is left in it — zombies do not count.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Callable, Iterable


def killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists (or is not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int, among: Iterable[int] | None = None) -> bool:
    """Whether a live (not zombie) process is left in the group; `among`: the only processes
    that can be in it (a jail's cgroup lists them), else every process's stat is read."""
    if not killpg(pgid, 0):
        return False   # no process at all, zombies included: no need to read /proc
    if among is not None:
        entries = [str(pid) for pid in among]
    else:
        try:
            entries = os.listdir("/proc")
        except OSError:
            return killpg(pgid, 0)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:   # os.open, not open(): a scan reads every process's stat, ~3× cheaper so
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def group_gone(pgid: int, timeout: float, among: Callable[[], Iterable[int] | None] = lambda: None) -> bool:
    """Wait until no live process is left in the group; False if some still are at the end
    (`among`: as for `group_alive`, asked at each look)."""
    deadline = time.monotonic() + timeout
    while group_alive(pgid, among()):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)    # nothing to await: other processes' deaths are not events
    return True
