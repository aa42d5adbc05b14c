"""The last whole `list --json` text, kept beside the index (`<common>/hive/listing.json`).

Status bars and scripts ask for the whole listing again and again while nothing changed, and
SQLite takes a while to make it of a big queue (docs/PERFORMANCE.md). The text is kept with the
index's listing generation, a token `Index.catch_up` draws anew in every transaction that changes
the index's rows: the same generation, the same rows, the same text (`Index.list_json_parts`
keeps a text only if the generation was the same before and after its rows were read). A cache
only: deleting it costs one listing made again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO

HEADER = "hive-listing "
CHUNK = 1 << 20          # characters handed on at once


def read(path: Path, generation: str) -> Iterator[str] | None:
    """The text kept at `path`, in parts, if it was kept for `generation`; None otherwise (no
    file, another generation, a link: never followed; anything but a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    handle = os.fdopen(fd, "r", encoding="utf-8", newline="")
    try:
        kept_for = handle.readline(len(HEADER) + len(generation) + 2)
    except (OSError, UnicodeDecodeError):
        kept_for = ""
    if kept_for != f"{HEADER}{generation}\n":
        handle.close()
        return None
    return _parts(handle)


def _parts(handle: TextIO) -> Iterator[str]:
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def keeping(path: Path, generation: str, parts: Iterable[str], still_current: Callable[[], bool]) -> Iterator[str]:
    """`parts`, handed on as they come and kept at `path` for `generation` once all have come, if
    `still_current()` then. A listing not read to its end (a closed pipe) keeps nothing; one the
    disk cannot take is still handed on whole."""
    keeper = _Keeper(path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}"),
                     f"{HEADER}{generation}\n")
    try:
        for part in parts:
            keeper.write(part)
            yield part
        if still_current():
            keeper.keep_at(path)
    finally:
        keeper.discard()


class _Keeper:
    """The text being kept, in a file of its own until it is whole; given up at the first error."""

    def __init__(self, temporary: Path, header: str):
        self.temporary = temporary
        self.out: TextIO | None = None
        try:
            self.out = open(temporary, "x", encoding="utf-8", newline="")
            self.out.write(header)
        except OSError:
            self.discard()

    def write(self, part: str) -> None:
        if self.out is not None:
            try:
                self.out.write(part)
            except OSError:
                self.discard()

    def keep_at(self, path: Path) -> None:
        if self._closed_whole():
            try:
                os.replace(self.temporary, path)
            except OSError:
                pass

    def discard(self) -> None:
        self._closed_whole()
        try:
            os.unlink(self.temporary)
        except OSError:
            pass   # gone already (kept, or never made)

    def _closed_whole(self) -> bool:
        """Close the file: whether it holds all that was written (not so if never made, given up,
        or its last bytes could not be written)."""
        out, self.out = self.out, None
        if out is None:
            return False
        try:
            out.close()
        except OSError:
            return False
        return True
