"""Writing the trees of `hive/state` commits: only the folders a change touches are rewritten.

A folder tree is kept as its serialized entries, in git's order, and written as a loose object
by `write_loose` below rather than by libgit2. The live `issues/` folder is the reason: it holds
an entry per issue (~400 KB at 10k issues), and libgit2 compresses every loose object with zlib
level 1, which costs ~9 ms for that tree on each write; a tree is mostly object ids, which do not
compress, so zlib level 0 (stored blocks, ~0.6 ms) costs a third more disk until `git gc` packs
it. libgit2 reads these objects like any other.

`FolderCache` keeps the folders a process wrote or read last, each with the tree id it holds:
the next write on the same tree changes it in place instead of reading the tree back (inflate
and parse, ~5 ms at 10k), and reads of a snapshot look entries up in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import tempfile
import zlib
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import pygit2

from hive import git
from hive.state import raw_trees

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's id of the tree with no entries
TREE_MODE = b"40000"
BLOB_MODE = b"100644"
INVALID_NAMES = frozenset({b"", b".", b"..", b".git"})

Changes = list[tuple[str, str | None, str | None]]   # (path, old blob id, new blob id)


@dataclass(frozen=True)
class Entry:
    id: pygit2.Oid
    filemode: int


class Folder:
    """One tree's entries in git's order, each its record `mode name\\0<20-byte id>`
    (`raw_trees`), found by binary search on the name as git sorts it (a subtree's with "/")."""

    def __init__(self, entries: list[bytes]):
        self.entries = entries

    @classmethod
    def parse(cls, raw: bytes) -> "Folder":
        return cls(raw_trees.parse(raw))

    def _find(self, name: str) -> int | None:
        encoded = _utf8(name)
        if encoded is None:
            return None
        for key in (encoded, encoded + b"/"):
            at = bisect_left(self.entries, key, key=_sort_key)
            if at < len(self.entries) and _sort_key(self.entries[at]) == key:
                return at
        return None

    def get(self, name: str) -> Entry | None:
        at = self._find(name)
        if at is None:
            return None
        entry = self.entries[at]
        mode = entry[:entry.index(b" ")]
        return Entry(pygit2.Oid(raw=entry[-20:]), int(mode, 8))

    def put(self, name: str, oid: pygit2.Oid, tree: bool = False) -> None:
        encoded = _utf8(name)
        if encoded is None or encoded in INVALID_NAMES or b"\0" in encoded or b"/" in encoded:
            raise ValueError(f"invalid file name in hive/state: {name!r}")
        self.remove(name)
        key = encoded + b"/" if tree else encoded
        at = bisect_left(self.entries, key, key=_sort_key)
        self.entries.insert(at, (TREE_MODE if tree else BLOB_MODE) + b" " + encoded + b"\0" + oid.raw)

    def remove(self, name: str) -> None:
        at = self._find(name)
        if at is not None:
            del self.entries[at]

    def body(self) -> bytes:
        return b"".join(self.entries)


def _utf8(name: str) -> bytes | None:
    """A name as `hive/state` holds it (UTF-8); None for one no state holds: a file name of other
    bytes in `.hive/` (Python keeps those as surrogates)."""
    try:
        return name.encode()
    except UnicodeEncodeError:
        return None


def write_loose(objects_dir: str, kind: bytes, body: bytes) -> pygit2.Oid:
    """Store an object as git does (`<objects>/ab/cdef…`, zlib), uncompressed blocks."""
    data = b"%s %d\0" % (kind, len(body)) + body
    hexsha = hashlib.sha1(data).hexdigest()
    folder = os.path.join(objects_dir, hexsha[:2])
    target = os.path.join(folder, hexsha[2:])
    if not os.path.exists(target):
        fd, temp = _temp_object(folder)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(zlib.compress(data, 0))
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
    return pygit2.Oid(hex=hexsha)


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_temp_numbers = itertools.count()


def _temp_object(folder: str) -> tuple[int, str]:
    """A new read-only file in `folder` (made if missing) to write an object into, and its path:
    named by process and a counter (`tempfile`'s random names cost a third of a small object's
    write); a name left by a process of the same id that died gets a random one instead."""
    temp = os.path.join(folder, f"tmp_obj_{os.getpid()}_{next(_temp_numbers)}")
    for attempt in range(2):
        try:
            return os.open(temp, _TEMP_FLAGS, 0o444), temp
        except FileNotFoundError:       # the first object of its fan-out folder
            if attempt:
                raise
            os.makedirs(folder, exist_ok=True)
        except FileExistsError:
            break
    fd, temp = tempfile.mkstemp(dir=folder, prefix="tmp_obj_")
    os.fchmod(fd, 0o444)
    return fd, temp


def _sort_key(record: bytes) -> bytes:
    """A record's place in git's order: its name, a subtree's with "/" appended."""
    space = record.index(b" ")
    name = record[space + 1:-21]
    return name + b"/" if record[:space] == TREE_MODE else name


class FolderCache:
    """The folders this process wrote or read last, by folder path, each with the tree id it holds.

    A folder is taken out (copied) while it is being changed, so a failed write never leaves one
    whose entries differ from its tree id.
    """

    def __init__(self) -> None:
        self._folders: dict[str, tuple[pygit2.Oid, Folder]] = {}

    def take(self, folder: str, tree_id: pygit2.Oid | None) -> Folder | None:
        """The kept folder to change for a write, as a copy: a reader that got the kept one a
        moment ago (another thread's snapshot) never sees it half-changed (~0.1 ms at 10k)."""
        kept = self._folders.pop(folder, None)
        if kept is None or tree_id is None or kept[0] != tree_id:
            return None
        return Folder(list(kept[1].entries))

    def keep(self, folder: str, tree_id: pygit2.Oid, contents: Folder) -> None:
        self._folders[folder] = (tree_id, contents)

    def folder(self, repo: pygit2.Repository, folder: str, tree_id: pygit2.Oid) -> Folder:
        """The folder `folder` as tree `tree_id` holds it: kept, or read and kept for the next
        write (a write then starts from it instead of reading the tree a second time)."""
        kept = self._folders.get(folder)
        if kept is not None and kept[0] == tree_id:
            return kept[1]
        contents = Folder.parse(repo.odb.read(tree_id)[1])
        self._folders[folder] = (tree_id, contents)
        return contents

    def lookup(self, repo: pygit2.Repository, root: pygit2.Tree, path: str) -> Entry | None:
        """The entry at `path` under `root`, read through the kept folders."""
        parts = path.split("/")
        folder, tree_id = "", root.id
        for depth, part in enumerate(parts):
            entry = self.folder(repo, folder, tree_id).get(part)
            if entry is None or depth == len(parts) - 1:
                return entry
            if entry.filemode != pygit2.GIT_FILEMODE_TREE:
                return None
            folder, tree_id = f"{folder}{part}/", entry.id
        return None


@lru_cache(maxsize=16)
def _objects_dir(git_dir: str) -> str:
    return os.path.join(git.common_dir_of(Path(git_dir)), "objects")


def write_tree(repo: pygit2.Repository, base: pygit2.Tree | None, files: dict[str, bytes | None], *,
               folders: FolderCache | None = None, changed: Changes | None = None) -> pygit2.Oid:
    """A new tree: `base` with `files` written (bytes) or removed (None), only touched folders rebuilt.

    With `folders`, the folders written are kept there for the next write. `changed` collects
    (path, old blob id, new blob id) for each file that really changed.
    """
    return _write_folder(repo, _objects_dir(repo.path), "", base.id if base is not None else None, files, folders, changed)


def _write_folder(repo: pygit2.Repository, objects_dir: str, folder: str, base_id: pygit2.Oid | None,
                  files: dict[str, bytes | None], folders: FolderCache | None,
                  changed: Changes | None) -> pygit2.Oid:
    direct: dict[str, bytes | None] = {}
    nested: dict[str, dict[str, bytes | None]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        if rest:
            nested.setdefault(head, {})[rest] = data
        else:
            direct[head] = data
    contents = folders.take(folder, base_id) if folders is not None else None
    if contents is None:
        contents = Folder.parse(repo.odb.read(base_id)[1]) if base_id is not None else Folder([])
    for name, data in direct.items():
        entry = contents.get(name)
        old = str(entry.id) if entry is not None and entry.filemode != pygit2.GIT_FILEMODE_TREE else None
        new = None
        if data is None:
            contents.remove(name)
        else:
            blob = repo.create_blob(data)
            contents.put(name, blob)
            new = str(blob)
        if changed is not None and old != new:
            changed.append((folder + name, old, new))
    for name, subfiles in nested.items():
        entry = contents.get(name)
        sub_base = entry.id if entry is not None and entry.filemode == pygit2.GIT_FILEMODE_TREE else None
        sub_id = _write_folder(repo, objects_dir, f"{folder}{name}/", sub_base, subfiles, folders, changed)
        if str(sub_id) == EMPTY_TREE:
            contents.remove(name)
        else:
            contents.put(name, sub_id, tree=True)
    tree_id = write_loose(objects_dir, b"tree", contents.body())
    if folders is not None:
        folders.keep(folder, tree_id, contents)
    return tree_id


def walk_changes(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None,
                 prefix: str = "") -> Iterator[tuple[str, str | None, str | None]]:
    """Yield (path, old blob id, new blob id) for every blob that differs, in name order; equal
    subtrees skipped.

    Folders are compared as sets of their entry records (`raw_trees`, which keeps the last few
    trees read: the trust check has just read the same two), not as pygit2 entry objects one by
    one in Python.
    """
    yield from _walk(repo, old.id if old is not None else None, new.id if new is not None else None, prefix)


def _walk(repo: pygit2.Repository, old_id: pygit2.Oid | None, new_id: pygit2.Oid | None,
          prefix: str) -> Iterator[tuple[str, str | None, str | None]]:
    if old_id == new_id:
        return
    old_entries = set(raw_trees.records(repo.odb, str(old_id))) if old_id is not None else set()
    new_entries = set(raw_trees.records(repo.odb, str(new_id))) if new_id is not None else set()
    before, after = _by_name(old_entries - new_entries), _by_name(new_entries - old_entries)
    # in name order, whatever the sets' hashing: the same walk in every process, on every machine
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)   # (is a folder, id)
        if was is not None and now is not None and was[1] == now[1]:
            continue                                     # a mode change only
        path = prefix + name
        was_tree = was[1] if was is not None and was[0] else None
        now_tree = now[1] if now is not None and now[0] else None
        if was_tree is not None or now_tree is not None:
            yield from _walk(repo, was_tree, now_tree, path + "/")
        old_blob = str(was[1]) if was is not None and not was[0] else None
        new_blob = str(now[1]) if now is not None and not now[0] else None
        if old_blob is not None or new_blob is not None:
            yield path, old_blob, new_blob


def _by_name(entries: set[bytes]) -> dict[str, tuple[bool, pygit2.Oid]]:
    found: dict[str, tuple[bool, pygit2.Oid]] = {}
    for entry in entries:
        space = entry.index(b" ")
        name = entry[space + 1:-21].decode("utf-8", "replace")
        found[name] = (entry[:space] == TREE_MODE, pygit2.Oid(raw=entry[-20:]))
    return found
