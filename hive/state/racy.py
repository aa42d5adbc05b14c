"""How young a file must be for its stat to prove nothing: the file system's timestamp tick.

A file saved twice within one tick of its mtime, at the same size, keeps the same stat: an edit
no stat comparison can see. So a record made less than a tick after the file's mtime is "racy"
and its content is compared next time (git's racy-git rule). The tick is what the kernel's
coarse clock and the file system make of it — a few milliseconds on ext4, xfs, btrfs and tmpfs,
a second or two on FAT and some network file systems — so it is measured, once per file system,
by saving a probe file until its mtime moves, and kept (`Checkout` stores it in checkout.db).

A file hive writes itself needs no window: `backdate` gives it an mtime no later save can get.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Written:
    """The stat of a file hive has just written; `exact`: it proves the bytes, so its record
    needs no look at the content next time, however young the file."""

    stat: os.stat_result
    exact: bool


def backdate(fd: int, data: bytes) -> Written:
    """The stat of the file hive has just written all of `data` to through `fd` (open for
    reading too), made exact at once: its mtime set one nanosecond before the stamp its write
    got, a stamp no later save can get (the clock only moves on; a file system with coarser
    timestamps rounds it down a whole tick), then its bytes read back, so that a save in between
    shows. Not exact where the file system kept no earlier mtime or the bytes are no longer
    `data`: that record is racy, its content compared next time.

    A queue taken in writes 10,000 files within a tick of their records: without this, each was
    read back once it was older than the window, or by the next command."""
    written = os.fstat(fd)
    try:
        os.utime(fd, ns=(written.st_atime_ns, written.st_mtime_ns - 1))
        backdated = os.fstat(fd)
        exact = backdated.st_mtime_ns < written.st_mtime_ns and os.pread(fd, len(data) + 1, 0) == data
    except OSError:
        return Written(written, False)
    return Written(backdated, exact)
