"""Kept attempts: `refs/hive/attempts/<issue-id>/<n>` (DESIGN §2).

Before hive deletes or resets a worktree or a `hive/work/<id>` branch, the heads it would discard
(the branch's tip, the worktree's HEAD) are kept here, numbered from 1 per issue, so that no
commit an agent or a person made becomes unreachable. A head that stays reachable anyway — from
the target branch, or from the commit the branch moves to — is not kept again, nor one already
kept for the issue. `git hive log ID` lists them; `git hive prune` removes old ones.

An attempt's age is its head commit's commit time: the last work it holds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from hive import git

if TYPE_CHECKING:   # pygit2 is imported where it is used: `git hive log` lists kept refs without it
    import pygit2

PREFIX = "refs/hive/attempts/"
DAY = 86_400


@dataclass(frozen=True)
class Attempt:
    issue_id: str
    number: int
    commit: str

    @property
    def ref(self) -> str:
        return ref_name(self.issue_id, self.number)


def ref_name(issue_id: str, number: int) -> str:
    return f"{PREFIX}{issue_id}/{number}"


def kept(common_dir: Path, issue_id: str | None = None) -> list[Attempt]:
    """The kept attempts (of one issue, or all), by issue then number; loose refs and packed ones."""
    found: dict[tuple[str, int], str] = {}
    prefix = ref_name(issue_id, 0)[:-1] if issue_id else PREFIX
    for name, oid in _packed(common_dir, prefix):
        _add(found, name, oid)
    top = common_dir / prefix.rstrip("/") if issue_id else common_dir / PREFIX.rstrip("/")
    for folder, _, files in os.walk(top):
        for file in files:
            path = Path(folder) / file
            try:
                oid = path.read_text(encoding="ascii").strip()
            except (OSError, UnicodeDecodeError):
                continue
            _add(found, path.relative_to(common_dir).as_posix(), oid)
    return [Attempt(issue, number, oid) for (issue, number), oid in sorted(found.items())]


def _packed(common_dir: Path, prefix: str) -> Iterator[tuple[str, str]]:
    """(name, id) of each packed ref whose name starts with `prefix`. The file may list every tag
    and remote branch of a big repository (keeping an attempt reads it, several times an issue):
    it is searched for the prefix, and only the lines holding it are split."""
    try:
        data = (common_dir / "packed-refs").read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return
    needle = b" " + prefix.encode()
    at = data.find(needle)
    while at != -1:
        end = data.find(b"\n", at)
        end = len(data) if end == -1 else end
        oid, _, name = data[data.rfind(b"\n", 0, at) + 1:end].decode("ascii", "replace").rstrip("\r").partition(" ")
        if name.startswith(prefix):
            yield name, oid
        at = data.find(needle, end)


def _add(found: dict[tuple[str, int], str], name: str, oid: str) -> None:
    issue, _, number = name.removeprefix(PREFIX).partition("/")
    if number.isdigit() and len(oid) == 40:
        found[(issue, int(number))] = oid


def holding(common_dir: Path, issue_id: str, commit: str) -> Attempt | None:
    """The kept attempt of the issue at `commit` (the newest, if several)."""
    found = [a for a in kept(common_dir, issue_id) if a.commit == commit]
    return found[-1] if found else None


def keep(repo: pygit2.Repository, issue_id: str, heads: Iterable[str | None],
         reachable_from: Iterable[str | None] = ()) -> list[Attempt]:
    """Keep each of `heads` that no ref would hold otherwise: not already kept for the issue, and
    not reachable from any of `reachable_from` (the target's tip, the branch's new head)."""
    import pygit2

    wanted = [head for head in dict.fromkeys(heads) if head]
    if not wanted:
        return []                  # most calls of a new issue's worktree: nothing to keep
    common = Path(repo.path)
    existing = kept(common, issue_id)
    have = {a.commit for a in existing}
    number = max((a.number for a in existing), default=0)
    candidates = [head for head in wanted if head not in have and _is_commit(repo, head)]
    anchors = [a for a in dict.fromkeys(reachable_from) if a and _is_commit(repo, a)] if candidates else []
    made = []
    for head in candidates:
        if _reachable(repo, head, anchors):
            continue
        while True:
            number += 1
            try:
                repo.references.create(ref_name(issue_id, number), head)
                break
            except (pygit2.AlreadyExistsError, ValueError):
                continue   # another process kept one meanwhile: the next number
            except (pygit2.GitError, OSError):   # (libgit2's "failed to lock" is an OSError)
                lock = git.ref_lock(common, ref_name(issue_id, number))
                if not lock.exists():
                    raise
                # another process is keeping one under this number, or a killed one left its
                # lock: the next number (a lock nobody holds any more goes)
                git.remove_if_stale(lock)
                continue
        made.append(Attempt(issue_id, number, head))
    return made


def prune(repo: pygit2.Repository, older_than_days: float, now: float | None = None) -> list[Attempt]:
    """Remove the kept attempts whose head commit is older than that many days; the ones removed."""
    import pygit2

    cutoff = (time.time() if now is None else now) - older_than_days * DAY
    removed = []
    for attempt in kept(Path(repo.path)):
        if committed_at(repo, attempt.commit) < cutoff:
            try:
                repo.references.delete(attempt.ref)
            except (KeyError, pygit2.GitError, OSError):   # locked meanwhile: the next prune
                continue
            removed.append(attempt)
    return removed


def committed_at(repo: pygit2.Repository, oid: str) -> float:
    """The commit time of `oid`; 0 for a commit that is not there (a kept ref to nothing goes first)."""
    import pygit2

    try:
        return float(repo[oid].peel(pygit2.Commit).commit_time)
    except (KeyError, ValueError, pygit2.GitError):
        return 0.0


def _is_commit(repo: pygit2.Repository, oid: str) -> bool:
    import pygit2

    try:
        return isinstance(repo[oid], pygit2.Commit)
    except (KeyError, ValueError):
        return False


def _reachable(repo: pygit2.Repository, head: str, anchors: list[str]) -> bool:
    import pygit2

    for anchor in anchors:
        try:
            if anchor == head or repo.descendant_of(anchor, head):
                return True
        except (pygit2.GitError, ValueError):
            continue
    return False
