"""The merge pipeline: done → finalized. One `MergeProcessor` per project, entries in order.

The queue is durable (a table in runtime.db), so a restarted daemon finishes what it started: the
replayed commit is recorded before the target moves, and an entry whose recorded commit is already
in the target is finalized without merging again — the target never gets an issue twice.

Per entry: mechanical tier (replay onto the target, the worker's then the project's tests,
fast-forward; fresh entries queued together land as one merge train, `mechanical.land_train`:
tested once, one fast-forward — one by one when the train does not make it); on a conflict or a
failing test, the refinery; its `merged` is verified by hive before the fast-forward, `rejected`
reopens the issue with the rejection as a note (counting against the retry budget),
`needs_human` escalates and keeps the worktree.
No fixed sleeps: an entry starts the moment it is queued; a waiting entry (a person's dirty
checkout of the target) is retried when anything wakes the daemon.
"""

from __future__ import annotations

import asyncio
import queue
from typing import Any, Callable

import pygit2

from hive import git, lifecycle
from hive.backends.base import Usage
from hive.lifecycle import TransitionRefused
from hive.merge import mechanical
from hive.merge.host import MergeHost
from hive.merge.lander import Lander, done_base
from hive.merge.mechanical import Landing
from hive.merge.refinery import Refinery
from hive.runtime import handover, process_start_time
from hive.runtime.merge_queue import Entry
from hive.state import history, trust
from hive.state.issue_file import TERMINAL_STATUSES, Issue
from hive.workspace import attempts, landings, worktrees


# `detail` of an entry while the refinery works on it (set before its turn, replaced after it)
REFINERY_IN_FLIGHT = ("refinery: conflict", "refinery: tests")
MAX_YIELD_TO_AGENTS = 0.5   # seconds a merge waits for agents being started, at most
MAX_MACHINE_CHARS = 120     # of a claim's machine name (from hive/state) in one line of the log
LOOK_AGAIN_SECONDS = 1.0    # after a failed look around (the target caught up, done issues queued)


def attach(host: MergeHost) -> "MergeProcessor | None":
    """The merge pipeline for `host` (auto mode) — manual mode leaves done issues to people."""
    from hive.backends.registry import backend_for_role

    config = host.config
    if config.merge_mode != "auto":
        return None
    paths = host.project.paths
    if config.backend_for("refinery") == config.backend_for("worker"):
        backend = host.backend
    else:
        backend = backend_for_role(config, "refinery", str(paths.hive_dir), str(paths.main_worktree))
    return MergeProcessor(host, Refinery(host, backend))


class MergeProcessor:
    def __init__(self, host: MergeHost, refinery: Refinery):
        self.host = host
        self.refinery = refinery
        self.project = host.project
        self.config = host.config
        self.runtime = host.runtime
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._told: dict[str, str] = {}   # the last waiting reason logged, per issue
        self._look_failed = ""            # the last failed look around's error, logged
        self._alone: set[str] = set()     # issues that land one at a time (their train did not make it)
        self.merged = 0

    # -- the queue ------------------------------------------------------------------------------

    def enqueue(self, issue_id: str, base_commit: str, test_command: str = "") -> None:
        if self.runtime.merge_queue.add(issue_id, worktrees.branch_name(issue_id), base_commit, test_command):
            self.host.log(f"{issue_id} queued for merge")
        self._wake.set()

    def _entry_of(self, issue_id: str) -> Entry | None:
        return self.runtime.merge_queue.get(issue_id)

    def entries(self) -> list[Entry]:
        return self.runtime.merge_queue.entries()

    def _update(self, entry: Entry, **fields: Any) -> None:
        self.runtime.merge_queue.update(entry, **fields)

    def _drop(self, entry: Entry) -> None:
        self.runtime.merge_queue.remove(entry)
        self.runtime.forget_handoff(entry.issue_id)
        self._alone.discard(entry.issue_id)

    def idle(self) -> bool:
        """Nothing to merge right now (entries waiting on a person do not count)."""
        return not self._busy and all(e.state == "waiting" for e in self.entries())

    def waiting(self) -> list[Entry]:
        """The entries that wait for a person (a dirty checkout of the target, an unreachable remote)."""
        return [e for e in self.entries() if e.state == "waiting"]

    def scan(self) -> None:
        """Queue every done issue whose branch exists but is not queued (a person's, or after a
        restart), whose agent is not running, and whose hand-off this machine recorded
        (`Runtime.record_handoff`) — in shared
        mode only work done here; retire the work of issues finished without it."""
        queued = {e.issue_id for e in self.entries()}
        shared = self.host.shared_target
        handed_off = self.runtime.handoffs()   # a `done` that came with hive/state is not one
        for issue in self.project.index.list(["done"]):
            # not while its agent's session closes: it hands the work over once its jail is gone
            if issue.id not in queued and issue.id in handed_off and not self.host.worker_running(issue.id) \
                    and worktrees.head_of(self.project.paths, issue.id) is not None \
                    and (shared is None or shared.worked_here(issue)):
                self.enqueue(issue.id, done_base(self.project, issue.id), handed_off[issue.id])
        self.retire_finished(queued)

    def retire_finished(self, queued: set[str] | None = None) -> None:
        """Retire the worktree and branch of every issue finished without this machine's merge
        (another machine took it over and landed its own agent's work, a person finalized or
        canceled it) — unless queued here or under a running agent: nothing will come back to
        them (their heads are kept, `worktrees.retire`). A daemon ending idle calls it last, as the
        state that finished them may have come with the very wake-up that found it idle."""
        if queued is None:
            queued = {e.issue_id for e in self.entries()}
        for issue_id in worktrees.leftover_worktrees(self.project.paths):
            leftover = self.project.index.get(issue_id)
            if leftover is not None and leftover.status in TERMINAL_STATUSES and issue_id not in queued \
                    and not self.host.worker_running(issue_id):
                worktrees.retire(self.project.paths, issue_id, self.config.target_branch)

    # -- events ---------------------------------------------------------------------------------

    def poke(self) -> None:
        self._wake.set()

    def spent(self) -> Usage:
        """What the refinery spent in this process."""
        return self.refinery.spent

    def refinery_busy(self) -> bool:
        return bool(self.refinery.issue_id)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        for entry in self.entries():
            if entry.detail in REFINERY_IN_FLIGHT and entry.refinery_attempts:
                # the daemon ended during that refinery turn: the refinery did not fail, it was
                # cut short — the turn is done again without counting against the entry
                self._update(entry, refinery_attempts=entry.refinery_attempts - 1, detail="")
            if entry.state != "queued":
                self._update(entry, state="queued")
        self.scan()
        self._task = asyncio.create_task(self._run(), name="merge-processor")

    async def stop(self) -> None:
        await self.refinery.abort()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.refinery.close()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                if self.host.shared_target is not None:
                    await asyncio.to_thread(self._catch_up_target)
                self.scan()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - it ended this task: the queue stood still for good
                if self._look_failed != str(exc):   # said once, not on every retry
                    self._look_failed = str(exc)
                    self.host.log(f"warning: the merge queue's look around failed: {exc}")
                asyncio.get_running_loop().call_later(LOOK_AGAIN_SECONDS, self._wake.set)
            progressed = False
            for listed in self.entries():
                entry = self._entry_of(listed.issue_id)   # as it is now: a train before it may have taken it
                if entry is None:
                    continue
                before = (entry.state, entry.detail)
                self._busy = True
                moved = False
                try:
                    moved = await self._process(entry)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one bad entry must not stop the pipeline
                    if entry.detail != f"error: {exc}":
                        self.host.log(f"{entry.issue_id} merge error: {exc}")
                    self._update(entry, state="waiting", detail=f"error: {exc}")
                finally:
                    self._busy = False
                progressed |= moved
                after = self._entry_of(entry.issue_id)
                # Wake the daemon only on a change: a waiting entry retried with the same outcome
                # must not wake it, or daemon → poke → retry → wake becomes a hot loop (and
                # `--until-idle` never sees the pipeline idle).
                if moved or after is None or (after.state, after.detail) != before:
                    self.host.wake_up()
            if not progressed:
                await self._wake.wait()

    def _catch_up_target(self) -> None:
        shared = self.host.shared_target
        assert shared is not None
        waiting = shared.catch_up_local_target(worktrees.open_repo(self.project.paths))
        if waiting and self.runtime.get("target_waiting") != waiting:
            self.host.log(waiting)
        self.runtime.put("target_waiting", waiting)

    # -- one entry ------------------------------------------------------------------------------

    async def _process(self, entry: Entry) -> bool:
        """Advance one entry; True if it left the queue or changed state for good."""
        self.project.update_index()
        issue = self.project.index.get(entry.issue_id)
        if issue is None or issue.status != "done":
            self._drop(entry)
            await self._retire_if_finished(entry.issue_id)
            return True
        paths, target = self.project.paths, self.config.target_branch
        shared = self.host.shared_target
        if shared is not None and not shared.worked_here(issue):
            # queued before this machine lost the issue (its lease expired while it was down):
            # the `done` is another machine's agent's, whose merge lands it; this copy is stale
            self._drop(entry)
            machine = trust.printable(str(issue.extra.get("machine")))[:MAX_MACHINE_CHARS]   # from hive/state
            self.host.log(f"{issue.id} left the merge queue: done by an agent of {machine}, whose merge lands it")
            await asyncio.to_thread(worktrees.retire, paths, issue.id, target, self.may_spare(issue.id))
            return True
        if shared is not None and not await asyncio.to_thread(shared.fetch_target):
            self._update(entry, state="waiting", detail=f"{shared.trouble}: the merge waits")
            return False
        repo = worktrees.open_repo(paths)
        target_ref = repo.references.get(shared.target_ref if shared is not None else git.branch_ref(target))
        if target_ref is None:
            self._update(entry, state="waiting", detail=f"target branch {target} does not exist")
            return False
        if entry.merged_commit and landings.contains(repo, str(target_ref.target), entry.merged_commit):
            await self._finalize_all([(issue, entry, entry.merged_commit)])
            return True
        landed = landings.landed_commit(repo, str(target_ref.target), issue.id, landings.recorded_of(issue))
        if landed:   # landed before (another machine, or before a crash): finalized, never landed twice
            self.host.log(f"{issue.id} already on {target} ({landed[:10]}): finalized, not landed again")
            await self._finalize_all([(issue, entry, landed)])
            return True
        head = worktrees.head_of(paths, entry.issue_id)
        if head is None:
            self._fail(issue, entry, f"branch {entry.branch} is gone")
            return True
        await self.host.agents_started(MAX_YIELD_TO_AGENTS)   # agents being started go first
        behind = self._train_behind(entry) if shared is None else []
        if behind and await self._land_train([(issue, entry, head), *behind]):
            return True
        self._update(entry, state="merging", detail="")
        return await self._merge(issue, entry, repo, head)

    def _train_behind(self, first: Entry) -> list[tuple[Issue, Entry, str]]:
        """The queued entries after `first` that may land in one train with it (`land_train`)."""
        listed = self.entries()
        order = [e.issue_id for e in listed]
        if not self._may_ride(first) or first.issue_id not in order:
            return []
        behind: list[tuple[Issue, Entry, str]] = []
        for entry in listed[order.index(first.issue_id) + 1:]:
            if len(behind) + 1 == mechanical.MAX_TRAIN:
                break
            if entry.state != "queued" or not self._may_ride(entry):
                continue
            issue = self.project.index.get(entry.issue_id)
            head = worktrees.head_of(self.project.paths, entry.issue_id)
            if issue is not None and issue.status == "done" and head is not None:
                behind.append((issue, entry, head))
        return behind

    def _may_ride(self, entry: Entry) -> bool:
        """A fresh entry: no refinery turn, no landing recorded, not known to land alone."""
        return not entry.refinery_attempts and not entry.merged_commit and entry.issue_id not in self._alone

    async def _land_train(self, cars: list[tuple[Issue, Entry, str]]) -> bool:
        """Land `cars` together (`Lander.land_train`) and finalize those that landed; whether the
        first did (if not, it lands alone at once, which says why). When the train did not make
        it, nothing landed and each of them lands alone from then on."""
        lander = Lander(self.project)
        plans = [lander.plan(issue, head, entry.base_commit, entry.test_command) for issue, entry, head in cars]
        events = [_EntryEvents(self, entry) for _, entry, _ in cars]
        paths = self.project.paths
        for _, entry, _ in cars:
            self._update(entry, state="merging", detail="")

        def prepare_and_land() -> mechanical.Train:
            for issue, _, head in cars:
                worktrees.prepare_for_merge(paths, issue.id, head)
            return lander.land_train(plans, events)

        try:
            train = await asyncio.to_thread(prepare_and_land)
        finally:
            for heard in events:
                heard.tests_ended()
        landed = train.landed
        for issue, entry, _ in cars:
            if issue.id not in landed:
                self._update(entry, state="queued", merged_commit="")
        if not landed:
            self._alone.update(issue.id for issue, _, _ in cars)
            if train.stopped:
                self.host.log(f"{', '.join(issue.id for issue, _, _ in cars)} did not land together "
                              f"({train.stopped}): each lands alone")
            return False
        last = list(landed.values())[-1].commit
        self.host.log(f"{', '.join(landed)} land together (tested once, on {last[:10]})")
        await self._finalize_all([(issue, entry, landed[issue.id].commit) for issue, entry, _ in cars
                                  if issue.id in landed])
        return cars[0][0].id in landed

    async def _merge(self, issue: Issue, entry: Entry, repo: pygit2.Repository, head: str,
                     from_refinery: bool = False) -> bool:
        lander = Lander(self.project, self.host.shared_target)
        plan = lander.plan(issue, head, entry.base_commit, entry.test_command, trust_head=from_refinery)
        events = _EntryEvents(self, entry)
        paths = self.project.paths

        def prepare_and_land() -> Landing:
            # one thread hop, not two: each resumption waits its turn on a busy event loop
            worktrees.prepare_for_merge(paths, issue.id, head)
            return lander.land(plan, events)

        try:
            landing = await asyncio.to_thread(prepare_and_land)
        finally:
            events.tests_ended()
        if landing.status == "merged":
            if landing.detail:
                self.host.log(f"{issue.id} {landing.detail}: finalized, not landed again")
            await self._finalize_all([(issue, entry, landing.commit)])
            return True
        if landing.status == "waiting":
            if self._told.get(issue.id) != landing.detail:   # said once, not on every retry
                self._told[issue.id] = landing.detail
                self.host.log(f"{issue.id} {landing.detail}")
            self._update(entry, state="waiting", detail=landing.detail, merged_commit="")
            return False
        self._update(entry, merged_commit="")
        kind = "conflict" if landing.status == "conflict" else "tests"
        return await self._to_refinery(issue, entry, kind, landing.detail, from_refinery)

    async def _to_refinery(self, issue: Issue, entry: Entry, kind: str, detail: str,
                           from_refinery: bool) -> bool:
        paths, target = self.project.paths, self.config.target_branch
        if from_refinery:
            detail = f"after the refinery said merged, hive's check failed: {detail}"
        attempts = entry.refinery_attempts + 1
        self._update(entry, refinery_attempts=attempts, detail=f"refinery: {kind}")
        if attempts > 2:
            self._escalate(issue, entry, f"the refinery could not land it: {detail[:300]}")
            return True
        self.host.log(f"{issue.id} {kind} → refinery")
        worktree = worktrees.worktree_path(paths, issue.id)
        if not worktree.exists():
            await asyncio.to_thread(worktrees.recreate, paths, issue.id)
        verdict = await self.refinery.resolve(issue, worktree, target, detail)
        self._update(entry, detail=f"refinery answered: {verdict.status}")
        said = verdict.summary[:80]
        self.host.log(f"{issue.id} refinery: " + (said if said.lower().startswith(verdict.status)
                                                  else f"{verdict.status} {said}".rstrip()))
        if verdict.status == "crashed":
            if attempts >= 2:
                self._escalate(issue, entry, f"the refinery crashed twice: {verdict.summary}")
                return True
            return False  # replaced session; the entry is retried once
        if verdict.status == "needs_human":
            self._escalate(issue, entry, f"the refinery asks for a person: {verdict.summary}")
            return True
        if verdict.status == "rejected":
            self._reject(issue, entry, verdict.summary, detail)
            return True
        repo = worktrees.open_repo(paths)
        head = worktrees.adopt_head(paths, issue.id)
        if head is None:
            self._fail(issue, entry, "the refinery deleted the branch")
            return True
        return await self._merge(issue, entry, repo, head, from_refinery=True)

    # -- endings --------------------------------------------------------------------------------

    def _moved(self, entry: Entry, transition: Callable[..., Any], *args: Any) -> bool:
        """Make an ending's transition and leave the queue; False when it was refused (the
        issue is no longer done: a person moved it meanwhile)."""
        try:
            transition(*args)
        except TransitionRefused as exc:
            self._left(entry, exc)
            return False
        self._drop(entry)
        return True

    def _left(self, entry: Entry, refusal: TransitionRefused) -> None:
        self._drop(entry)
        self.host.log(f"{entry.issue_id} left the merge queue: {refusal}")

    def _finalize(self, issue: Issue, entry: Entry, merged: str) -> bool:
        """The `finalized` commit (`_finalize_all` around it); False when it was refused."""
        return self._moved(entry, lifecycle.finalize, self.project, self.runtime, issue.id, merged,
                           self.config.target_branch, self.refinery.take_usage(issue.id))

    async def _finalize_all(self, landed: list[tuple[Issue, Entry, str]]) -> None:
        """The finalize commits of `landed` (issue, entry, landed commit) one after the other, each
        after one turn of the event loop for the rest of the daemon. Meanwhile a thread retires
        the worktree and branch of each one finalized, in that order: removing files takes
        milliseconds the event loop needs to start the dependents these issues unblocked. A retire
        that fails is a warning (the leftover sweep, `retire_finished`, retires it); a finalize
        commit that fails is raised once those before it are told (the queue makes it again)."""
        target, paths = self.config.target_branch, self.project.paths
        to_retire: queue.SimpleQueue[tuple[str, bool] | None] = queue.SimpleQueue()
        not_retired: list[tuple[str, Exception]] = []

        def retire_each() -> None:
            while (job := to_retire.get()) is not None:
                try:
                    worktrees.retire(paths, job[0], target, job[1], keep_uncommitted=False)
                except Exception as exc:  # noqa: BLE001 - finalized all the same: the leftover sweep retires it
                    not_retired.append((job[0], exc))

        retiring = asyncio.create_task(asyncio.to_thread(retire_each))
        finished: list[tuple[Issue, str]] = []
        refused: list[str] = []
        error: Exception | None = None
        try:
            for issue, entry, merged in landed:
                if self._finalize(issue, entry, merged):
                    finished.append((issue, merged))
                    to_retire.put((issue.id, self.may_spare(issue.id)))
                else:
                    refused.append(issue.id)
                await asyncio.sleep(0)
        except Exception as exc:  # noqa: BLE001 - raised once those finalized are told
            error = exc
        finally:
            to_retire.put(None)
            await retiring
        for issue_id in refused:
            await self._retire_if_finished(issue_id)   # finalized meanwhile by another machine
        shared = self.host.shared_target
        for issue, merged in finished:
            if shared is not None:
                shared.request_push()   # here: its event is the event loop's, not a thread's to set
                await asyncio.to_thread(shared.finalized, issue.id)
            self.merged += 1
            self.host.log(f"{issue.id} merged into {target} ({merged[:10]}) and finalized")
        for issue_id, why in not_retired:
            self.host.log(f"warning: {issue_id}'s worktree and branch were not retired ({why}): "
                          "the next leftover sweep retires them")
        if error is not None:
            raise error

    async def _retire_if_finished(self, issue_id: str) -> None:
        """An issue finished elsewhere (another machine landed its own agent's work, or a person
        canceled it): this copy of the work is obsolete and nothing will come back to it — its
        worktree and branch go, their heads kept (`worktrees.retire`)."""
        self.project.update_index()
        issue = self.project.index.get(issue_id)
        if issue is not None and issue.status in TERMINAL_STATUSES:
            await asyncio.to_thread(worktrees.retire, self.project.paths, issue_id, self.config.target_branch,
                                    self.may_spare(issue_id))

    def may_spare(self, issue_id: str) -> bool:
        """Whether the issue's worktree may become a spare for another issue's: only once no agent
        can write it any more (a jail's bind mount follows the folder wherever it is moved)."""
        return not self.host.worker_running(issue_id) and not self.refinery.in_worktree(
            worktrees.worktree_path(self.project.paths, issue_id))

    def _reject(self, issue: Issue, entry: Entry, reason: str, detail: str) -> None:
        paths = self.project.paths
        head = worktrees.head_of(paths, issue.id) or ""   # the rejected commit: what the merge step tried
        try:
            decision = lifecycle.reject(self.project, self.runtime, self.config, issue.id, reason,
                                        self.refinery.take_usage(issue.id))
        except TransitionRefused as exc:
            self._left(entry, exc)
            return
        self._drop(entry)
        failure = rejection_text(head, reason, detail)
        if decision.action == lifecycle.RETRY and self.host.shared_target is None:
            # the same agent goes on where it was: its session, its worktree, the rejected commit
            # (the refinery may have left the worktree elsewhere: its HEAD is kept, then reset)
            if head:
                worktrees.prepare_for_merge(paths, issue.id, head)
            done = history.last_event(paths, issue.id, "done")
            handover.put(self.runtime, handover.Handover(
                issue.id, failure, agent_id=done.agent if done else "",
                session_id=self.runtime.budget(issue.id).last_session))
            how = "whose session resumes in its worktree at the rejected commit"
        elif decision.action != lifecycle.ESCALATE:
            # a fresh agent; or, in a shared queue, whichever machine claims the issue next
            worktrees.remove(paths, issue.id, target=self.config.target_branch)
            kept = attempts.holding(paths.common_dir, issue.id, head)
            handover.put(self.runtime, handover.Handover(issue.id, failure, kept_ref=kept.ref if kept else ""))
            how = (("in a clean worktree" if decision.action == lifecycle.SWITCH else
                    "in a clean worktree: in a shared queue any machine may claim it")
                   + (f"; the rejected attempt is kept as {kept.ref}" if kept else ""))
        else:
            how = "its worktree kept for you"
        self.host.log(f"{issue.id} rejected → {lifecycle.status_after(decision)} ({decision.reason}, {how})")

    def _escalate(self, issue: Issue, entry: Entry, reason: str) -> None:
        if not self._moved(entry, lifecycle.escalate_merge, self.project, issue.id, reason,
                           self.refinery.take_usage(issue.id)):
            return
        self.runtime.attempt_log.settle(issue.id, "stuck")
        # the worktree stays for the person
        self.host.log(f"{issue.id} escalated: {reason[:120]}")

    def _fail(self, issue: Issue, entry: Entry, reason: str) -> None:
        if not self._moved(entry, lifecycle.fail_merge, self.project, issue.id, reason,
                           self.refinery.take_usage(issue.id)):
            return
        self.runtime.attempt_log.settle(issue.id, "stuck")
        self.host.log(f"{issue.id} failed: {reason}")


def rejection_text(head: str, reason: str, detail: str) -> str:
    """What the next attempt's prompt says of a rejection: the commit, why, what the tests said."""
    text = f"The merge step rejected the work at commit {head or '(unknown)'}: {reason.strip()}"
    if detail.strip():
        text += f"\n\nWhat the merge step saw (the failing test's output, or the conflict):\n\n```\n{detail.strip()}\n```"
    return text


class _EntryEvents:
    """What the pipeline does while one entry lands: the candidate recorded on the entry (a
    restarted daemon finalizes it once it is on the target), each test command listed like an
    agent (a later daemon ends one left running before it touches the worktree)."""

    def __init__(self, processor: MergeProcessor, entry: Entry):
        self.processor, self.entry = processor, entry
        self.test_agent, self.tested = f"test-{entry.issue_id}", list[int]()

    def candidate(self, commit: str) -> None:
        self.processor._update(self.entry, merged_commit=commit)

    def test_started(self, pid: int) -> None:
        runtime = self.processor.host.runtime
        if self.tested:
            runtime.remove_agent(self.test_agent)
        self.tested.append(pid)
        runtime.add_agent(id=self.test_agent, issue_id=self.entry.issue_id, role="test", pid=pid,
                          pid_start=process_start_time(pid),
                          worktree=str(worktrees.worktree_path(self.processor.project.paths, self.entry.issue_id)))

    def tests_ended(self) -> None:
        if self.tested:
            self.processor.host.runtime.remove_agent(self.test_agent)
