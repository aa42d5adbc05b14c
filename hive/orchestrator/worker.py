"""One issue's worker: claim → worktree → session → prompt → result → done, or the escalation chain.

A `Worker` lives as one asyncio task in the daemon. It talks to the agent only through its
`AgentSession` (`hive/agents/session.py`: usage, permissions and resume happen there) — each
attempt is one turn, which an abort (cancel, stop, stall, budget) ends — and moves its issue only
through `hive.lifecycle` (CAS commits with trailers): every transition it makes — retry,
switched, done, escalated — is a commit. Its policy is the prompt, the judging of the result and
the issue's budget.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ContextManager, Protocol

from hive import cost, git, lifecycle
from hive.agents import jails, protocol
from hive.agents.ids import is_agent_id, new_agent_id
from hive.agents.briefing import brief
from hive.agents.prompts import WORKER_SYSTEM_PROMPT, told_message
from hive.agents.session import AgentSession, Grant, SessionLost
from hive.backends.base import Backend, SessionSpec, TurnResult, Usage
from hive.backends.transcripts import issue_folder, new_transcript
from hive.config import Config
from hive.lifecycle import TransitionRefused
from hive.orchestrator.degraded import ProviderHealth
from hive.orchestrator.handoff import MergeQueue
from hive.orchestrator.watchers import watch_worker_files
from hive.project import Project
from hive.runtime import Runtime, handover
from hive.runtime.attempt_log import Seen
from hive.runtime.tells import Tell
from hive import issues
from hive.state import trust
from hive.state.issue_file import Issue
from hive.workspace import attempts, landings, worktrees


# A worker's notes relayed to its running siblings (as FYIs, each a message their sessions pay
# for): the first ones. A flood of notes stays in its file on hive/state.
MAX_RELAYED_NOTES = 10


@dataclass
class Outcome:
    ok: bool
    error: str = ""
    summary: str = ""
    test_command: str = ""
    hopeless: str = ""        # a failure no retry can fix (token budget): escalate at once
    provider: bool = False    # the provider failed, not the work


def taken_from(status: str, assignee: str, agent_id: str) -> str:
    """Why an issue is no longer the agent's to work ("canceled", "finalized", "taken over"), or
    "" while it is (its status and assignee as the index has them; no status: the issue is gone).
    Held or done by another of hive's agents (another machine took it over once the lease
    expired) is taken over; done by a person, or reopened, is not: the work may still be wanted."""
    if not status or status == "canceled":
        return "canceled"
    if status == "finalized":
        return "finalized"   # landed: another machine's work, a person's, or this agent's already handed off
    if status == "in_progress" and assignee not in ("", agent_id):
        return "taken over"
    if status == "done" and assignee != agent_id and is_agent_id(assignee):
        return "taken over"
    return ""


class Canceled(Exception):
    """The issue was canceled (or the daemon is stopping) while its worker ran."""


class WorkerHost(Protocol):
    """What a worker needs from the daemon it runs in."""

    @property
    def project(self) -> Project: ...

    @property
    def config(self) -> Config: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def health(self) -> ProviderHealth:
        """The provider's health: degraded mode is entered, and waited out, there."""

    @property
    def target_ref(self) -> str:
        """The ref of the target branch workers start from (the remote's, in shared mode)."""

    def log(self, message: str) -> None: ...

    def agent_starting(self) -> ContextManager[None]:
        """Held while the agent is being started (merges wait meanwhile)."""

    def relay_notes(self, source: "Worker", notes: list[dict[str, Any]]) -> None: ...

    def tokens_spent(self, growth: Usage) -> None:
        """A session's usage grew by `growth` (the run's caps count it)."""

    def worker_closing(self, worker: "Worker") -> None:
        """The worker's agent has ended its work and its session is being closed: its slot is free."""

    def worker_finished(self, worker: "Worker") -> None: ...


class Worker:
    def __init__(self, host: WorkerHost, issue_id: str, agent_id: str, merge: MergeQueue):
        self.host = host
        self.merge = merge             # where the done work goes
        self.issue_id = issue_id
        self.agent_id = agent_id
        # it may work in its worktree only (the path is the issue's, whichever attempt)
        grant = Grant("worker", str(worktrees.worktree_path(host.project.paths, issue_id)))
        self.session = AgentSession(host.backend, host.runtime, grant, on_usage=self._spent,
                                    on_activity=self.on_activity, on_open=self._session_opened, log=self._log)
        self.worktree: worktrees.Worktree | None = None
        self.watch: asyncio.Task[None] | None = None   # the worktree's notes and result files
        self.notes_offset = 0
        self.notes_relayed = 0         # of MAX_RELAYED_NOTES
        self.notes_lock = asyncio.Lock()   # one harvest at a time: each starts where the last ended
        self.harvests: set[asyncio.Task[str]] = set()
        self.last_activity = time.monotonic()
        self.started = time.time()
        self.stop_reason = ""          # set when the daemon cancels this worker
        self.closing = False           # its work is over: the session is being closed
        # the done work, handed to the merge step only once the session is closed (its jail's
        # processes gone): the merge rewrites the worktree they could write
        self.done_handoff: tuple[str, str, str] | None = None
        self.stopped = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.parent = ""
        self.attempt_record = 0        # the attempt_log row of the attempt in progress (0: none)
        self.attempt_number = 0        # its number (the notes it writes say so)

    # -- helpers ----------------------------------------------------------------------------

    @property
    def project(self) -> Project:
        return self.host.project

    @property
    def config(self) -> Config:
        return self.host.config

    @property
    def backend(self) -> Backend:
        return self.host.backend

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def in_turn(self) -> bool:
        """The agent has its work: a turn is in progress."""
        return self.session.in_turn

    def _log(self, message: str) -> None:
        self.host.log(f"{self.issue_id} {message}")

    # -- the lifecycle ----------------------------------------------------------------------

    async def run(self) -> None:
        budget = self.host.runtime.budget(self.issue_id)
        previous_failure = budget.last_error if budget.failures else ""
        resume = refused = False
        try:
            previous_failure, resume = self._handed_over(previous_failure)
            while True:
                self._check_stop()
                try:
                    outcome = await self._attempt(previous_failure, resume)
                except (Canceled, TransitionRefused):
                    raise
                except Exception as exc:  # noqa: BLE001 - a surprise is a failed attempt, not a stuck issue
                    self._log(f"attempt error: {exc!r}")
                    outcome = Outcome(False, f"hive could not run the attempt: {exc}")
                if outcome.ok:
                    self._end_attempt("done")
                    self._finish_done(outcome)
                    return
                decision = self._count_failure(outcome)
                how = {lifecycle.RETRY: ", whose session resumes in its worktree",
                       lifecycle.SWITCH: ", in a clean worktree"}.get(decision.action, "")
                self._log(f"failed: {outcome.error} → {decision.reason}{how}")
                previous_failure = outcome.error
                self._end_attempt("escalated" if decision.action == lifecycle.ESCALATE else "retried")
                if decision.action == lifecycle.ESCALATE:
                    self._escalate(decision.reason, outcome.error)
                    return
                if decision.action == lifecycle.RETRY:
                    self._record_retry(outcome.error)
                    resume = True
                    if outcome.provider:
                        await self.host.health.wait_healthy()
                    continue
                kept = await self._switch_agent(outcome.error)
                if kept:
                    previous_failure += _kept_text(kept)
                resume = False
        except Canceled:
            return
        except TransitionRefused as exc:
            self._log(f"stopped: {exc}")
            refused = True
        finally:
            self._end_attempt("stopped")
            self.closing = True
            self.host.worker_closing(self)
            try:
                await self._close_session()
            finally:
                if self.done_handoff:
                    self.merge.handoff(*self.done_handoff)
            if self.watch is not None:
                self.watch.cancel()
            if refused:
                await self._retire_if_taken()
            self.host.worker_finished(self)

    async def _retire_if_taken(self) -> None:
        """A move refused because the issue is another's now (canceled, finalized, or taken over by
        another machine once the lease expired): nothing will come back to this worktree, so it
        goes (its heads kept first), as for a worker stopped while running. A person's move (done,
        open) keeps it."""
        self.project.update_index()
        status, assignee = self.project.index.assignments([self.issue_id]).get(self.issue_id, ("", ""))
        if taken_from(status, assignee, self.agent_id):
            await asyncio.to_thread(worktrees.retire, self.project.paths, self.issue_id, self.config.target_branch)

    def _count_failure(self, outcome: Outcome) -> lifecycle.Decision:
        if outcome.provider:
            self.host.health.enter(outcome.error[:200])
        return lifecycle.count_failure(self.host.runtime, self.config, self.issue_id, outcome.error,
                                       hopeless=outcome.hopeless, provider=outcome.provider)

    def _record_retry(self, error: str) -> None:
        attempt = self.host.runtime.budget(self.issue_id).retries + 1
        try:
            lifecycle.record_retry(self.project, self.issue_id, self.agent_id, error, attempt)
        except TransitionRefused:
            pass   # no longer ours: the next attempt sees it and stops

    def _check_stop(self) -> None:
        if self.stop_reason:
            raise Canceled(self.stop_reason)

    async def _prepare_worktree(self) -> None:
        """A clean worktree from the target branch plus unmerged blocker work."""
        issue = self.project.index.get(self.issue_id)
        blockers = []
        for blocker_id in (issue.depends_on if issue else []):
            blocker = self.project.index.get(blocker_id)
            if blocker is not None and blocker.status == "done":
                blockers.append((blocker_id, worktrees.branch_name(blocker_id)))
        paths, target, target_ref = self.project.paths, self.config.target_branch, self.host.target_ref

        def build() -> worktrees.Worktree:
            repo = worktrees.open_repo(paths)
            base, combined, skipped = worktrees.compute_base(repo, target, blockers, target_ref)
            tree = worktrees.create(paths, self.issue_id, base)
            tree.combined, tree.skipped = combined, skipped
            return tree

        self.worktree = await asyncio.to_thread(build)
        self.notes_offset = 0
        self.host.runtime.update_agent(self.agent_id, worktree=str(self.worktree.path),
                                         branch=self.worktree.branch, base_commit=self.worktree.base_commit)
        self._watch(self.worktree.path)

    async def _attempt(self, previous_failure: str, resume: bool) -> Outcome:
        landed = self._landed_already()
        if landed:   # never done twice: the pipeline finalizes it from the landing it finds
            return Outcome(True, summary=f"already on {self.config.target_branch} at {landed[:10]}")
        with self.host.agent_starting():
            setup_error, issue, prompt = await self._prepare_turn(previous_failure, resume)
        if setup_error:
            return await self._setup_failed(setup_error)
        assert issue is not None
        turn = await self._run_turn(issue, prompt)
        if isinstance(turn, Outcome):
            return turn
        refused = await self._harvest_notes()
        if refused:
            return Outcome(False, refused)
        assert self.worktree is not None
        worktree = self.worktree.path

        def adopt_and_read() -> protocol.WorkResult:
            # in a thread: taking in the agent's objects (written, hashed, its store emptied)
            # takes milliseconds the event loop needs for the merge and the other agents
            worktrees.adopt_head(self.project.paths, self.issue_id)   # its commits onto its branch
            return protocol.read_result(worktree)

        return self._judge(turn, await asyncio.to_thread(adopt_and_read))

    async def _prepare_turn(self, previous_failure: str, resume: bool) -> tuple[str, Issue | None, str]:
        """Worktree, session, prompt: ("", the issue, the prompt), or a setup error to back off from."""
        # `.git`, not just the folder: an agent that deleted its worktree may have written files
        # into a fresh folder at the same path, which git no longer knows as a worktree
        if self.worktree is None or not (self.worktree.path / ".git").is_file():
            try:
                await self._prepare_worktree()
            except Exception as exc:  # noqa: BLE001 - any setup failure follows the policy
                return f"worktree: {exc}", None, ""
        self._check_stop()
        assert self.worktree is not None
        (self.worktree.path / protocol.RESULT_FILE).unlink(missing_ok=True)
        issue = self.project.index.get(self.issue_id)
        if issue is None or issue.status != "in_progress" or issue.assignee != self.agent_id:
            raise Canceled("the issue changed hands before the agent started")
        self.parent = issue.parent
        try:
            await self._ensure_session(issue, resume)
        except Exception as exc:  # noqa: BLE001
            return f"session: {exc}", None, ""
        return "", issue, self._prompt(issue, previous_failure)

    async def _run_turn(self, issue: Issue, prompt: str) -> TurnResult | Outcome:
        """The attempt's turn: its result (the abort's reason when hive aborted it), or the
        attempt's outcome when the session did not take the prompt."""
        self._check_stop()  # canceled while the session was being set up: never send the work
        self.host.runtime.update_agent(self.agent_id, state="busy")
        try:
            return await self.session.turn(prompt)
        except SessionLost as exc:
            return Outcome(False, str(exc))

    async def _setup_failed(self, error: str) -> Outcome:
        """A failure before the agent started: back off (no hot loop), count it, go on."""
        budget = self.host.runtime.budget(self.issue_id)
        delay = lifecycle.backoff_seconds(len(budget.failures or []) + 1)
        self._log(f"{error}; backing off {delay:.1f}s")
        try:   # ends early when the worker is aborted (cancel, the daemon stopping)
            await asyncio.wait_for(self.stopped.wait(), delay)
        except asyncio.TimeoutError:
            pass
        self.worktree = None
        return Outcome(False, error)

    async def _ensure_session(self, issue: Issue, resume: bool) -> None:
        assert self.worktree is not None      # prepared before any session
        if self.session_id:
            if await self.session.alive():
                return
            resume = True
        previous = self.session_id or (self.host.runtime.budget(self.issue_id).last_session if resume else "")
        spec = SessionSpec(role="worker", cwd=str(self.worktree.path), model=self.config.model_for("worker"),
                           system_prompt=WORKER_SYSTEM_PROMPT, resume=previous if resume else "",
                           issue_id=self.issue_id, labels=tuple(issue.labels),
                           env={"HIVE_ISSUE": self.issue_id, "HIVE_AGENT_ID": self.agent_id,
                                **git.agent_git_env()},
                           jail=jails.worktree_jail(self.config, self.project.paths, self.worktree.path),
                           transcript=new_transcript(issue_folder(self.project.paths.hive_dir, self.issue_id),
                                                     f"worker-{self.agent_id}"))
        await self.session.open(spec)

    def _session_opened(self, session: AgentSession) -> None:
        """Recorded for every session opened (a resume in a turn included): the budget's
        last session (a later worker resumes it), the agent's pid (recovery ends it)."""
        budget = self.host.runtime.budget(self.issue_id)
        budget.last_session = session.id
        self.host.runtime.save_budget(budget)
        self.host.runtime.update_agent(self.agent_id, **session.process())

    def _prompt(self, issue: Issue, previous_failure: str) -> str:
        assert self.worktree is not None
        told = self.host.runtime.pending_tells(issue.id)
        briefing = brief(self.project, issue, self.config.notes_prompt_tokens, previous_failure=previous_failure,
                         combined_blockers=self.worktree.combined, skipped_blockers=self.worktree.skipped,
                         told=[t.text for t in told])
        if told:
            self.host.runtime.tells_delivered(told, "prompt")
            self._log(f"{len(told)} message(s) from you in its prompt")
        self._end_attempt("stopped")   # a turn sent again (a setup retry) is a new attempt
        seen = [Seen(c.note["key"], c.note["category"], c.tokens) for c in briefing.selection.chosen]
        self.attempt_record, self.attempt_number = self.host.runtime.attempt_log.start(
            issue.id, self.agent_id, epic=issue.parent, labels=issue.labels, notes=seen,
            tokens_before=self.host.runtime.budget(issue.id).tokens)
        return briefing.prompt

    def _end_attempt(self, outcome: str) -> None:
        """How the attempt whose prompt was sent ended (`hive/runtime/attempt_log.py`)."""
        if self.attempt_record:
            runtime = self.host.runtime
            runtime.attempt_log.end(self.attempt_record, outcome, runtime.budget(self.issue_id).tokens)
            self.attempt_record = 0

    def _judge(self, turn: TurnResult, result: protocol.WorkResult) -> Outcome:
        assert self.worktree is not None
        if self.stop_reason:
            raise Canceled(self.stop_reason)
        over = self._over_budget()
        if over:
            return Outcome(False, over, hopeless=over)
        if not turn.ok:
            return Outcome(False, turn.error or "the agent's turn failed", provider=turn.provider_error)
        if result.status in ("missing", "garbage"):
            return Outcome(False, result.problem)
        if not result.ok:
            return Outcome(False, f"agent reported {result.status}: {result.summary or 'no summary'}")
        if not worktrees.has_new_commits(self.project.paths, self.issue_id, self.worktree.base_commit):
            return Outcome(False, "the agent reported success but committed nothing on its branch")
        return Outcome(True, summary=result.summary, test_command=result.test_command)

    def _over_budget(self) -> str:
        return lifecycle.over_budget(self.host.runtime.budget(self.issue_id), self.config)

    # -- endings ----------------------------------------------------------------------------

    def _landed_already(self) -> str:
        """The target commit that already holds this issue's work ('' if none): a machine landed
        it and lost the issue before finalizing (its lease expired), and it was reopened."""
        issue = self.project.index.get(self.issue_id)
        tip = git.read_ref(self.project.paths.common_dir, self.host.target_ref)
        if issue is None or tip is None:
            return ""
        return landings.landed_commit(worktrees.open_repo(self.project.paths), tip, self.issue_id,
                                      landings.recorded_of(issue))

    def _finish_done(self, outcome: Outcome) -> None:
        # the record outlives the runtime budget
        trailers = lifecycle.done_trailers(self.worktree.base_commit if self.worktree else "",
                                           worktrees.head_of(self.project.paths, self.issue_id) or "",
                                           outcome.test_command, self._usage_trailers())
        # refused (the issue is no longer this agent's): `run` stops, and retires the worktree
        lifecycle.hand_off(self.project, self.host.runtime, self.issue_id, self.agent_id, outcome.summary,
                           trailers, outcome.test_command)
        # The budget is kept until the issue is finalized: a refinery rejection reopens the issue
        # and counts against the same budget, so an issue rejected again and again escalates.
        self._log(f"done ({outcome.summary[:80] or 'no summary'})")
        self.done_handoff = (self.issue_id, self.worktree.base_commit if self.worktree else "", outcome.test_command)

    def _usage_trailers(self) -> dict[str, str]:
        return cost.worker_trailers(self.host.runtime.budget(self.issue_id), self.config.model_for("worker"),
                                    self.backend.name)

    def _escalate(self, reason: str, error: str) -> None:
        try:
            lifecycle.escalate(self.project, self.issue_id, self.agent_id, reason, error,
                               self._usage_trailers())
        except TransitionRefused:
            pass
        self._log(f"escalated: {reason}")

    async def _switch_agent(self, error: str) -> str:
        """A fresh agent in a clean worktree; the ref the last attempt is kept under ('' if none)."""
        old = self.agent_id
        await self._close_session()
        paths = self.project.paths
        head = worktrees.worktree_head(paths, self.issue_id) or worktrees.head_of(paths, self.issue_id)
        uncommitted = await asyncio.to_thread(partial(worktrees.remove, paths, self.issue_id,
                                                      target=self.config.target_branch))
        last = uncommitted or head   # what the agent left uncommitted is kept on its head
        kept = attempts.holding(paths.common_dir, self.issue_id, last) if last else None
        self.worktree = None
        self.agent_id = new_agent_id()
        self.host.runtime.remove_agent(old)
        self.host.runtime.add_agent(id=self.agent_id, issue_id=self.issue_id, role="worker",
                                      backend=self.backend.name)
        try:
            lifecycle.switch_agent(self.project, self.issue_id, old, self.agent_id, error)
        except TransitionRefused:
            pass   # no longer ours: the next attempt sees it and stops
        self._log(f"switched to a fresh agent {self.agent_id} in a clean worktree"
                  + (f"; the last attempt is kept as {kept.ref}" if kept else ""))
        return kept.ref if kept else ""

    def _handed_over(self, previous_failure: str) -> tuple[str, bool]:
        """What a rejection handed this attempt: (the failure its prompt tells, whether it resumes
        the same session in the kept worktree). Advisory: whatever goes wrong, a clean start."""
        try:
            handed = handover.take(self.host.runtime, self.issue_id)
            if handed is None:
                return previous_failure, False
            resume = handed.same_agent and handed.agent_id == self.agent_id and self._reuse_worktree()
        except Exception as exc:  # noqa: BLE001 - the attempt goes on without it
            self._log(f"handover not taken: {exc!r}")
            return previous_failure, False
        self._log("resumes its session in its worktree at the rejected commit" if resume
                  else "starts clean" + (f"; the last attempt is kept as {handed.kept_ref}" if handed.kept_ref else ""))
        return handed.failure + (_kept_text(handed.kept_ref) if handed.kept_ref else ""), resume

    def _reuse_worktree(self) -> bool:
        """Take up the kept worktree of a rejected attempt (its HEAD the rejected commit); False
        when it is gone (the attempt then starts clean)."""
        paths = self.project.paths
        path = worktrees.worktree_path(paths, self.issue_id)
        head = worktrees.head_of(paths, self.issue_id)
        if head is None or not (path / ".git").is_file():
            return False
        repo = worktrees.open_repo(paths)
        tip = git.read_ref(paths.common_dir, self.host.target_ref)
        base = str(repo.merge_base(head, tip) or "") if tip else ""
        self.worktree = worktrees.Worktree(self.issue_id, path, worktrees.branch_name(self.issue_id), base or head)
        try:   # the notes of the rejected attempt were harvested then
            self.notes_offset = (path / protocol.NOTES_FILE).stat().st_size
        except OSError:
            self.notes_offset = 0
        self.host.runtime.update_agent(self.agent_id, worktree=str(path), branch=self.worktree.branch,
                                       base_commit=self.worktree.base_commit)
        self._watch(path)
        return True

    async def _close_session(self) -> None:
        await self.session.close()

    async def abort(self, reason: str) -> None:
        """Stop the agent now (cancel, stop, stall, budget); the run() task then ends."""
        self.stop_reason = reason
        self.stopped.set()
        await self.session.abort(reason)

    async def abort_turn(self, reason: str) -> None:
        """End the turn in progress (stall, budget): the attempt fails with `reason`."""
        await self.session.abort(reason)

    # -- events of its session, and its tells ----------------------------------------------

    def on_activity(self) -> None:
        self.last_activity = time.monotonic()

    def _watch(self, worktree: Path) -> None:
        if self.watch is not None:
            self.watch.cancel()
        self.watch = asyncio.create_task(watch_worker_files(
            worktree, self.notes_changed, self.on_activity,
            lambda why: self._log(f"warning: its worktree cannot be watched ({why}): its notes are taken "
                                  "in at the daemon's safety tick")))

    def notes_unseen(self) -> bool:
        """Whether its notes file (a regular one) holds more than was harvested: the daemon's
        safety tick asks, for a write the watcher missed or could not see (no watcher, a write
        through another name of the file)."""
        if self.worktree is None:
            return False
        try:
            found = os.lstat(self.worktree.path / protocol.NOTES_FILE)
        except OSError:
            return False
        return stat.S_ISREG(found.st_mode) and found.st_size > self.notes_offset

    async def send_fyi(self, text: str) -> None:
        """Relay a sibling's note; it is queued behind the turn in progress (its result unread)."""
        await self.session.tell(text)

    async def send_told(self, told: list[Tell]) -> bool:
        """A person's messages to the session at work (queued behind its turn); whether it took them."""
        session = self.session_id
        if not await self.session.tell(told_message([t.text for t in told])):
            return False
        self.host.runtime.tells_delivered(told, f"session {session}")
        return True

    def _spent(self, growth: Usage) -> None:
        """The session's usage grew: spent from the issue's budget and the run's."""
        over = lifecycle.spend(self.host.runtime, self.config, self.issue_id, growth)
        self.host.runtime.update_agent(self.agent_id, tokens=self.host.runtime.budget(self.issue_id).tokens)
        self.host.tokens_spent(growth)
        if over and self.in_turn:
            asyncio.ensure_future(self.abort_turn(over))

    async def _harvest_notes(self) -> str:
        """Commit the notes the agent appended since the last harvest; read off the event loop.
        A notes file hive does not read (a FIFO, a link, too big) is the reason returned (and
        the turn in progress, if any, is ended with it)."""
        worktree = self.worktree
        if worktree is None:
            return ""
        async with self.notes_lock:
            batch = await asyncio.to_thread(protocol.read_new_notes, worktree.path, self.notes_offset)
            self.notes_offset = batch.offset
            for problem in batch.problems:
                self._log(f"bad note ignored: {problem}")
            if batch.notes:
                stamped = [issues.note_line(n["content"], n["category"], issue=self.issue_id, agent=self.agent_id,
                                            attempt=self.attempt_number) for n in batch.notes]
                dropped = issues.add_notes(self.project, stamped, file_id=self.issue_id, agent=self.agent_id)
                self._log(f"{len(stamped)} note(s) harvested")
                if dropped:
                    self._log(f"{dropped} of them left out: the notes on {git.STATE_BRANCH} are full "
                              f"({trust.NOTES_BOUNDS})")
                relayed = stamped[:len(stamped) - dropped][:max(0, MAX_RELAYED_NOTES - self.notes_relayed)]
                self.notes_relayed += len(relayed)
                if relayed:
                    self.host.relay_notes(self, relayed)
        if batch.refused and self.in_turn:
            await self.abort_turn(batch.refused)
        return batch.refused

    def notes_changed(self) -> None:
        self.on_activity()
        task = asyncio.ensure_future(self._harvest_notes())
        self.harvests.add(task)
        task.add_done_callback(self._harvested)

    def _harvested(self, task: "asyncio.Task[str]") -> None:
        self.harvests.discard(task)
        if not task.cancelled() and task.exception() is not None:   # said, as the watcher said it before
            self._log(f"warning: notes not harvested: {task.exception()}")


def _kept_text(ref: str) -> str:
    return (f"\n\nThat attempt's work is kept as `{ref}` (`git log -p {ref}` shows it); your worktree starts "
            "clean from the base: take from it what is good.")

