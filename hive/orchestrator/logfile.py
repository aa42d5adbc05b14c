"""The daemon's own log as a file, `<git-common-dir>/hive/daemon.log` (`git hive logs` shows it).

Every line the daemon logs is appended there, whether it runs in the foreground or detached. A
detached daemon (`git hive run --detach`) already has that file as its stdout: then the lines are
not written a second time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from hive.errors import printable


class LogFile:
    def __init__(self, path: Path):
        self.path = path
        self._fd = -1
        self._off = _is_stdout(path)

    def write(self, line: str) -> None:
        if self._off:
            return
        try:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.write(self._fd, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            self._off = True           # the log on stdout still has it

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RunLog:
    """A run's lines, time-stamped: to the person (`show`) and to daemon.log. Output that can no
    longer be written (EPIPE: the reader died, the terminal closed) goes on in daemon.log alone,
    and `output_gone` is told once. A line may quote an agent (its summary), a remote or
    hive/state: its control characters and newlines are written as escapes, on a terminal and in
    the file (which people `tail -f`), so that none retitles a terminal or sets its clipboard."""

    def __init__(self, path: Path, show: Callable[[str], None], output_gone: Callable[[], None]):
        self._file = LogFile(path)
        self._show: Callable[[str], None] | None = show
        self._output_gone = output_gone

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {printable(message)}"
        if self._show is not None:
            try:
                self._show(line)
            except OSError:
                self._show = None
                self._output_gone()
        self._file.write(line)

    def to_file_only(self, message: str) -> None:
        """A line for daemon.log alone (what the person sees was said in one line already)."""
        self._file.write(f"{time.strftime('%H:%M:%S')} {printable(message)}")

    def close(self) -> None:
        self._file.close()


def _is_stdout(path: Path) -> bool:
    try:
        out, there = os.fstat(1), os.stat(path)
    except OSError:
        return False
    return (out.st_dev, out.st_ino) == (there.st_dev, there.st_ino)
