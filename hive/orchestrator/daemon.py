"""The daemon: one asyncio process per repository, woken by events, never by a fixed poll.

Wake sources: watchfiles on the `.hive/` checkout and on the `ref-events` file that other hive
processes and the `reference-transaction` hook append to; a worker finishing. Each worker watches
its own worktree's notes/result files and waits for its own turns; the backend's events go, by
session id, to the `AgentSession` they belong to (`hive/agents/session.py`). A slow safety tick
checks leases and stalls. On each wake the loop brings the state up to date, stops workers whose
issue was canceled, and spawns workers while below `max_agents` and the ready queue is not empty.

The daemon only runs that loop and owns the workers; each of its other jobs is a module of its
own: `.hive/` following the branch (checkout.py), what may start (schedule.py), tells and notes
to agents at work (messages.py), the run's caps (spend.py), its progress (progress.py), done work
to the merge step (handoff.py), how a run ends (shutdown.py) and after a crash (recovery.py).
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from typing import Any, Callable, ContextManager

from hive import git
from hive.agents.ids import new_agent_id
from hive.backends.base import PROVIDER_ERROR, Backend, Event, Usage
from hive.config import Config
from hive.errors import HiveError
from hive.initialize import record_target_branch
from hive.merge.host import SharedTarget
from hive.merge.pipeline import MergeProcessor
from hive.orchestrator import claims, messages, recovery
from hive.orchestrator.checkout import CheckoutFollower
from hive.orchestrator.degraded import ProviderHealth
from hive.orchestrator.handoff import Handoff
from hive.orchestrator.logfile import LogFile
from hive.orchestrator.progress import PROGRESS_KEY, Publisher, RunProgress, RunSummary, summarize
from hive.orchestrator.schedule import Schedule
from hive.orchestrator.shared import SharedQueue
from hive.orchestrator.shutdown import OUTPUT_GONE, STOP_SIGNALS, end_workers, stop_cause
from hive.orchestrator.spend import RunSpend
from hive.orchestrator.starting import StartGate
from hive.orchestrator.watchers import watch_state
from hive.orchestrator.worker import Worker, taken_from
from hive.project import Project
from hive.runtime import DaemonLock, Runtime, handover
from hive.workspace import spares, worktrees

SAFETY_TICK_SECONDS = 2.0
FULL_SWEEP_SECONDS = 30.0


class Daemon:
    def __init__(self, project: Project, backend: Backend, config: Config, *,
                 max_agents: int | None = None, until_idle: bool = False,
                 log: Callable[[str], None] | None = None, remote: str | None = None):
        self.project = project
        self.backend = backend
        self.config = config
        self.max_agents = max_agents or config.max_agents
        self.until_idle = until_idle
        self.waiting_merges: list = []   # --until-idle: the merges still waiting when it ended
        self.stopped_by = 0                  # the signal (or OUTPUT_GONE) that stopped the run
        self._output_gone = False            # stdout could not be written: the lines go to daemon.log only
        self.runtime = Runtime(project.paths)
        self.lock = DaemonLock(project.paths)
        self.running: dict[str, Worker] = {}
        self.wake = asyncio.Event()
        self.starts = StartGate()            # agents being started go before merges
        self.stopping = asyncio.Event()
        self._watch_stop = asyncio.Event()   # awatch sets its stop event itself when it ends
        self._log = log or (lambda line: print(line, flush=True))
        self._log_file = LogFile(project.paths.daemon_log)
        self.health = ProviderHealth(backend, self.runtime, self.stopping, self.log, self.wake.set)
        self.merge: MergeProcessor | None = None    # set by use_merge() (auto merge mode)
        self.finished = 0
        self.started_at = time.time()
        self.start_commit = ""      # the tip of hive/state when the run began (for its summary)
        self.on_progress: Callable[[RunProgress], None] | None = None   # told each change
        # a SharedQueue when the queue is shared through a remote
        self.shared = SharedQueue(self, remote, config.target_branch) if remote else None
        self.handoff = Handoff(self.shared, self.wake.set)   # done work → the merge step
        self.checkout = CheckoutFollower(project, self.log, self.wake.set)
        self.schedule = Schedule(project, config.touches_mode, self.shared, lambda: self.target_ref,
                                 self.running, self.log)
        self.spend = RunSpend(config, self.log)
        self._progress = Publisher(self.runtime.put)

    def use_merge(self, processor: MergeProcessor | None) -> None:
        """The merge pipeline that takes this daemon's done issues (None: a person merges)."""
        self.merge = self.handoff.merge = processor

    # -- what the worker, the shared queue and the merge pipeline ask of the daemon -------------

    @property
    def shared_target(self) -> SharedTarget | None:
        return self.shared

    @property
    def target_ref(self) -> str:
        """Where workers start from: the remote's target once fetched (shared mode), else the local one."""
        if self.shared is not None and git.read_ref(self.project.paths.common_dir, self.shared.target_ref):
            return self.shared.target_ref
        return git.branch_ref(self.config.target_branch)

    def wake_up(self) -> None:
        self.wake.set()

    def worker_running(self, issue_id: str) -> bool:
        return issue_id in self.running   # left once its session is closed (`worker_finished`)

    def running_agents(self) -> frozenset[str]:
        return frozenset(worker.agent_id for worker in self.running.values())

    async def agents_started(self, at_most: float) -> None:
        await self.starts.wait(at_most)

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        if not self._output_gone:
            try:
                self._log(line)
            except OSError:   # EPIPE: the reader died (a `tee` ended by the same Ctrl-C), the terminal closed
                self._output_gone = True
                self.request_stop(OUTPUT_GONE)
        self._log_file.write(line)

    def tokens_spent(self, growth: Usage) -> None:
        self.spend.add(growth)

    def relay_notes(self, source: Worker, notes: list[dict[str, Any]]) -> None:
        messages.relay_notes(self.running, source, notes)

    # -- a run, start to end --------------------------------------------------------------------

    async def run(self) -> int:
        self.checkout.loop = asyncio.get_running_loop()
        try:
            return await self._run()
        except HiveError:
            raise
        except Exception as exc:
            # what stops the daemon unexpectedly: the person sees one line; daemon.log keeps where
            self._log_file.write(f"{time.strftime('%H:%M:%S')} daemon stopped by {type(exc).__name__}: {exc}\n"
                                 + "".join(traceback.format_exception(exc)).rstrip())
            raise
        finally:
            self.checkout.loop = None

    async def _run(self) -> int:
        if not self.lock.acquire():
            raise HiveError(f"a hive daemon is already running for this repository "
                            f"(pid {self.lock.holder()}); `git hive stop` stops it")
        git.clear_stale_locks(self.project.paths.common_dir, self.log)   # left by a killed process
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.request_stop, sig)
        record_target_branch(self.project.paths, self.config.target_branch)
        self.runtime.put("daemon_pid", str(os.getpid()))
        self.runtime.put("daemon_started", str(time.time()))
        self.started_at = time.time()
        self.start_commit = git.read_ref(self.project.paths.common_dir, git.STATE_REF) or ""
        watcher = asyncio.create_task(watch_state(self.project, self._watch_stop, self._state_changed, self.log))
        ticker = asyncio.create_task(self._tick())
        try:
            self.backend.on(PROVIDER_ERROR, self._on_provider_error)
            await self.backend.connect_with_reconnect()
            self.project.sync(warn=False)
            if self.shared is not None:
                await asyncio.to_thread(self.shared.catch_up)
            await self.recover()
            if self.shared is not None:
                self.shared.start()
            if self.merge is not None:
                await self.merge.start()
            self.log(f"running: up to {self.max_agents} agents, backend {self.backend.name}")
            await self._loop()
        finally:
            await self.shutdown()   # a second Ctrl-C meanwhile changes nothing: the handlers stay until done
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
            self.checkout.stop()
            self._watch_stop.set()
            watcher.cancel()
            ticker.cancel()
            self.runtime.delete("daemon_pid")
            self.runtime.delete(PROGRESS_KEY)
            self.health.stop()
            self.lock.release()
            self._log_file.close()
        return 0

    def request_stop(self, why: int = 0) -> None:
        """Stop: agents end, the issues they held go back to open. `why`: the signal that asked
        (SIGINT, SIGTERM, SIGHUP), or OUTPUT_GONE; it makes the exit code (`exit_code`)."""
        first = not self.stopping.is_set()
        self.stopping.set()
        self.wake.set()
        if first:
            self.stopped_by = why
            self.log("stopping: ending agents" + (f" ({stop_cause(why)})" if why else ""))

    @property
    def exit_code(self) -> int:
        """0 for a run that ended by itself (or by `request_stop()`); 128 + the signal otherwise."""
        return 128 + self.stopped_by if self.stopped_by else 0

    @property
    def stop_cause(self) -> str:
        return stop_cause(self.stopped_by)

    async def _loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            self.checkout.refresh()
            await self._stop_canceled()
            await messages.deliver_tells(self.runtime, self.running, self.log)
            await self._spawn()
            if self.merge is not None:
                self.merge.poke()
            if self.shared is not None:
                self.shared.local_changed()
            progress = self.progress()
            if self._progress.publish(progress) and self.on_progress is not None:
                self.on_progress(progress)
            if self.until_idle and self._idle():
                self.waiting_merges = self.merge.waiting() if self.merge is not None else []
                self.log("idle: nothing ready, nothing running" + (
                    f"; {len(self.waiting_merges)} merge(s) wait for you" if self.waiting_merges else ""))
                return
            await self.wake.wait()

    def _idle(self) -> bool:
        if self.running or (self.merge is not None and not self.merge.idle()):
            return False
        if self.shared is not None and not self.spend.capped:
            # other machines' work may still unblock ours: idle only when the whole queue is
            counts = self.project.index.counts()
            return not any(counts.get(s, 0) for s in ("open", "in_progress", "done"))
        return self.spend.capped or self.schedule.nothing_to_start()

    async def _spawn(self) -> None:
        if self.stopping.is_set() or self.spend.capped or not self.health.healthy.is_set():
            return
        if self.shared is not None and not self.shared.online:
            return  # a claim is valid only once pushed: none while the remote is unreachable
        if len(self.running) >= self.max_agents:
            return
        lease = self.config.lease_seconds if self.shared is not None else 0
        picker = self.schedule.picker()
        for issue in picker.order(self.schedule.candidates()):
            if len(self.running) >= self.max_agents or self.stopping.is_set():
                break
            handed = handover.peek(self.runtime, issue.id)
            # a rejected attempt retried by the same agent: it goes on under its own id
            agent_id = handed.agent_id if handed is not None and handed.same_agent else new_agent_id()
            claimed = await claims.claim(self.project, self.shared, issue, agent_id, lease, self.log)
            if claimed == claims.OFFLINE:
                break
            if claimed == claims.TAKEN:
                continue
            self.log(f"{issue.id} claimed by {agent_id}: {issue.title}")
            picker.started(issue)
            self.start_worker(issue.id, agent_id)
        self.schedule.tell_held(picker.held)

    # -- the workers ----------------------------------------------------------------------------

    def start_worker(self, issue_id: str, agent_id: str) -> Worker:
        worker = Worker(self, issue_id, agent_id, self.handoff)
        self.runtime.add_agent(id=agent_id, issue_id=issue_id, role="worker", backend=self.backend.name)
        self.running[issue_id] = worker
        worker.task = asyncio.create_task(worker.run(), name=f"worker-{issue_id}")
        return worker

    def worker_finished(self, worker: Worker) -> None:
        self.running.pop(worker.issue_id, None)
        self.runtime.remove_agent(worker.agent_id)
        self.finished += 1
        self.wake.set()

    def agent_starting(self) -> ContextManager[None]:
        return self.starts.starting()

    async def _stop_canceled(self) -> None:
        if not self.running:
            return
        held = self.project.index.assignments(self.running)
        for issue_id, worker in list(self.running.items()):
            what = taken_from(*held.get(issue_id, ("", "")), worker.agent_id)
            if what:
                self.log(f"{issue_id} {what}: stopping its agent")
                await worker.abort(what)
                if worker.task is not None:
                    await asyncio.gather(worker.task, return_exceptions=True)
                spare = self.merge is None or self.merge.may_spare(issue_id)   # the refinery may be in it
                await asyncio.to_thread(worktrees.retire, self.project.paths, issue_id, self.config.target_branch, spare)

    # -- wake sources ---------------------------------------------------------------------------

    def _state_changed(self, checkout_paths: set[str]) -> None:
        self.checkout.changed(checkout_paths)
        self.wake.set()

    async def _tick(self) -> None:
        last_sweep = time.monotonic()
        while True:
            await asyncio.sleep(SAFETY_TICK_SECONDS)
            now = time.monotonic()
            if now - last_sweep >= FULL_SWEEP_SECONDS:
                self.checkout.sweep()
                last_sweep = now
            for worker in list(self.running.values()):
                if worker.in_turn and now - worker.last_activity > self.config.stall_seconds:
                    self.log(f"{worker.issue_id} stalled: no activity for {self.config.stall_seconds}s")
                    await worker.abort_turn(f"stalled: no agent activity for {self.config.stall_seconds}s")
            if self.shared is not None:
                self.shared.renew_leases([(w.issue_id, w.agent_id) for w in self.running.values()],
                                         self.config.lease_seconds)
            self.wake.set()

    def _on_provider_error(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        status = data.get("status")
        self.health.enter(f"provider error{f' {status}' if status else ''}: {data.get('message', '')}"[:200])

    # -- what the run did -----------------------------------------------------------------------

    def spent(self) -> Usage:
        """What this run spent: its workers and the refinery."""
        return self.spend.usage.plus(self.merge.spent()) if self.merge is not None else self.spend.usage

    def progress(self) -> RunProgress:
        counts = self.project.index.counts()
        return RunProgress(self.started_at, finalized=counts.get("finalized", 0),
                           total=sum(counts.values()) - counts.get("canceled", 0),
                           busy=len(self.running) + int(self.merge is not None and self.merge.refinery_busy()),
                           usage=self.spent())

    def summary(self) -> RunSummary:
        """What the run did, from the state commits made since it began."""
        self.project.update_index()
        return summarize(self.project.paths, self.start_commit, self.spent(), self.started_at,
                         lambda issue_id: getattr(self.project.index.get(issue_id), "status", None))

    # -- recovery and shutdown ------------------------------------------------------------------

    async def recover(self) -> None:
        """Make the state consistent after any kind of previous ending, SIGKILL included."""
        previous_agents = recovery.kill_lost_agents(self.runtime)
        recovery.requeue_lost_issues(self.project, self.runtime, self.config, previous_agents,
                                     shared=self.shared is not None, log=self.log)
        await asyncio.to_thread(recovery.clean_leftovers, self.project, set(self.running), self.runtime)

    async def shutdown(self) -> None:
        """End every agent; leave each issue where the next `run` continues from."""
        await end_workers(self.project, self.runtime, self.config, self.running.values())
        if self.merge is not None:
            await self.merge.stop()
        if self.shared is not None:
            await self.shared.stop()
        await asyncio.to_thread(spares.clear, self.project.paths)   # a run's own: none outlives it
        self.project.checkout.refresh()   # the last writes, deferred like all of the daemon's
        try:
            await self.backend.stop()
        except Exception:  # noqa: BLE001
            pass
