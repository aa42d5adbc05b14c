"""Reading and writing `hive/state`: commits built from objects, moved by compare-and-swap.

Every commit hive makes of state files goes through `StateStore`: on `hive/state`, and on a plan
branch (`hive/plan/<slug>`, through `on_ref`) that holds the same files.

Every state change is one commit on `refs/heads/hive/state`, made with pygit2's object plumbing
(no checkout involved) and published with a CAS ref update: the commit is built on the tip that
was read, and the ref moves only if it still points there. Otherwise the change is rebuilt on the
new tip — its preconditions re-checked by the caller's `build` function — and tried again.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pygit2

from hive import git
from hive.errors import HiveError
from hive.state import layout, raw_trees
from hive.state.merging import merge_states
from hive.state.trees import TREE_MODE, Changes, Entry, FolderCache, walk_changes, write_tree

MAX_ATTEMPTS = 200
WRITTEN_KEPT = 64   # own commits remembered: enough for the writes between two `.hive/` refreshes

# libgit2 caches only trees under 4 KB by default. The live `issues/` folder is a tree of ~40
# bytes per issue (~400 KB at 10k issues), so every path lookup in it (several per write: the
# issue, its blockers) re-read and re-parsed it: ~2 ms each, ~0.03 ms cached.
pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, 64 * 1024 * 1024)


class Refused(Exception):
    """Raised by a `build` function when the change no longer applies on the current tip."""


@dataclass(frozen=True)
class Written:
    """What one commit of this process changed: the index and the `.hive/` refresh apply a
    chain of them without walking trees (`StateStore.changes_between`)."""

    parent: str | None
    commit: str
    changes: Changes


@dataclass
class Change:
    """One state change: files to write (bytes) or delete (None), and how to describe it."""

    files: dict[str, bytes | None]
    summary: str
    event: str
    issue: str = ""
    agent: str = ""
    trailers: dict[str, str] = field(default_factory=dict)
    audit: bool = False   # commit even if no file changes: the event itself is the record

    def message(self) -> str:
        lines = [f"Hive-Event: {self.event}"]
        if self.issue:
            lines.append(f"Hive-Issue: {self.issue}")
        if self.agent:
            lines.append(f"Hive-Agent: {self.agent}")
        lines.extend(f"{key}: {value}" for key, value in self.trailers.items())
        return f"{self.summary}\n\n" + "\n".join(lines) + "\n"


class Snapshot:
    """Read access to the files of one commit of `hive/state`."""

    def __init__(self, repo: pygit2.Repository, commit: pygit2.Commit | None,
                 folders: FolderCache | None = None):
        self.repo = repo
        self.commit = commit
        self.tree = commit.tree if commit is not None else None
        self.folders = folders

    @property
    def oid(self) -> str | None:
        return str(self.commit.id) if self.commit is not None else None

    def _entry(self, path: str) -> pygit2.Object | Entry | None:
        if self.tree is None:
            return None
        if self.folders is None:
            try:
                return self.tree[path]
            except KeyError:
                return None
        return self.folders.lookup(self.repo, self.tree, path)

    def read(self, path: str) -> bytes | None:
        entry = self._entry(path)
        if entry is None:
            return None
        obj = self.repo[entry.id]
        return obj.data if isinstance(obj, pygit2.Blob) else None

    def blob_id(self, path: str) -> str | None:
        entry = self._entry(path)
        return str(entry.id) if entry is not None else None

    def size(self, path: str) -> int:
        """The size of the file at `path` (0 if there is none), from its object header."""
        entry = self._entry(path)
        if entry is None or entry.filemode == pygit2.GIT_FILEMODE_TREE:
            return 0
        return _blob_size(self.repo, entry.id)

    def bytes_under(self, folder: str) -> int:
        """The sizes of all the files under `folder` added up, each as often as it appears (as
        the trust check counts them), read from object headers."""
        entry = self._entry(folder)
        if entry is None or entry.filemode != pygit2.GIT_FILEMODE_TREE:
            return 0
        total, folders = 0, [entry.id]
        while folders:
            for record in raw_trees.parse(self.repo.odb.read(folders.pop())[1]):
                oid = pygit2.Oid(raw=record[-20:])
                if record[:record.index(b" ")] == TREE_MODE:
                    folders.append(oid)
                else:
                    total += _blob_size(self.repo, oid)
        return total

    def issue_path(self, issue_id: str) -> str | None:
        """Where the issue's file is in this snapshot (live or archived), if anywhere."""
        for path in layout.candidate_paths(issue_id):
            if self.blob_id(path) is not None:
                return path
        return None

    def read_issue(self, issue_id: str) -> tuple[str, bytes] | None:
        path = self.issue_path(issue_id)
        if path is None:
            return None
        data = self.read(path)
        return (path, data) if data is not None else None


_SIZES: dict[pygit2.Oid, int] = {}   # a blob's size never changes: read once per process


def _blob_size(repo: pygit2.Repository, oid: pygit2.Oid) -> int:
    size = _SIZES.get(oid)
    if size is None:
        if len(_SIZES) > 100_000:
            _SIZES.clear()
        size = _SIZES[oid] = repo.odb.read_header(oid)[1]
    return size


def signature_for(repo: pygit2.Repository, name: str | None = None, email: str | None = None) -> pygit2.Signature:
    """The person's git identity when there is one; hive's own otherwise."""
    if name and email:
        return pygit2.Signature(name, email)
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        if not _IDENTITY_WARNED:
            _IDENTITY_WARNED.append(True)
            print("warning: no git identity (user.name, user.email): hive's commits are made as "
                  "`git hive <hive@localhost>`; set yours with `git config --global user.name/user.email`",
                  file=sys.stderr)
        return pygit2.Signature("git hive", "hive@localhost")


_IDENTITY_WARNED: list[bool] = []   # the missing-identity warning is given once per process


class StateStore:
    """The `hive/state` branch of one repository (or another branch of state files: `ref`)."""

    def __init__(self, paths: git.RepoPaths, ref: str = git.STATE_REF, *,
                 repo: pygit2.Repository | None = None):
        self.paths = paths
        self.ref = ref
        self.repo = repo if repo is not None else git.open_repository(paths.common_dir)
        self.folders = FolderCache()
        self.written: deque[Written] = deque(maxlen=WRITTEN_KEPT)   # this process's last commits
        self._drafts = threading.local()   # .open: the Draft this thread's commits go to

    def on_ref(self, ref: str) -> "StateStore":
        """The store of another branch of state files in this repository (a plan branch), sharing
        this one's repository handle."""
        return StateStore(self.paths, ref, repo=self.repo)

    def changes_between(self, old: str | None, new: str | None) -> Changes | None:
        """What changed from commit `old` to commit `new` when this process's own commits are all
        that happened in between (a daemon's `.hive/` refresh spans several); None otherwise."""
        if not old or not new:
            return None
        by_commit = {w.commit: w for w in self.written}
        chain: list[Written] = []
        at = new
        while at != old:
            step = by_commit.get(at)
            if step is None or step.parent is None:
                return None
            chain.append(step)
            at = step.parent
        first_and_last: dict[str, tuple[str | None, str | None]] = {}
        for step in reversed(chain):
            for path, before, after in step.changes:
                first_and_last[path] = (first_and_last.get(path, (before, None))[0], after)
        return [(path, before, after) for path, (before, after) in first_and_last.items() if before != after]

    def changes(self, old: str | None, new: str | None) -> Changes:
        """What changed from commit `old` (None or unknown: from nothing) to commit `new`: from
        this process's own commits when they are all that happened, by comparing trees otherwise."""
        own = self.changes_between(old, new)
        if own is not None:
            return own
        old_tree = None
        if old:
            try:
                old_tree = self.repo[old].peel(pygit2.Commit).tree
            except (KeyError, ValueError):
                old_tree = None
        new_tree = self.repo[new].peel(pygit2.Commit).tree if new else None
        return list(walk_changes(self.repo, old_tree, new_tree))

    def tip(self) -> str | None:
        ref = self.repo.references.get(self.ref)
        return str(ref.target) if ref is not None else None

    def snapshot(self, oid: str | None = None) -> Snapshot:
        oid = oid or self.tip()
        return Snapshot(self.repo, self.repo[oid].peel(pygit2.Commit) if oid else None, self.folders)

    def commit(self, build: Callable[[Snapshot], Change | None], *,
               author: pygit2.Signature | None = None) -> str | None:
        """Apply `build(tip snapshot)` as one commit, CAS-published; retried when the tip moves.

        `build` returns the Change to make, None when there is nothing to do, or raises Refused
        when the change no longer applies. Returns the new commit id (None if nothing was done).
        """
        draft = getattr(self._drafts, "open", None)
        if draft is not None:
            return self._commit_draft(draft, build, author)
        signature = author or signature_for(self.repo)
        for attempt in range(MAX_ATTEMPTS):
            snap = self.snapshot()
            change = build(snap)
            if change is None:
                return None
            changed: Changes = []
            tree_id = write_tree(self.repo, snap.tree, change.files, folders=self.folders, changed=changed)
            if snap.tree is not None and tree_id == snap.tree.id and not change.audit:
                return None
            parents = [snap.commit.id] if snap.commit is not None else []
            new = self.repo.create_commit(None, signature, signature, change.message(), tree_id, parents)
            if cas_update(self.repo, self.ref, snap.oid, str(new), change.summary):
                self.written.append(Written(snap.oid, str(new), changed))
                notify(self.paths)
                return str(new)
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
        raise HiveError(f"could not update {self.ref}: it kept moving ({MAX_ATTEMPTS} attempts)")

    def start(self, change: Change) -> str | None:
        """Create the branch with a first commit (no parent) of `change.files`; None, and nothing
        done, when the branch exists already."""
        return self.commit(lambda snap: change if snap.commit is None else None)

    def adopt(self, commit: str, message: str) -> bool:
        """Create the branch at an existing commit (a remote's state; the state a plan starts
        from); False, and nothing done, when the branch exists already."""
        if not cas_update(self.repo, self.ref, None, commit, message):
            return False
        notify(self.paths)
        return True

    def merge(self, theirs: str, change: Change, *, drop: tuple[str, ...] = (),
              prefer_theirs_claims: bool = False,
              decisions: list[str] | None = None) -> tuple[str | None, list[str]]:
        """Merge the commit `theirs` into `hive/state` with the hive rules, CAS-published.

        Returns (the new tip or None when `theirs` is already contained, merge warnings).
        A fast-forward is used when possible and nothing has to be dropped. `decisions` gets
        what a rule kept of fields both sides changed (one line each) in the merge published.
        """
        signature = signature_for(self.repo)
        for attempt in range(MAX_ATTEMPTS):
            tip = self.tip()
            if tip is not None and (tip == theirs or self.repo.descendant_of(tip, theirs)):
                return None, []
            if tip is None or (not drop and self.repo.descendant_of(theirs, tip)):
                if cas_update(self.repo, self.ref, tip, theirs, change.summary):
                    notify(self.paths)
                    return theirs, []
                continue
            merged = merge_states(self.repo, tip, theirs, drop=drop, prefer_theirs_claims=prefer_theirs_claims)
            new = self.repo.create_commit(None, signature, signature, change.message(), merged.tree,
                                          [pygit2.Oid(hex=tip), pygit2.Oid(hex=theirs)])
            if cas_update(self.repo, self.ref, tip, str(new), change.summary):
                notify(self.paths)
                if decisions is not None:
                    decisions.extend(merged.decisions)
                return str(new), merged.warnings
            time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
        raise HiveError(f"could not update {self.ref}: it kept moving ({MAX_ATTEMPTS} attempts)")

    # -- drafts: a commit built now, published later (shared mode pushes a claim first) ------

    @contextmanager
    def draft(self, base: str) -> Iterator["Draft"]:
        """While open, this thread's `commit`s build one commit on `base` and move no ref:
        `draft.made`, to `publish` once it is safe to (shared mode: once the remote took it).
        Per thread, so the event loop's own commits meanwhile publish as usual."""
        if getattr(self._drafts, "open", None) is not None:
            raise RuntimeError("a draft is already open on this store in this thread")
        self._drafts.open = Draft(base)
        try:
            yield self._drafts.open
        finally:
            self._drafts.open = None

    def publish(self, draft: "Draft", summary: str) -> bool:
        """Move the branch from the draft's base to the commit it made; False if it moved meanwhile."""
        if not draft.made or not cas_update(self.repo, self.ref, draft.base, draft.made, summary):
            return False
        notify(self.paths)
        return True

    def _commit_draft(self, draft: "Draft", build: Callable[[Snapshot], Change | None],
                      author: pygit2.Signature | None) -> str | None:
        # no folder cache: it follows the branch, which a draft leaves where it is
        snap = Snapshot(self.repo, self.repo[draft.base].peel(pygit2.Commit))
        change = build(snap)
        if change is None:
            return None
        tree_id = write_tree(self.repo, snap.tree, change.files)
        signature = author or signature_for(self.repo)
        parents = [snap.commit.id] if snap.commit is not None else []
        draft.made = str(self.repo.create_commit(None, signature, signature, change.message(), tree_id, parents))
        return draft.made


@dataclass
class Draft:
    """A commit built on `base` and not yet on any branch (see `StateStore.draft`)."""

    base: str
    made: str = ""


def cas_update(repo: pygit2.Repository, ref: str, old: str | None, new: str, message: str) -> bool:
    """Move `ref` from `old` to `new` only if it still points at `old` (None: must not exist)."""
    try:
        with repo.transaction() as txn:
            txn.lock_ref(ref)
            current = repo.references.get(ref)
            if (str(current.target) if current is not None else None) != old:
                return False
            txn.set_target(ref, new, message=message)
        return True
    except pygit2.GitError:
        # the ref is locked by another writer: re-read and retry — once it is released, or once
        # it is stale (left by a writer killed mid-update, it would block every write forever)
        git.release_stale_ref_lock(repo.path, ref)
        return False


def notify(paths: git.RepoPaths) -> None:
    """Tell a running daemon that refs moved (libgit2 ref updates run no git hooks)."""
    try:
        with open(paths.ref_events, "a", encoding="utf-8") as out:
            out.write(f"{time.time():.3f} {os.getpid()}\n")
    except FileNotFoundError:
        pass
