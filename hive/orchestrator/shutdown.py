"""How a run is stopped: the signals that stop it and its exit code (its workers are then ended
by `Crew.end_all`)."""

from __future__ import annotations

import asyncio
import signal
from contextlib import contextmanager
from typing import Callable, Iterator

# every way a person or a wrapper ends a run: Ctrl-C (to the process group, through `| tee` or
# `bash -c`), `kill`, a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
OUTPUT_GONE = int(signal.SIGPIPE)   # stdout closed (EPIPE): exit 141, as a shell reports SIGPIPE


def stop_cause(why: int) -> str:
    """The signal (or OUTPUT_GONE) that stopped a run, in words ("" for none)."""
    if why == OUTPUT_GONE:
        return "its output was closed"
    try:
        return signal.Signals(why).name
    except ValueError:
        return f"signal {why}" if why else ""


class Stopping:
    """Whether a run is asked to stop, and by what: a signal, its output gone (`OUTPUT_GONE`), or
    a plain `request()`; that makes its exit code."""

    def __init__(self, wake: Callable[[], None], log: Callable[[str], None]):
        self.event = asyncio.Event()
        self.by = 0
        self._wake = wake
        self._log = log

    def is_set(self) -> bool:
        return self.event.is_set()

    def request(self, why: int = 0) -> None:
        """Stop: agents end, the issues they held go back to open."""
        first = not self.event.is_set()
        self.event.set()
        self._wake()
        if first:
            self.by = why
            self._log("stopping: ending agents" + (f" ({stop_cause(why)})" if why else ""))

    @property
    def exit_code(self) -> int:
        """0 for a run that ended by itself (or by `request()`); 128 + the signal otherwise."""
        return 128 + self.by if self.by else 0

    @property
    def cause(self) -> str:
        return stop_cause(self.by)

    @contextmanager
    def on_signals(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        """Every stop signal requests a stop while inside (a second one changes nothing)."""
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.request, sig)
        try:
            yield
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
