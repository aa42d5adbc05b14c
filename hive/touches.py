"""The touches rule (DESIGN §3): issues that touch the same files do not run at once.

Two agents changing the same file end in a conflict at the merge, handed to the refinery (an LLM
session: the most expensive call hive makes) or worse. So among ready issues, one whose declared
`touches` meet the files of an issue that is *busy* — `in_progress` (an agent works on it) or
`done` (its work waits to land) — waits while another ready issue can use the agent. "The files"
of a busy issue are its declared globs and the files its work has changed so far, as hive sees
them here (`hive/workspace/changes.py`). When nothing else is ready the issue still waits for
the landing; only when the overlap is declared against declared (a guess against a guess) and
`touches_mode = "advise"` is it started anyway. An issue that declares no `touches` never waits.

`touches` come from `hive/state`, which may be anyone's: they are only compared as strings
(`hive/state/globs.py`), and all they can do is hold an issue back; nothing here starts anything.

The daemon picks with a `Picker` (`order`, then `started` for each issue it claims); `git hive
list --ready` shows each issue's `Wait` (`waits`): the same rule, written once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable, Iterator

from hive import git
from hive.project import Project
from hive.state import globs
from hive.state.issue_file import Issue

BUSY_STATUSES = ("in_progress", "done")
_WILD = frozenset("*?[")
MAX_WALK = 1000   # blockers followed back from one issue


@dataclass
class Busy:
    """An issue whose work is under way or waits to land: the globs it declared and, read only
    when asked and then kept, the files its work changed so far."""

    issue_id: str
    declared: tuple[str, ...]
    read_changed: Callable[[], list[str]] | None = None
    _changed: list[str] | None = field(default=None, repr=False)

    def changed(self) -> list[str]:
        if self._changed is None:
            self._changed = self.read_changed() if self.read_changed is not None else []
        return self._changed


@dataclass(frozen=True)
class Wait:
    """Why an issue waits: `what` (a file, or a glob) is also touched by the busy issue `like`."""

    like: str
    what: str
    declared_only: bool   # declared globs against declared globs: `advise` may start it anyway

    def __str__(self) -> str:
        return f"touches {self.what} like {self.like}"


def wait_of(issue: Issue, busy: Iterable[Busy], *, files_first: bool = True,
            behind: frozenset[str] = frozenset()) -> Wait | None:
    """Why `issue` should not start beside `busy`: a file their work changed that its globs
    cover, else one of their globs that meets one of its own; None if nothing does. Without
    `files_first` a declared overlap is answer enough (no worktree is read for it). `behind`:
    the issue's blockers, whose unmerged work it starts from (`worktrees.compute_base`): they
    cannot conflict with it."""
    if not issue.touches:
        return None
    others = [other for other in busy if other.issue_id != issue.id and other.issue_id not in behind]
    declared = next((w for w in (_declared_wait(issue.touches, other) for other in others) if w), None)
    if declared is not None and not files_first:
        return declared
    for other in others:
        for path in other.changed():
            if any(globs.matches(mine, path) for mine in issue.touches):
                return Wait(other.issue_id, path, declared_only=False)
    return declared


def _declared_wait(touches: list[str], other: Busy) -> Wait | None:
    for theirs in other.declared:
        for mine in touches:
            if globs.overlap(mine, theirs):
                return Wait(other.issue_id, theirs if _names_a_file(theirs) else mine, declared_only=True)
    return None


def _names_a_file(glob: str) -> bool:
    return not glob.endswith("/") and not _WILD & set(glob)


ChangedFiles = Callable[[str], list[str]]   # an issue id -> the files its work changed so far


def _changed_files(paths: git.RepoPaths, issue_id: str, target_ref: str) -> list[str]:
    """`changes.changed_files`, loaded when first read (pygit2): `git hive list --ready` reads
    none unless a ready issue declares `touches` while another is busy."""
    from hive.workspace import changes

    return changes.changed_files(paths, issue_id, target_ref)


def busy_work(project: Project, target_ref: str, changed: ChangedFiles | None = None) -> list[Busy]:
    """Every busy issue of the index, with the files its work here has changed (read lazily,
    by `changed`: `changes.changed_files` unless given)."""
    read = changed or partial(_changed_files, project.paths, target_ref=target_ref)
    return [Busy(issue.id, tuple(issue.touches), partial(read, issue.id))
            for issue in project.index.list(BUSY_STATUSES, with_body=False)]


class RecentChanges:
    """`changes.changed_files`, read at most once per `max_age` seconds per issue: a daemon wakes
    many times a second while agents work, and each read stats every file of a worktree."""

    def __init__(self, paths: git.RepoPaths, target_ref: Callable[[], str], max_age: float = 1.0):
        self.paths, self.target_ref, self.max_age = paths, target_ref, max_age
        self._seen: dict[str, tuple[float, list[str]]] = {}

    def __call__(self, issue_id: str) -> list[str]:
        now = time.monotonic()
        seen = self._seen.get(issue_id)
        if seen is None or now - seen[0] > self.max_age:
            seen = self._seen[issue_id] = (now, _changed_files(self.paths, issue_id, self.target_ref()))
        return seen[1]

    def forget(self, keep: Iterable[str]) -> None:
        """Drop what is kept of issues no longer busy."""
        kept = set(keep)
        for issue_id in [i for i in self._seen if i not in kept]:
            del self._seen[issue_id]


def target_ref_of(project: Project) -> str:
    return git.branch_ref(project.config.target_branch)


def waits(project: Project, ready: list[Issue], target_ref: str = "") -> dict[str, Wait]:
    """The issues of `ready` that wait now, and why (what `git hive list --ready` shows)."""
    if not any(issue.touches for issue in ready):
        return {}
    picker = Picker(lambda: busy_work(project, target_ref or target_ref_of(project)),
                    blockers_of=project.index.blockers_of)
    found = {issue.id: picker.wait_of(issue, files_first=True) for issue in ready}
    return {issue_id: wait for issue_id, wait in found.items() if wait is not None}


class Picker:
    """The order a daemon tries ready issues in under the rule: `order(candidates)` yields those
    that may start, re-checked as each one it claims (`started`) becomes busy too."""

    def __init__(self, busy: Callable[[], list[Busy]], mode: str = "wait",
                 blockers_of: Callable[[str], list[str]] | None = None):
        self._read_busy = busy
        self._blockers_of = blockers_of
        self._busy: list[Busy] | None = None
        self.mode = mode
        self.held: dict[str, Wait] = {}   # the issues held back by the last `order`, and why

    @property
    def busy(self) -> list[Busy]:
        if self._busy is None:
            self._busy = self._read_busy()
        return self._busy

    def wait_of(self, issue: Issue, files_first: bool | None = None) -> Wait | None:
        if not issue.touches:
            return None
        if files_first is None:   # advise may start one held by declared globs only: it needs the files
            files_first = self.mode == "advise"
        return wait_of(issue, self.busy, files_first=files_first, behind=self._behind(issue))

    def _behind(self, issue: Issue) -> frozenset[str]:
        """Every blocker of `issue`, transitively (an issue's work holds its blockers' work)."""
        if self._blockers_of is None or not issue.depends_on:
            return frozenset(issue.depends_on)
        seen: set[str] = set()
        todo = list(issue.depends_on)
        while todo and len(seen) < MAX_WALK:
            blocker = todo.pop()
            if blocker not in seen:
                seen.add(blocker)
                todo.extend(self._blockers_of(blocker))
        return frozenset(seen)

    def order(self, candidates: Iterable[Issue]) -> Iterator[Issue]:
        """The issues that may start, in the candidates' order; then, with `advise`, those held
        by declared globs only (nothing else was left to start)."""
        self.held = {}
        held: list[Issue] = []
        for issue in candidates:
            wait = self.wait_of(issue)
            if wait is None:
                yield issue
            else:
                self.held[issue.id] = wait
                held.append(issue)
        if self.mode != "advise":
            return
        for issue in held:
            wait = self.wait_of(issue)
            if wait is None or wait.declared_only:
                self.held.pop(issue.id, None)
                yield issue

    def started(self, issue: Issue) -> None:
        """`issue` was claimed: it is busy from now on (nothing changed yet)."""
        self.busy.append(Busy(issue.id, tuple(issue.touches)))
