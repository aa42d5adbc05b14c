"""Lines from outside — the worker protocol files agents write, notes fetched with `hive/state` —
opened and parsed within bounds (docs/SECURITY.md, "Bounded parsing").

Python's `json` and `tomllib` recurse once per nested array or table: a line of 100,000 `[`
raises RecursionError from deep in C. Every parse of such data goes through `json_line` (or
measures `toml_depth` first), so that hostile input is a `BadLine`, a problem named by its
caller, never an exception that ends a command.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

MAX_JSON_DEPTH = 32          # arrays and objects in one JSON line; hive's own nest 2 deep
MAX_JSON_LINE = 1 << 20      # bytes of one JSON line parsed
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC   # a folder, no link followed

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_INNERMOST = re.compile(rb"[\[{][\]}]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class BadLine(ValueError):
    """A line that is not what it should be: too long, nested too deep, or not JSON."""


class NotAFile(OSError):
    """A protocol file that is not a regular file (a FIFO, socket, device, link) or too big."""


def json_depth_over(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON text nests arrays and objects deeper than `limit` (or leaves brackets
    open): strings removed, innermost pairs removed `limit` times, in C; nothing recurses."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)


def json_line(raw: bytes | str, max_bytes: int = MAX_JSON_LINE) -> Any:
    """`json.loads` of one line of outside data, or BadLine saying why not (one short line)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise BadLine(f"a line of {len(data)} bytes, longer than {max_bytes}")
    if json_depth_over(data):
        raise BadLine(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadLine(str(exc).splitlines()[0][:200]) from None


def toml_depth(text: str) -> int:
    """How deep arrays and inline tables nest in TOML text; brackets in strings and comments are
    not counted (strings are followed well enough for a limit far above what a person writes and
    far below what makes tomllib recurse out)."""
    depth = deepest = 0
    quote = ""
    at, size = 0, len(text)
    while at < size:
        ch = text[at]
        if quote:
            if ch == "\\" and quote == '"':
                at += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            newline = text.find("\n", at)
            at = size if newline < 0 else newline
            continue
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
        at += 1
    return deepest


def open_regular(path: Path, max_bytes: int | None = None) -> BinaryIO | None:
    """`path` opened for reading without blocking and without following a link, or None when
    there is none. NotAFile (its message says what it is) for a symbolic link, FIFO, socket,
    device or folder, or a file over `max_bytes`: an agent may have made any of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAFile(f"{path.name}: refused: a symbolic link, not a file") from None
        if exc.errno == errno.ENXIO:
            raise NotAFile(f"{path.name}: refused: a socket, not a file") from None
        raise NotAFile(f"{path.name}: cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{path.name}: refused: {_kind(info.st_mode)}, not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise NotAFile(f"{path.name}: {info.st_size} bytes, more than {max_bytes}")
        os.set_blocking(fd, True)   # a regular file never blocks: plain reads from here
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_folder(path: Path | int, names: Iterable[str] = ()) -> int:
    """A descriptor of the folder `path` (or a copy of the open folder descriptor `path`), then of
    each of `names` in turn inside the one before, none opened through a link (swapped in after a
    check, it is not followed); OSError when one is not a real folder (what was opened closed)."""
    at = os.dup(path) if isinstance(path, int) else os.open(path, FOLDER_FLAGS)
    try:
        for name in names:
            inner = os.open(name, FOLDER_FLAGS, dir_fd=at)
            os.close(at)
            at = inner
    except BaseException:
        os.close(at)
        raise
    return at


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def read_regular(path: Path, max_bytes: int) -> bytes | None:
    """The whole of a regular file of at most `max_bytes` (`open_regular`), or None if absent."""
    handle = open_regular(path, max_bytes)
    if handle is None:
        return None
    with handle:
        return handle.read(max_bytes + 1)[:max_bytes]


def iter_lines(path: Path, offset: int = 0, max_line: int = 1 << 20,
               max_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(end offset, line) for each complete line after `offset`; overlong lines are skipped.
    The file is opened as `open_regular` opens it (NotAFile for anything else); with
    `max_bytes`, reading stops there."""
    handle = open_regular(path)
    if handle is None:
        return
    with handle:
        handle.seek(offset)
        while max_bytes is None or handle.tell() < max_bytes:
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
