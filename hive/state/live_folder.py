"""The live scan of `.hive/`, and the same scan kept current by inotify in the command server.

The live scan (`scan`) is what a command looks at before it trusts its records of the checkout
(`Checkout.find_edits`): the records of the flat `issues/` folder and `context.md`, each as
(mtime, size, inode). At 10,000 issues it is 10,000 `stat`s, most of a served command's work.

The command server (hive/cli/command_server.py) keeps the scans of the checkouts its commands
used in memory (`Watcher`), changed only where inotify says a file changed, and the command it
forks takes its checkout's from there (`taken`) instead of looking at every file. Such a scan is
as new as a fresh one: the kernel queues a change's event in the system call that makes it, and
the server reads the queue (`Watcher.catch_up`) after the command asked and before the fork —
a save finished before the command started is in it. What would make no event is looked at
otherwise: a file with another name elsewhere (a change through that name notifies the other
folder only) is stat-ed again by each command; a checkout on a file system whose files may
change without this kernel seeing it (NFS, FUSE, a virtual machine's shared folder) is not
watched; a queue that overflowed starts every scan anew. Two changes make no event at all: a
write through a shared memory mapping, and one through a hard link made after the watch began;
the server scans the checkouts its commands used again once they pause (`Watcher.verify`), so
such an edit waits at most until then (a refresh never overwrites it meanwhile: it compares
contents).
"""

from __future__ import annotations

import array
import errno
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Collection

from hive import lines
from hive.state import layout
from hive.state.layout import leads_outside

if TYPE_CHECKING:
    import ctypes

Seen = tuple[int, int, int]   # a scanned file's (mtime_ns, size, inode): a stat_result is ~600 bytes
RECORD_SUFFIXES = (".md", ".jsonl")   # the files of `.hive/` a scan reads (issues, notes, context)

# <sys/inotify.h>
IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x2000, 0x4000, 0x8000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
FOLDER_EVENTS = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
                 | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
EVENT_HEADER = struct.Struct("iIII")   # wd, mask, cookie, len

# statfs f_type of the file systems whose every change this kernel makes (and so notifies)
LOCAL_FILE_SYSTEMS = {0xEF53: "ext2/3/4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs",
                      0x794C7630: "overlay", 0xF2F52010: "f2fs", 0x2FC12FC1: "zfs", 0xCA451A4E: "bcachefs"}
MAX_WATCHED = 64   # checkouts one server keeps; more are scanned as without it


def in_live_scan(path: str) -> bool:
    """Whether the live scan finds a file at `path` (the live folder, flat; context.md)."""
    folder, _, name = path.rpartition("/")
    return path == layout.CONTEXT_FILE or (folder == layout.ISSUES_DIR and not name.startswith(".")
                                            and name.endswith(RECORD_SUFFIXES))


def scan(root: Path, full: bool, linked: set[str] | None = None) -> dict[str, Seen]:
    """The files of the checkout at `root` hive reads: the live scan, or all of them when `full`.
    `linked`: given, collects those with another name elsewhere."""
    found: dict[str, Seen] = {}

    def visit(rel: str, recurse: bool) -> None:
        if leads_outside(root, rel):
            return  # `issues` or `notes` as a symlink (a fetched state can hold one): not ours
        # names, then one stat each relative to the folder's descriptor: ~30 % less than
        # os.scandir's entries at 10k files (docs/PERFORMANCE.md), the stat saying the type
        try:
            folder = os.open(root / rel, lines.FOLDER_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return  # became a symlink since the look above
            raise
        try:
            for name in os.listdir(folder):
                if name.startswith("."):
                    continue
                is_record = name.endswith(RECORD_SUFFIXES)
                if not (is_record or recurse):
                    continue
                try:
                    st = os.stat(name, dir_fd=folder, follow_symlinks=False)
                except FileNotFoundError:
                    continue   # removed since the folder was read
                if stat.S_ISDIR(st.st_mode):
                    if recurse:
                        visit(f"{rel}/{name}", recurse)
                elif is_record and stat.S_ISREG(st.st_mode):
                    found[f"{rel}/{name}"] = (st.st_mtime_ns, st.st_size, st.st_ino)
                    if linked is not None and st.st_nlink > 1:
                        linked.add(f"{rel}/{name}")
        finally:
            os.close(folder)

    for rel in [layout.ISSUES_DIR] + ([layout.NOTES_DIR] if full else []):
        visit(rel, recurse=full)
    try:
        st = os.lstat(root / layout.CONTEXT_FILE)
    except OSError:
        return found
    if stat.S_ISREG(st.st_mode):
        found[layout.CONTEXT_FILE] = (st.st_mtime_ns, st.st_size, st.st_ino)
        if linked is not None and st.st_nlink > 1:
            linked.add(layout.CONTEXT_FILE)
    return found


def fingerprint(seen: dict[str, Seen]) -> str:
    """A digest of the files' paths and stats (in path order: a kept scan lists new files last)."""
    try:   # hashlib's blake2b from its own module: hashlib loads OpenSSL to start (~3 ms)
        from _blake2 import blake2b
    except ImportError:
        from hashlib import blake2b
    paths = sorted(seen)
    stats = array.array("q", [n for path in paths for n in seen[path]])
    digest = blake2b("\0".join(paths).encode("utf-8", "surrogateescape"), digest_size=20)   # any bytes a name holds
    digest.update(stats.tobytes())
    return digest.hexdigest()


@dataclass
class _Watched:
    root: str
    identity: tuple[int, int]     # (st_dev, st_ino) of `issues/`
    folders: tuple[int, int]      # descriptors of the root and `issues/`, which every stat is relative to
    watches: tuple[int, int]      # the inotify watches of the two
    seen: dict[str, Seen]
    linked: set[str] = field(default_factory=set)
    digest: str = ""              # `fingerprint(seen)`, "" when it is to be computed again


class Watcher:
    """Live scans of checkouts, kept current by one inotify instance (Linux)."""

    def __init__(self) -> None:
        self._libc = _libc()
        self._fd = _checked(self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        self._watched: dict[tuple[int, int], _Watched] = {}   # by the root's (st_dev, st_ino)
        self._by_watch: dict[int, tuple[_Watched, str]] = {}  # watch -> its checkout, "" or "issues/"

    def fileno(self) -> int:
        return self._fd

    def watch(self, root: str) -> str:
        """Keep the live scan of the checkout at `root` from now on; "" or why not."""
        if not os.path.isabs(root):
            return f"{root!r} is no absolute path"
        if len(self._watched) >= MAX_WATCHED:
            return f"{MAX_WATCHED} checkouts are watched already"
        opened: list[int] = []
        try:
            why = self._watch(root, opened)
        except OSError as exc:
            why = f"{root}: {exc.strerror or exc}"
        if why is not None:
            for fd in opened:
                os.close(fd)
        return why or ""

    def _watch(self, root: str, opened: list[int]) -> str | None:
        """None once kept (the folders put in `opened` stay open for it), else why not ("": kept
        already)."""
        opened.append(os.open(root, lines.FOLDER_FLAGS))
        key = _identity(os.fstat(opened[0]))
        if key in self._watched:
            return ""
        kind = _file_system(root)
        if kind not in LOCAL_FILE_SYSTEMS:
            return f"{root}: its file system ({kind:#x}) may change without this kernel's knowing"
        opened.append(os.open(layout.ISSUES_DIR, lines.FOLDER_FLAGS, dir_fd=opened[0]))
        # watched before the scan: a change during the scan is both in it and in the queue;
        # through the descriptors (/proc/self/fd: the very folders opened without following)
        root_watch = self._add_watch(f"/proc/self/fd/{opened[0]}")
        try:
            issues_watch = self._add_watch(f"/proc/self/fd/{opened[1]}")
        except OSError:
            self._libc.inotify_rm_watch(self._fd, root_watch)
            raise
        watched = _Watched(root, _identity(os.fstat(opened[1])), (opened[0], opened[1]),
                           (root_watch, issues_watch), {})
        watched.seen = scan(Path(root), full=False, linked=watched.linked)
        self._watched[key] = watched
        self._by_watch[root_watch] = (watched, "")
        self._by_watch[issues_watch] = (watched, layout.ISSUES_DIR + "/")
        return None

    def _add_watch(self, path: str) -> int:
        return _checked(self._libc.inotify_add_watch(self._fd, os.fsencode(path), FOLDER_EVENTS))

    def catch_up(self) -> None:
        """Read every queued event, and bring the scans they concern up to date."""
        changed: dict[int, set[str]] = {}    # by the root watch: paths to look at again
        ended: set[int] = set()
        overflowed = False
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            offset = 0
            while offset + EVENT_HEADER.size <= len(data):
                wd, mask, _, length = EVENT_HEADER.unpack_from(data, offset)
                name = data[offset + EVENT_HEADER.size:offset + EVENT_HEADER.size + length].rstrip(b"\0")
                offset += EVENT_HEADER.size + length
                if mask & IN_Q_OVERFLOW:
                    overflowed = True
                    continue
                target = self._by_watch.get(wd)
                if target is None:
                    continue   # a watch ended already
                watched, prefix = target
                if mask & GONE:
                    ended.add(watched.watches[0])
                    continue
                path = prefix + os.fsdecode(name)
                if not prefix and path == layout.ISSUES_DIR:
                    ended.add(watched.watches[0])   # `issues/` replaced or removed: scanned anew
                elif in_live_scan(path):
                    changed.setdefault(watched.watches[0], set()).add(path)
        if overflowed:
            ended = {watched.watches[0] for watched in self._watched.values()}
        for root_watch in ended:
            self._forget(self._by_watch[root_watch][0])
        for root_watch, paths in changed.items():
            if root_watch in self._by_watch:
                _restat(self._by_watch[root_watch][0], paths)

    def _forget(self, watched: _Watched) -> None:
        for wd in watched.watches:
            self._libc.inotify_rm_watch(self._fd, wd)
            self._by_watch.pop(wd, None)
        for fd in watched.folders:
            os.close(fd)
        self._watched = {key: other for key, other in self._watched.items() if other is not watched}

    def watching(self) -> list[str]:
        return [watched.root for watched in self._watched.values()]

    def kept(self, root: Path) -> tuple[dict[str, Seen], str] | None:
        """The live scan of the checkout at `root` and its fingerprint, if kept (by the folders
        themselves: a path may lead to another checkout by now)."""
        try:
            st_root = os.lstat(root)
            st_issues = os.lstat(root / layout.ISSUES_DIR)
        except OSError:
            return None
        watched = self._watched.get(_identity(st_root))
        if watched is None or not stat.S_ISDIR(st_issues.st_mode) or _identity(st_issues) != watched.identity:
            return None
        if watched.linked:
            _restat(watched, set(watched.linked))
        if not watched.digest:
            watched.digest = fingerprint(watched.seen)
        return watched.seen, watched.digest

    def verify(self, roots: Collection[str]) -> list[str]:
        """The kept scans of `roots` made anew (what no event told); the roots whose scan had
        drifted."""
        drifted = []
        for watched in [watched for watched in self._watched.values() if watched.root in roots]:
            root = Path(watched.root)
            try:
                same = (_identity(os.lstat(root)), _identity(os.lstat(root / layout.ISSUES_DIR))) == \
                    (_identity(os.fstat(watched.folders[0])), watched.identity)
            except OSError:
                same = False
            if not same:
                self._forget(watched)   # moved or replaced: kept anew when a command names it
                continue
            linked: set[str] = set()
            seen = scan(root, full=False, linked=linked)
            if seen != watched.seen:
                drifted.append(watched.root)
                watched.seen, watched.digest = seen, ""
            watched.linked = linked
        return drifted

    def prepare(self) -> None:
        """The fingerprints a command will take, computed before it asks (off its path)."""
        for watched in self._watched.values():
            if not watched.digest:
                watched.digest = fingerprint(watched.seen)

    def close(self) -> None:
        for watched in list(self._watched.values()):
            self._forget(watched)
        os.close(self._fd)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _restat(watched: _Watched, paths: set[str]) -> None:
    """`paths` of a kept scan looked at again, relative to the folders' descriptors (the way to
    the checkout may lead elsewhere by now)."""
    for path in paths:
        folder, name = (watched.folders[1], path[len(layout.ISSUES_DIR) + 1:]) if "/" in path \
            else (watched.folders[0], path)
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except OSError:
            st = None
        before = watched.seen.get(path)
        if st is None or not stat.S_ISREG(st.st_mode):
            watched.seen.pop(path, None)
            watched.linked.discard(path)
        else:
            watched.seen[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
            if st.st_nlink > 1:
                watched.linked.add(path)
            else:
                watched.linked.discard(path)
        if watched.seen.get(path) != before:
            watched.digest = ""


def _file_system(path: str) -> int:
    """statfs(2)'s f_type of the file system holding `path`."""
    import ctypes

    buffer = ctypes.create_string_buffer(256)   # struct statfs: f_type is its first word
    _checked(_libc().statfs(os.fsencode(path), buffer))
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def _libc() -> "ctypes.CDLL":
    """The C library, for what `os` does not offer (inotify, statfs); loaded when first used."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _checked(result: int) -> int:
    """A C call's result; its errno as an OSError when it failed."""
    if result < 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


# -- in a command the server forked ------------------------------------------------------------

_server: tuple[Watcher, int] | None = None
_asked: set[str] = set()


def served_by(watcher: Watcher, report: int) -> None:
    """This process is a command the server forked: its live scans come from `watcher`, and
    a checkout it does not keep is named on `report` (a pipe the server reads), to be kept."""
    global _server
    _server = (watcher, report)


def taken(root: Path) -> tuple[dict[str, Seen], str] | None:
    """The live scan of `root` and its fingerprint as the command server kept it when it forked
    this process; once: a second look (after this command's own writes) is a new scan. None
    when there is none to take (no server; not kept yet). Either way the server is told the
    checkout was used: it keeps it from now on, and makes its scan anew once commands pause."""
    if _server is None or str(root) in _asked:
        return None
    _asked.add(str(root))
    watcher, report = _server
    try:
        os.write(report, os.fsencode(str(root)) + b"\0")
    except OSError:
        pass   # the server's pipe is full or gone: as without one
    return watcher.kept(root)
