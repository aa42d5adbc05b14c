"""`Project`: one repository's hive — its paths, state branch, index, checkout and config.

The handle every command and the daemon work through. Parts are opened lazily so that a command
pays only for what it uses (pygit2 alone costs ~170 ms to import).
"""

from __future__ import annotations

import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection

from hive import git
from hive.errors import HiveError
from hive.state import issue_file, layout, lost
from hive.state.checkout import Absorbed, Checkout, Committed, Edit
from hive.state.index import Adopting, Index, Problem

if TYPE_CHECKING:
    from hive.config import Config
    from hive.state.store import StateStore


class Project:
    def __init__(self, paths: git.RepoPaths):
        self.paths = paths
        self.index = Index(paths)
        self.checkout = Checkout(paths, lambda: self.store, self._adopted_tip, self._read_already)
        # Who brings `.hive/` up to date after this process's writes: None, each write itself; a
        # daemon sets a function that schedules its own refresh, batched (see after_write).
        self.defer_checkout: Callable[[], None] | None = None
        self._adopting: Adopting | None = None   # a tip being indexed beside a sync's refresh

    @classmethod
    def open(cls, where: Path | str | None = None, *, require_init: bool = True) -> "Project":
        project = cls(git.discover(where))
        if require_init and project.store_tip() is None:
            if not lost.had_state(project.paths):
                raise HiveError("this repository has no hive yet: run `git hive init`")
            project.recover_state()
        if require_init and not project.checkout.exists:
            project.checkout.create(project.store.repo)
            print(f"git hive: .hive/ was missing: checked {git.STATE_BRANCH} out there again", file=sys.stderr)
        return project

    def recover_state(self) -> "lost.Trace":
        """`hive/state` is missing where a hive was: put it back from where it was remembered,
        or stop (HiveError) saying where the data may be."""
        trace = lost.recover(self.store)
        if trace is None:
            if self.store_tip() is not None:
                return lost.Trace("another process's recovery", self.store_tip() or "")
            raise HiveError(lost.lost_message(self.paths))
        print(f"warning: {git.STATE_BRANCH} was missing: recovered it at {trace.commit[:10]} "
              f"from {trace.where}", file=sys.stderr)
        return trace

    @cached_property
    def store(self) -> "StateStore":
        from hive.state.store import StateStore   # the pygit2 boundary: read-only commands skip it

        return StateStore(self.paths)

    @cached_property
    def config(self) -> "Config":
        from hive import config   # ~30 ms (tomllib, the defaults): `list` never needs it

        return config.load(self.paths)

    def store_tip(self) -> str | None:
        return git.read_ref(self.paths.common_dir, git.STATE_REF)

    def sync(self, *, full: bool = False, warn: bool = True, only: "Collection[str] | None" = None,
             refresh: bool = True) -> list[Problem]:
        """Absorb a person's saved edits in `.hive/`, follow the branch, catch the index up.

        `only`: look for edits among these checkout paths alone (those a watcher reported).
        `refresh=False` leaves the checkout's files behind the branch for now (a daemon batches).
        Returns the problems (invalid files) found; they are also printed as warnings.
        """
        # first what moved the branch from outside: adopted, or refused and taken back, before
        # an edit is committed on it or the checkout follows it. A big move (a pull of a large
        # queue) is indexed by a child process while `.hive/` follows it here.
        adopting = self._adopting = self.index.adopt() if refresh else None
        try:
            problems = self.update_index() if adopting is None else []
            edit_problems = self.absorb(full=full, only=only).problems
            if refresh:
                self.checkout.refresh()
            if adopting is not None:
                problems += adopting.problems()
            problems += self.update_index()
        finally:
            self._adopting = None
            if adopting is not None:
                adopting.close()
        known = {p.location for p in problems}
        for exc in edit_problems:
            where = exc.where or ""
            problem = Problem(where.split(":")[0], where, str(exc).split(": ", 1)[-1] if where else str(exc))
            if problem.location not in known:
                problems.append(problem)
        if warn:
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr)
        return problems

    def absorb(self, *, full: bool = False, only: "Collection[str] | None" = None) -> Absorbed:
        """Commit a person's valid saved edits in `.hive/` (among `only` when given); the others
        are reported, left as written."""
        return self.checkout.absorb(self._commit_edit, full=full, only=only)

    def _commit_edit(self, edit: Edit) -> Committed:
        # imported only when there is an edit: it loads pygit2 (~130 ms), which a read-only
        # command with nothing to absorb never needs
        from hive.state.edits import commit_edit

        self.update_index()   # the edit is checked against the branch as indexed
        committed = commit_edit(self.store, self.index, edit)
        self.update_index()
        issue_id = layout.issue_id_of(edit.path)
        if committed.data is not None and issue_id is not None:
            for hint in issue_file.key_hints(issue_file.parse(committed.data, issue_id, f".hive/{edit.path}")):
                print(f"warning: .hive/{edit.path}: {hint}", file=sys.stderr)
        if committed.path != edit.path:
            print(f"hive: your edit of .hive/{edit.path} is committed at .hive/{committed.path} "
                  f"(the issue moved there meanwhile)", file=sys.stderr)
        return committed

    def after_write(self) -> list[Problem]:
        """Make a write visible everywhere: the `.hive/` checkout and the index; the problems of
        the files that changed.

        A daemon sets `defer_checkout` and refreshes the checkout from its loop instead, at most a
        few times a second, so a burst of state writes costs one refresh, not one each.
        """
        problems = self.update_index()
        if self.defer_checkout is None:
            self._refresh_after_write()
        else:
            self.defer_checkout()
        return problems

    def _adopted_tip(self) -> str | None:
        """The newest commit of `hive/state` that passed the trust check: what `.hive/` follows."""
        if self._adopting is not None and self.store_tip() == self._adopting.tip:
            return self._adopting.tip   # checked, being indexed; if the branch moved on, the index decides
        self.update_index()
        return self.index.indexed_commit or None

    def _read_already(self) -> dict[str, bytes]:
        """The issue files the trust check of the tip being adopted read (by blob id)."""
        return self._adopting.blobs if self._adopting is not None else {}

    def _refresh_after_write(self) -> None:
        """Bring `.hive/` up to date after a write that is already committed: failing here must
        not fail the command (a retry would repeat the write), so it is a warning."""
        import pygit2   # loaded already: the write went through the store

        try:
            self.checkout.refresh()
        except (OSError, HiveError, pygit2.GitError) as exc:
            print(f"warning: the change is committed on {git.STATE_BRANCH}, but .hive/ could not be "
                  f"updated ({exc}); `git hive doctor --fix` repairs it", file=sys.stderr)

    def update_index(self) -> list[Problem]:
        """Catch the index up with `hive/state` (from this process's last write when that is all
        that happened since: no tree walk then). A tip being adopted beside is waited for first
        (its problems are the sync's to report)."""
        if self._adopting is not None:
            self._adopting.problems()
            self._adopting = None   # indexed: what `.hive/` follows is the index's again
        store = self.__dict__.get("store")   # not opened just for this: pygit2 costs to import
        return self.index.ensure_current(store.changes_between if store is not None else None)

    def close(self) -> None:
        self.index.close()
        self.checkout.close()
