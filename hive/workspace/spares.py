"""Spare worktrees: a finished issue's worktree kept, cleaned, for the next issue's.

`git worktree add` writes every file of the checkout and `remove` deletes them all again; a spare
is a retired worktree moved aside (`<hive_dir>/spares/<n>`, out of every jail's sight, its admin
folder renamed `<common>/worktrees/hive-spare-<n>`), then moved to the next issue's place and reset
there to its base, which writes only the files that differ. Spares live as long as a daemon's run:
its end, and the next start after a crash, remove them (`clear`). Nothing is kept here that is not kept elsewhere:
the caller keeps the heads a worktree held (`attempts.keep`) before it hands it over, and a spare
is reset only after it has been moved to a new issue's place.

Every step is a rename or the rewrite of one link file, in an order that leaves, wherever a
process is killed, either a whole spare, a whole worktree of the issue, or pieces that are no
spare at all (their links do not name each other): those are removed when next seen.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pygit2

from hive import git
from hive.workspace import files_on_disk, head_file, rewrite

MAX_SPARES = 8          # a pool for as many agents as usually run at once; more are removed
ADMIN_PREFIX = "hive-spare-"


def spares_dir(paths: git.RepoPaths) -> Path:
    return paths.hive_dir / "spares"


def _admin(paths: git.RepoPaths, name: str) -> Path:
    return git.worktree_admin(paths.common_dir, name)


def _read(path: Path) -> str:
    try:
        if not path.is_file() or path.is_symlink():
            return ""
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _whole(paths: git.RepoPaths, number: str) -> bool:
    """Whether spare `number` is whole: its folder and its admin folder name each other."""
    path, admin = spares_dir(paths) / number, _admin(paths, ADMIN_PREFIX + number)
    if path.is_symlink() or admin.is_symlink() or not admin.is_dir():
        return False
    return _read(path / ".git") == f"gitdir: {admin}" and _read(admin / "gitdir") == str(path / ".git")


def _discard(paths: git.RepoPaths, number: str) -> None:
    shutil.rmtree(spares_dir(paths) / number, ignore_errors=True)
    shutil.rmtree(_admin(paths, ADMIN_PREFIX + number), ignore_errors=True)


def _numbers(paths: git.RepoPaths) -> set[str]:
    """The spare numbers with a folder or an admin folder (whole or not)."""
    found: set[str] = set()
    try:
        found.update(e.name for e in os.scandir(spares_dir(paths)) if e.name.isdigit())
    except (FileNotFoundError, NotADirectoryError):
        pass
    try:
        found.update(e.name.removeprefix(ADMIN_PREFIX) for e in os.scandir(paths.common_dir / "worktrees")
                     if e.name.startswith(ADMIN_PREFIX) and e.name.removeprefix(ADMIN_PREFIX).isdigit())
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


@contextmanager
def _pool(paths: git.RepoPaths) -> Iterator[None]:
    """The pool to oneself (threads and processes): no spare is taken or discarded half made."""
    folder = spares_dir(paths)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def put(paths: git.RepoPaths, name: str, path: Path) -> bool:
    """Make the worktree `name` at `path` a spare, unless the pool is full or it is not plainly
    hive's (submodules, a rebase half done, links in its admin folder); whether it was taken. The
    caller has kept what it held; its HEAD is detached here, so that no spare names a branch."""
    admin = _admin(paths, name)
    if not (path / ".git").is_file() or (path / ".gitmodules").exists() or not admin.is_dir():
        return False
    try:
        if git.open_worktree(path).state() != pygit2.enums.RepositoryState.NONE:
            return False
    except (pygit2.GitError, KeyError, ValueError):
        return False
    if head_file.commit(paths, name, detach=True) is None:
        return False
    with _pool(paths):
        numbers = _numbers(paths)
        number = str(max((int(n) for n in numbers), default=0) + 1)
        if len(numbers) >= MAX_SPARES:   # each looked at only when the pool seems full
            broken = {n for n in numbers if not _whole(paths, n)}
            for piece in broken:
                _discard(paths, piece)
            numbers -= broken
        if len(numbers) >= MAX_SPARES or not _admin_cleared(admin):
            return False
        spare, spare_admin = spares_dir(paths) / number, _admin(paths, ADMIN_PREFIX + number)
        os.rename(admin, spare_admin)    # from here on the folder is no worktree: removed if left
        (spare_admin / "gitdir").write_text(f"{spare / '.git'}\n", encoding="utf-8")
        (path / ".git").write_text(f"gitdir: {spare_admin}\n", encoding="utf-8")
        os.rename(path, spare)           # a whole spare from here on
    return True


def take(paths: git.RepoPaths, name: str, path: Path, base: str) -> bool:
    """Move a whole spare to `path` as the worktree `name`, detached at `base` with exactly its
    files (anything else in it removed); False when there is none (or it did not come clean:
    then it is removed)."""
    admin = _admin(paths, name)
    if not _numbers(paths):
        return False                   # no pool (a command, not a daemon): not even its folder made
    with _pool(paths):
        for number in sorted(_numbers(paths), key=int):
            if _whole(paths, number):
                break
            _discard(paths, number)      # pieces a killed process left
        else:
            return False
        spare, spare_admin = spares_dir(paths) / number, _admin(paths, ADMIN_PREFIX + number)
        (spare / ".git").write_text(f"gitdir: {admin}\n", encoding="utf-8")   # no spare from here on
        os.rename(spare_admin, admin)
        os.rename(spare, path)
        (admin / "gitdir").write_text(f"{path / '.git'}\n", encoding="utf-8")
    if _clean_at(path, base):
        return True
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(admin, ignore_errors=True)
    return False


ADMIN_KEPT = frozenset({"HEAD", "commondir", "gitdir", "index", "hive-objects"})


def _admin_cleared(admin: Path) -> bool:
    """Leave in a worktree's admin folder only what a new worktree has: its agent could write
    there (logs, `ORIG_HEAD`, per-worktree refs, `config.worktree`); False when what is left is
    not plainly git's (a link, objects its private store still holds)."""
    try:
        for entry in os.scandir(admin):
            if entry.is_symlink():
                return False
            if entry.name == "hive-objects":
                if {e.name for e in os.scandir(entry.path)} - {"pack"} or any(os.scandir(Path(entry.path, "pack"))):
                    return False
            elif entry.name not in ADMIN_KEPT:
                if entry.is_dir():
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
            elif not entry.is_file():
                return False
    except OSError:
        return False
    return True


def _clean_at(path: Path, base: str) -> bool:
    """Reset the worktree at `path` to `base` (files, index, detached HEAD), everything untracked
    or ignored removed; whether it is clean after it."""
    try:
        work = git.open_worktree(path)
        rewrite.reset(work, base, remove="untracked and ignored")
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return False
    # not libgit2's status: it would read the `.gitignore` of `base` (landed work) through a link
    entries = files_on_disk.index_entries(Path(work.path) / "index")
    return entries is not None and not files_on_disk.differing(path, entries)


def clear(paths: git.RepoPaths) -> None:
    """Remove every spare (the end of a run, or what a killed one left)."""
    if not _numbers(paths):
        return
    with _pool(paths):
        for number in _numbers(paths):
            _discard(paths, number)
