"""One daemon per repository: an flock on `<git-common-dir>/hive/daemon.lock`."""

from __future__ import annotations

import fcntl
import os
from typing import IO

from hive import git


class DaemonLock:
    """The lock a running daemon holds; the file also records its pid."""

    def __init__(self, paths: git.RepoPaths):
        self.path = paths.hive_dir / "daemon.lock"
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def holder(self) -> int | None:
        """The pid of the running daemon, or None when no daemon holds the lock."""
        if not self.path.exists():
            return None
        with open(self.path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                text = handle.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
