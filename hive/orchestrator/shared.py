"""Shared daemon mode: several machines working one queue through a git remote.

Protocol (docs/ARCHITECTURE.md, "Several machines"):
* `hive/state` is pulled when the remote moves (a fetch every few seconds, backing off to 60 s
  while the remote is unreachable) and pushed after every local change.
* A claim is valid only once it is pushed: the push is the compare-and-swap between machines. A
  claim whose push loses is merged with the remote (the claim already there wins) and, if the
  issue is now someone else's, abandoned before any work starts. While the remote is unreachable
  no new claim is made; agents already working go on, and their merges wait.
* Claims carry `lease_expires`, extended while the agent works; an issue whose lease expired (its
  machine died) is reopened by any other machine.
* Work branches are pushed when done, so any machine — or a person — sees them, and deleted once
  finalized; no machine builds on or merges another's (code lands only from agents run here: a
  dependent on another machine starts once its blocker is finalized and on the fetched target).
  The target branch moves on the remote by a push with a lease on the tip it was replayed onto,
  only once this machine's state is on the remote (no split brain); a push that loses is replayed
  and tested again, and finds an issue already landed (its trailer) instead of landing it twice.
All network work runs in a worker thread with its own repository handles, one operation at a time.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Iterable, Protocol

import pygit2

from hive import git, issues, lifecycle
from hive.errors import HiveError
from hive.lifecycle import TransitionRefused
from hive.orchestrator.orphans import claimed_on, machine_name
from hive.project import Project
from hive.remote import FetchResult, PushResult, Remote
from hive.runtime import Runtime
from hive.state import history, trust
from hive.state.issue_file import Issue
from hive.state.store import Draft
from hive.workspace import landings
from hive.workspace.fastforward import FastForward, fast_forward
from hive.workspace.worktrees import branch_name

SYNC_SECONDS = 2.0
MAX_BACKOFF = 60.0
CLAIM_ROUNDS = 6


class SharedHost(Protocol):
    """What the shared queue needs from the daemon it runs in."""

    @property
    def project(self) -> Project: ...

    @property
    def runtime(self) -> Runtime: ...

    def log(self, message: str) -> None: ...

    def wake_up(self) -> None: ...

    def running_agents(self) -> frozenset[str]:
        """The agents this machine runs now (their leases are renewed, never reclaimed)."""


class SharedQueue:
    def __init__(self, host: SharedHost, remote_name: str, target_branch: str):
        self.host = host
        self.project = Project(host.project.paths)   # handles for the network thread only
        self.remote = Remote(self.project, remote_name)
        self.remote.log = host.log
        self.machine = machine_name(host.project.paths)
        self.target = target_branch
        self.online = True
        self.trouble = ""       # why the last exchange failed: git's words ("" while it works)
        self._announced = True
        self._claims_refused_for = ""   # the trouble last said to keep claims from being made
        self._stopped = False
        self.push_needed = asyncio.Event()
        self._lock = threading.Lock()
        self._pushed_branches: set[str] = set()   # work branches pushed by this process
        self._finalized_branches: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.remote.name

    def worked_here(self, issue: Issue) -> bool:
        """Whether this machine's agent did the issue's work (its claim names this machine; a
        claim made before claims named machines counts as here). Only such work is merged here or
        built on: a local work branch of an issue another machine took over is stale."""
        return claimed_on(issue, self.machine)

    @property
    def target_ref(self) -> str:
        return self.remote.tracking_ref(self.target)

    # -- the sync loop ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="shared-queue")

    async def stop(self) -> None:
        # Python 3.11's asyncio.wait_for can swallow a cancellation that arrives as the awaited
        # event fires: the loop would then go on forever and this stop() never return. The flag
        # ends the loop at its next turn whatever happens to the cancellation.
        self._stopped = True
        self.push_needed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self._exchange, frozenset())  # a last push of what is local

    async def _run(self) -> None:
        delay = SYNC_SECONDS
        pulled = 0.0
        loop = asyncio.get_running_loop()
        while not self._stopped:
            # a round asked for by a local change only pushes (a lost push fetches anyway);
            # a full round — fetch, merge, reclaim, push — runs at least every SYNC_SECONDS
            pull = not self.push_needed.is_set() or loop.time() - pulled >= SYNC_SECONDS
            self.push_needed.clear()
            ours = self.host.running_agents()
            before = self.host.project.store.tip()
            try:
                if pull:
                    pulled = loop.time()
                online = await asyncio.to_thread(self._exchange, ours, pull)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must outlive one bad round
                # An uncaught error would end this task silently: no more pulls or pushes, and
                # `--until-idle` would wait forever for the other machines' state.
                self.host.log(f"warning: sync with {self.name} failed: {type(exc).__name__}: {exc}")
                online = self.online
            if online != self._announced:   # (a failed claim push may have set self.online)
                self.host.log(f"remote {self.name} reachable again: catching up" if online else
                              f"{self.trouble}: working locally, no new claims")
                self.host.runtime.put("remote_state", "online" if online else "offline")
                self._announced = online
            changed = online != self.online or self.host.project.store.tip() != before
            self.online = online
            if changed:
                # only on news: the daemon's loop asks for a push on every wake, so waking it
                # after every round would make fetch → wake → push request → fetch a hot loop
                self.host.wake_up()
            if not online:
                delay = min(MAX_BACKOFF, delay * 2)
                await asyncio.sleep(delay)   # back off: local changes wait for the remote
                continue
            delay = SYNC_SECONDS
            try:
                await asyncio.wait_for(self.push_needed.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass
            if self.push_needed.is_set():
                await asyncio.sleep(0.05)  # let a burst of state changes go out in one push

    def catch_up(self) -> None:
        """Fetch and merge the remote's state, pushing nothing: at start, before recovery, so
        that claims another machine took over meanwhile are seen as theirs (and left alone)."""
        with self._lock:
            try:
                if self._fetched(self.remote.fetch(git.STATE_BRANCH, self.target, work_branches=True)):
                    self.remote.merge_remote_state()
            except trust.Untrusted as exc:
                self.host.log(f"warning: {exc}")

    def local_changed(self) -> None:
        """Ask for a push if `hive/state` has commits that the remote has not seen yet."""
        if self.host.project.store.tip() != self.remote.remote_tip():
            self.push_needed.set()

    def _exchange(self, ours: frozenset[str], pull: bool = True) -> bool:
        """fetch, merge, reclaim expired leases, push (`pull=False`: push only). False when the
        remote is unreachable."""
        with self._lock:
            if pull:
                if not self._fetched(self.remote.fetch(git.STATE_BRANCH, self.target, work_branches=True)):
                    return False
                self.remote.merge_remote_state()
                self._reclaim_expired(ours)
                self.remote.prune_work_branches(self.remote.tracked_work_branches())
            return self._push_state()

    def _fetched(self, result: FetchResult) -> bool:
        """Record why a fetch failed: "unreachable" only for the remote's own errors."""
        if not result.ok:
            self.trouble = (f"cannot fetch from remote {self.name} (a problem on this machine): {result.reason}"
                            if result.local else f"remote {self.name} unreachable: {result.reason}")
        return result.ok

    def _pushed(self, result: PushResult) -> PushResult:
        if result.offline:
            self.trouble = f"remote {self.name} unreachable: {result.message}"
        return result

    def _refused(self, result: PushResult, expected: str | None) -> bool:
        """Whether a rejected push of `hive/state` was refused by the remote itself: its branch is
        still at `expected` (fetched after the push), so no other machine's push won — a lock left
        on the remote, a hook, a protected branch. Taken for a lost race, it was retried as one
        forever ("lost to another machine's claim"); it is trouble to report, in git's words."""
        if self.remote.remote_tip() != expected:
            return False
        self.trouble = (f"remote {self.name} refused the update of {git.STATE_BRANCH} (no other push "
                        f"moved it): {result.reason}")
        return True

    def _push_state(self) -> bool:
        for _ in range(CLAIM_ROUNDS):
            local, remote_tip = self.project.store.tip(), self.remote.remote_tip()
            if local is None or local == remote_tip:
                return True
            if remote_tip and self.project.store.repo.descendant_of(remote_tip, local):
                return True  # nothing of ours to send
            if not self.remote.contains(local, remote_tip):
                self.remote.merge_remote_state()   # never push over commits not merged here
                continue
            result = self._pushed(self.remote.push(git.STATE_REF, git.STATE_BRANCH, remote_tip))
            if result.ok:
                self.remote.track(git.STATE_BRANCH, local)
                return True
            if result.offline or not self._fetched(self.remote.fetch(git.STATE_BRANCH)):
                return False
            if self._refused(result, remote_tip):
                return False
            self.remote.merge_remote_state()
        return True

    def _reclaim_expired(self, ours: frozenset[str]) -> None:
        self.project.update_index()
        lease_seconds = self.project.config.lease_seconds
        for issue in self.project.index.list(["in_progress"]):
            if issue.assignee in ours or not lifecycle.lease_expired(issue, lease_seconds):
                continue
            lease = " ".join(str(issue.extra.get("lease_expires", "")).split())[:40]
            try:
                lifecycle.expire_lease(self.project, issue.id, issue.assignee, lease, lease_seconds)
            except TransitionRefused:
                continue   # the lease was renewed meanwhile
            self.host.log(f"{issue.id} reopened: the lease of {issue.assignee} expired")

    # -- claims -----------------------------------------------------------------------------

    async def claim(self, issue_id: str, agent_id: str, lease_seconds: int) -> bool:
        """Claim `issue_id` for `agent_id` on the remote: True once the claim is pushed.

        The claim commit is built on the local tip and pushed *before* any local ref moves: the
        push is the compare-and-swap between machines. A claim whose push loses is simply dropped
        (it never reaches any branch, so no history ever shows two holders at once); the remote
        is merged in and the claim re-checked against it, and retried while still claimable.
        """
        return await asyncio.to_thread(self._claim, issue_id, agent_id, lease_seconds)

    def claims_trouble_news(self) -> str:
        """Why no claim can be made now — the first time for this trouble, "" after: claims are
        tried again at every round (a refusing remote may take them any moment), and one line
        says why they fail until one succeeds."""
        trouble = self.trouble or "the remote cannot be reached"
        if trouble == self._claims_refused_for:
            return ""
        self._claims_refused_for = trouble
        return trouble

    def _claim(self, issue_id: str, agent_id: str, lease_seconds: int) -> bool:
        try:
            return self._claim_locked(issue_id, agent_id, lease_seconds)
        except trust.Untrusted as exc:   # the remote's state was refused: no claim through it
            self.host.log(f"warning: {exc}")
            return False

    def _claim_locked(self, issue_id: str, agent_id: str, lease_seconds: int) -> bool:
        with self._lock:
            store = self.project.store
            for _ in range(CLAIM_ROUNDS):
                base, remote_tip = store.tip(), self.remote.remote_tip()
                if base is None:
                    return False
                if not self.remote.contains(base, remote_tip):
                    self.remote.merge_remote_state()   # build on what the remote has
                    continue
                with store.draft(base) as draft:
                    claimed = lifecycle.claim(self.project, issue_id, agent_id, lease_seconds=lease_seconds,
                                              machine=self.machine)
                if not claimed:
                    return False   # not claimable (any more) on what this machine knows
                result = self._pushed(self.remote.push(draft.made, git.STATE_BRANCH, remote_tip))
                if result.ok:
                    self.remote.track(git.STATE_BRANCH, draft.made)
                    self._adopt(draft, f"claim {issue_id} for {agent_id}")
                    self._claims_refused_for = ""   # a refusal from now on is news again
                    return True
                if result.offline or not self._fetched(self.remote.fetch(git.STATE_BRANCH)) or \
                        self._refused(result, remote_tip):
                    self.online = False
                    return False
                self.remote.merge_remote_state()
            return False

    def _adopt(self, draft: Draft, summary: str) -> None:
        """Bring a commit already pushed onto the local `hive/state` (moved meanwhile: merged)."""
        if self.project.store.publish(draft, summary):
            self.project.after_write()
        else:
            self.remote.merge_remote_state()

    def request_push(self) -> None:
        self.push_needed.set()

    async def renew_leases(self, working: Iterable[tuple[str, str]], seconds: int) -> None:
        """Renew the leases of the issues (issue id, agent id) this machine's agents still work
        on, once half of one has passed. An issue another machine reopened because its lease
        lapsed while this one was cut off is claimed again for the agent still at work on it
        (pushed as any claim: if another machine claimed it first, that claim stands and the
        worker is stopped as taken over)."""
        horizon = lifecycle.lease_until(seconds // 2)
        for issue_id, agent_id in working:
            issue = self.host.project.index.get(issue_id)
            if issue is not None and issue.status == "open" and not issue.assignee and \
                    await asyncio.to_thread(history.lapsed_while_away, self.project.paths, issue_id, agent_id):
                if await self.claim(issue_id, agent_id, seconds):
                    self.host.log(f"{issue_id} claimed again for {agent_id}, still at work on it: "
                                  f"its lease lapsed while this machine was cut off")
                continue
            if issue is None or issue.assignee != agent_id or str(issue.extra.get("lease_expires", "")) >= horizon:
                continue
            try:
                lifecycle.extend_lease(self.host.project, issue_id, agent_id, seconds)
            except TransitionRefused:
                pass   # not ours any more
            self.push_needed.set()

    # -- branches ---------------------------------------------------------------------------

    async def push_work_branch(self, issue_id: str) -> None:
        branch = branch_name(issue_id)

        def push() -> None:
            with self._lock:  # only the machine that owns the issue pushes its branch: no lease
                if branch not in self._finalized_branches and \
                        self.remote.push(git.branch_ref(branch), branch, None, lease=False).ok:
                    self._pushed_branches.add(branch)

        await asyncio.to_thread(push)

    def fetch_target(self) -> bool:
        with self._lock:
            return self._fetched(self.remote.fetch(self.target))

    def state_out(self) -> bool:
        """Whether this machine's `hive/state` has reached the remote (pushed now if it can):
        only then may anything else be pushed — a machine whose state commits cannot reach the
        remote must not move the remote's target (its finalize would never follow, and another
        machine would land the issue again)."""
        local = self.project.store.tip()   # everything committed here up to now must be out
        if not self.online or not self._push_state():
            return False
        remote_tip = self.remote.remote_tip()
        return local is None or (remote_tip is not None and self.remote.contains(remote_tip, local))

    def publish_target(self, repo: pygit2.Repository, old: str, new: str) -> FastForward:
        """Move the remote target from `old` to `new` (lease), then catch the local one up —
        only while this machine's state reaches the remote (`state_out`)."""
        with self._lock:
            self._record_landing(repo, new)
            if not self.state_out():
                why = self.trouble or f"hive/state does not reach remote {self.name}"
                return FastForward(False, waiting=f"{why}: the merge waits")
            result = self._pushed(self.remote.push(new, self.target, old))
            if result.offline:
                return FastForward(False, waiting=f"{self.trouble}: the merge waits")
            if not result.ok:
                self.remote.fetch(self.target)
                return FastForward(False)
            self.remote.track(self.target, new)
        self.catch_up_local_target(repo)
        return FastForward(True, moved=True)

    def _record_landing(self, repo: pygit2.Repository, new: str) -> None:
        """The landing in the issue's file (`landing`), pushed with hive/state before the target
        moves: a machine that takes the issue over after this one died finds it recorded
        (`landings.landed_commit`), a forged trailer stays unrecorded."""
        issue_id = landings.issue_of_landing(repo[new].peel(pygit2.Commit))
        if not issue_id:
            return
        try:
            issues.update(self.project, issue_id, {landings.LANDING_FIELD: new}, event="landing",
                          summary=f"{issue_id} lands on {self.target} as {new[:10]}")
        except HiveError as exc:   # gone meanwhile: this machine's own record still holds
            self.host.log(f"{issue_id}: landing not recorded on hive/state ({exc})")

    def finalized(self, issue_id: str) -> None:
        """An issue of this machine is finalized: its state goes out, its work branch leaves
        the remote (no one builds on it; `git hive sync --prune` removes any left behind). Run
        in a thread: the push of the state is asked for (`request_push`) on the loop."""
        branch = branch_name(issue_id)
        with self._lock:
            self._finalized_branches.add(branch)   # a push of it still to come is not made
            if self.remote.remote_tip(branch) is not None or branch in self._pushed_branches:
                if self.remote.delete_branches([branch]):
                    self._pushed_branches.discard(branch)

    def catch_up_local_target(self, repo: pygit2.Repository) -> str:
        """Fast-forward the local target to the remote one, sparing a person's checkout."""
        remote_ref = repo.references.get(self.target_ref)
        local_ref = repo.references.get(git.branch_ref(self.target))
        if remote_ref is None:
            return ""
        remote_tip = str(remote_ref.target)
        if local_ref is None:
            repo.references.create(git.branch_ref(self.target), remote_tip)
            return ""
        local_tip = str(local_ref.target)
        if local_tip == remote_tip or not repo.descendant_of(remote_tip, local_tip):
            return ""
        return fast_forward(self.host.project.paths, repo, self.target, local_tip, remote_tip).waiting
