"""The two kinds of failure a command can end with, and their exit codes (DESIGN §5)."""

from __future__ import annotations


class HiveError(Exception):
    """An operation failed: exit code 1, one line on stderr."""

    exit_code = 1


class NeedsPerson(HiveError):
    """`run --until-idle` ended with issues escalated or failed: exit code 3 (DESIGN §5)."""

    exit_code = 3


class BadInput(HiveError):
    """Bad usage or bad input: exit code 2. `where` names the file and line when there is one."""

    exit_code = 2

    def __init__(self, message: str, where: str | None = None):
        # a file name may hold a newline or a terminal escape: the report stays one honest line
        self.where = printable(where) if where else where
        super().__init__(f"{self.where}: {message}" if where else message)


def printable(text: str) -> str:
    """`text` with each character that is not printable (a control character, a newline) written
    as its escape (`\\x1b`, `\\n`): safe to show on a terminal, one line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
