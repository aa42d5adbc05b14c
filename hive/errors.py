"""The two kinds of failure a command can end with, and their exit codes (DESIGN §5)."""

from __future__ import annotations


class HiveError(Exception):
    """An operation failed: exit code 1, one line on stderr."""

    exit_code = 1


class BadInput(HiveError):
    """Bad usage or bad input: exit code 2. `where` names the file and line when there is one."""

    exit_code = 2

    def __init__(self, message: str, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
