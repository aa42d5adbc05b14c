"""Rewriting a worktree an agent wrote, the one way hive does it; and clearing what libgit2 must
not meet in anything else an agent wrote before hive reads it (its private object store).

libgit2's forced checkout (and so `reset --hard`) does not look at what stands in a tracked
path's place the way git does: it writes a tracked folder's files *through* a link the agent put
at the folder's place (into whatever the link names: a jailed agent's commit would then be
written by hive, unjailed, anywhere the user can write), and it reads a tracked path to compare
it, which waits forever on a FIFO. So every link, FIFO, socket and device in the worktree is
removed first, links not followed; the checkout makes again the links git tracks. When the caller
asks (`keep_uncommitted`: the merge's resets do; a spare's issue is finished with, what it held
was kept when it was retired), what the worktree held uncommitted, its links included, is
committed before and handed to it to keep (`keep_what_is_uncommitted`, which a worktree's
removal calls too).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable, Literal

import pygit2
from pygit2.enums import CheckoutStrategy, FileStatus

from hive import lines
from hive.state.store import signature_for


Removed = Literal["nothing", "untracked", "untracked and ignored"]
_REMOVES: dict[Removed, CheckoutStrategy] = {
    "nothing": CheckoutStrategy.FORCE,
    "untracked": CheckoutStrategy.FORCE | CheckoutStrategy.REMOVE_UNTRACKED,
    "untracked and ignored": CheckoutStrategy.FORCE | CheckoutStrategy.REMOVE_UNTRACKED | CheckoutStrategy.REMOVE_IGNORED,
}


def reset(work: pygit2.Repository, commit: str, *, remove: Removed = "untracked",
          keep_uncommitted: Callable[[str], object] | None = None) -> None:
    """`git reset --hard <commit>` in the worktree `work` (opened on the worktree itself): its
    tracked files, index and detached HEAD; then what `remove` names goes too (`git clean`):
    "untracked" files (the default: ignored build caches stay), "untracked and ignored" ones,
    or "nothing". With `keep_uncommitted`, what the worktree held uncommitted is committed first
    (on no branch) and that commit handed to it, before anything is rewritten."""
    if keep_uncommitted:
        keep_what_is_uncommitted(work, keep_uncommitted)
    remove_links_and_special_files(Path(work.workdir))
    target = work[commit].peel(pygit2.Commit)
    work.checkout_tree(target.tree, strategy=_REMOVES[remove])
    work.set_head(target.id)


def move_head(work: pygit2.Repository, commit: str) -> None:
    """`git reset --mixed <commit>` in the worktree `work`: its HEAD detached at `commit`, its
    index that commit's tree; no file of the worktree read or written (for a folder whose files
    are that commit's already, and that a session still running may write: libgit2's checkout
    reads every `.gitignore` there, and waits for good on a FIFO put back at once)."""
    target = work[commit].peel(pygit2.Commit)
    index = work.index
    index.read_tree(target.tree)
    index.write()
    work.set_head(target.id)


def keep_what_is_uncommitted(work: pygit2.Repository, keep: Callable[[str], object]) -> str | None:
    """What the worktree `work` holds uncommitted (changed and untracked files, links included;
    ignored ones not) committed on its HEAD, on no branch, and that commit handed to `keep`; None
    when it holds nothing uncommitted. Its FIFOs, sockets and devices go first (git keeps none),
    and its links named as a file git reads (`.gitignore`: libgit2's status reads each, through a
    link too, and waits for good on a FIFO it names; git itself never follows one), taken into
    the commit as links."""
    read_by_git: dict[str, bytes] = {}
    remove_links_and_special_files(Path(work.workdir), links=False, taken=read_by_git)
    uncommitted = _commit_uncommitted(work, read_by_git)
    if uncommitted:
        keep(uncommitted)
    return uncommitted


def _commit_uncommitted(work: pygit2.Repository, links: dict[str, bytes]) -> str | None:
    """A commit of the worktree's HEAD plus its changed and untracked files (ignored ones not) and
    `links` (path -> what the link says); None when that is the HEAD's tree. Its index is left as
    it was."""
    if not links and not any(flags & ~(FileStatus.WT_DELETED | FileStatus.INDEX_DELETED)
                             for flags in work.status(untracked_files="all").values()):
        return None
    head = work.head.peel(pygit2.Commit)
    index = work.index
    try:
        index.add_all()
        for path, target in links.items():
            index.add(pygit2.IndexEntry(path, work.create_blob(target), pygit2.enums.FileMode.LINK))
        tree = index.write_tree(work)
    finally:
        index.read(True)
    if tree == head.tree_id:
        return None
    signature = signature_for(work)
    return str(work.create_commit(None, signature, signature, "uncommitted changes left in hive's worktree\n",
                                  tree, [head.id]))


GIT_READS = frozenset({".gitignore", ".gitattributes", ".gitmodules"})


def remove_links_and_special_files(root: Path, *, links: bool = True, taken: dict[str, bytes] | None = None) -> None:
    """Remove every link, FIFO, socket and device under `root`, a folder an agent wrote (its
    worktree, its private object store), links not followed. Each folder is opened from the one
    above it without following a link, and its entries removed through it: a folder swapped for a
    link meanwhile leads nowhere. A folder the agent made unreadable is made readable again (it
    is the user's own): a link in it must not stay unseen. `OSError` when one still cannot be
    read: then nothing may be rewritten there. Nothing to do when `root` does not exist. With
    `links=False` the links stay (read as links, their own text, they lead nowhere), but those
    named as a file git reads (GIT_READS): they go, what they say put in `taken` by path."""
    try:
        first = os.open(root, lines.FOLDER_FLAGS)
    except FileNotFoundError:
        return                          # no such folder: nothing in it
    except PermissionError:
        os.chmod(root, stat.S_IMODE(os.lstat(root).st_mode) | stat.S_IRWXU)
        first = os.open(root, lines.FOLDER_FLAGS)
    pending = [(first, "")]
    try:
        while pending:
            at, folder = pending.pop()
            try:
                with os.scandir(at) as entries:
                    listed = list(entries)
                for entry in listed:
                    if entry.is_file(follow_symlinks=False):
                        continue
                    if not links and entry.is_symlink():
                        if entry.name in GIT_READS:
                            _take_link(entry.name, at, f"{folder}{entry.name}", taken)
                        continue
                    inner = _clear(entry.name, at, links)
                    if inner is not None:
                        pending.append((inner, f"{folder}{entry.name}/"))
            finally:
                os.close(at)
    finally:
        for at, _ in pending:
            os.close(at)


def _take_link(name: str, at: int, path: str, taken: dict[str, bytes] | None) -> None:
    """Remove the link `name` of the open folder `at`, what it says kept in `taken` under `path`."""
    try:
        target = os.readlink(name, dir_fd=at)
        os.unlink(name, dir_fd=at)
    except FileNotFoundError:
        return
    except OSError:                      # not a link any more: a FIFO goes, a folder is no name git reads
        inner = _clear(name, at, links=False)
        if inner is not None:
            os.close(inner)
            raise OSError(errno.EAGAIN, "it kept changing while hive cleared it", name) from None
        return
    if taken is not None:
        taken[path] = os.fsencode(target)


_TRIES = 8      # an entry an agent keeps swapping between a folder and something else


def _clear(name: str, at: int, links: bool) -> int | None:
    """The entry `name` of the open folder `at`: a folder opened (made readable first if it is
    not), to be walked; None once it is removed (a link unless `links` is off, a FIFO, a
    socket, a device), or when it is a regular file or gone."""
    for _ in range(_TRIES):
        try:
            return os.open(name, lines.FOLDER_FLAGS, dir_fd=at)
        except FileNotFoundError:
            return None
        except PermissionError:
            mode = os.stat(name, dir_fd=at, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(name, stat.S_IMODE(mode) | stat.S_IRWXU, dir_fd=at, follow_symlinks=False)
            continue
        except OSError:                  # ELOOP, ENOTDIR: not a folder
            pass
        try:
            mode = os.stat(name, dir_fd=at, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                continue                 # a folder again meanwhile
            if stat.S_ISREG(mode) or (stat.S_ISLNK(mode) and not links):
                return None
            os.unlink(name, dir_fd=at)
            return None
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            continue
    raise OSError(errno.EAGAIN, "it kept changing while hive cleared it", name)
