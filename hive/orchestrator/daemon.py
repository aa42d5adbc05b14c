"""The daemon: one asyncio process per repository, woken by events, never by a fixed poll.

Wake sources: watchfiles on the `.hive/` checkout and on the `ref-events` file that other hive
processes and the `reference-transaction` hook append to; a worker finishing. Each worker watches
its own worktree's notes/result files and waits for its own turns; the backend's events go, by
session id, to the `AgentSession` they belong to (`hive/agents/session.py`). A slow safety tick
checks leases and stalls. On each wake the loop brings the state up to date, stops workers whose
issue was canceled, and spawns workers while below `max_agents` and the ready queue is not empty.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import traceback
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator

from hive import git, lifecycle, touches
from hive.agents.ids import new_agent_id
from hive.agents.prompts import fyi_message
from hive.backends.base import PROVIDER_ERROR, Backend, Event, Usage
from hive.config import Config
from hive.errors import HiveError
from hive.initialize import record_target_branch
from hive.merge.host import SharedTarget
from hive.merge.pipeline import MergeProcessor
from hive.orchestrator import recovery
from hive.orchestrator.degraded import ProviderHealth
from hive.orchestrator.progress import PROGRESS_KEY, RunProgress, RunSummary, summarize
from hive.orchestrator.logfile import LogFile
from hive.orchestrator.shared import SharedQueue
from hive.orchestrator.watchers import watch_state
from hive.orchestrator.handoff import Handoff
from hive.orchestrator.worker import Worker, taken_from
from hive.project import Project
from hive.runtime import DaemonLock, Runtime, handover
from hive.runtime.tells import Tell
from hive.state.issue_file import Issue
from hive.workspace import landings, spares, worktrees

SAFETY_TICK_SECONDS = 2.0
FULL_SWEEP_SECONDS = 30.0
# `.hive/` follows the branch at most this often while the daemon writes (three commits per
# issue): each refresh rewrites the checkout's git index and records, and a file changed several
# times in between is written once.
CHECKOUT_REFRESH_SECONDS = 0.5

# every way a person or a wrapper ends a run: Ctrl-C (to the process group, through `| tee` or
# `bash -c`), `kill`, a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
OUTPUT_GONE = int(signal.SIGPIPE)   # stdout closed (EPIPE): exit 141, as a shell reports SIGPIPE


class Daemon:
    def __init__(self, project: Project, backend: Backend, config: Config, *,
                 max_agents: int | None = None, until_idle: bool = False,
                 log: Callable[[str], None] | None = None, remote: str | None = None):
        self.project = project
        project.defer_checkout = self._checkout_behind   # the loop refreshes `.hive/`, batched
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
        self._checkout_changes: set[str] | None = None   # None: look at the whole checkout
        self._checkout_refreshed = float("-inf")          # time.monotonic() of the last refresh
        self._refresh_timer: asyncio.TimerHandle | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None   # while run() runs
        self._agents_starting = 0
        self.no_agent_starting = asyncio.Event()
        self.no_agent_starting.set()
        self.stopping = asyncio.Event()
        self._watch_stop = asyncio.Event()   # awatch sets its stop event itself when it ends
        self.run_tokens = 0
        self.run_usage = Usage()
        self.token_cap_reached = False
        self._log = log or (lambda line: print(line, flush=True))
        self._log_file = LogFile(project.paths.daemon_log)
        self.health = ProviderHealth(backend, self.runtime, self.stopping, self.log, self.wake.set)
        self.merge: MergeProcessor | None = None    # set by use_merge() (auto merge mode)
        self._problems_seen: set[str] = set()
        self._held_told: dict[str, str] = {}   # issue -> the touches wait logged last
        self._recent_changes = touches.RecentChanges(project.paths, lambda: self.target_ref)
        self.finished = 0
        self.started_at = time.time()
        self.start_commit = ""      # the tip of hive/state when the run began (for its summary)
        self.on_progress: Callable[[RunProgress], None] | None = None   # told each change
        self._published = ""
        # a SharedQueue when the queue is shared through a remote
        self.shared = SharedQueue(self, remote, config.target_branch) if remote else None
        self.handoff = Handoff(self.shared, self.wake.set)   # done work → the merge step

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
        try:
            await asyncio.wait_for(self.no_agent_starting.wait(), at_most)
        except asyncio.TimeoutError:
            pass

    # -- logging --------------------------------------------------------------------------------

    def log(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        if not self._output_gone:
            try:
                self._log(line)
            except OSError:   # EPIPE: the reader died (a `tee` ended by the same Ctrl-C), the terminal closed
                self._output_gone = True
                self.request_stop(OUTPUT_GONE)
        self._log_file.write(line)

    # -- main loop ------------------------------------------------------------------------------

    async def run(self) -> int:
        self._event_loop = asyncio.get_running_loop()
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
            self._event_loop = None

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
        watcher = asyncio.create_task(self._watch_state())
        ticker = asyncio.create_task(self._tick())
        try:
            self._subscribe()
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
            if self._refresh_timer is not None:
                self._refresh_timer.cancel()
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
            self.log("stopping: ending agents" + (f" ({_stop_cause(why)})" if why else ""))

    @property
    def exit_code(self) -> int:
        """0 for a run that ended by itself (or by `request_stop()`); 128 + the signal otherwise."""
        return 128 + self.stopped_by if self.stopped_by else 0

    @property
    def stop_cause(self) -> str:
        return _stop_cause(self.stopped_by)

    async def _loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            self._refresh_state()
            await self._stop_canceled()
            await self._deliver_tells()
            await self._spawn()
            if self.merge is not None:
                self.merge.poke()
            if self.shared is not None:
                self.shared.local_changed()
            self._publish_progress()
            if self.until_idle and self._idle():
                self.waiting_merges = self.merge.waiting() if self.merge is not None else []
                self.log("idle: nothing ready, nothing running" + (
                    f"; {len(self.waiting_merges)} merge(s) wait for you" if self.waiting_merges else ""))
                return
            await self.wake.wait()

    def _refresh_state(self) -> None:
        # only the `.hive/` files the watcher saw change are looked at for a person's edits; all
        # of them at start and on every full sweep (FULL_SWEEP_SECONDS), in case an event was lost
        only, self._checkout_changes = self._checkout_changes, set()
        due = time.monotonic() - self._checkout_refreshed >= CHECKOUT_REFRESH_SECONDS
        if not due:
            self._schedule_refresh()
        problems = self.project.sync(warn=False, only=only, refresh=due)
        if due:
            self._checkout_refreshed = time.monotonic()
        for problem in problems:
            if str(problem) not in self._problems_seen:
                self._problems_seen.add(str(problem))
                self.log(f"warning: {problem}")

    def _checkout_behind(self) -> None:
        """Called after each of this process's state commits (any thread): `.hive/` follows
        within CHECKOUT_REFRESH_SECONDS."""
        loop = self._event_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule_refresh)

    def _schedule_refresh(self) -> None:
        if self._refresh_timer is None:
            wait = max(0.0, self._checkout_refreshed + CHECKOUT_REFRESH_SECONDS - time.monotonic())
            self._refresh_timer = asyncio.get_running_loop().call_later(wait, self._refresh_due)

    def _refresh_due(self) -> None:
        self._refresh_timer = None
        self.wake.set()

    def _idle(self) -> bool:
        if self.running or (self.merge is not None and not self.merge.idle()):
            return False
        if self.shared is not None and not self.token_cap_reached:
            # other machines' work may still unblock ours: idle only when the whole queue is
            counts = self.project.index.counts()
            return not any(counts.get(s, 0) for s in ("open", "in_progress", "done"))
        if self.token_cap_reached:
            return True
        first = self.project.index.ready(limit=1)
        if not first or (not first[0].touches and not self._waits_for_work_elsewhere(first[0])):
            return not first
        return next(iter(self._picker().order(self._candidates())), None) is None

    async def _spawn(self) -> None:
        if self.stopping.is_set() or self.token_cap_reached or not self.health.healthy.is_set():
            return
        if self.shared is not None and not self.shared.online:
            return  # a claim is valid only once pushed: none while the remote is unreachable
        if len(self.running) >= self.max_agents:
            return
        lease = self.config.lease_seconds if self.shared is not None else 0
        picker = self._picker()
        for issue in picker.order(self._candidates()):
            if len(self.running) >= self.max_agents or self.stopping.is_set():
                break
            handed = handover.peek(self.runtime, issue.id)
            # a rejected attempt retried by the same agent: it goes on under its own id
            agent_id = handed.agent_id if handed is not None and handed.same_agent else new_agent_id()
            if self.shared is not None:
                # a claim is valid only once pushed: pushed first, then it lands here
                if not await self.shared.claim(issue.id, agent_id, lease):
                    self.project.sync(warn=False)
                    if not self.shared.online:
                        self.log(f"{issue.id} not claimed: {self.shared.trouble or 'the remote cannot be reached'}")
                        break
                    self.log(f"{issue.id} lost to another machine's claim")
                    continue
                self.project.update_index()
            elif not lifecycle.claim(self.project, issue.id, agent_id, lease_seconds=lease):
                continue
            self.log(f"{issue.id} claimed by {agent_id}: {issue.title}")
            picker.started(issue)
            self.start_worker(issue.id, agent_id)
        self._tell_held(picker.held)

    def _candidates(self) -> Iterator[Issue]:
        """The ready queue, in order, less what runs here or waits for work elsewhere."""
        for issue in self.project.index.ready():
            if issue.id not in self.running and not self._waits_for_work_elsewhere(issue):
                yield issue

    def _picker(self) -> touches.Picker:
        """The touches rule over what is busy now (`hive/touches.py`), read only when an issue
        declares touches."""
        def busy() -> list[touches.Busy]:
            found = touches.busy_work(self.project, self.target_ref, self._recent_changes)
            self._recent_changes.forget(b.issue_id for b in found)
            return found

        return touches.Picker(busy, self.config.touches_mode, self.project.index.blockers_of)

    def _tell_held(self, held: dict[str, touches.Wait]) -> None:
        """Log each issue the touches rule holds back, once per reason."""
        for issue_id, wait in held.items():
            if self._held_told.get(issue_id) != str(wait):
                self._held_told[issue_id] = str(wait)
                self.log(f"{issue_id} waits: {wait}")

    def _waits_for_work_elsewhere(self, issue: Issue) -> bool:
        """Whether a blocker's work is not where this machine may start from: done but neither on
        the target nor on a local work branch, which only this machine's agents make (done on
        another machine; a fetched branch is `refs/remotes/*`, never built on), or finalized but
        its landing not yet on the target workers start from (`target_ref`: fetched first in
        shared mode). Code lands only from agents run here, so the dependent waits — it is
        neither claimed nor failed — and starts from the target once the blocker is there."""
        common = self.project.paths.common_dir
        for blocker_id in issue.depends_on:
            blocker = self.project.index.get(blocker_id)
            if blocker is None:
                continue
            if blocker.status == "done" and (git.read_ref(
                    common, worktrees.work_ref(blocker_id)) is None or (
                    self.shared is not None and not self.shared.worked_here(blocker))):
                return True
            if blocker.status == "finalized":
                tip = git.read_ref(common, self.target_ref)
                if tip is None or not landings.on_target(worktrees.open_repo(self.project.paths), tip, blocker):
                    return True
        return False

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

    @contextmanager
    def agent_starting(self) -> Iterator[None]:
        """Mark an agent being started (worktree, session, prompt): merges wait meanwhile.

        Starting an agent is on the critical path — its issue's dependents wait for it — and a
        merge is not (dependents start from their blockers' unmerged work). Both are mostly
        pygit2 calls holding the GIL, so a merge running beside a start-up doubled its latency.
        """
        self._agents_starting += 1
        self.no_agent_starting.clear()
        try:
            yield
        finally:
            self._agents_starting -= 1
            if not self._agents_starting:
                self.no_agent_starting.set()

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

    async def _watch_state(self) -> None:
        await watch_state(self.project, self._watch_stop, self._state_changed, self.log)

    def _state_changed(self, checkout_paths: set[str]) -> None:
        if self._checkout_changes is not None:
            self._checkout_changes |= checkout_paths
        self.wake.set()

    async def _tick(self) -> None:
        last_sweep = time.monotonic()
        while True:
            await asyncio.sleep(SAFETY_TICK_SECONDS)
            now = time.monotonic()
            if now - last_sweep >= FULL_SWEEP_SECONDS:
                self._checkout_changes, last_sweep = None, now
            for worker in list(self.running.values()):
                if worker.in_turn and now - worker.last_activity > self.config.stall_seconds:
                    self.log(f"{worker.issue_id} stalled: no activity for {self.config.stall_seconds}s")
                    await worker.abort_turn(f"stalled: no agent activity for {self.config.stall_seconds}s")
            if self.shared is not None:
                self._extend_leases()
            self.wake.set()

    def _extend_leases(self) -> None:
        """Renew the leases of issues whose agents are still working (shared mode)."""
        shared = self.shared
        if shared is None:
            return
        horizon = lifecycle.lease_until(self.config.lease_seconds // 2)
        for worker in list(self.running.values()):
            issue = self.project.index.get(worker.issue_id)
            if issue is None or issue.assignee != worker.agent_id:
                continue
            if str(issue.extra.get("lease_expires", "")) < horizon:
                shared.extend_lease(worker.issue_id, worker.agent_id, self.config.lease_seconds)

    # -- backend events -------------------------------------------------------------------------

    def _subscribe(self) -> None:
        self.backend.on(PROVIDER_ERROR, self._on_provider_error)

    async def _deliver_tells(self) -> None:
        """A person's messages (`git hive tell`) to the sessions working their issues now; the
        others wait for their issue's next prompt (`Worker`)."""
        for issue_id, waiting in _by_issue(self.runtime.pending_tells()).items():
            worker = self.running.get(issue_id)
            if worker is not None and worker.in_turn and await worker.send_told(waiting):
                self.log(f"{issue_id}: {len(waiting)} message(s) from you passed to its agent")

    def _on_provider_error(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        status = data.get("status")
        self.health.enter(f"provider error{f' {status}' if status else ''}: {data.get('message', '')}"[:200])

    # -- degraded mode: the provider keeps failing (see degraded.py) ---------------------------

    def tokens_spent(self, delta: Usage) -> None:
        """The run's caps (tokens counted as max_tokens_per_issue counts them; USD): once over
        one, no new agent starts."""
        self.run_usage = self.run_usage.plus(delta)
        self.run_tokens = self.run_usage.counted_tokens
        cap, cost_cap = self.config.max_tokens_per_run, self.config.max_cost_usd_per_run
        over = ((cap and self.run_tokens > cap and f"{self.run_tokens:,} > max_tokens_per_run {cap:,}")
                or (cost_cap and self.run_usage.cost_usd > cost_cap
                    and f"${self.run_usage.cost_usd:.4f} > max_cost_usd_per_run ${cost_cap:.2f}"))
        if over and not self.token_cap_reached:
            self.token_cap_reached = True
            self.log(f"budget of this run reached ({over}; {lifecycle.usage_figures(self.run_usage)}): "
                     "no new agents")

    # -- progress -------------------------------------------------------------------------------

    def spent(self) -> Usage:
        """What this run spent: its workers and the refinery."""
        return self.run_usage.plus(self.merge.spent()) if self.merge is not None else self.run_usage

    def progress(self) -> RunProgress:
        counts = self.project.index.counts()
        return RunProgress(self.started_at, finalized=counts.get("finalized", 0),
                           total=sum(counts.values()) - counts.get("canceled", 0),
                           busy=len(self.running) + int(self.merge is not None and self.merge.refinery_busy()),
                           usage=self.spent())

    def _publish_progress(self) -> None:
        """For `git hive status` (runtime.db) and `on_progress`, when it changed."""
        progress = self.progress()
        text = json.dumps(progress.to_json())
        if text != self._published:
            self._published = text
            self.runtime.put(PROGRESS_KEY, text)
            if self.on_progress is not None:
                self.on_progress(progress)

    def summary(self) -> RunSummary:
        """What the run did, from the state commits made since it began."""
        def status_of(issue_id: str) -> str | None:
            issue = self.project.index.get(issue_id)
            return issue.status if issue is not None else None

        self.project.update_index()
        return summarize(self.project.paths, self.start_commit, self.spent(), self.started_at, status_of)

    # -- notes ----------------------------------------------------------------------------------

    def relay_notes(self, source: Worker, notes: list[dict[str, Any]]) -> None:
        """FYI to running siblings: same epic; gotchas go to everyone."""
        for worker in list(self.running.values()):
            if worker is source or not worker.session_id or not worker.in_turn:
                continue
            same_epic = bool(source.parent) and worker.parent == source.parent
            for note in notes:
                if same_epic or note["category"] == "gotcha":
                    asyncio.ensure_future(worker.send_fyi(fyi_message(note)))

    # -- recovery and shutdown ------------------------------------------------------------------

    async def recover(self) -> None:
        """Make the state consistent after any kind of previous ending, SIGKILL included."""
        previous_agents = recovery.kill_lost_agents(self.runtime)
        recovery.requeue_lost_issues(self.project, self.runtime, self.config, previous_agents,
                                     shared=self.shared is not None, log=self.log)
        await asyncio.to_thread(recovery.clean_leftovers, self.project, set(self.running), self.runtime)

    async def shutdown(self) -> None:
        """End every agent; leave each issue where the next `run` continues from."""
        workers = list(self.running.values())
        for worker in workers:
            await worker.abort("the daemon is stopping")
        for worker in workers:
            if worker.task is not None:
                await asyncio.gather(worker.task, return_exceptions=True)
            try:
                released = lifecycle.release(self.project, worker.issue_id, worker.agent_id, "the daemon stopped")
            except HiveError:   # TransitionRefused included: it finished, or changed hands
                released = None
            if released is not None:  # a worker that already finished keeps its branch
                await asyncio.to_thread(partial(worktrees.remove, self.project.paths, worker.issue_id,
                                                target=self.config.target_branch))
            self.runtime.remove_agent(worker.agent_id)
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


def _stop_cause(why: int) -> str:
    if why == OUTPUT_GONE:
        return "its output was closed"
    try:
        return signal.Signals(why).name
    except ValueError:
        return f"signal {why}" if why else ""


def _by_issue(tells: list[Tell]) -> dict[str, list[Tell]]:
    grouped: dict[str, list[Tell]] = {}
    for tell in tells:
        grouped.setdefault(tell.issue_id, []).append(tell)
    return grouped
