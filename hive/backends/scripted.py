"""The `scripted` backend: real subprocess agents that follow a script, for tests and `git hive demo`.

Each session is one long-lived `scripted_agent` process (see `hive/backends/scripted_agent.py`
for the script format and the JSON-lines protocol), started in its own process group in the
session's worktree. The backend writes user turns and permission answers on the agent's stdin and
turns the agent's stdout lines into `Event`s:

    agent line                        event
    {"type":"busy"}                   busy
    {"type":"message","text"}         message   {"role": "assistant", "text"}
    {"type":"usage",...}  (a delta)   usage     Usage: totals for the session
    {"type":"permission",...}         permission PermissionRequest (answer with reply_permission)
    {"type":"provider_error",...}     provider_error {"status", "message"}
    {"type":"result",...}             idle      TurnResult
    end of the process                idle TurnResult(ok=False, ...) first if a turn was open,
                                      then exited {"exit_code"}

Scripts come only from the file the user or the test names (`script_path`), never from
`hive/state` (DESIGN §7). With no script the agent runs its built-in successful script.

Semantics the orchestrator can rely on:
* `send_message_async` marks the session busy at once (no race with `get_session_status`); turns
  sent while one runs are queued by the agent and run in order, each with its own busy/idle.
* `abort_session` kills the whole process group (SIGTERM, SIGKILL after `kill_grace` seconds);
  when it returns, `idle` (ok=False, error "aborted") and `exited` have been emitted and the
  state is "exited".
* `delete_session` closes stdin, waits up to `kill_grace`, kills the group if needed and forgets
  the session; no event of that session is emitted after `delete_session` is called.
* `create_session` with `spec.resume` reuses that id: a live session with that id is returned as
  it is; otherwise a new agent process starts under the same id and the session's usage totals
  carry on (like Claude's `--resume`). The agent's attempt counters are per issue anyway.
* Unknown session ids raise KeyError; sending to an exited session raises RuntimeError.
"""

from __future__ import annotations

import asyncio
import json
import collections
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive.backends import scripted_agent
from hive.backends.processes import amount, count, group_gone, killpg
from hive.backends.sessions import SessionBook
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, Event, EventBus, Handler,
    PermissionRequest, SessionSpec, TurnResult, Usage,
)
from hive.errors import BadInput

log = logging.getLogger(__name__)

AGENT_PATH = str(Path(scripted_agent.__file__).resolve())
LINE_LIMIT = 2 * 1024 * 1024      # longest stdout line kept; longer ones are discarded
MAX_MESSAGES = 500                # message history kept per session
MAX_MESSAGE_CHARS = 64 * 1024     # longest message text kept
STDERR_TAIL = 4096
MAX_PAST_SESSIONS = 1000          # deleted sessions whose usage is kept for a later resume
MAX_ARG_CHARS = 32 * 1024         # a system prompt is passed on argv (Linux: 128 KiB per arg)


@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: asyncio.subprocess.Process
    usage: Usage = field(default_factory=Usage)
    messages: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_MESSAGES))
    permissions: dict[str, PermissionRequest] = field(default_factory=dict)
    pending_turns: int = 0           # turns sent whose result has not come yet
    last_activity: float = field(default_factory=time.monotonic)
    exit_code: int | None = None
    exited: bool = False
    aborted: bool = False
    deleted: bool = False
    script: str = ""                 # the script entry the agent chose (from its init line)
    discarded_lines: int = 0         # overlong or non-JSON stdout lines
    stderr_tail: bytes = b""
    reader: asyncio.Task | None = None
    stderr_reader: asyncio.Task | None = None
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def state(self) -> str:
        if self.exited or self.proc.returncode is not None:
            return "exited"
        return "busy" if self.pending_turns > 0 else "idle"


class ScriptedBackend(SessionBook):
    """Runs `scripted_agent` processes; see the module docstring."""

    name = "scripted"
    kill_grace = 2.0                 # seconds between SIGTERM and SIGKILL, and for a clean exit

    def __init__(self, script_path: str | None = None, hive_dir: str | None = None,
                 python: str = sys.executable):
        self.script_path = str(Path(script_path).resolve()) if script_path else None
        if self.script_path:
            try:
                scripted_agent.load_script(self.script_path)
            except scripted_agent.ScriptError as e:
                raise BadInput(str(e), where=script_path) from None
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        self.python = python
        self._bus = EventBus()
        self._sessions: dict[str, _Session] = {}
        self._past_usage: dict[str, Usage] = {}     # usage of deleted sessions, for resume

    # -- events --------------------------------------------------------------------------------
    def on(self, event_type: str, handler: Handler) -> None:
        self._bus.on(event_type, handler)

    async def _emit(self, s: _Session, type_: str, data: Any = None) -> None:
        if s.deleted:
            return
        try:
            await self._bus.emit(Event(type_, s.id, data))
        except Exception:                               # a bad handler must not kill the reader
            log.exception("scripted backend: %s handler failed for session %s", type_, s.id)

    async def connect_with_reconnect(self) -> None:
        return None

    async def health_check(self) -> bool:
        return True

    async def stop(self) -> None:
        """End every session at once: busy agents are killed, idle ones leave cleanly."""
        await asyncio.gather(*(self._end(sid, patient=False) for sid in list(self._sessions)),
                             return_exceptions=True)

    # -- sessions ------------------------------------------------------------------------------
    async def create_session(self, spec: SessionSpec) -> str:
        sid = spec.resume or str(uuid.uuid4())
        old = self._sessions.get(sid)
        if old is not None and old.state() != "exited":
            return sid
        if old is not None:
            # the agent is gone, what it started may not be (a child ignoring SIGTERM survives the
            # group's TERM at exit): end its process group before the session forgets it
            await self._kill_group(old)
        # `--opt=value` throughout: a label or prompt starting with "-" stays a value
        argv = [self.python, "-I", "-S", AGENT_PATH, f"--session-id={sid}",
                f"--role={spec.role or 'worker'}"]
        if spec.issue_id:
            argv.append(f"--issue={spec.issue_id}")
        argv += [f"--label={label}" for label in spec.labels]
        if self.hive_dir:
            argv.append(f"--hive-dir={self.hive_dir}")
        if self.script_path:
            argv.append(f"--script={self.script_path}")
        if spec.model:
            argv.append(f"--model={spec.model}")
        if spec.system_prompt:
            argv.append(f"--system-prompt={spec.system_prompt[:MAX_ARG_CHARS]}")
        env = {**os.environ, **spec.env}
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=spec.cwd, env=env, start_new_session=True, limit=LINE_LIMIT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        s = _Session(sid, replace(spec, resume=sid), proc)
        if old is not None:
            s.usage = replace(old.usage)
            s.messages.extend(old.messages)
        elif sid in self._past_usage:
            s.usage = self._past_usage.pop(sid)
        self._sessions[sid] = s
        s.reader = asyncio.create_task(self._read_stdout(s), name=f"scripted-{sid[:8]}-stdout")
        s.stderr_reader = asyncio.create_task(self._read_stderr(s), name=f"scripted-{sid[:8]}-stderr")
        return sid

    async def abort_session(self, session_id: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.exited:
            return
        s.aborted = True
        await self._kill_group(s)
        await self._wait_reader(s)

    async def delete_session(self, session_id: str) -> None:
        await self._end(session_id, patient=True)

    async def _end(self, session_id: str, patient: bool) -> None:
        """Forget a session: close stdin, let the agent finish (when patient) or kill it."""
        s = self._sessions.pop(session_id, None)
        if s is None:
            return
        s.deleted = True
        self._past_usage[s.id] = s.usage
        while len(self._past_usage) > MAX_PAST_SESSIONS:
            self._past_usage.pop(next(iter(self._past_usage)))
        if s.proc.returncode is None:
            if s.proc.stdin is not None and not s.proc.stdin.is_closing():
                s.proc.stdin.close()
            # an idle agent leaves at once when stdin closes; a busy one first ends its turn
            if patient or s.pending_turns == 0:
                try:
                    await asyncio.wait_for(s.proc.wait(), self.kill_grace)
                except asyncio.TimeoutError:
                    pass
        await self._kill_group(s)
        await self._wait_reader(s)

    # -- messages ------------------------------------------------------------------------------
    async def send_message_async(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        if s.state() == "exited":
            raise RuntimeError(f"scripted session {session_id} has exited")
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.pending_turns += 1
        s.last_activity = time.monotonic()
        try:
            await self._write(s, {"type": "user", "text": text})
        except (BrokenPipeError, ConnectionResetError) as e:
            s.pending_turns -= 1
            raise RuntimeError(f"scripted session {session_id} has exited") from e

    # -- permissions ---------------------------------------------------------------------------
    async def reply_permission(self, session_id: str, request_id: str, allow: bool,
                               message: str = "") -> None:
        s = self._sessions.get(session_id)
        if s is None or s.permissions.pop(request_id, None) is None:
            log.debug("scripted backend: no pending permission %s/%s", session_id, request_id)
            return
        try:
            await self._write(s, {"type": "permission_response", "request_id": request_id,
                                  "allow": bool(allow), "message": message})
        except (BrokenPipeError, ConnectionResetError):
            pass                                        # the agent is gone; its turn ends anyway

    # -- internals -----------------------------------------------------------------------------
    async def _write(self, s: _Session, obj: dict) -> None:

        stdin = s.proc.stdin
        if stdin is None or stdin.is_closing():
            raise BrokenPipeError("agent stdin is closed")
        async with s.write_lock:
            stdin.write(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
            await stdin.drain()

    async def _kill_group(self, s: _Session) -> None:
        """SIGTERM the session's process group, SIGKILL after the grace; stragglers too."""
        pgid = s.proc.pid                           # start_new_session: pid == pgid
        if s.proc.returncode is None:
            killpg(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(s.proc.wait(), self.kill_grace)
            except asyncio.TimeoutError:
                killpg(pgid, signal.SIGKILL)
                await s.proc.wait()
        # children left in the group (they may ignore SIGTERM, or the leader exited by itself)
        if killpg(pgid, signal.SIGTERM) and not await group_gone(pgid, self.kill_grace):
            killpg(pgid, signal.SIGKILL)
            await group_gone(pgid, self.kill_grace)

    async def _wait_reader(self, s: _Session) -> None:
        current = asyncio.current_task()
        for task in (s.reader, s.stderr_reader):
            if task is None or task is current or task.done():
                continue
            try:
                await asyncio.wait_for(asyncio.shield(task), self.kill_grace + 1)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass

    async def _read_stderr(self, s: _Session) -> None:
        stream = s.proc.stderr
        assert stream is not None
        while chunk := await stream.read(65536):
            s.stderr_tail = (s.stderr_tail + chunk)[-STDERR_TAIL:]

    async def _read_stdout(self, s: _Session) -> None:
        stream = s.proc.stdout
        assert stream is not None
        discarding = False
        while True:
            try:
                line = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as e:      # EOF
                if e.partial and not discarding:
                    await self._handle_line(s, e.partial)
                break
            except asyncio.LimitOverrunError as e:        # an overlong line: drop what is buffered
                if not discarding:
                    s.discarded_lines += 1
                discarding = True
                await stream.readexactly(e.consumed)
                continue
            if discarding:                                # the tail of an overlong line
                discarding = False
                continue
            await self._handle_line(s, line)
        code = await s.proc.wait()
        s.exit_code, s.exited = code, True
        s.last_activity = time.monotonic()
        s.permissions.clear()
        killpg(s.proc.pid, signal.SIGTERM)   # what the agent left behind (delete/abort SIGKILL it)
        if s.pending_turns > 0:
            s.pending_turns = 0
            if s.aborted:
                error = "aborted"
            else:
                error = f"agent exited with code {code} mid-turn"
                tail = s.stderr_tail.decode("utf-8", errors="replace").strip().splitlines()
                if tail:
                    error += f": {tail[-1][:300]}"
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
        await self._emit(s, EXITED, {"exit_code": code})

    async def _handle_line(self, s: _Session, raw: bytes) -> None:

        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            s.discarded_lines += 1
            return
        s.last_activity = time.monotonic()
        kind = msg.get("type")
        if kind == "init":
            s.script = str(msg.get("script", ""))
        elif kind == "busy":
            await self._emit(s, BUSY)
        elif kind == "message":
            text = str(msg.get("text", ""))[:MAX_MESSAGE_CHARS]
            s.messages.append({"role": "assistant", "text": text, "at": time.time()})
            await self._emit(s, MESSAGE, {"role": "assistant", "text": text})
        elif kind == "usage":
            s.usage.input_tokens += count(msg.get("input_tokens"))
            s.usage.output_tokens += count(msg.get("output_tokens"))
            s.usage.cost_usd += amount(msg.get("cost_usd"))
            await self._emit(s, USAGE, replace(s.usage))
        elif kind == "permission":
            paths = msg.get("paths") or []
            req = PermissionRequest(
                request_id=str(msg.get("request_id", "")), tool=str(msg.get("tool", "")),
                input=msg.get("input") if isinstance(msg.get("input"), dict) else {},
                paths=[str(p) for p in paths] if isinstance(paths, list) else [],
                command=str(msg.get("command", "")))
            s.permissions[req.request_id] = req
            await self._emit(s, PERMISSION, req)
        elif kind == "provider_error":
            await self._emit(s, PROVIDER_ERROR, {"status": msg.get("status"),
                                                 "message": str(msg.get("message", ""))})
        elif kind == "result":
            s.pending_turns = max(0, s.pending_turns - 1)
            ok = bool(msg.get("ok"))
            await self._emit(s, IDLE, TurnResult(
                ok=ok, error="" if ok else str(msg.get("error") or "turn failed"),
                provider_error=bool(msg.get("provider_error")),
                text=str(msg.get("text", ""))[:MAX_MESSAGE_CHARS]))
        else:
            s.discarded_lines += 1




