"""A missing `hive/state` ref in a repository that had a hive: find the state again.

`git update-ref -d`, `git branch -D` or a mistaken script can delete the branch; its commits are
still in the object store (until git prunes them) and several places remember the last tip: the
branch's reflog (when the ref file alone was removed), the `.hive/` checkout's records, the
index, and a remote's copy. Hive recovers from the best of them, or stops and says where the data
may be — it never starts an empty state branch over an existing one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hive import git

if TYPE_CHECKING:
    import pygit2

    from hive.state.store import StateStore


@dataclass(frozen=True)
class Trace:
    """A commit that was the tip of `hive/state`, and where it was remembered."""

    where: str
    commit: str


def had_state(paths: git.RepoPaths) -> bool:
    """True if this repository had a hive (its checkout, checkout records or index remain)."""
    return ((paths.state_checkout / ".git").exists() or paths.checkout_db.is_file()
            or paths.index_db.is_file())


def _reflog_tip(log: Path) -> str | None:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    fields = lines[-1].split() if lines else []
    return fields[1] if len(fields) > 1 else None


def _meta(db_path: Path, key: str) -> str | None:
    if not db_path.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return str(row[0]) if row and row[0] else None


def _local_traces(paths: git.RepoPaths) -> list[Trace]:
    found = [
        ("the reflog of hive/state", _reflog_tip(paths.common_dir / "logs" / git.STATE_REF)),
        ("the .hive/ checkout's records", _meta(paths.checkout_db, "commit")),
        ("the index", _meta(paths.index_db, "state_commit")),
    ]
    return [Trace(where, commit) for where, commit in found if commit]


def _remote_traces(repo: "pygit2.Repository") -> list[Trace]:
    traces = []
    for remote in repo.remotes:
        ref = repo.references.get(f"refs/remotes/{remote.name}/{git.STATE_BRANCH}")
        if ref is not None:
            traces.append(Trace(f"{remote.name}/{git.STATE_BRANCH}", str(ref.target)))
    return traces


def _is_commit(repo: "pygit2.Repository", oid: str) -> bool:
    import pygit2   # the store has loaded it already

    try:
        return isinstance(repo[oid], pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return False


def best_trace(store: "StateStore") -> Trace | None:
    """The commit to recover `hive/state` at: the newest of the local traces (one that descends
    from the others), else a remote's copy; None if no trace names a commit still stored."""
    repo = store.repo
    local = [t for t in _local_traces(store.paths) if _is_commit(repo, t.commit)]
    if local:
        best = local[0]
        for trace in local[1:]:
            if trace.commit != best.commit and repo.descendant_of(trace.commit, best.commit):
                best = trace
        return best
    return next((t for t in _remote_traces(repo) if _is_commit(repo, t.commit)), None)


def recover(store: "StateStore") -> Trace | None:
    """Put `hive/state` back at the best trace; the trace used, or None if there was none (or
    the branch exists again: someone else recovered it)."""
    trace = best_trace(store)
    if trace is None or not store.adopt(trace.commit, f"hive: recovered {git.STATE_BRANCH} from {trace.where}"):
        return None
    return trace


def lost_message(paths: git.RepoPaths) -> str:
    """What to tell a person when `hive/state` is gone and nothing names a commit to recover."""
    return (f"{git.STATE_BRANCH} is missing and no stored commit of it was found; git hive will not "
            f"start an empty one over your issues. The live ones may still be in {paths.state_checkout} "
            f"(copy it away; the finished ones are not checked out there), a remote's {git.STATE_BRANCH} (`git fetch`), or `git fsck --lost-found`; "
            f"to start afresh, remove {paths.state_checkout} and {paths.hive_dir}, then `git hive init`")
