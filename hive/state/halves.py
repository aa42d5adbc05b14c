"""CPU-bound work over many items, split between this process and one forked child.

A rebuild, or a queue taken in whole, parses every issue file: pure Python that one interpreter
runs on one core. `map_halves` gives the second half of the items to a child made by `fork` (it
inherits them, nothing is sent), does the first half itself meanwhile, and reads the child's
results back through a pipe (pickled). The child only computes: it touches no file, database or
lock and leaves by `os._exit`.

It forks only where that is safe and worth it: enough items, two cores or more, and this process
running one thread (a fork copies only the calling thread; a lock another thread held would stay
held in the child). Anything wrong with the child (killed, crashed, garbled results) costs only
time: its half is then done here.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import threading
from typing import Callable, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

MIN_ITEMS = 4000   # fewer: the fork and the transfer cost more than the half they save


def map_halves(fn: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
    """`[fn(item) for item in items]`, in that order, the second half computed in a child when
    there are MIN_ITEMS or more."""
    if len(items) < max(MIN_ITEMS, 2) or not _may_fork():
        return [fn(item) for item in items]
    half = len(items) // 2
    read_end, write_end = os.pipe()
    # Objects made before the fork are left out of garbage collection until the child has ended:
    # a full collection writes to every object it visits, and each page written is copied (in
    # the parent, in the child) — in a big process that cost more than the half saved.
    gc.freeze()
    pid = os.fork()
    if pid == 0:   # the child: never returns into the caller's code
        try:
            os.close(read_end)
            payload = pickle.dumps([fn(item) for item in items[half:]], protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:   # noqa: BLE001 - whatever happens here, the parent redoes the half
            os._exit(1)
        os._exit(0)
    os.close(write_end)
    try:
        results = [fn(item) for item in items[:half]]
        with os.fdopen(read_end, "rb") as pipe:
            read_end = -1
            payload = pipe.read()
        _, status = os.waitpid(pid, 0)
        pid = 0
        theirs = _unpickled(payload) if os.waitstatus_to_exitcode(status) == 0 else None
        if theirs is None or len(theirs) != len(items) - half:
            theirs = [fn(item) for item in items[half:]]
        return results + theirs
    finally:
        if read_end >= 0:
            os.close(read_end)
        if pid:   # interrupted (Ctrl-C, an exception of fn here): the child goes too
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        gc.unfreeze()


def _may_fork() -> bool:
    return hasattr(os, "fork") and (os.cpu_count() or 1) >= 2 and threading.active_count() == 1


def _unpickled(payload: bytes) -> list | None:
    try:
        found = pickle.loads(payload)
    except Exception:   # noqa: BLE001 - a child killed mid-write: a truncated pickle
        return None
    return found if isinstance(found, list) else None
