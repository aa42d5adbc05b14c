"""Moving the target branch by compare-and-swap without overwriting a person's checkout.

When the target is checked out in a worktree, that checkout's files and index are updated for the
touched paths only, and only when none of them holds a person's uncommitted change (see
`fast_forward`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, FileStatus

from hive import git
from hive.state.layout import leads_outside
from hive.state.store import cas_update
from hive.workspace.spares import ADMIN_PREFIX


def checkout_of(paths: git.RepoPaths, branch: str) -> Path | None:
    """The worktree that has `branch` checked out, if any (main or linked).

    Hive's own worktrees are the agents': an agent writes its worktree's admin `HEAD` (it is all
    a commit there moves), so a branch that admin HEAD names is no person's checkout — but for the
    worktree's own work branch, which only that agent could lose."""
    # Called several times per merge with a worktree per running agent: read each HEAD once and a
    # `gitdir` file only for the match (pathlib over every entry cost ~0.3 ms a worktree).
    wanted = f"ref: refs/heads/{branch}"
    if _read_stripped(str(paths.common_dir / "HEAD")) == wanted:
        return paths.main_worktree
    try:
        entries = list(os.scandir(paths.common_dir / "worktrees"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for entry in entries:
        if entry.name.startswith(ADMIN_PREFIX) or _read_stripped(os.path.join(entry.path, "HEAD")) != wanted:
            continue   # a spare worktree is detached, no one's checkout (`spares.put`)
        gitdir = _read_stripped(os.path.join(entry.path, "gitdir"))
        if not gitdir:
            continue
        checkout = Path(gitdir).parent
        hives = os.path.realpath(checkout.parent) == os.path.realpath(paths.worktrees_dir)
        if hives and branch != f"hive/work/{checkout.name}":
            continue
        return checkout
    return None


def _read_stripped(path: str) -> str | None:
    # os.open, not open(): a text file object costs more than the read (~4× for a HEAD file)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def touched_paths(repo: pygit2.Repository, old: str, new: str) -> list[str]:
    diff = repo[old].peel(pygit2.Commit).tree.diff_to_tree(repo[new].peel(pygit2.Commit).tree)
    return sorted({p for d in diff.deltas for p in (d.old_file.path, d.new_file.path)})


def dirty_paths(root: Path, paths: list[str], checkout: pygit2.Repository | None = None,
                merged: pygit2.Tree | None = None) -> list[str]:
    """Which of `paths` have uncommitted changes (staged, unstaged, untracked or ignored) in `root`
    (`checkout`: that worktree, opened already). A path whose index and file already hold what
    the `merged` tree has is not in the way (see `_inspect`)."""
    return _inspect(root, paths, checkout, merged)[0]


def _inspect(root: Path, paths: list[str], checkout: pygit2.Repository | None,
             merged: pygit2.Tree | None) -> tuple[list[str], list[str]]:
    """(dirty paths, paths already holding `merged`'s version): the latter are left by a
    fast-forward interrupted after the files were written; going on loses nothing."""
    if not paths:
        return [], []
    checkout = checkout or pygit2.Repository(str(root))
    if _needs_git_checkout(checkout, paths):
        proc = git.run(["status", "--porcelain", "-z", "--untracked-files=all", "--", *paths], root, check=False)
        return sorted({e[3:] for e in proc.stdout.split("\0") if len(e) > 3}), []
    dirty: list[str] = []
    written: list[str] = []
    for path in paths:
        if leads_outside(root, path):
            dirty.append(path)  # a person's symlink on the way: libgit2 would write through it
            continue
        try:
            status = checkout.status_file(path)
        except KeyError:
            continue            # in neither the index, HEAD nor the files: nothing to lose
        except pygit2.GitError:
            dirty.append(path)  # e.g. a directory where the file would go
            continue
        if status == FileStatus.CURRENT:
            continue
        held = _holds_merged(checkout, path, status, merged) or _file_holds_merged(root, path, status, merged)
        (written if held else dirty).append(path)
    return dirty, written


_WORKTREE_CHANGES = (FileStatus.WT_NEW | FileStatus.WT_MODIFIED | FileStatus.WT_DELETED
                     | FileStatus.WT_TYPECHANGE | FileStatus.WT_RENAMED | FileStatus.WT_UNREADABLE
                     | FileStatus.IGNORED | FileStatus.CONFLICTED)


def _holds_merged(checkout: pygit2.Repository, path: str, status: int, merged: pygit2.Tree | None) -> bool:
    """Whether the file equals its index entry and that entry equals `merged`'s (both absent counts)."""
    if merged is None or status & _WORKTREE_CHANGES:
        return False
    staged = checkout.index[path] if path in checkout.index else None
    try:
        wanted = merged[path]
    except KeyError:
        wanted = None
    if staged is None or wanted is None:
        return staged is None and wanted is None
    return staged.id == wanted.id and staged.mode == wanted.filemode


def _file_holds_merged(root: Path, path: str, status: int, merged: pygit2.Tree | None) -> bool:
    """Whether the file alone (not its index entry) already holds `merged`'s version, with nothing
    staged: libgit2 writes the files of a checkout before its index, so a fast-forward killed in
    between leaves them so. Taking them loses nothing (`fast_forward` stages them)."""
    if merged is None or status & ~(FileStatus.WT_NEW | FileStatus.WT_MODIFIED):
        return False
    try:
        wanted = merged[path]
    except KeyError:
        return False
    full = root / path
    try:
        st = os.lstat(full)
    except OSError:
        return False
    executable = wanted.filemode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
    if not stat.S_ISREG(st.st_mode) or wanted.filemode not in (pygit2.GIT_FILEMODE_BLOB,
                                                                 pygit2.GIT_FILEMODE_BLOB_EXECUTABLE):
        return False
    return bool(st.st_mode & 0o111) == executable and str(pygit2.hashfile(str(full))) == str(wanted.id)


def _needs_git_checkout(work: pygit2.Repository, touched: list[str]) -> bool:
    """Whether reading or writing these paths of a checkout needs git itself (libgit2 knows
    neither sparse checkouts nor external filters such as git-lfs)."""
    if "core.sparseCheckout" in work.config and work.config.get_bool("core.sparseCheckout"):
        return True
    return any(work.get_attr(path, "filter") for path in touched)


@dataclass
class FastForward:
    ok: bool
    waiting: str = ""      # the target could not move yet because of a person's changes
    moved: bool = False    # False with ok=False and no waiting: the target moved meanwhile


def checkout_waiting(paths: git.RepoPaths, repo: pygit2.Repository, target: str, old: str, new: str) -> str:
    """Why moving `target` from `old` to `new` must wait for a person ('' if it need not)."""
    checkout = checkout_of(paths, target)
    if checkout is None:
        return ""
    dirty = dirty_paths(checkout, touched_paths(repo, old, new), merged=repo[new].peel(pygit2.Tree))
    return _waiting_message(checkout, target, dirty) if dirty else ""


def fast_forward(paths: git.RepoPaths, repo: pygit2.Repository, target: str, old: str, new: str) -> FastForward:
    """Move `target` from `old` to `new` (a descendant), sparing a person's checkout.

    When `target` is checked out, the touched paths are first checked to be clean there, then
    written with a libgit2 safe checkout limited to them (files and index), then the ref moves by
    compare-and-swap: ~10× cheaper than `git merge --ff-only`, and no hook runs, as for hive's other
    ref updates. Killed between the two, the next attempt finds the files already written and goes
    on. Checkouts libgit2 cannot write faithfully (sparse, or a `filter=` attribute such as git-lfs
    on a touched path) go through `git merge --ff-only`.
    """
    checkout = checkout_of(paths, target)
    if checkout is None:
        return FastForward(cas_update(repo, git.branch_ref(target), old, new, "hive: merge"), moved=True)
    touched = touched_paths(repo, old, new)
    work = pygit2.Repository(str(checkout))
    dirty, written = _inspect(checkout, touched, work, work[new].peel(pygit2.Tree))
    if dirty:
        return FastForward(False, waiting=_waiting_message(checkout, target, dirty))
    current = repo.references.get(git.branch_ref(target))
    if current is None or str(current.target) != old:
        return FastForward(False)
    if _needs_git_checkout(work, touched):
        return _git_merge_ff(checkout, repo, target, old, new)
    strategy = CheckoutStrategy.SAFE | CheckoutStrategy.DISABLE_PATHSPEC_MATCH
    to_write = [path for path in touched if path not in written]
    if to_write:  # an empty path list would mean "every path"
        try:
            work.checkout_tree(work[new].peel(pygit2.Tree), strategy=strategy, paths=to_write)
        except pygit2.GitError as exc:
            return FastForward(False, waiting=f"{checkout}: cannot update {target}: {exc}")
    _stage_written(work, written, work[new].peel(pygit2.Tree))
    if cas_update(repo, git.branch_ref(target), old, new, "hive merge: fast-forward"):
        return FastForward(True, moved=True)
    if touched:  # someone moved the target meanwhile: give back the files hive just wrote
        work = pygit2.Repository(str(checkout))  # re-read: its HEAD moved
        work.checkout_tree(work.head.peel(pygit2.Tree), paths=touched,
                           strategy=CheckoutStrategy.FORCE | CheckoutStrategy.DISABLE_PATHSPEC_MATCH)
    return FastForward(False)


def _stage_written(work: pygit2.Repository, written: list[str], merged: pygit2.Tree) -> None:
    """Stage the paths an interrupted fast-forward wrote but did not stage (their files hold
    `merged`'s version already, see `_file_holds_merged`)."""
    def staged(path: str) -> bool:
        try:
            wanted = merged[path]
        except KeyError:
            return True                      # a deletion: nothing to stage
        return path in work.index and work.index[path].id == wanted.id

    unstaged = [p for p in written if not staged(p)]
    if unstaged:
        for path in unstaged:
            work.index.add(path)
        work.index.write()


def _waiting_message(checkout: Path, target: str, dirty: list[str]) -> str:
    return (f"{checkout} has uncommitted changes in {', '.join(dirty[:5])}"
            f"{' …' if len(dirty) > 5 else ''}: waiting to update {target}")


def _git_merge_ff(checkout: Path, repo: pygit2.Repository, target: str, old: str, new: str) -> FastForward:
    proc = git.run(["merge", "--ff-only", "--quiet", new], checkout, check=False,
                   env={"GIT_REFLOG_ACTION": "hive merge"})
    if proc.returncode == 0:
        return FastForward(True, moved=True)
    reason = (proc.stderr or proc.stdout).strip().splitlines()
    now = repo.references.get(git.branch_ref(target))
    if now is not None and str(now.target) != old:
        return FastForward(False)
    return FastForward(False, waiting=f"{checkout}: git refused to update {target}: "
                                      f"{reason[-1] if reason else 'unknown reason'}")
