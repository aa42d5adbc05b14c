"""How young a file must be for its stat to prove nothing: the file system's timestamp tick.

A file saved twice within one tick of its mtime, at the same size, keeps the same stat: an edit
no stat comparison can see. So a record made less than a tick after the file's mtime is "racy"
and its content is compared next time (git's racy-git rule). The tick is what the kernel's
coarse clock and the file system make of it — a few milliseconds on ext4, xfs, btrfs and tmpfs,
a second or two on FAT and some network file systems — so it is measured, once per file system,
by saving a probe file until its mtime moves, and kept (`Checkout` stores it in checkout.db).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FALLBACK_NS = 2_000_000_000      # when no tick was seen (FAT has 2 s timestamps)
MEASURE_NS = 2_100_000_000       # how long to try: longer than the coarsest tick known
FLOOR_NS = 10_000_000            # never less: the coarse clock lags the fine one by up to a tick
STEPS = 3                        # mtime moves to see


def measure_tick(folder: Path) -> int:
    """The smallest step between successive mtimes of a file saved over and over in `folder`.

    Every step is a whole number of ticks; a larger one is only a save that came late (the
    process was descheduled on a loaded machine). Taking the largest made such a pause the
    window kept for the file system from then on."""
    probe = folder / f".hive-mtime-probe-{os.getpid()}"
    seen: list[int] = []
    began = time.monotonic_ns()
    try:
        while len(seen) <= STEPS and time.monotonic_ns() - began < MEASURE_NS:
            with open(probe, "wb") as out:
                out.write(b"x")
            mtime = os.stat(probe).st_mtime_ns
            if not seen or mtime != seen[-1]:
                seen.append(mtime)
    except OSError:
        return FALLBACK_NS
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    steps = [b - a for a, b in zip(seen, seen[1:]) if b > a]
    return min(steps) if len(steps) >= 2 else FALLBACK_NS


def racy_window(tick_ns: int) -> int:
    """How young a file's mtime may be for its record to be racy: two ticks (the coarse clock
    that stamps files lags the one hive reads), at least FLOOR_NS, at most FALLBACK_NS."""
    return min(max(2 * tick_ns, FLOOR_NS), FALLBACK_NS)
