"""The daemon: one asyncio process per repository, woken by events, never by a fixed poll.

Wake sources: watchfiles on the `.hive/` checkout and on the `ref-events` file that other hive
processes and the `reference-transaction` hook append to; a worker finishing. Each worker watches
its own worktree's notes/result files and waits for its own turns; the backend's events go, by
session id, to the `AgentSession` they belong to (`hive/agents/session.py`). A slow safety tick
checks leases and stalls, and takes in notes no watcher reported. On each wake the loop brings the
state up to date, stops workers whose issue was canceled, and claims ready issues for new workers
while below `max_agents`.

The daemon only runs that loop; each of its other jobs is a module of its own: the workers
(crew.py), `.hive/` following the branch (checkout.py), what may start (schedule.py), the run's
caps (spend.py), its progress (progress.py), done work to the merge step (handoff.py), how a run
ends (shutdown.py) and after a crash (recovery.py).
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from typing import Callable

from hive import git
from hive.backends.base import PROVIDER_ERROR, Backend, Usage
from hive.config import Config
from hive.errors import HiveError
from hive.initialize import record_target_branch
from hive.merge.host import SharedTarget
from hive.merge.pipeline import MergeProcessor
from hive.orchestrator import recovery
from hive.orchestrator.checkout import CheckoutFollower
from hive.orchestrator.crew import Crew
from hive.orchestrator.degraded import ProviderHealth
from hive.orchestrator.handoff import Handoff
from hive.orchestrator.logfile import RunLog
from hive.orchestrator.progress import PROGRESS_KEY, Publisher, RunProgress, RunSummary, summarize
from hive.orchestrator.schedule import Schedule
from hive.orchestrator.shared import SharedQueue
from hive.orchestrator.shutdown import OUTPUT_GONE, Stopping
from hive.orchestrator.spend import RunSpend
from hive.orchestrator.watchers import watch_state
from hive.project import Project
from hive.runtime import DaemonLock, Runtime
from hive.workspace import spares

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
        self.runtime = Runtime(project.paths)
        self.lock = DaemonLock(project.paths)
        self.wake = asyncio.Event()
        self._watch_stop = asyncio.Event()   # awatch sets its stop event itself when it ends
        self.log = RunLog(project.paths.daemon_log, log or (lambda line: print(line, flush=True)),
                          output_gone=lambda: self.stop.request(OUTPUT_GONE))
        self.stop = Stopping(self.wake.set, self.log)
        self.health = ProviderHealth(backend, self.runtime, self.stop.event, self.log, self.wake.set)
        self.merge: MergeProcessor | None = None    # set by use_merge() (auto merge mode)
        self.started_at = time.time()
        self.start_commit = ""      # the tip of hive/state when the run began (for its summary)
        self.on_progress: Callable[[RunProgress], None] | None = None   # told each change
        # a SharedQueue when the queue is shared through a remote
        self.shared = SharedQueue(self, remote, config.target_branch) if remote else None
        self.handoff = Handoff(self.shared, self.wake.set)   # done work → the merge step
        self.checkout = CheckoutFollower(project, self.log, self.wake.set)
        self.spend = RunSpend(config, self.log)
        self.crew = Crew(project, config, backend, self.runtime, self.health, self.spend, self.handoff,
                         target_ref=lambda: self.target_ref, log=self.log, wake=self.wake.set)
        self.schedule = Schedule(project, config.touches_mode, self.shared, lambda: self.target_ref,
                                 self.crew, self.log)
        self._progress = Publisher(self.runtime.put)

    def use_merge(self, processor: MergeProcessor | None) -> None:
        """The merge pipeline that takes this daemon's done issues (None: a person merges)."""
        self.merge = self.handoff.merge = processor

    # -- what the shared queue and the merge pipeline ask of the daemon -------------------------

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
        return issue_id in self.crew   # left once its session is closed

    def running_agents(self) -> frozenset[str]:
        return self.crew.agents()

    async def agents_started(self, at_most: float) -> None:
        await self.crew.agents_started(at_most)

    # -- a run, start to end --------------------------------------------------------------------

    async def run(self) -> int:
        self.checkout.loop = asyncio.get_running_loop()
        try:
            return await self._run()
        except HiveError:
            raise
        except Exception as exc:
            # what stops the daemon unexpectedly: the person sees one line; daemon.log keeps where
            self.log.to_file_only(f"daemon stopped by {type(exc).__name__}: {exc}\n"
                                  + "".join(traceback.format_exception(exc)).rstrip())
            raise
        finally:
            self.checkout.loop = None

    async def _run(self) -> int:
        if not self.lock.acquire():
            raise HiveError(f"a hive daemon is already running for this repository "
                            f"(pid {self.lock.holder()}); `git hive stop` stops it")
        git.clear_stale_locks(self.project.paths.common_dir, self.log)   # left by a killed process
        record_target_branch(self.project.paths, self.config.target_branch)
        self.runtime.put("daemon_pid", str(os.getpid()))
        self.runtime.put("daemon_started", str(time.time()))
        self.started_at = time.time()
        self.start_commit = git.read_ref(self.project.paths.common_dir, git.STATE_REF) or ""
        watcher = asyncio.create_task(watch_state(self.project, self._watch_stop, self._state_changed, self.log))
        ticker = asyncio.create_task(self._tick())
        try:
            # a second Ctrl-C while the agents are being ended changes nothing: the handlers stay
            with self.stop.on_signals(asyncio.get_running_loop()):
                try:
                    await self._start()
                    await self._loop()
                finally:
                    await self.shutdown()
        finally:
            self.checkout.stop()
            self._watch_stop.set()
            watcher.cancel()
            ticker.cancel()
            self.runtime.delete("daemon_pid")
            self.runtime.delete(PROGRESS_KEY)
            self.health.stop()
            self.lock.release()
            self.log.close()
        return 0

    async def _start(self) -> None:
        self.backend.on(PROVIDER_ERROR, self.health.provider_error)
        await self.backend.connect_with_reconnect()
        self.project.sync(warn=False)
        if self.shared is not None:
            await asyncio.to_thread(self.shared.catch_up)
        # the state made consistent after any kind of previous ending, SIGKILL included
        previous_agents = recovery.kill_lost_agents(self.runtime)
        recovery.requeue_lost_issues(self.project, self.runtime, self.config, previous_agents,
                                     shared=self.shared is not None, log=self.log)
        await asyncio.to_thread(recovery.clean_leftovers, self.project, set(), self.runtime)
        if self.shared is not None:
            self.shared.start()
        if self.merge is not None:
            await self.merge.start()
        self.log(f"running: up to {self.max_agents} agents, backend {self.backend.name}")

    def request_stop(self, why: int = 0) -> None:
        self.stop.request(why)

    async def _loop(self) -> None:
        while not self.stop.is_set():
            self.wake.clear()
            self.checkout.refresh()
            await self.crew.stop_taken(lambda issue_id: self.merge is None or self.merge.may_spare(issue_id))
            await self.crew.deliver_tells()
            await self._hire()
            if self.merge is not None:
                self.merge.poke()
            if self.shared is not None:
                self.shared.local_changed()
            progress = self.progress()
            if self._progress.publish(progress) and self.on_progress is not None:
                self.on_progress(progress)
            if self.until_idle and self._idle():
                if self.merge is not None:
                    try:
                        self.merge.retire_finished()
                    except Exception as exc:  # noqa: BLE001 - the run is over: what is left goes at the next start
                        self.log(f"warning: the work of finished issues was not cleaned up: {exc}")
                self.waiting_merges = self.merge.waiting() if self.merge is not None else []
                self.log("idle: nothing ready, nothing running" + (
                    f"; {len(self.waiting_merges)} merge(s) wait for you" if self.waiting_merges else ""))
                return
            await self.wake.wait()

    def _idle(self) -> bool:
        if len(self.crew) or (self.merge is not None and not self.merge.idle()):
            return False
        if self.shared is not None and not self.spend.capped:
            # other machines' work may still unblock ours: idle only when the whole queue is
            counts = self.project.index.counts()
            return not any(counts.get(s, 0) for s in ("open", "in_progress", "done"))
        return self.spend.capped or self.schedule.nothing_to_start()

    async def _hire(self) -> None:
        if self.stop.is_set() or self.spend.capped or not self.health.healthy.is_set():
            return
        if self.shared is not None and not self.shared.online:
            return  # a claim is valid only once pushed: none while the remote is unreachable
        await self.crew.hire(self.schedule, self.max_agents, self.shared, self.stop.is_set,
                             lease=self.config.lease_seconds if self.shared is not None else 0)

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
            await self.crew.end_stalled()
            self.crew.harvest_unseen_notes()
            if self.shared is not None:
                await self.shared.renew_leases(self.crew.holdings(), self.config.lease_seconds)
            self.wake.set()

    # -- what the run did -----------------------------------------------------------------------

    def spent(self) -> Usage:
        """What this run spent: its workers and the refinery."""
        return self.spend.usage.plus(self.merge.spent()) if self.merge is not None else self.spend.usage

    def progress(self) -> RunProgress:
        counts = self.project.index.counts()
        return RunProgress(self.started_at, finalized=counts.get("finalized", 0),
                           total=sum(counts.values()) - counts.get("canceled", 0),
                           busy=len(self.crew) + int(self.merge is not None and self.merge.refinery_busy()),
                           usage=self.spent())

    def summary(self) -> RunSummary:
        """What the run did, from the state commits made since it began."""
        self.project.update_index()
        return summarize(self.project.paths, self.start_commit, self.spent(), self.started_at,
                         lambda issue_id: getattr(self.project.index.get(issue_id), "status", None))

    # -- the end of a run ------------------------------------------------------------------

    async def shutdown(self) -> None:
        """End every agent; leave each issue where the next `run` continues from."""
        await self.crew.end_all()
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
