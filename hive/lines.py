"""Reading a file that another process appends lines to (the worker protocol files)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator


def iter_lines(path: Path, offset: int = 0, max_line: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(end offset, line) for each complete line after `offset`; overlong lines are skipped."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    with handle:
        handle.seek(offset)
        while True:
            line = handle.readline(max_line + 1)
            if not line:
                return
            if not line.endswith(b"\n"):
                if len(line) > max_line:
                    # an overlong line: skip to its end without holding it in memory
                    while line and not line.endswith(b"\n"):
                        line = handle.readline(max_line + 1)
                    yield handle.tell(), b""
                    continue
                return  # incomplete last line: wait for the writer to finish it
            yield handle.tell(), line
