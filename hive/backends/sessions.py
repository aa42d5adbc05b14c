"""The session half every backend shares: the event bus, the session table, turns, the end.

A backend keeps its sessions in `self._sessions` (id → its own session record). Each record has
`id`, `spec` (its `SessionSpec`), `state()`, `usage`, `proc` (an `AgentProcess`, or None),
`last_activity`, `messages` (the recent history), `permissions` (requests waiting for an answer)
and `deleted`. `SessionBackend`
answers from them the protocol's status call and the introspection calls tests and debugging use
(`list_sessions`, `get_messages`, `get_pending_permissions`: not part of the protocol), and holds
the plumbing that does not depend on the CLI:

* `on`, `on_session` and `_emit` (no event of a deleted session; a failing handler is logged, not
  raised; a permission request that no handler hears is refused, so no agent waits on it forever);
* `send_message_async` / `run_turn` around the backend's `_send_turn`: each turn sent gets exactly
  one `idle`, turns end in the order they were sent, so `run_turn` returns its own turn's result
  (the one `idle` that ends it, or a failure when the process exits or the session is deleted);
* `delete_session`, `stop` and the record of deleted sessions kept for a later resume;
* the session's transcript (`hive/backends/transcripts.py`), written here for every backend from
  what passes through: the turns sent, the events emitted, the permission answers.

A backend implements `_send_turn`, `_reply_permission`, `_shut_down` (end the process of a
forgotten session) and `_remember` (what a later resume of a deleted session carries on), and
drives its CLI.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import logging
from dataclasses import dataclass, replace
from typing import Any

from hive.backends.base import (
    EVENT_TYPES, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, Event, Handler, PermissionRequest, SessionStatus,
    TurnResult,
)
from hive.backends.transcripts import Recorder, cut

log = logging.getLogger(__name__)

MAX_PAST_SESSIONS = 1000          # deleted sessions remembered for a later resume
UNHEARD = "no one answers this session's requests"


class EventBus:
    """The `on()`/`on_session()`/emit half of the protocol."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        self._by_session: dict[str, Handler] = {}

    def on(self, event_type: str, handler: Handler) -> None:
        if event_type not in EVENT_TYPES and event_type != "*":
            raise ValueError(f"unknown event type {event_type!r}")
        self._handlers.setdefault(event_type, []).append(handler)

    def on_session(self, session_id: str, handler: Handler | None) -> None:
        if handler is None:
            self._by_session.pop(session_id, None)
        else:
            self._by_session[session_id] = handler

    async def emit(self, event: Event) -> bool:
        """Call the event's handlers; whether it had any."""
        mine = self._by_session.get(event.session_id)
        handlers = (*self._handlers.get(event.type, ()), *self._handlers.get("*", ()), *((mine,) if mine else ()))
        for handler in handlers:
            outcome = handler(event)
            if outcome is not None:
                await outcome
        return bool(handlers)


@dataclass(eq=False)
class _Turn:
    """A turn sent and not ended yet; `waiter` is run_turn's (None for send_message_async)."""

    waiter: asyncio.Future[TurnResult] | None

    def resolve(self, result: TurnResult) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(result)


class SessionBackend(abc.ABC):
    """The shared base of the backends; see the module docstring."""

    name: str
    kill_grace = 2.0                 # seconds between SIGTERM and SIGKILL, and for a clean exit

    def __init__(self) -> None:
        self._bus = EventBus()
        self._sessions: dict[str, Any] = {}
        self._past: dict[str, Any] = {}       # deleted sessions (id → `_remember`'s record)
        self._turns: dict[str, collections.deque[_Turn]] = {}   # per session: turns sent, not ended
        self._recorder = Recorder(self.name)

    async def _reader_done(self, reader: "asyncio.Task[None] | None") -> None:
        """Wait (a little) for a session's stdout reader to deliver its last events."""
        if reader is None or reader is asyncio.current_task() or reader.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(reader), self.kill_grace + 1)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass

    # -- what each backend writes ------------------------------------------------------------------
    @abc.abstractmethod
    async def _send_turn(self, session_id: str, text: str) -> None:
        """Deliver one user turn to the session's process, in the backend's own protocol."""

    @abc.abstractmethod
    async def _reply_permission(self, session_id: str, request_id: str, allow: bool, message: str) -> None:
        """Answer a permission request of the agent CLI (recorded by `reply_permission`)."""

    @abc.abstractmethod
    async def _shut_down(self, s: Any, patient: bool) -> None:
        """End the process of a session that is forgotten already (see `_end`)."""

    def _remember(self, s: Any) -> Any:
        """The record of a deleted session that a later resume carries on."""
        return replace(s.usage)

    # -- events ------------------------------------------------------------------------------------
    def on(self, event_type: str, handler: Handler) -> None:
        self._bus.on(event_type, handler)

    def on_session(self, session_id: str, handler: Handler | None) -> None:
        self._bus.on_session(session_id, handler)

    async def _emit(self, s: Any, type_: str, data: Any = None) -> None:
        if s.deleted or not s.id:
            return
        self._record_event(s, type_, data)
        try:
            heard = await self._bus.emit(Event(type_, s.id, data))
            if not heard and type_ == PERMISSION:
                await self.reply_permission(s.id, data.request_id, False, UNHEARD)
        except Exception:                               # a bad handler must not kill the reader
            log.exception("%s backend: %s handler failed for session %s", self.name, type_, s.id)
        if type_ == IDLE:
            self._turn_ended(s.id, data)
        elif type_ == EXITED:
            self._end_turns(s.id, TurnResult(ok=False, error=f"{self.name} process exited"))

    def _record_event(self, s: Any, type_: str, data: Any) -> None:
        if type_ == MESSAGE and isinstance(data, dict):
            tool = {"tool": str(data["tool"])} if data.get("tool") else {}
            self._recorder.record(s, "message", role=str(data.get("role", "")), text=cut(data.get("text")), **tool)
        elif type_ == IDLE and isinstance(data, TurnResult):
            self._recorder.turn_ended(s, data.ok, data.error)
        elif type_ == PROVIDER_ERROR and isinstance(data, dict):
            self._recorder.record(s, "error", status=data.get("status"), message=cut(data.get("message")))
        elif type_ == EXITED:
            self._recorder.record(s, "exit", code=(data or {}).get("exit_code"))
            self._recorder.pause(s)

    def _turn_ended(self, session_id: str, result: TurnResult) -> None:
        turns = self._turns.get(session_id)
        if not turns:
            return
        turns.popleft().resolve(result)

    def _end_turns(self, session_id: str, result: TurnResult) -> None:
        for turn in self._turns.pop(session_id, ()):
            turn.resolve(result)

    # -- turns -------------------------------------------------------------------------------------
    async def send_message_async(self, session_id: str, text: str) -> None:
        await self._send(session_id, text, None)

    async def run_turn(self, session_id: str, text: str) -> TurnResult:
        waiter: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        await self._send(session_id, text, waiter)
        return await waiter

    async def _send(self, session_id: str, text: str, waiter: asyncio.Future[TurnResult] | None) -> None:
        self._get(session_id)                           # KeyError before anything is queued
        turns = self._turns.setdefault(session_id, collections.deque())
        turn = _Turn(waiter)
        turns.append(turn)
        self._recorder.record(self._get(session_id), "prompt", text=cut(text))
        try:
            await self._send_turn(session_id, text)
        except BaseException:
            # a send that failed gets no idle, so it takes no place among the turns
            if turn in turns:
                turns.remove(turn)
            raise

    # -- permissions -------------------------------------------------------------------------------
    async def reply_permission(self, session_id: str, request_id: str, allow: bool,
                               message: str = "") -> None:
        s = self._sessions.get(session_id)
        request = s.permissions.get(request_id) if s is not None else None
        if request is not None:
            self._recorder.record(s, "permission", tool=request.tool, command=cut(request.command),
                                  paths=[cut(p) for p in request.paths[:20]], allow=bool(allow),
                                  reason=cut(message))
        await self._reply_permission(session_id, request_id, allow, message)

    # -- the end -----------------------------------------------------------------------------------
    async def delete_session(self, session_id: str) -> None:
        await self._end(session_id, patient=True)

    async def stop(self) -> None:
        """End every session at once: busy processes are killed, idle ones leave cleanly."""
        await asyncio.gather(*(self._end(sid, patient=False) for sid in list(self._sessions)),
                             return_exceptions=True)

    async def _end(self, session_id: str, patient: bool) -> None:
        """Forget a session: no more events; let its process finish (when patient) or kill it."""
        s = self._sessions.pop(session_id, None)
        if s is None:
            return
        s.deleted = True
        self._bus.on_session(s.id, None)
        self._past[s.id] = self._remember(s)
        while len(self._past) > MAX_PAST_SESSIONS:
            self._past.pop(next(iter(self._past)))
        self._end_turns(s.id, TurnResult(ok=False, error="session deleted"))
        await self._shut_down(s, patient)
        self._recorder.close(s)

    # -- status and introspection ------------------------------------------------------------------
    def _get(self, session_id: str) -> Any:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"no {self.name} session {session_id!r}") from None

    def _status(self, s: Any) -> SessionStatus:
        return SessionStatus(session_id=s.id, state=s.state(), usage=replace(s.usage),
                             pid=s.proc.pid if s.proc is not None else None, last_activity=s.last_activity)

    async def get_session_status(self, session_id: str) -> SessionStatus:
        return self._status(self._get(session_id))

    async def list_sessions(self) -> list[SessionStatus]:
        return [self._status(s) for s in self._sessions.values()]

    async def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        return [dict(m) for m in self._get(session_id).messages]

    async def get_pending_permissions(self, session_id: str) -> list[PermissionRequest]:
        return list(self._get(session_id).permissions.values())
