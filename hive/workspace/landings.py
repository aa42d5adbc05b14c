"""Which issues are on the target branch: the `Hive-Issue` trailer of a landing, read and written.

Every landing replays the work's own commits onto the target (`hive.workspace.replay`); the last
one carries `Hive-Issue: <id>` (any such line an agent wrote itself is dropped, so an agent cannot
make another issue look landed). The candidate is recorded before the target moves
(`record_landing`), so that landing is idempotent across restarts: the merge step finalizes a
recorded landing that is on the target instead of landing twice (`landed_commit`); a trailer
hive did not record (anyone can write one in a commit) counts for nothing. A finalized issue
records its landed commit in its file (`merged`), so whether a blocker is on a given target tip is one ancestry check
(`blockers_off_target`): a dependent neither starts from nor lands on a target without it.
"""

from __future__ import annotations

import re
from typing import Mapping

import pygit2

from hive import git
from hive.state.issue_file import Issue

ISSUE_TRAILER = "Hive-Issue"
MERGED_FIELD = "merged"          # the landed commit, in a finalized issue's file
LANDING_REF = "refs/hive/landings/"   # this machine's landings, recorded before the target moves
LANDING_FIELD = "landing"             # a shared daemon's landing, in the issue's file before the target push

_TRAILER_LINE = re.compile(rf"^{ISSUE_TRAILER}:.*$\n?", re.MULTILINE | re.IGNORECASE)
_TRAILER_ID = re.compile(rf"^{ISSUE_TRAILER}: (.+)$", re.MULTILINE)


def landing_message(message: str, issue_id: str, last: bool) -> str:
    """A replayed commit's message: the agent's, without `Hive-Issue` lines; the last commit of
    a landing ends with the issue's trailer."""
    text = _TRAILER_LINE.sub("", message).rstrip("\n")
    if not last:
        return text + "\n"
    return f"{text}\n\n{ISSUE_TRAILER}: {issue_id}\n"


def carries(commit: pygit2.Commit, issue_id: str) -> bool:
    return f"\n{ISSUE_TRAILER}: {issue_id}\n" in "\n" + (commit.message or "") + "\n"


def record_landing(repo: pygit2.Repository, issue_id: str, commit: str) -> None:
    """Remember, before the target moves, that `commit` is this machine's landing of `issue_id`
    (`refs/hive/landings/<id>`: local, never fetched or pushed, out of any jail's reach)."""
    _unlock(repo, issue_id)
    repo.references.create(LANDING_REF + issue_id, commit, force=True)


def forget_landing(repo: pygit2.Repository, issue_id: str) -> None:
    ref = repo.references.get(LANDING_REF + issue_id)
    if ref is not None:
        _unlock(repo, issue_id)
        ref.delete()


def _unlock(repo: pygit2.Repository, issue_id: str) -> None:
    """Wait for the landing ref's lock to go; remove it if a killed process left it (every later
    write of the ref would fail on it)."""
    git.release_stale_ref_lock(repo.path, LANDING_REF + issue_id)


def landed_commit(repo: pygit2.Repository, tip: str, issue_id: str, recorded: str = "") -> str:
    """The commit in `tip`'s history that landed `issue_id` ('' if none): only one hive recorded
    — this machine's (`record_landing`, written before the target moved) or one the issue's file
    records (`recorded_of`: its `merged`, or the `landing` a shared daemon wrote before it pushed
    the target) — and that carries the issue's trailer. A `Hive-Issue` line in anyone else's
    commit finalizes nothing."""
    ref = repo.references.get(LANDING_REF + issue_id)
    candidates = (str(ref.target) if ref is not None else "", *recorded.split())
    for commit_id in dict.fromkeys(c for c in candidates if c):
        try:
            commit = repo[commit_id].peel(pygit2.Commit)
            if carries(commit, issue_id) and (commit_id == tip or repo.descendant_of(tip, commit_id)):
                return commit_id
        except (pygit2.GitError, KeyError, ValueError):
            continue   # not fetched here (yet)
    return ""


def merged_of(issue: Issue) -> str:
    """The landed commit a finalized issue's file records ('' if none, or not a commit id)."""
    merged = str(issue.extra.get(MERGED_FIELD, ""))
    return merged if git.is_object_id(merged) else ""


def recorded_of(issue: Issue) -> str:
    """The landings the issue's file records, space-separated: `merged` and `landing`."""
    found = [str(issue.extra.get(key, "")) for key in (MERGED_FIELD, LANDING_FIELD)]
    return " ".join(c for c in found if git.is_object_id(c))


def issue_of_landing(commit: pygit2.Commit) -> str:
    """The issue whose trailer ends a landing commit hive made ('' if none)."""
    found = _TRAILER_ID.findall(commit.message or "")
    return found[-1].strip() if found else ""


def on_target(repo: pygit2.Repository, tip: str, blocker: Issue) -> bool:
    """Whether a blocker no longer holds its dependents back on the target at `tip`: canceled,
    or finalized with its recorded landing in `tip` (finalized without one — by a person, or
    an epic — counts as there: nothing of it is to be waited for)."""
    if blocker.status == "canceled":
        return True
    if blocker.status != "finalized":
        return False
    merged = merged_of(blocker)
    return not merged or contains(repo, tip, merged)


def contains(repo: pygit2.Repository, tip: str, commit: str) -> bool:
    """Whether `commit` is `tip` or one of its ancestors (False when either is not here)."""
    try:
        return commit == tip or repo.descendant_of(tip, commit)
    except (pygit2.GitError, KeyError, ValueError):
        return False   # not fetched here yet


def blockers_off_target(repo: pygit2.Repository, tip: str, blockers: dict[str, Issue | None],
                        landed: Mapping[str, str] | None = None) -> list[str]:
    """The ids of the blockers not on the target at `tip` (unknown ones included). `landed`:
    commits that land blockers not finalized yet (a merge train's cars before the one asking) —
    such a blocker is on the target wherever `tip` holds its commit."""
    landed = landed or {}
    return [i for i, blocker in blockers.items()
            if not (i in landed and contains(repo, tip, landed[i]))
            and (blocker is None or not on_target(repo, tip, blocker))]
