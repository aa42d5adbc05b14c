"""The refinery: one long-lived LLM session per project for the merges git cannot do alone.

It gets a rebase conflict or failing test output plus the issue, works in the worker's worktree,
and answers in `.hive-result.jsonl` with `merged`, `rejected` or `needs_human`. The session starts
in the worktree it works in (so the agent CLI reports that folder as its cwd, and `cd <worktree>
&& git ...` is judged there) and its jail lets it write only that one; it is reused (resumed) for
the next task in the same worktree and renewed for another worktree, or once it passes 100k tokens
or 20 messages, so its context never overflows. A session that crashes is replaced.

Its process ends after each task, before hive reads the answer: hive then rewrites that worktree
(the merge's resets, its tests, a person's fix after `needs_human`), and nothing in a jail that may
write there may run meanwhile — a link swapped in during a reset would be followed. The next task
in that worktree resumes the session, so its context lives on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path

from hive import cost, git
from hive.agents import jails, protocol
from hive.agents.session import AgentSession, Grant, SessionLost
from hive.backends.base import Backend, SessionSpec, TurnResult, Usage
from hive.backends.transcripts import issue_folder, new_transcript
from hive.merge.host import RefineryHost
from hive.prompts import load, material, render
from hive.state.issue_file import Issue

RENEW_TOKENS = 100_000
RENEW_MESSAGES = 20
REFINERY_STATUSES = ("merged", "rejected", "needs_human")

SYSTEM_PROMPT = load("refinery-system")


@dataclass
class Verdict:
    status: str            # merged | rejected | needs_human | crashed
    summary: str = ""


class Refinery:
    """The refinery's policy: when its session is renewed, what it is asked, how its answer reads,
    and whose merge its spending goes to. The session itself is an `AgentSession`."""

    def __init__(self, host: RefineryHost, backend: Backend):
        self.host = host
        self.backend = backend
        self.session = AgentSession(backend, host.runtime, Grant("refinery"), on_usage=self._spent,
                                    on_open=self._record_agent, log=host.log)
        self.messages = 0
        self.renewals = 0
        self.cwd = ""                        # the worktree its process runs in (its jail's), while it runs
        self.last = ("", "")                 # (session id, worktree) of the last task's session, to resume
        self.unrecorded: dict[str, Usage] = {}   # issue -> spend on its merge not yet on hive/state
        self.issue_id = ""                   # the issue of the task in progress
        self.spent = Usage()                 # everything its sessions spent in this process
        self._saved: tuple[str, str] | None = None   # what `_save_unrecorded` last wrote

    @property
    def session_id(self) -> str:
        """The session of the task in progress, else of the last one (resumed for the next task in
        its worktree)."""
        return self.session.id or self.last[0]

    @property
    def tokens(self) -> int:
        """The session's tokens so far (cache reads included): past RENEW_TOKENS it is renewed."""
        return self.session.usage.total_tokens

    def _spent(self, grown: Usage) -> None:
        """The session's totals grew: the growth is spent on the merge in progress."""
        self.host.runtime.put("refinery_tokens", str(self.tokens))
        self.host.runtime.update_agent(_agent_id(self.session_id), tokens=self.session.usage.counted_tokens)
        self.spent = self.spent.plus(grown)
        if self.issue_id:
            self.unrecorded[self.issue_id] = self.unrecorded.get(self.issue_id, Usage()).plus(grown)
            self._save_unrecorded()

    def _save_unrecorded(self) -> None:
        """The spend not yet on hive/state, for `status` and a restarted daemon: written when it
        changed (every finalize asks, and most merges never reach the refinery)."""
        saved = (cost.dump_usage(self._sum_unrecorded()), self.issue_id or next(iter(self.unrecorded), ""))
        if saved != self._saved:
            self.host.runtime.put(cost.REFINERY_IN_FLIGHT_KEY, saved[0])
            self.host.runtime.put("refinery_issue", saved[1])
            self._saved = saved

    def _sum_unrecorded(self) -> Usage:
        total = Usage()
        for usage in self.unrecorded.values():
            total = total.plus(usage)
        return total

    def take_usage(self, issue_id: str) -> dict[str, str]:
        """The trailers of what the refinery spent on `issue_id`'s merge, for the commit that ends
        it (a refinery record of `hive.cost`); {} when it spent nothing. Taken once."""
        usage = self.unrecorded.pop(issue_id, None)
        self._save_unrecorded()
        if usage is None or not (usage.total_tokens or usage.cost_usd):
            return {}
        return cost.usage_trailers(usage, usage.counted_tokens, role="refinery",
                                   model=self.host.config.model_for("refinery"), backend=self.backend.name)

    async def _session(self, worktree: Path, issue_id: str) -> None:
        """Open the task's session: the last one resumed when it worked in `worktree` and is not
        due for renewal, else a new one; a session that cannot be resumed is replaced."""
        resume = self.last[0] if self.last[1] == str(worktree) else ""
        if resume and (self.tokens > RENEW_TOKENS or self.messages >= RENEW_MESSAGES):
            self.host.log(f"refinery: renewing its session ({self.messages} messages, {self.tokens} tokens)")
            self.renewals += 1
            self.host.runtime.put("refinery_renewals", str(self.renewals))
            resume = ""
        self.last = ("", "")
        config = self.host.config
        spec = SessionSpec(role="refinery", cwd=str(worktree),
                           model=config.model_for("refinery"), system_prompt=SYSTEM_PROMPT,
                           env=git.agent_git_env(),
                           jail=jails.worktree_jail(config, self.host.project.paths, worktree),
                           transcript=new_transcript(issue_folder(self.host.project.paths.hive_dir, issue_id),
                                                     "refinery"), resume=resume)
        if resume:
            try:
                await self.session.open(spec)
            except Exception as exc:  # noqa: BLE001 - its context is lost, the task is not: a new session
                self.host.log(f"refinery: its session {resume} could not be resumed ({exc}): a new one starts")
                await self.session.close(abort=True)
                resume = ""
        if not resume:
            await self.session.open(replace(spec, resume=""))
            self.messages = 0
        self.cwd = str(worktree)

    def in_worktree(self, worktree: Path) -> bool:
        """Whether the refinery's process runs in, and may write, `worktree`."""
        return bool(self.cwd) and self.cwd == str(worktree)

    async def resolve(self, issue: Issue, worktree: Path, target: str, problem: str) -> Verdict:
        """One refinery task; the verdict comes from the result file the session writes."""
        (worktree / protocol.RESULT_FILE).unlink(missing_ok=True)
        try:
            await self._session(worktree, issue.id)
        except Exception as exc:  # noqa: BLE001 - a refinery that cannot start counts as a crash
            return Verdict("crashed", f"could not start a refinery session: {exc}")
        agent_id = _agent_id(self.session_id)
        self.issue_id = issue.id
        self.messages += 1
        self.host.runtime.put("refinery_messages", str(self.messages))
        self.host.runtime.update_agent(agent_id, state="busy", issue_id=issue.id)
        try:
            turn = await self.session.turn(task_prompt(issue, worktree, target, problem))
        except SessionLost as exc:
            turn = TurnResult(False, str(exc))
        finally:
            self.issue_id = ""
            resumable = self.session.id
            await self.close()
        if not turn.ok:
            return Verdict("crashed", turn.error or "the refinery's turn failed")
        self.last = (resumable, str(worktree))
        result = await asyncio.to_thread(protocol.read_result, worktree, REFINERY_STATUSES)
        if result.status not in REFINERY_STATUSES:
            return Verdict("crashed", result.problem)
        return Verdict(result.status, result.summary)

    async def abort(self) -> None:
        await self.session.abort()

    def _record_agent(self, session: AgentSession) -> None:
        """List the session's process among the daemon's agents, so that a daemon started after
        this one was killed ends it (as it does workers) before anything touches its worktree."""
        self.host.runtime.put("refinery_session", session.id)
        self.host.runtime.add_agent(id=_agent_id(session.id), issue_id=self.issue_id, role="refinery",
                                    backend=self.backend.name, **session.process())

    async def close(self) -> None:
        """End the session's process (and everything in its jail) and forget it."""
        if self.session.id:
            agent_id = _agent_id(self.session.id)
            await self.session.close()
            self.host.runtime.remove_agent(agent_id)
        self.cwd = ""
        self.last = ("", "")


def _agent_id(session_id: str) -> str:
    return f"refinery-{session_id}"


def task_prompt(issue: Issue, worktree: Path, target: str, problem: str) -> str:
    return render("refinery-task", issue_id=issue.id, target=target, worktree=worktree, problem=problem.strip(),
                  body=material(f"{issue.title}\n\n{issue.body.strip() or '(no description)'}",
                                f"issue {issue.id}: its title and description on hive/state"))
