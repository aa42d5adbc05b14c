"""Moving the target branch by compare-and-swap without overwriting a person's checkout.

When the target is checked out in a worktree, that checkout's files and index are updated for the
touched paths only, and only when none of them holds a person's uncommitted change (see
`fast_forward`). libgit2 writes each file in place: a process killed in the middle leaves a
file empty or cut short, which no person wrote — the paths being written are noted first
(`_Begun`), and the next attempt writes such a file again instead of waiting for a person.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, FileStatus

from hive import git, lines
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
                merged: pygit2.Tree | None = None, begun: "_Begun | None" = None) -> list[str]:
    """Which of `paths` have uncommitted changes (staged, unstaged, untracked or ignored) in `root`
    (`checkout`: that worktree, opened already). A path whose index and file already hold what
    the `merged` tree has is not in the way, nor is one an interrupted write left (see `_inspect`)."""
    return _inspect(root, paths, checkout, merged, begun).dirty


@dataclass
class _Inspected:
    dirty: list[str]     # a person's uncommitted changes: the fast-forward waits
    written: list[str]   # holding `merged`'s version already (an interrupted fast-forward wrote it)
    cut_short: list[str]   # a file an interrupted fast-forward was writing: written again


def _inspect(root: Path, paths: list[str], checkout: pygit2.Repository | None,
             merged: pygit2.Tree | None, begun: "_Begun | None" = None) -> _Inspected:
    """The touched `paths` of the checkout at `root` sorted by what is in them: going on with the
    written and the cut-short ones loses nothing."""
    found = _Inspected([], [], [])
    if not paths:
        return found
    checkout = checkout or git.open_repository(root)
    if _needs_git_checkout(checkout, paths):
        proc = git.run(["status", "--porcelain", "-z", "--untracked-files=all", "--", *paths], root, check=False,
                       here=True)
        found.dirty = sorted({e[3:] for e in proc.stdout.split("\0") if len(e) > 3})
        return found
    for path in paths:
        if leads_outside(root, path):
            found.dirty.append(path)  # a person's symlink on the way: libgit2 would write through it
            continue
        try:
            status = checkout.status_file(path)
        except KeyError:
            continue            # in neither the index, HEAD nor the files: nothing to lose
        except pygit2.GitError:
            found.dirty.append(path)  # e.g. a directory where the file would go
            continue
        if status == FileStatus.CURRENT:
            continue
        if _holds_merged(checkout, path, status, merged) or _file_holds_merged(root, path, status, merged):
            found.written.append(path)
        elif begun is not None and begun.cut_short(root, path):
            found.cut_short.append(path)
        else:
            found.dirty.append(path)
    return found


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
    dirty = dirty_paths(checkout, touched_paths(repo, old, new), merged=repo[new].peel(pygit2.Tree),
                        begun=_Begun.left(paths, repo, target, old))
    return _waiting_message(checkout, target, dirty) if dirty else ""


NOTE_BYTES = 1 << 22   # the longest note read back: a path and a blob id per file written


class _Begun:
    """The files a fast-forward of `target` from `old` is about to write in a checkout, noted in
    `<hive_dir>/fast-forward.json` before libgit2 writes any, removed once it has moved the ref.

    A note left behind (the process was killed) counts while the target is still at `old`: each
    touched path of it was clean when the note was made, so a file there now empty, absent, or
    holding the first bytes of what was being written is libgit2's write cut short — nothing of
    a person's. Any other content is theirs and waits for them."""

    NAME = "fast-forward.json"

    def __init__(self, paths: git.RepoPaths, repo: pygit2.Repository, writing: dict[str, str]) -> None:
        self.file, self.repo, self.writing = paths.hive_dir / self.NAME, repo, writing

    @classmethod
    def left(cls, paths: git.RepoPaths, repo: pygit2.Repository, target: str, old: str) -> "_Begun | None":
        """The note an interrupted fast-forward of `target` from `old` left, if any."""
        try:
            note = json.loads(lines.read_regular(paths.hive_dir / cls.NAME, NOTE_BYTES) or b"null")
        except (OSError, ValueError):   # a link, a folder, too big (lines.NotAFile), no JSON
            return None
        if not isinstance(note, dict) or note.get("target") != target or note.get("old") != old \
                or not isinstance(note.get("writing"), dict):
            return None
        writing = note["writing"]
        return cls(paths, repo, {str(p): str(b) for p, b in writing.items()})

    @classmethod
    def note(cls, paths: git.RepoPaths, repo: pygit2.Repository, target: str, old: str, merged: pygit2.Tree,
             writing: list[str]) -> "_Begun":
        """Note the paths about to be written (with the blob each gets, "" for a removal)."""
        begun = cls(paths, repo, {path: _blob_at(merged, path) for path in writing})
        if not writing:
            return begun
        text = json.dumps({"target": target, "old": old, "writing": begun.writing})
        begun.file.parent.mkdir(parents=True, exist_ok=True)
        temporary = begun.file.with_name(f".{cls.NAME}.{os.getpid()}")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, begun.file)
        return begun

    def done(self) -> None:
        try:
            self.file.unlink()
        except FileNotFoundError:
            pass

    def cut_short(self, root: Path, path: str) -> bool:
        """Whether the file at `path` is one this fast-forward began writing and did not finish."""
        if path not in self.writing:
            return False
        blob = self.writing[path]
        if not blob:
            return not os.path.lexists(root / path)   # a removal: done, or not done yet
        try:
            wanted = self.repo[blob].peel(pygit2.Blob).data
            held = lines.read_regular(root / path, len(wanted))   # a link, a folder, longer: NotAFile
        except (OSError, KeyError, ValueError, pygit2.GitError):
            return False
        return held is None or wanted.startswith(held)   # not made yet, or its first bytes


def _blob_at(tree: pygit2.Tree, path: str) -> str:
    try:
        return str(tree[path].id)
    except KeyError:
        return ""


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
    work = git.open_repository(checkout)
    merged = work[new].peel(pygit2.Tree)
    found = _inspect(checkout, touched, work, merged, _Begun.left(paths, repo, target, old))
    if found.dirty:
        return FastForward(False, waiting=_waiting_message(checkout, target, found.dirty))
    current = repo.references.get(git.branch_ref(target))
    if current is None or str(current.target) != old:
        return FastForward(False)
    if _needs_git_checkout(work, touched):
        return _git_merge_ff(checkout, repo, target, old, new)
    to_write = [path for path in touched if path not in found.written and path not in found.cut_short]
    begun = _Begun.note(paths, repo, target, old, merged, to_write + found.cut_short)
    try:
        # an empty path list would mean "every path"; a file cut short is replaced whatever it holds
        for chosen, strategy in ((to_write, CheckoutStrategy.SAFE), (found.cut_short, CheckoutStrategy.FORCE)):
            if chosen:
                work.checkout_tree(merged, strategy=strategy | CheckoutStrategy.DISABLE_PATHSPEC_MATCH, paths=chosen)
    except pygit2.GitError as exc:
        begun.done()
        return FastForward(False, waiting=f"{checkout}: cannot update {target}: {exc}")
    _stage_written(work, found.written, merged)
    if cas_update(repo, git.branch_ref(target), old, new, "hive merge: fast-forward"):
        begun.done()
        return FastForward(True, moved=True)
    if touched:  # someone moved the target meanwhile: give back the files hive just wrote
        work = git.open_repository(checkout)  # re-read: its HEAD moved
        work.checkout_tree(work.head.peel(pygit2.Tree), paths=touched,
                           strategy=CheckoutStrategy.FORCE | CheckoutStrategy.DISABLE_PATHSPEC_MATCH)
    begun.done()
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
    # no hook, as on the libgit2 path: with `core.hooksPath` in a tracked folder (husky's setup)
    # the hooks git would run are files of the work being merged, an agent's to write
    proc = git.run([*git.NO_HOOKS, "merge", "--ff-only", "--quiet", new], checkout, check=False, here=True,
                   env={"GIT_REFLOG_ACTION": "hive merge"})
    if proc.returncode == 0:
        return FastForward(True, moved=True)
    reason = (proc.stderr or proc.stdout).strip().splitlines()
    now = repo.references.get(git.branch_ref(target))
    if now is not None and str(now.target) != old:
        return FastForward(False)
    return FastForward(False, waiting=f"{checkout}: git refused to update {target}: "
                                      f"{reason[-1] if reason else 'unknown reason'}")
