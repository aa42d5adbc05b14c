"""A worktree's files against its index's record of them (`git status`'s stat cache), read
without opening a file of the worktree or following a link in it: the worktree and its index may
be an agent's, still running, which may have made any file a FIFO (libgit2's status and diff read
every `.gitignore`, through a link too, and wait for good on a FIFO). No file is hashed: one
whose kind, executable bit, size or time differ from its record counts as changed."""

from __future__ import annotations

import collections
import hashlib
import io
import os
import stat
import struct
from pathlib import Path

import dulwich.index

from hive import lines

MAX_NEW = 1000     # new files listed one by one; then new folders as `folder/`
MAX_INDEX_BYTES = 256 << 20
_LINK, _GITLINK = 0o120000, 0o160000
_SECOND = 1_000_000_000

Entry = tuple[str, int, int, int]   # blob id, mode, size, modification time in ns


def read_index(index_file: Path) -> bytes | None:
    """The bytes of an index file, read only if it is a regular file; None when it is not one."""
    try:
        return lines.read_regular(index_file, MAX_INDEX_BYTES)
    except OSError:               # lines.NotAFile too
        return None


def index_entries(index_file: Path) -> dict[str, Entry] | None:
    """The index's entries by path; None when it is no index (missing, not a regular file,
    unreadable)."""
    data = read_index(index_file)
    return None if data is None else entries_of(data)


def entries_of(data: bytes) -> dict[str, Entry] | None:
    """The entries of an index's bytes by path; None when they are no index. A conflicted entry
    has no blob id: it differs from anything."""
    try:
        return _read_v2_or_v3(data) or _read_any(data)
    except Exception:  # noqa: BLE001 - struct.error, ValueError, or what dulwich raises on bytes that are no index
        return None


_HEADER = struct.Struct(">4sII")
# ctime, mtime (s, ns), dev, ino, mode, uid, gid, size, id, flags: what is kept of them
_ENTRY = struct.Struct(">8xII8xI8xI20sH")
_EXTENDED, _STAGE, _NAME_END = 0x4000, 0x3000, b"\0"


def _read_v2_or_v3(data: bytes, offsets: dict[str, int] | None = None) -> dict[str, Entry] | None:
    """The entries of an index of version 2 or 3 (what git and libgit2 write unless told
    otherwise), read with `struct` alone (dulwich's reader, kept for the others, takes ~5 times
    as long); None for another version. `offsets` gets where each entry starts in `data`."""
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != b"DIRC" or version not in (2, 3):
        return None
    entries: dict[str, Entry] = {}
    at = _HEADER.size
    for _ in range(count):
        seconds, nanoseconds, mode, size, sha, flags = _ENTRY.unpack_from(data, at)
        start = at + _ENTRY.size + (2 if flags & _EXTENDED and version == 3 else 0)
        end = data.index(_NAME_END, start)
        path = os.fsdecode(data[start:end])
        entries[path] = (("", -1, -1, -1) if flags & _STAGE else
                         (sha.hex(), mode, size, seconds * _SECOND + nanoseconds))
        if offsets is not None:
            offsets[path] = at
        at += (end - at + 8) & ~7
    return entries


def entries_and_offsets(data: bytes) -> tuple[dict[str, Entry], dict[str, int]] | None:
    """The entries of an index of version 2 or 3 by path, and where each starts in `data` (for
    `restamped`); None for another version, or bytes that are no index."""
    offsets: dict[str, int] = {}
    try:
        entries = _read_v2_or_v3(data, offsets)
    except (struct.error, ValueError):
        return None
    return None if entries is None else (entries, offsets)


_STAT = struct.Struct(">IIIIII")            # ctime (s, ns), mtime (s, ns), device, inode
_OWNER = struct.Struct(">III")              # uid, gid, size; the mode between them and these is kept
_CHECKSUM = 20


def restamped(data: bytes, stamps: dict[int, os.stat_result]) -> bytes:
    """The index `data` (version 2 or 3) with the stat record of each entry at an offset of
    `stamps` replaced by that `lstat` (cut to 32 bits, as git keeps them), its mode and the
    rest unchanged, and its checksum made again (left all zeros if it was: `index.skipHash`)."""
    out = bytearray(data)
    word = 0xFFFFFFFF
    for at, st in stamps.items():
        _STAT.pack_into(out, at, st.st_ctime_ns // _SECOND & word, st.st_ctime_ns % _SECOND,
                        st.st_mtime_ns // _SECOND & word, st.st_mtime_ns % _SECOND,
                        st.st_dev & word, st.st_ino & word)
        _OWNER.pack_into(out, at + 28, st.st_uid & word, st.st_gid & word, st.st_size & word)
    if any(data[-_CHECKSUM:]):
        out[-_CHECKSUM:] = hashlib.sha1(memoryview(out)[:-_CHECKSUM]).digest()
    return bytes(out)


def _read_any(data: bytes) -> dict[str, Entry]:
    read = dulwich.index.read_index_dict_with_version(io.BytesIO(data))[0]
    entries: dict[str, Entry] = {}
    for name, entry in read.items():
        path = os.fsdecode(name)
        if isinstance(entry, dulwich.index.IndexEntry):
            entries[path] = (os.fsdecode(entry.sha), entry.mode, entry.size, _ns(entry.mtime))
        else:
            entries[path] = ("", -1, -1, -1)
    return entries


def _ns(when: int | float | tuple[int, int]) -> int:
    if isinstance(when, tuple):
        return when[0] * _SECOND + when[1]
    return int(when * _SECOND)


def differing(worktree: Path, entries: dict[str, Entry]) -> list[str]:
    """The files whose `lstat` differs from their entry or that are gone, then the new ones,
    nearest the top first: one by one up to MAX_NEW of them, then each new folder not yet walked
    as `folder/` (an agent's `node_modules/` is not walked every second), and so is a new folder
    holding a repository of its own. Links are not followed, FIFOs and sockets not listed (git
    keeps neither). Each folder is opened from the one above it without following a link
    (`_Folders`): one the agent swaps for a link meanwhile is not listed, wherever it leads."""
    changed: list[str] = []
    new: list[str] = []
    seen: set[str] = set()
    known = {os.path.dirname(name) for name in entries}
    known |= {folder[:cut] for folder in known for cut, ch in enumerate(folder) if ch == "/"}
    queue = collections.deque([""])
    with _Folders(worktree) as folders:
        while queue:
            folder = queue.popleft()
            if folder not in known and len(new) >= MAX_NEW:
                new.append(f"{folder}/")
                continue
            listed = folders.list(folder)
            if listed is None:
                continue
            if folder and folder not in known and any(item == ".git" for item, _ in listed):
                new.append(f"{folder}/")      # a repository of its own (a clone): one entry, as git shows it
                continue
            for item, info in listed:
                name = f"{folder}/{item}" if folder else item
                if item == ".git" or info is None:
                    continue
                entry = entries.get(name)
                if entry is not None:
                    seen.add(name)
                    if _differs(entry, info):
                        changed.append(name)
                elif stat.S_ISDIR(info.st_mode):
                    queue.append(name)
                elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                    new.append(name)
    gone = [name for name, entry in entries.items() if name not in seen and entry[1] != _GITLINK]
    return changed + gone + new


def _lstat(item: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return item.stat(follow_symlinks=False)
    except OSError:
        return None


class _Folders:
    """The folders of a worktree listed through descriptors, each opened from the one above it
    without following a link. The walk lists a folder's subfolders one after the other, so the
    last parent opened is kept: a folder costs one `open` more than a listing by path."""

    def __init__(self, worktree: Path):
        self._worktree = worktree
        self._root: int | None = None
        self._parent: tuple[str, int] | None = None

    def __enter__(self) -> "_Folders":
        try:
            self._root = os.open(self._worktree, lines.FOLDER_FLAGS)
        except OSError:
            self._root = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._parent is not None:
            os.close(self._parent[1])
        if self._root is not None:
            os.close(self._root)

    def list(self, folder: str) -> list[tuple[str, os.stat_result | None]] | None:
        """The name and `lstat` of each entry of `folder` (relative, `/`-separated; None for
        one gone meanwhile); None when it cannot be opened as a folder (gone, made a link or a
        file meanwhile, unreadable)."""
        try:
            fd = self._open(folder)
        except OSError:
            return None
        try:
            with os.scandir(fd) as listing:      # its entries stat through `fd`: while it is open
                return [(item.name, _lstat(item)) for item in listing]
        except OSError:
            return None
        finally:
            os.close(fd)

    def _open(self, folder: str) -> int:
        if self._root is None:
            raise FileNotFoundError(self._worktree)
        if not folder:
            return lines.open_folder(self._root)
        parent, _, name = folder.rpartition("/")
        return os.open(name, lines.FOLDER_FLAGS, dir_fd=self._parent_fd(parent))

    def _parent_fd(self, parent: str) -> int:
        assert self._root is not None
        if not parent:
            return self._root
        if self._parent is not None and self._parent[0] == parent:
            return self._parent[1]
        if self._parent is not None:
            os.close(self._parent[1])
            self._parent = None
        fd = lines.open_folder(self._root, parent.split("/"))
        self._parent = (parent, fd)
        return fd


def _differs(entry: Entry, info: os.stat_result) -> bool:
    _, mode, size, mtime = entry
    if mode == _GITLINK:
        return False                      # a submodule: its own repository, not this work's files
    if mode == _LINK:
        kind_matches = stat.S_ISLNK(info.st_mode)
    else:
        kind_matches = stat.S_ISREG(info.st_mode) and bool(info.st_mode & 0o100) == bool(mode & 0o100)
    if not kind_matches or info.st_size & 0xFFFFFFFF != size:
        return True
    seconds, nanoseconds = divmod(mtime, _SECOND)
    # git records no nanoseconds unless built to (`USE_NSEC`): then the seconds are all it compares
    return info.st_mtime_ns // _SECOND != seconds or (nanoseconds != 0 and info.st_mtime_ns % _SECOND != nanoseconds)
