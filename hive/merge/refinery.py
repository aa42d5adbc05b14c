"""The refinery: one long-lived LLM session per project for the merges git cannot do alone.

It gets a rebase conflict or failing test output plus the issue, works in the worker's worktree,
and answers in `.hive-result.jsonl` with `merged`, `rejected` or `needs_human`. The session starts
in the worktree it works in (so the agent CLI reports that folder as its cwd, and `cd <worktree>
&& git ...` is judged there) and its jail lets it write only that one; it is reused for the next
task in the same worktree and renewed for another worktree, or once it passes 100k tokens or 20
messages, so its context never overflows. A session that crashes is replaced.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from hive import cost, git
from hive.agents import jails, protocol
from hive.backends.base import USAGE, Backend, Event, SessionSpec, Usage
from hive.backends.transcripts import issue_folder, new_transcript
from hive.merge.host import RefineryHost
from hive.prompts import load, material, render
from hive.runtime import process_start_time
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
    def __init__(self, host: RefineryHost, backend: Backend):
        self.host = host
        self.backend = backend
        self.session_id = ""
        self.messages = 0
        self.tokens = 0
        self.renewals = 0
        self.root = ""                       # the worktree of the task in progress
        self.cwd = ""                        # the worktree the session was started in (and its jail's)
        self.session_usage = Usage()         # the session's totals as last reported
        self.unrecorded: dict[str, Usage] = {}   # issue -> spend on its merge not yet on hive/state
        self.issue_id = ""                   # the issue of the task in progress
        self.spent = Usage()                 # everything its sessions spent in this process

    def owns(self, session_id: str) -> bool:
        return bool(session_id) and session_id == self.session_id

    def on_event(self, event: Event) -> None:
        """USAGE events of the refinery's session (routed here by the pipeline; its turns end in run_turn)."""
        if not self.owns(event.session_id):
            return
        if event.type == USAGE:
            self.tokens = event.data.total_tokens
            self.host.runtime.put("refinery_tokens", str(self.tokens))
            self.host.runtime.update_agent(_agent_id(self.session_id), tokens=event.data.counted_tokens)
            self._spent(event.data)

    def _spent(self, totals: Usage) -> None:
        """The session's totals grew: the growth is spent on the merge in progress."""
        grown = totals.growth_since(self.session_usage)
        self.session_usage = totals
        self.spent = self.spent.plus(grown)
        self.host.runtime.put(f"session_usage:{self.session_id}", cost.dump_usage(totals))
        if self.issue_id:
            self.unrecorded[self.issue_id] = self.unrecorded.get(self.issue_id, Usage()).plus(grown)
            self._save_unrecorded()

    def _save_unrecorded(self) -> None:
        self.host.runtime.put(cost.REFINERY_IN_FLIGHT_KEY, cost.dump_usage(self._sum_unrecorded()))
        self.host.runtime.put("refinery_issue", self.issue_id or next(iter(self.unrecorded), ""))

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

    async def _session(self, worktree: Path, issue_id: str) -> str:
        if self.session_id and self.cwd != str(worktree):
            await self.close()                 # a session starts in (and may write only) its worktree
        if self.session_id and (self.tokens > RENEW_TOKENS or self.messages >= RENEW_MESSAGES):
            self.host.log(f"refinery: renewing its session ({self.messages} messages, {self.tokens} tokens)")
            await self.close()
            self.renewals += 1
            self.host.runtime.put("refinery_renewals", str(self.renewals))
        if self.session_id:
            status = await self.backend.get_session_status(self.session_id)
            if status.state == "exited":
                await self.close()
        if not self.session_id:
            config = self.host.config
            spec = SessionSpec(role="refinery", cwd=str(worktree),
                               model=config.model_for("refinery"), system_prompt=SYSTEM_PROMPT,
                               env=git.agent_git_env(),
                               jail=jails.worktree_jail(config, self.host.project.paths, worktree),
                               transcript=new_transcript(issue_folder(self.host.project.paths.hive_dir, issue_id),
                                                         "refinery"))
            self.session_id = await self.backend.create_session(spec)
            self.cwd = str(worktree)
            self.messages = 0
            self.tokens = 0
            self.session_usage = Usage()
            self.host.runtime.put("refinery_session", self.session_id)
            await self._record_agent()
        return self.session_id

    def in_worktree(self, worktree: Path) -> bool:
        """Whether the refinery's session (idle or not) was started in, and may write, `worktree`."""
        return bool(self.session_id) and self.cwd == str(worktree)

    async def resolve(self, issue: Issue, worktree: Path, target: str, problem: str) -> Verdict:
        """One refinery task; the verdict comes from the result file the session writes."""
        (worktree / protocol.RESULT_FILE).unlink(missing_ok=True)
        try:
            session = await self._session(worktree, issue.id)
        except Exception as exc:  # noqa: BLE001 - a refinery that cannot start counts as a crash
            return Verdict("crashed", f"could not start a refinery session: {exc}")
        self.root, self.issue_id = str(worktree), issue.id
        self.messages += 1
        self.host.runtime.put("refinery_messages", str(self.messages))
        # `status` lists the refinery while it works on an issue, not while its session waits
        self.host.runtime.update_agent(_agent_id(session), state="busy", issue_id=issue.id)
        try:
            turn = await self.backend.run_turn(session, task_prompt(issue, worktree, target, problem))
        finally:
            self.root, self.issue_id = "", ""
            self.host.runtime.update_agent(_agent_id(session), state="idle", issue_id="")
        if not turn.ok:
            await self.close()
            return Verdict("crashed", turn.error or "the refinery's turn failed")
        result = await asyncio.to_thread(protocol.read_result, worktree, REFINERY_STATUSES)
        if result.status not in REFINERY_STATUSES:
            return Verdict("crashed", result.problem)
        return Verdict(result.status, result.summary)

    async def abort(self) -> None:
        if self.session_id:
            try:
                await self.backend.abort_session(self.session_id)
            except (KeyError, RuntimeError):
                pass

    async def _record_agent(self) -> None:
        """List the session's process among the daemon's agents, so that a daemon started after
        this one was killed ends it (as it does workers) before anything touches its worktree."""
        try:
            status = await self.backend.get_session_status(self.session_id)
        except (KeyError, RuntimeError):
            return
        pid = status.pid or 0
        self.host.runtime.add_agent(id=_agent_id(self.session_id), issue_id="", role="refinery",
                                      session_id=self.session_id, backend=self.backend.name, pid=pid,
                                      pid_start=process_start_time(pid) if pid else "")

    async def close(self) -> None:
        if self.session_id:
            try:
                await self.backend.delete_session(self.session_id)
            except (KeyError, RuntimeError):
                pass
            self.host.runtime.remove_agent(_agent_id(self.session_id))
            self.session_id = ""


def _agent_id(session_id: str) -> str:
    return f"refinery-{session_id}"


def task_prompt(issue: Issue, worktree: Path, target: str, problem: str) -> str:
    return render("refinery-task", issue_id=issue.id, target=target, worktree=worktree, problem=problem.strip(),
                  body=material(f"{issue.title}\n\n{issue.body.strip() or '(no description)'}",
                                f"issue {issue.id}: its title and description on hive/state"))
