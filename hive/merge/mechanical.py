"""The mechanical tier: replay a work branch onto the target, run the tests, fast-forward — one
branch (`land`), or several queued together as a merge train (`land_train`).

Everything here is deterministic git work: no LLM. The replay (`hive.workspace.replay`) and the
fast-forward (`hive.workspace.fastforward`) are shared git work; this module is the test gate and
the order of the steps.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

import pygit2

from hive import git
from hive.jail import JailSpec, prepare
from hive.jail.environment import jail_environment
from hive.state.issue_file import Issue
from hive.workspace import landings, worktrees
from hive.workspace.fastforward import FastForward, checkout_waiting, fast_forward
from hive.workspace.replay import replay

OUTPUT_LIMIT = 20_000


@dataclass
class TestRun:
    ok: bool
    command: str
    output: str = ""
    timed_out: bool = False


def run_test(command: str, cwd: Path, timeout: float, jail: JailSpec | None = None,
             started: Callable[[int], None] = lambda _: None) -> TestRun:
    """Run a test command in a worktree, in its own process group, killed whole on timeout.
    `started(pid)` is told the group's leader at once (a daemon killed meanwhile leaves it
    behind: the next one ends it before it touches the worktree).

    The command is the agent's as much as the user's (a worker names it in its result), so it
    runs in the worktree's jail with the jail's environment (`sh -c`, never hive's environment);
    unjailed, with the same environment, only with `sandbox = "off"` or where no jail can be built."""
    launch = prepare(["sh", "-c", command], cwd=str(cwd), env=jail_environment(dict(os.environ)),
                     jail=jail, strict=False)
    try:
        proc = launch.popen(cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    except BaseException:
        launch.release()
        raise
    started(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        timed_out = True
    _kill_group(proc.pid)  # anything it left running in the background
    launch.release()
    text = out.decode("utf-8", "replace")
    if len(text) > OUTPUT_LIMIT:
        text = "[…]\n" + text[-OUTPUT_LIMIT:]
    return TestRun(proc.returncode == 0 and not timed_out, command, text, timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Landing:
    status: str            # merged | conflict | tests | waiting
    commit: str = ""       # merged: the commit the target now points at
    detail: str = ""


MAX_TARGET_RACES = 20


Publish = Callable[[pygit2.Repository, str, str], FastForward]


@dataclass(frozen=True)
class Plan:
    """One work branch to land, and what decides whether it may (`hive.merge.lander` makes it)."""
    issue_id: str
    head: str
    base: str                          # where the branch's own commits start (its worker's base)
    agent_test: str                    # the command the issue's agent named: run in its worktree only
    project_test: str                  # the project's `test_command`
    timeout: float
    recorded: str = ""                 # the landing the issue file records (`merged`)
    blockers: Mapping[str, Issue | None] = field(default_factory=dict)
    trust_head: bool = False           # replay from the merge base: the refinery rewrote the branch
    by_person: bool = False            # `git hive finalize`: hive's own files may land too

    @property
    def test_commands(self) -> list[str]:
        """The gate, in order: the agent's own command, then the project's."""
        return [c for c in (self.agent_test, self.project_test) if c]


@dataclass(frozen=True)
class Target:
    """Where a landing goes: the local branch, or (shared mode) the remote's, moved by `publish`."""
    branch: str
    ref: str = ""                      # the ref replayed onto ("": refs/heads/<branch>)
    publish: Publish | None = None     # None: fast-forward the local branch and its checkout


class LandingEvents(Protocol):
    """What the caller hears of a landing while it runs."""

    def candidate(self, commit: str) -> None:
        """The commit about to become the target, recorded before the target moves, so that an
        interrupted merge can tell afterwards whether it landed."""

    def test_started(self, pid: int) -> None:
        """A test command's process group started (a daemon killed meanwhile: the next ends it)."""


class Quiet:
    """No one listening (`git hive finalize`, the bench)."""

    def candidate(self, commit: str) -> None:
        pass

    def test_started(self, pid: int) -> None:
        pass


def land(paths: git.RepoPaths, target: Target, plan: Plan, events: LandingEvents = Quiet(),
         jail: Callable[[Path], JailSpec | None] = lambda _: None) -> Landing:
    """The whole mechanical tier for one branch: replay, test, fast-forward; the tests run in
    `jail(worktree)`. Work that changes hive's own files (`needs_person`) lands only
    `plan.by_person`: otherwise it waits.

    Landing is idempotent and in order, on every target tip it tries: an issue whose recorded
    landing is already on the target (this machine's, before a crash, or the `merged` commit
    another machine finalized) is only finalized; one whose blockers are not all on the target
    waits for them (`hive.workspace.landings`).
    """
    repo = worktrees.open_repo(paths)
    local = target.publish is None
    target_ref = target.ref or git.branch_ref(target.branch)
    publish = target.publish or (lambda repo_, old, new: fast_forward(paths, repo_, target.branch, old, new))
    issue_id, head, base, trust_head = plan.issue_id, plan.head, plan.base, plan.trust_head
    for _ in range(MAX_TARGET_RACES):
        ref = repo.references.get(target_ref)
        if ref is None:
            return Landing("waiting", detail=f"target branch {target.branch} does not exist")
        tip = str(ref.target)
        git.fetch_missing_objects(paths, [tip])   # a partial clone's target, moved by a fetch
        landed = landings.landed_commit(repo, tip, issue_id, plan.recorded)
        if landed:
            return Landing("merged", commit=landed, detail=f"already on {target.branch}")
        late = landings.blockers_off_target(repo, tip, dict(plan.blockers))
        if late:
            return Landing("waiting", detail=f"waits for its blocker(s) {', '.join(late)} to be on {target.branch}")
        if head == tip:
            candidate = head
        else:
            replayed = replay(repo, head, _replay_start(repo, head, base, tip, trust_head), tip, issue_id)
            if not replayed.ok:
                return Landing("conflict", detail=replayed.detail)
            candidate = replayed.head
        held = [] if plan.by_person else needs_person(repo, paths, tip, candidate)
        if held:
            return Landing("waiting", detail=f"its work changes {', '.join(held)}: it waits for a person "
                                              f"(`git hive finalize {issue_id}` lands it)")
        if local and plan.test_commands:
            # a person's uncommitted change in the way: wait before the tests, not after them
            # (a waiting entry is retried on every wake; its test suite must not run each time).
            # Without tests the fast-forward's own check comes at once: one `git status` is enough.
            waiting = checkout_waiting(paths, repo, target.branch, tip, candidate)
            if waiting:
                return Landing("waiting", detail=waiting)
        if plan.test_commands:
            # the tests run in the worker's worktree, on exactly the candidate (what was left
            # there uncommitted kept aside); without tests nothing reads that worktree again
            # (finalize removes it), so it is not rewritten for nothing
            worktrees.sync_worktree(paths, issue_id, candidate)
        worktree = worktrees.worktree_path(paths, issue_id)
        for command in plan.test_commands:
            result = run_test(command, worktree, plan.timeout, jail(worktree), events.test_started)
            if not result.ok:
                why = "timed out" if result.timed_out else "failed"
                return Landing("tests", detail=f"`{command}` {why}:\n{result.output}")
        landings.record_landing(repo, issue_id, candidate)   # a landing counts only as recorded
        events.candidate(candidate)
        moved = publish(repo, tip, candidate)
        if moved.ok:
            return Landing("merged", commit=candidate)
        if moved.waiting:
            return Landing("waiting", detail=moved.waiting)
        head, base, trust_head = candidate, tip, False  # the target moved meanwhile: go again
    return Landing("waiting", detail="the target branch kept moving")


def _replay_start(repo: pygit2.Repository, head: str, base: str, onto: str, trust_head: bool) -> str:
    """Where the branch's own commits start: `onto` when the branch is built on it already, else
    the worker's base (the merge base when the refinery rewrote the branch, or the base is gone)."""
    start = onto if repo.descendant_of(head, onto) else "" if trust_head else base
    if not start or not _is_commit(repo, start):
        merge_base = repo.merge_base(head, onto)
        start = str(merge_base) if merge_base else ""
    return start


MAX_TRAIN = 8   # branches landed together at most


def land_train(paths: git.RepoPaths, branch: str, plans: list[Plan], events: Sequence[LandingEvents],
               jail: Callable[[Path], JailSpec | None] = lambda _: None) -> Train:
    """Several done branches landed on the local target at once — a merge train: each replayed
    onto the one before, the tests run once on the last candidate (which holds them all), one
    fast-forward. Each keeps its own landing commit (its last replayed one, with its trailer);
    the commits between the target's old and new tip were tested together, not one by one.

    The train takes `plans` in order (`events[i]` hears of `plans[i]`), leaving out each that
    `land` would not land now: landed already, a blocker neither on the target nor in the train
    before it, a file only a person lands, or a conflict with the ones before it — each of those
    lands alone (`land`), which says why. Returns the landings by issue id — or none, and nothing
    moved, when fewer than two make the train, or (`Train.stopped` says which) its tests fail, a
    person's checkout is in the way or the target moved: then each lands alone.

    Each agent's own test command runs in its own worktree (DESIGN §7), the project's once, in the
    last one's; the worktrees are at the last candidate for it and back at their heads after a
    failure; the work branches are not moved (retiring them keeps their heads)."""
    repo = worktrees.open_repo(paths)
    ref = repo.references.get(git.branch_ref(branch))
    if ref is None:
        return Train()
    tip = str(ref.target)
    git.fetch_missing_objects(paths, [tip])
    cars = _coupled(repo, paths, tip, list(zip(plans, events))[:MAX_TRAIN])
    if len(cars) < 2:
        return Train()
    last = cars[-1].candidate
    if any(car.plan.test_commands for car in cars):
        if checkout_waiting(paths, repo, branch, tip, last):
            return Train(stopped=f"a person's checkout of {branch} is in the way")
        failed = _train_fails(paths, cars, jail)
        if failed:
            return Train(stopped=f"`{failed}` failed on all of them")
    for car in cars:
        landings.record_landing(repo, car.plan.issue_id, car.candidate)   # a landing counts only as recorded
        car.heard.candidate(car.candidate)
    moved = fast_forward(paths, repo, branch, tip, last)
    if not moved.ok:
        return Train(stopped=moved.waiting or f"{branch} moved meanwhile")
    return Train({car.plan.issue_id: Landing("merged", commit=car.candidate) for car in cars})


@dataclass(frozen=True)
class Train:
    """What `land_train` did: the landings by issue id (none: nothing moved) and, when a train of
    two or more did not go, why."""
    landed: dict[str, Landing] = field(default_factory=dict)
    stopped: str = ""


@dataclass(frozen=True)
class _Car:
    """One branch of a merge train: its plan, who hears of it, its candidate on the one before."""
    plan: Plan
    heard: LandingEvents
    candidate: str


def _coupled(repo: pygit2.Repository, paths: git.RepoPaths, tip: str,
             plans: list[tuple[Plan, LandingEvents]]) -> list[_Car]:
    """The cars of the train: each plan that `land` would land now, replayed onto the one before
    — a blocker among those before counts as landed (at its candidate: the train lands all or none)."""
    cars: list[_Car] = []
    at = tip
    for plan, heard in plans:
        landed_before = {car.plan.issue_id: car.candidate for car in cars}
        if (plan.by_person or plan.head == at or landings.landed_commit(repo, tip, plan.issue_id, plan.recorded)
                or landings.blockers_off_target(repo, at, dict(plan.blockers), landed_before)):
            continue
        replayed = replay(repo, plan.head, _replay_start(repo, plan.head, plan.base, at, plan.trust_head),
                          at, plan.issue_id)
        if not replayed.ok or needs_person(repo, paths, at, replayed.head):
            continue
        cars.append(_Car(plan, heard, replayed.head))
        at = replayed.head
    return cars


def _train_fails(paths: git.RepoPaths, cars: list[_Car], jail: Callable[[Path], JailSpec | None]) -> str:
    """The train's tests on its last candidate: each agent's command in its own worktree, then
    each distinct project command once, in the last car's worktree. The first that fails ("" when
    none does), after the worktrees were put back."""
    last = cars[-1].candidate
    runs = [(car, car.plan.agent_test) for car in cars if car.plan.agent_test]
    runs += [(cars[-1], command) for command in dict.fromkeys(car.plan.project_test for car in cars
                                                                if car.plan.project_test)]
    moved: list[_Car] = []
    for car, command in runs:
        worktree = worktrees.worktree_path(paths, car.plan.issue_id)
        if car not in moved:
            worktrees.check_out_for_tests(paths, car.plan.issue_id, last)
            moved.append(car)
        if not run_test(command, worktree, car.plan.timeout, jail(worktree), car.heard.test_started).ok:
            for tested in moved:
                worktrees.check_out_for_tests(paths, tested.plan.issue_id, tested.plan.head, also_held=last)
            return command
    return ""


PROTECTED_FILES = (".hive.toml",)   # what hive reads as settings: an agent's change of it is not a person's


def needs_person(repo: pygit2.Repository, paths: git.RepoPaths, old: str, new: str) -> list[str]:
    """The paths between `old` and `new` that only a person may land: `.hive.toml` (agents
    write the target: DESIGN §7) and the hooks folder git runs, when it is in the worktree."""
    folders = [h + "/" for h in [_tracked_hooks(repo, paths)] if h]
    diff = repo[old].peel(pygit2.Tree).diff_to_tree(repo[new].peel(pygit2.Tree))
    touched = {path for delta in diff.deltas for path in (delta.old_file.path, delta.new_file.path)}
    return sorted(p for p in touched if p in PROTECTED_FILES or any(p.startswith(f) for f in folders))


def _tracked_hooks(repo: pygit2.Repository, paths: git.RepoPaths) -> str:
    """The hooks folder git runs, relative to the main worktree when it lies inside it ('' otherwise)."""
    try:
        configured = repo.config["core.hooksPath"]
    except KeyError:
        return ""
    return git.worktree_hooks_folder(paths, configured)


def _is_commit(repo: pygit2.Repository, oid: str) -> bool:
    try:
        return isinstance(repo[oid], pygit2.Commit)
    except (KeyError, ValueError):
        return False


def diffstat(paths: git.RepoPaths, issue_id: str, target: str) -> tuple[int, int, int, int] | None:
    """(commits, files, insertions, deletions) of the issue's work branch against `target`; None
    when the branch or the target is gone."""
    repo = worktrees.open_repo(paths)
    head = worktrees.head_of(paths, issue_id)
    tip = repo.references.get(git.branch_ref(target))
    if head is None or tip is None:
        return None
    base = repo.merge_base(head, tip.target)
    walker = repo.walk(head)
    if base:
        walker.hide(base)
    commits = sum(1 for _ in walker)
    work = repo[head].peel(pygit2.Tree)
    diff = repo[base].peel(pygit2.Tree).diff_to_tree(work) if base else work.diff_to_tree(swap=True)
    stats = diff.stats
    return commits, stats.files_changed, stats.insertions, stats.deletions
