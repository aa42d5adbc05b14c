"""One agent session, whatever the role: open or resume, turns, tells, abort, close.

A worker, the refinery and the Queen each hold an `AgentSession` and keep only their policy (what
to prompt, how to judge). The session hears its own events (`Backend.on_session`: nobody guesses
whose session an event is) and does, once for every role:

* usage: the backend reports session totals; the growth since the last report goes to the role's
  `on_usage`, and the totals are kept in runtime.db (`session_usage:<id>`) so a resume after a
  daemon restart carries them on (`SessionSpec.usage`);
* permissions: every request is answered by `hive.agents.permissions.decide` for the session's
  `Grant` (role, and the folder it may work in);
* activity and last words: the role's `on_activity` (its stall clock), and what the agent said last
  for `status` (`Runtime.set_last_message`);
* the one resume-on-error rule (`turn`): a session whose process ended just after its previous
  turn is resumed once and the text sent again; a turn hive aborted with a reason (stall, budget)
  ends with that reason, never with the session's own "aborted".

The calls the Backend protocol declares idempotent (abort, delete) are made without guards; the
ones that raise for a session that is gone (KeyError, RuntimeError) are caught here, not by roles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from hive import cost
from hive.agents import permissions
from hive.backends.base import BUSY, EXITED, MESSAGE, PERMISSION, USAGE, Backend, Event, SessionSpec, TurnResult, Usage
from hive.runtime import Runtime, process_start_time

GONE = (KeyError, RuntimeError)      # what the backend raises for a session that is gone
USAGE_KEY = "session_usage:{}"       # runtime.db: a session's usage totals as last reported
ACTIVITY = (BUSY, MESSAGE, USAGE, EXITED)


class SessionLost(RuntimeError):
    """The session did not take a turn, even resumed once."""


@dataclass(frozen=True)
class Grant:
    """What the session's agent may do: hive's policy for `role`, in `root` (the Queen: the
    repository it reads; `plan_root` the only folder it writes). Empty `root`: the session's cwd."""

    role: str
    root: str = ""
    plan_root: str = ""


def stored_usage(runtime: Runtime | None, session_id: str) -> Usage:
    """hive's record of a session's usage totals (empty when none)."""
    return cost.stored_usage(runtime.get(USAGE_KEY.format(session_id), "")) if runtime is not None and session_id else Usage()


class AgentSession:
    """One role's session with one backend; see the module docstring."""

    def __init__(self, backend: Backend, runtime: Runtime | None, grant: Grant, *,
                 on_usage: Callable[[Usage], None] | None = None,
                 on_activity: Callable[[], None] | None = None,
                 on_open: Callable[["AgentSession"], None] | None = None,
                 log: Callable[[str], None] | None = None):
        self.backend = backend
        self.runtime = runtime
        self.grant = grant
        self.on_usage = on_usage
        self.on_activity = on_activity
        self.on_open = on_open             # told of every session opened, a resume in `turn` too
        self.log = log
        self.id = ""
        self.spec: SessionSpec | None = None
        self.usage = Usage()               # the session's totals as last reported
        self.pid = 0
        self.in_turn = False
        self.abort_reason = ""             # why hive aborted the turn in progress

    # -- opening and closing ---------------------------------------------------------------------

    async def open(self, spec: SessionSpec) -> str:
        """Start the session, or continue `spec.resume` with its totals as hive recorded them."""
        if spec.resume:
            known = self.usage if spec.resume == self.id else stored_usage(self.runtime, spec.resume)
            spec = replace(spec, usage=replace(known))
        new_id = await self.backend.create_session(spec)
        if self.id and self.id != new_id:
            self.backend.on_session(self.id, None)
        self.usage = replace(spec.usage) if new_id == spec.resume else Usage()
        self.id, self.spec = new_id, spec
        self.backend.on_session(new_id, self._on_event)
        try:
            self.pid = (await self.backend.get_session_status(new_id)).pid or 0
        except GONE:
            self.pid = 0
        if self.on_open is not None:
            self.on_open(self)
        return new_id

    async def alive(self) -> bool:
        """Whether the session is open and its process has not exited."""
        if not self.id:
            return False
        try:
            return (await self.backend.get_session_status(self.id)).state != "exited"
        except GONE:
            return False

    def process(self) -> dict[str, Any]:
        """The runtime.db fields of the session's process (the `agents` table)."""
        return {"session_id": self.id, "pid": self.pid,
                "pid_start": process_start_time(self.pid) if self.pid else ""}

    async def abort(self, reason: str = "") -> None:
        """End the turn in progress; with a reason, the turn ends with it (stall, budget, stop)."""
        if reason and self.in_turn:
            self.abort_reason = reason
        if self.id:
            await self.backend.abort_session(self.id)

    async def close(self, abort: bool = False) -> None:
        """End and forget the session (`abort`: its process group ends at once)."""
        if self.id:
            if abort:
                await self.backend.abort_session(self.id)
            await self.backend.delete_session(self.id)
            self.backend.on_session(self.id, None)
            self.id = ""

    # -- turns -------------------------------------------------------------------------------------

    async def turn(self, text: str) -> TurnResult:
        """Send a turn and wait for its end. SessionLost: it could not be sent, resumed once."""
        self.abort_reason = ""
        self.in_turn = True
        try:
            result = await self._send(text)
        finally:
            self.in_turn = False
            self._active()
        if not result.ok and self.abort_reason:
            result = TurnResult(False, self.abort_reason)
        return result

    async def _send(self, text: str) -> TurnResult:
        try:
            return await self.backend.run_turn(self.id, text)
        except GONE:
            pass
        # the agent ended just after its previous turn: resume its session, send again
        try:
            await self.backend.abort_session(self.id)
            assert self.spec is not None
            await self.open(replace(self.spec, resume=self.id))
            if self.abort_reason:      # aborted meanwhile: the work is not sent again
                return TurnResult(False, self.abort_reason)
            return await self.backend.run_turn(self.id, text)
        except (*GONE, OSError) as exc:
            raise SessionLost(f"the agent session did not take the prompt: {exc}") from exc

    async def tell(self, text: str) -> bool:
        """A message queued behind the turn in progress; whether the session took it."""
        if not self.id:
            return False
        try:
            await self.backend.send_message_async(self.id, text)
        except GONE:
            return False
        return True

    # -- the session's events ----------------------------------------------------------------------

    async def _on_event(self, event: Event) -> None:
        if event.session_id != self.id:
            return
        if event.type in ACTIVITY:
            self._active()
        if event.type == USAGE and isinstance(event.data, Usage):
            self._grew(event.data)
        elif event.type == PERMISSION:
            await self._answer(event.data)
        elif event.type == MESSAGE and isinstance(event.data, dict) and event.data.get("role") == "assistant":
            if self.runtime is not None:
                self.runtime.set_last_message(self.id, str(event.data.get("text", "")))

    def _active(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    def _grew(self, totals: Usage) -> None:
        growth = totals.growth_since(self.usage)
        self.usage = totals
        if self.runtime is not None:
            self.runtime.put(USAGE_KEY.format(self.id), cost.dump_usage(totals))
        if self.on_usage is not None:
            self.on_usage(growth)

    async def _answer(self, request: Any) -> None:
        root = self.grant.root or (self.spec.cwd if self.spec is not None else "")
        verdict = (permissions.decide(request, role=self.grant.role, root=root, plan_root=self.grant.plan_root)
                   if root else permissions.Verdict(False, "the session has no folder to work in"))
        if not verdict.allow and self.log is not None:
            self.log(f"denied {request.tool} to {self.grant.role} ({verdict.reason})")
        await self.backend.reply_permission(self.id, request.request_id, verdict.allow, verdict.reason)
