"""The workers of a run: hired for ready issues (each claimed first), told, checked for stalls,
stopped when their issue is taken from them, ended with the run. The crew is what each worker
runs in (`WorkerHost`)."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any, Callable, ContextManager, Iterator

from hive import lifecycle
from hive.agents.ids import new_agent_id
from hive.backends.base import Backend, Usage
from hive.config import Config
from hive.errors import HiveError
from hive.orchestrator import claims, messages
from hive.orchestrator.degraded import ProviderHealth
from hive.orchestrator.handoff import MergeQueue
from hive.orchestrator.schedule import Schedule
from hive.orchestrator.shared import SharedQueue
from hive.orchestrator.spend import RunSpend
from hive.orchestrator.starting import StartGate
from hive.orchestrator.worker import Worker, taken_from
from hive.project import Project
from hive.runtime import Runtime, handover
from hive.workspace import worktrees


class Crew:
    def __init__(self, project: Project, config: Config, backend: Backend, runtime: Runtime,
                 health: ProviderHealth, spend: RunSpend, merge: MergeQueue, *,
                 target_ref: Callable[[], str], log: Callable[[str], None], wake: Callable[[], None]):
        self.project = project
        self.config = config
        self.backend = backend
        self.runtime = runtime
        self.health = health
        self.spend = spend
        self.merge = merge               # where each worker's done work goes
        self._target_ref = target_ref
        self.log = log
        self._wake = wake
        self._starts = StartGate()       # agents being started go before merges
        self._workers: dict[str, Worker] = {}   # issue id -> its worker, until its session is closed

    # -- what the daemon asks -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._workers)

    def working(self) -> int:
        """The workers whose agent still works: one whose session is being closed (an agent CLI
        may take a while to exit) holds no slot of `max_agents`, though it is in the crew until
        closed (its worktree is not another's before)."""
        return sum(1 for worker in self._workers.values() if not worker.closing)

    def __contains__(self, issue_id: object) -> bool:
        return issue_id in self._workers

    def __iter__(self) -> Iterator[Worker]:
        return iter(list(self._workers.values()))

    async def agents_started(self, at_most: float) -> None:
        """Until no agent is being started, `at_most` seconds (a merge waits so)."""
        await self._starts.wait(at_most)

    def agents(self) -> frozenset[str]:
        return frozenset(worker.agent_id for worker in self._workers.values())

    async def hire(self, schedule: Schedule, most: int, shared: SharedQueue | None, stopping: Callable[[], bool],
                   lease: int) -> None:
        """Claim ready issues, in the schedule's order, for new workers while fewer than `most`
        work (`lease`: the claims' lease in seconds, shared mode)."""
        if self.working() >= most:
            return
        picker = schedule.picker()
        for issue in picker.order(schedule.candidates()):
            if self.working() >= most or stopping():
                break
            handed = handover.peek(self.runtime, issue.id)
            # a rejected attempt retried by the same agent: it goes on under its own id
            agent_id = handed.agent_id if handed is not None and handed.same_agent else new_agent_id()
            claimed = await claims.claim(self.project, shared, issue, agent_id, lease, self.log)
            if claimed == claims.OFFLINE:
                break
            if claimed == claims.TAKEN:
                continue
            self.log(f"{issue.id} claimed by {agent_id}: {issue.title}")
            picker.started(issue)
            self.start(issue.id, agent_id)
        schedule.tell_held(picker.held)

    def start(self, issue_id: str, agent_id: str) -> Worker:
        """A worker for a claimed issue, running as its own task."""
        worker = Worker(self, issue_id, agent_id, self.merge)
        self.runtime.add_agent(id=agent_id, issue_id=issue_id, role="worker", backend=self.backend.name)
        self._workers[issue_id] = worker
        worker.task = asyncio.create_task(worker.run(), name=f"worker-{issue_id}")
        return worker

    async def stop_taken(self, may_spare: Callable[[str], bool]) -> None:
        """Stop the workers whose issue is no longer theirs (canceled, taken over); each worktree
        goes, its heads kept (`may_spare`: whether its folder may go back to the pool). A worker
        closing its session after its hand-off whose issue is finalized is left to close: its
        work landed, and the merge step (or the leftover sweep) retires its worktree."""
        if not self._workers:
            return
        # every worker is judged against the same reading, before any is stopped: stopping one
        # awaits, and meanwhile another may move on (switch to a fresh agent) past that reading
        held = self.project.index.assignments(self._workers)
        taken = [(worker, what) for issue_id, worker in self._workers.items()
                 if (what := taken_from(*held.get(issue_id, ("", "")), worker.agent_id))
                 and not (worker.closing and what == "finalized")]
        for worker, what in taken:
            self.log(f"{worker.issue_id} {what}: stopping its agent")
            await worker.abort(what)
            if worker.task is not None:
                await asyncio.gather(worker.task, return_exceptions=True)
            await asyncio.to_thread(worktrees.retire, self.project.paths, worker.issue_id, self.config.target_branch,
                                    may_spare(worker.issue_id))

    async def end_stalled(self) -> None:
        """End the turns with no agent activity for `stall_seconds`: each attempt fails."""
        stall = self.config.stall_seconds
        now = time.monotonic()
        for worker in self:
            if worker.in_turn and now - worker.last_activity > stall:
                self.log(f"{worker.issue_id} stalled: no activity for {stall}s")
                await worker.abort_turn(f"stalled: no agent activity for {stall}s")

    def harvest_unseen_notes(self) -> None:
        """Harvest the notes a worker's watcher did not report (the safety tick's net)."""
        for worker in self:
            if worker.notes_unseen():
                worker.notes_changed()

    def holdings(self) -> list[tuple[str, str]]:
        """(issue, agent) of every worker: the leases this machine renews."""
        return [(worker.issue_id, worker.agent_id) for worker in self._workers.values()]

    async def deliver_tells(self) -> None:
        await messages.deliver_tells(self.runtime, self._workers, self.log)

    async def end_all(self) -> None:
        """End every agent; the issue of each that had not finished goes back to open, its worktree
        removed (a worker that already finished keeps its branch)."""
        workers = list(self)
        for worker in workers:
            await worker.abort("the daemon is stopping")
        for worker in workers:
            if worker.task is not None:
                await asyncio.gather(worker.task, return_exceptions=True)
            try:
                released = lifecycle.release(self.project, worker.issue_id, worker.agent_id, "the daemon stopped")
            except HiveError:   # TransitionRefused included: it finished, or changed hands
                released = None
            if released is not None:
                await asyncio.to_thread(partial(worktrees.remove, self.project.paths, worker.issue_id,
                                                target=self.config.target_branch))
            self.runtime.remove_agent(worker.agent_id)

    # -- what each worker asks (WorkerHost) -----------------------------------------------------

    @property
    def target_ref(self) -> str:
        return self._target_ref()

    def agent_starting(self) -> ContextManager[None]:
        return self._starts.starting()

    def relay_notes(self, source: Worker, notes: list[dict[str, Any]]) -> None:
        messages.relay_notes(self._workers, source, notes)

    def tokens_spent(self, growth: Usage) -> None:
        self.spend.add(growth)

    def worker_closing(self, worker: Worker) -> None:
        self._wake()   # a slot is free: the next ready issue need not wait for the agent's exit

    def worker_finished(self, worker: Worker) -> None:
        if self._workers.get(worker.issue_id) is worker:
            del self._workers[worker.issue_id]
        self.runtime.remove_agent(worker.agent_id)
        self._wake()
