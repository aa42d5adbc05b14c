"""The mechanical tier: replay a work branch onto the target, run the tests, fast-forward.

Everything here is deterministic git work (pygit2): no LLM. The branch's own commits — those after
the commit it started from — are replayed one by one onto the target's tip in memory
(`merge_trees`), so a dependent that started from its blocker's unmerged work replays only its own
changes once the blocker has been merged. The target moves by compare-and-swap; when it is
checked out in a worktree, that checkout's files and index are updated for the touched paths only,
and only when none of them holds a person's uncommitted change (see `fast_forward`).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pygit2
from pygit2.enums import CheckoutStrategy, FileStatus

from hive import git
from hive.orchestrator import worktrees
from hive.state.store import cas_update

OUTPUT_LIMIT = 20_000


@dataclass
class Replay:
    ok: bool
    head: str = ""                  # the replayed head (ok)
    conflicts: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class TestRun:
    ok: bool
    command: str
    output: str = ""
    timed_out: bool = False


def own_commits(repo: pygit2.Repository, head: str, base: str) -> list[pygit2.Commit]:
    """Commits reachable from `head` but not from `base`, oldest first (first-parent chain)."""
    walker = repo.walk(head, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE)
    if base:
        walker.hide(base)
    return [c for c in walker]


def replay(repo: pygit2.Repository, head: str, base: str, onto: str) -> Replay:
    """Replay the commits base..head onto `onto` in memory; no ref or file is touched."""
    current = repo[onto].peel(pygit2.Commit)
    commits = own_commits(repo, head, base)
    for commit in commits:
        parent_tree = commit.parents[0].tree if commit.parents else repo[repo.TreeBuilder().write()]
        index = repo.merge_trees(parent_tree, current.tree, commit.tree)
        if index.conflicts is not None:
            paths = sorted({(entry.path) for triple in index.conflicts for entry in triple if entry is not None})
            return Replay(False, conflicts=paths,
                          detail=f"replaying {str(commit.id)[:10]} ({commit.message.splitlines()[0] if commit.message else ''}) "
                                 f"onto {onto[:10]} conflicts in: {', '.join(paths)}")
        tree = index.write_tree(repo)
        if tree == current.tree.id:
            continue  # already contained (e.g. a blocker's change that reached the target)
        new = repo.create_commit(None, commit.author, commit.committer, commit.message, tree, [current.id])
        current = repo[new]
    return Replay(True, head=str(current.id))


def run_test(command: str, cwd: Path, timeout: float) -> TestRun:
    """Run a test command in a worktree, in its own process group, killed whole on timeout."""
    proc = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        timed_out = True
    _kill_group(proc.pid)  # anything it left running in the background
    text = out.decode("utf-8", "replace")
    if len(text) > OUTPUT_LIMIT:
        text = "[…]\n" + text[-OUTPUT_LIMIT:]
    return TestRun(proc.returncode == 0 and not timed_out, command, text, timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def checkout_of(paths: git.RepoPaths, branch: str) -> Path | None:
    """The worktree that has `branch` checked out, if any (main or linked)."""
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
        if _read_stripped(os.path.join(entry.path, "HEAD")) != wanted:
            continue
        gitdir = _read_stripped(os.path.join(entry.path, "gitdir"))
        if gitdir:
            return Path(gitdir).parent
    return None


def _read_stripped(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def touched_paths(repo: pygit2.Repository, old: str, new: str) -> list[str]:
    diff = repo.diff(repo[old].peel(pygit2.Commit).tree, repo[new].peel(pygit2.Commit).tree)
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
    dirty, written = [], []
    for path in paths:
        try:
            status = checkout.status_file(path)
        except KeyError:
            continue            # in neither the index, HEAD nor the files: nothing to lose
        except pygit2.GitError:
            dirty.append(path)  # e.g. a directory where the file would go
            continue
        if status == FileStatus.CURRENT:
            continue
        (written if _holds_merged(checkout, path, status, merged) else dirty).append(path)
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
        return FastForward(cas_update(repo, f"refs/heads/{target}", old, new, "hive: merge"), moved=True)
    touched = touched_paths(repo, old, new)
    work = pygit2.Repository(str(checkout))
    dirty, written = _inspect(checkout, touched, work, work[new].peel(pygit2.Tree))
    if dirty:
        return FastForward(False, waiting=_waiting_message(checkout, target, dirty))
    current = repo.references.get(f"refs/heads/{target}")
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
    if cas_update(repo, f"refs/heads/{target}", old, new, "hive merge: fast-forward"):
        return FastForward(True, moved=True)
    if touched:  # someone moved the target meanwhile: give back the files hive just wrote
        work = pygit2.Repository(str(checkout))  # re-read: its HEAD moved
        work.checkout_tree(work.head.peel(pygit2.Tree), paths=touched,
                           strategy=CheckoutStrategy.FORCE | CheckoutStrategy.DISABLE_PATHSPEC_MATCH)
    return FastForward(False)


def _waiting_message(checkout: Path, target: str, dirty: list[str]) -> str:
    return (f"{checkout} has uncommitted changes in {', '.join(dirty[:5])}"
            f"{' …' if len(dirty) > 5 else ''}: waiting to update {target}")


def _git_merge_ff(checkout: Path, repo: pygit2.Repository, target: str, old: str, new: str) -> FastForward:
    proc = git.run(["merge", "--ff-only", "--quiet", new], checkout, check=False,
                   env={"GIT_REFLOG_ACTION": "hive merge"})
    if proc.returncode == 0:
        return FastForward(True, moved=True)
    reason = (proc.stderr or proc.stdout).strip().splitlines()
    now = repo.references.get(f"refs/heads/{target}")
    if now is not None and str(now.target) != old:
        return FastForward(False)
    return FastForward(False, waiting=f"{checkout}: git refused to update {target}: "
                                      f"{reason[-1] if reason else 'unknown reason'}")


def sync_worktree(paths: git.RepoPaths, issue_id: str, head: str) -> None:
    """Point the work branch at `head` and make its worktree match (a hard reset of hive's own tree)."""
    worktree = worktrees.worktree_path(paths, issue_id)
    repo = worktrees.open_repo(paths)
    branch = worktrees.branch_name(issue_id)
    elsewhere = checkout_of(paths, branch)
    if elsewhere is None or elsewhere.resolve() == worktree.resolve():
        worktrees.unlock_branch(paths, issue_id)
        repo.references.create(f"refs/heads/{branch}", head, force=True)
    # else: a person's own checkout of the branch: never move it under them (hive's worktree is
    # detached then, see pipeline._recreate_worktree)
    if worktree.exists():
        work = pygit2.Repository(str(worktree))
        work.reset(pygit2.Oid(hex=head), pygit2.GIT_RESET_HARD)


@dataclass
class Landing:
    status: str            # merged | conflict | tests | waiting
    commit: str = ""       # merged: the commit the target now points at
    detail: str = ""


MAX_TARGET_RACES = 20


Publish = Callable[[pygit2.Repository, str, str], FastForward]


def land(paths: git.RepoPaths, target: str, issue_id: str, head: str, base: str,
         test_commands: list[str], timeout: float, record: Callable[[str], None] = lambda _: None,
         trust_head: bool = False, target_ref: str = "", publish: Publish | None = None) -> Landing:
    """The whole mechanical tier for one branch: replay, test, fast-forward.

    `record(commit)` is called before the target moves, so that an interrupted merge can tell
    afterwards whether it landed. With `trust_head`, a head that does not sit on the target is
    replayed from its merge base (used after the refinery rewrote the branch). A shared daemon
    replays onto its remote-tracking `target_ref` and moves the remote with `publish`.
    """
    repo = worktrees.open_repo(paths)
    local = not target_ref and publish is None
    target_ref = target_ref or f"refs/heads/{target}"
    publish = publish or (lambda repo_, old, new: fast_forward(paths, repo_, target, old, new))
    for _ in range(MAX_TARGET_RACES):
        ref = repo.references.get(target_ref)
        if ref is None:
            return Landing("waiting", detail=f"target branch {target} does not exist")
        tip = str(ref.target)
        if head == tip or repo.descendant_of(head, tip):
            candidate = head
        else:
            start = "" if trust_head else base
            if not start or not _is_commit(repo, start):
                merge_base = repo.merge_base(head, tip)
                start = str(merge_base) if merge_base else ""
            replayed = replay(repo, head, start, tip)
            if not replayed.ok:
                return Landing("conflict", detail=replayed.detail)
            candidate = replayed.head
        if local and test_commands:
            # a person's uncommitted change in the way: wait before the tests, not after them
            # (a waiting entry is retried on every wake; its test suite must not run each time).
            # Without tests the fast-forward's own check comes at once: one `git status` is enough.
            waiting = checkout_waiting(paths, repo, target, tip, candidate)
            if waiting:
                return Landing("waiting", detail=waiting)
        if candidate != head and test_commands:
            # the tests run in the worker's worktree, on the replayed commit; without tests nothing
            # reads that worktree again (finalize removes it), so it is not rewritten for nothing
            sync_worktree(paths, issue_id, candidate)
        worktree = worktrees.worktree_path(paths, issue_id)
        for command in test_commands:
            result = run_test(command, worktree, timeout)
            if not result.ok:
                why = "timed out" if result.timed_out else "failed"
                return Landing("tests", detail=f"`{command}` {why}:\n{result.output}")
        record(candidate)
        moved = publish(repo, tip, candidate)
        if moved.ok:
            return Landing("merged", commit=candidate)
        if moved.waiting:
            return Landing("waiting", detail=moved.waiting)
        head, base, trust_head = candidate, tip, False  # the target moved meanwhile: go again
    return Landing("waiting", detail="the target branch kept moving")


def _is_commit(repo: pygit2.Repository, oid: str) -> bool:
    try:
        return isinstance(repo[oid], pygit2.Commit)
    except (KeyError, ValueError):
        return False
