"""Which issues are on the target branch: the `Hive-Issue` trailer of a landing, read and written.

Every landing replays the work's own commits onto the target (`hive.workspace.replay`); the last
one carries `Hive-Issue: <id>` (any such line an agent wrote itself is dropped, so an agent cannot
make another issue look landed). That makes landing idempotent across machines and restarts: the
merge step looks for the trailer on the target's first-parent history first and finalizes
instead of landing twice (`landed_commit`). A finalized issue records its landed commit in its
file (`merged`), so whether a blocker is on a given target tip is one ancestry check
(`blockers_off_target`): a dependent neither starts from nor lands on a target without it.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

import pygit2

from hive.state.issue_file import Issue

ISSUE_TRAILER = "Hive-Issue"
MERGED_FIELD = "merged"          # the landed commit, in a finalized issue's file
# a landing is never older than its issue; commit clocks of other machines may be off by this much
CLOCK_SKEW_SECONDS = 24 * 3600
MAX_WALK = 200_000

_TRAILER_LINE = re.compile(rf"^{ISSUE_TRAILER}:.*$\n?", re.MULTILINE | re.IGNORECASE)
_TRAILER_ID = re.compile(rf"^{ISSUE_TRAILER}: (.+)$", re.MULTILINE)   # the lines `carries` matches
_OID = re.compile(r"\A[0-9a-f]{40}\Z")


def landing_message(message: str, issue_id: str, last: bool) -> str:
    """A replayed commit's message: the agent's, without `Hive-Issue` lines; the last commit of
    a landing ends with the issue's trailer."""
    text = _TRAILER_LINE.sub("", message).rstrip("\n")
    if not last:
        return text + "\n"
    return f"{text}\n\n{ISSUE_TRAILER}: {issue_id}\n"


def carries(commit: pygit2.Commit, issue_id: str) -> bool:
    return f"\n{ISSUE_TRAILER}: {issue_id}\n" in "\n" + (commit.message or "") + "\n"


def landed_commit(repo: pygit2.Repository, tip: str, issue_id: str, created: str = "") -> str:
    """The commit of `tip`'s first-parent history that landed `issue_id` ('' if none). The walk
    stops at commits older than the issue (`created`, less the clock skew allowed)."""
    since = _epoch(created) - CLOCK_SKEW_SECONDS if created else 0.0
    return _landings_on(repo, tip, since).get(issue_id, "")


@dataclass(frozen=True)
class _Scan:
    landed: dict[str, str]   # issue id -> the newest first-parent commit carrying its trailer
    since: float             # the walk went down to the first commit older than this


_SCANS: OrderedDict[tuple[str, str], _Scan] = OrderedDict()
_SCANS_LOCK = threading.Lock()
MAX_SCANS = 32


def _landings_on(repo: pygit2.Repository, tip: str, since: float) -> dict[str, str]:
    """The landings on `tip`'s first-parent history down to `since`. Every merge step asks this
    of a target that moved by a commit or two since it last asked, so a scan is kept per tip
    (commits never change) and the next one walks only down to a tip already scanned."""
    def known(commit_id: str) -> _Scan | None:
        with _SCANS_LOCK:
            scan = _SCANS.get((repo.path, commit_id))
            if scan is not None and scan.since <= since:
                _SCANS.move_to_end((repo.path, commit_id))
                return scan
            return None

    cached = known(tip)
    if cached is not None:
        return cached.landed
    landed: dict[str, str] = {}
    reached = since
    walker = repo.walk(tip, pygit2.GIT_SORT_NONE)
    walker.simplify_first_parent()
    for count, commit in enumerate(walker):
        if commit.commit_time < since or count >= MAX_WALK:
            break
        below = known(str(commit.id)) if count else None
        if below is not None:
            landed.update((k, v) for k, v in below.landed.items() if k not in landed)
            reached = below.since
            break
        for issue_id in _TRAILER_ID.findall(commit.message or ""):
            landed.setdefault(issue_id, str(commit.id))
    with _SCANS_LOCK:
        _SCANS[(repo.path, tip)] = _Scan(landed, reached)
        while len(_SCANS) > MAX_SCANS:
            _SCANS.popitem(last=False)
    return landed


def on_target(repo: pygit2.Repository, tip: str, blocker: Issue) -> bool:
    """Whether a blocker no longer holds its dependents back on the target at `tip`: canceled,
    or finalized with its recorded landing in `tip` (finalized without one — by a person, or
    an epic — counts as there: nothing of it is to be waited for)."""
    if blocker.status == "canceled":
        return True
    if blocker.status != "finalized":
        return False
    merged = str(blocker.extra.get(MERGED_FIELD, ""))
    if not _OID.match(merged):
        return True
    try:
        return merged == tip or repo.descendant_of(tip, merged)
    except (pygit2.GitError, KeyError, ValueError):
        return False   # not fetched here yet


def blockers_off_target(repo: pygit2.Repository, tip: str, blockers: dict[str, Issue | None]) -> list[str]:
    """The ids of the blockers not on the target at `tip` (unknown ones included)."""
    return [i for i, blocker in blockers.items() if blocker is None or not on_target(repo, tip, blocker)]


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
