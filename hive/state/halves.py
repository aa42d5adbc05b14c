"""Work done in a forked child while this process does its own: two cores used where one
interpreter would use one.

A rebuild, or a queue taken in whole, parses every issue file: pure Python that one interpreter
runs on one core. `map_halves` gives the second half of the items to a child made by `fork` (it
inherits them, nothing is sent) and does the first half itself meanwhile. `Beside` runs any one
function in a child while the caller goes on (taking a big queue in indexes it there while
`.hive/` is written here). Results come back through a pipe, pickled.

It forks only where that is safe and worth it: two cores free, and this process running one
thread (a fork copies only the calling thread; a lock another thread held would stay held in the
child). A core is not free while a `Beside` child works beside its caller: for the caller while
its child runs, for the child until its caller waits for the result. On two cores, a queue taken
in whole is then parsed in one process while `.hive/` is written in the other, and in two once
the writing is over (a third process on two cores only added forks and switches). The child
leaves by `os._exit`: nothing of the parent's (buffers, atexit handlers, open transactions) is
flushed or closed twice. Anything wrong with the child (killed, crashed, garbled results) costs
only time: its work is then done here.
"""

from __future__ import annotations

import gc
import os
import select
import threading
from typing import Callable, Generic, Iterable, Iterator, Sequence, TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")

MIN_ITEMS = 4000   # fewer: the fork and the transfer cost more than the half they save
BATCH_BYTES = 8 << 20   # bytes of input held at once by the bulk paths (`batches`)
BATCH_ITEMS = 5_000      # items held at once, however small

_running_beside = 0     # this process's `Beside` children still working
_caller_waits = -1      # in a `Beside` child: a pipe that turns readable when its caller waits


def batches(items: Iterable[Item], size: Callable[[Item], int], max_bytes: int = BATCH_BYTES,
            max_items: int = BATCH_ITEMS) -> Iterator[list[Item]]:
    """`items` in consecutive lists of at most `max_items` and about `max_bytes` by `size`
    (one item larger than that is a list of its own): what a bulk path holds at once, so that
    its memory stays flat however much comes in."""
    batch: list[Item] = []
    held = 0
    for item in items:
        measured = size(item)
        if batch and (held + measured > max_bytes or len(batch) >= max_items):
            yield batch
            batch, held = [], 0
        batch.append(item)
        held += measured
    if batch:
        yield batch


def map_halves(fn: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
    """`[fn(item) for item in items]`, in that order, the second half computed in a child when
    there are MIN_ITEMS or more."""
    if len(items) < max(MIN_ITEMS, 2) or not may_fork():
        return [fn(item) for item in items]
    half = len(items) // 2
    with Beside(lambda: [fn(item) for item in items[half:]]) as theirs:
        mine = [fn(item) for item in items[:half]]
        return mine + theirs.result()


class Beside(Generic[Result]):
    """`fn()` computed by a forked child from now on; `result()` waits for it and returns its
    value. Where no fork may be made (or `fork=False`: not worth one), or when the child fails,
    `result()` calls `fn()` here. Used as a context manager: leaving the block without the result
    ends the child (killed)."""

    def __init__(self, fn: Callable[[], Result], *, fork: bool = True):
        self._fn = fn
        self._pid = 0
        self._read_end = -1
        self._waiting: tuple[int, int] = (-1, -1)   # a pipe written to once this caller waits
        self._frozen = False
        if fork and may_fork():
            self._fork()

    def _fork(self) -> None:
        global _running_beside, _caller_waits
        read_end, write_end = os.pipe()
        waits_read, waits_write = os.pipe()
        # Objects made before the fork are left out of garbage collection until the child has
        # ended: a full collection writes to every object it visits, and each page written is
        # copied (in the parent, in the child) — in a big process that cost more than it saved.
        gc.freeze()
        self._frozen = True
        try:
            pid = os.fork()
        except OSError:   # no memory or processes left for a child: all of it is done here
            for fd in (read_end, write_end, waits_read, waits_write):
                os.close(fd)
            self.close()
            return
        if pid == 0:   # the child: never returns into the caller's code
            try:
                import pickle

                os.close(read_end)
                os.close(waits_write)
                _running_beside, _caller_waits = 0, waits_read
                payload = pickle.dumps((True, self._fn()), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as out:
                    out.write(payload)
            except BaseException:   # noqa: BLE001 - whatever happens here, the parent redoes it
                os._exit(1)
            os._exit(0)
        os.close(write_end)
        # its read end kept here too: the byte that says "waiting" never meets a closed pipe
        self._pid, self._read_end, self._waiting = pid, read_end, (waits_read, waits_write)
        _running_beside += 1

    def result(self) -> Result:
        if not self._pid:
            return self._fn()
        os.write(self._waiting[1], b".")   # this core is the child's now
        try:
            with os.fdopen(self._read_end, "rb") as pipe:
                self._read_end = -1
                payload = pipe.read()
            _, status = os.waitpid(self._pid, 0)
            self._pid = 0
        finally:
            self.close()
        found = _unpickled(payload) if os.waitstatus_to_exitcode(status) == 0 else None
        return cast(Result, found[1]) if found is not None else self._fn()

    def close(self) -> None:
        """End the child if it still runs (interrupted: Ctrl-C, an exception here)."""
        global _running_beside
        if self._read_end >= 0:
            os.close(self._read_end)
            self._read_end = -1
        if self._waiting[0] >= 0:
            for fd in self._waiting:
                os.close(fd)
            self._waiting = (-1, -1)
            _running_beside -= 1
        if self._pid:
            import signal   # not on the way of a command that forks nothing (~0.7 ms)

            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = 0
        if self._frozen:
            gc.unfreeze()
            self._frozen = False

    def __enter__(self) -> "Beside[Result]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def may_fork() -> bool:
    return hasattr(os, "fork") and free_cores() >= 2 and threading.active_count() == 1


def free_cores() -> int:
    """The cores this process may use: those it may run on, less one for each `Beside` child of
    its own still working, and, in such a child, one for its caller until it waits."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores - _running_beside - (1 if _caller_works() else 0)


def _caller_works() -> bool:
    if _caller_waits < 0:
        return False
    waits = select.poll()
    waits.register(_caller_waits, select.POLLIN)
    return not waits.poll(0)


def _unpickled(payload: bytes) -> tuple[bool, object] | None:
    import pickle

    try:
        found = pickle.loads(payload)
    except Exception:   # noqa: BLE001 - a child killed mid-write: a truncated pickle
        return None
    return found if isinstance(found, tuple) and len(found) == 2 and found[0] is True else None
