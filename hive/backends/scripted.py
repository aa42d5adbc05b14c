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
import collections
import os
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive import module_process
from hive.backends import scripted_agent
from hive.backends.agent_process import AgentProcess
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, PermissionRequest, SessionSpec,
    TurnResult, Usage,
)
from hive.backends.jails import session_jail
from hive.backends.reports import amount, count, table
from hive.backends.sessions import SessionBackend
from hive.errors import BadInput
from hive.jail import JailSpec

AGENT_PATH = str(Path(scripted_agent.__file__).resolve())
AGENT_BYTECODE = module_process.bytecode(AGENT_PATH)
LINE_LIMIT = 2 * 1024 * 1024      # longest stdout line kept; longer ones are discarded
MAX_MESSAGES = 500                # message history kept per session
MAX_MESSAGE_CHARS = 64 * 1024     # longest message text kept
STDERR_TAIL = 4096
MAX_ARG_CHARS = 32 * 1024         # a system prompt is passed on argv (Linux: 128 KiB per arg)


@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: AgentProcess
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
    unknown_lines: int = 0           # JSON lines of no known type
    reader: asyncio.Task | None = None

    @property
    def discarded_lines(self) -> int:
        """Overlong, non-JSON or unknown stdout lines."""
        return self.proc.discarded_lines + self.unknown_lines

    def state(self) -> str:
        if self.exited or self.proc.returncode is not None:
            return "exited"
        return "busy" if self.pending_turns > 0 else "idle"


class ScriptedBackend(SessionBackend):
    """Runs `scripted_agent` processes; see the module docstring."""

    name = "scripted"
    kill_grace = 2.0                 # seconds between SIGTERM and SIGKILL, and for a clean exit

    def __init__(self, script_path: str | None = None, hive_dir: str | None = None,
                 python: str = sys.executable):
        super().__init__()
        self.script_path = str(Path(script_path).resolve()) if script_path else None
        if self.script_path:
            try:
                scripted_agent.load_script(self.script_path)
            except scripted_agent.ScriptError as e:
                raise BadInput(str(e), where=script_path) from None
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        self.python = python

    @classmethod
    def from_settings(cls, config: Any, *, hive_dir: str, repo_root: str) -> ScriptedBackend:
        script = config.scripted_script
        if script and not os.path.isabs(script):
            script = os.path.join(repo_root, script)
        return cls(script_path=script or None, hive_dir=hive_dir)

    async def connect_with_reconnect(self) -> None:
        return None

    async def health_check(self) -> bool:
        return True

    # -- sessions ------------------------------------------------------------------------------
    async def create_session(self, spec: SessionSpec) -> str:
        sid = spec.resume or str(uuid.uuid4())
        old = self._sessions.get(sid)
        if old is not None and old.state() != "exited":
            return sid
        if old is not None:
            # the agent is gone, what it started may not be (a child ignoring SIGTERM survives the
            # group's TERM at exit): end its process group before the session forgets it
            await old.proc.kill()
        try:
            proc = await AgentProcess.start(self._argv(sid, spec), cwd=spec.cwd, env={**os.environ, **spec.env},
                                            line_limit=LINE_LIMIT, kill_grace=self.kill_grace,
                                            stderr_limit=STDERR_TAIL, jail=self._jail(spec))
        except OSError as e:
            raise RuntimeError(f"cannot start the scripted agent: {e}") from None
        s = _Session(sid, replace(spec, resume=sid), proc)
        past = self._past.pop(sid, None)
        if old is not None:
            s.usage = replace(old.usage)
            s.messages.extend(old.messages)
        elif past is not None:
            s.usage = past
        else:
            s.usage = replace(spec.usage)    # a daemon restart: hive's record of the totals
        self._sessions[sid] = s
        s.reader = asyncio.create_task(self._read_stdout(s), name=f"scripted-{sid[:8]}-stdout")
        return sid

    def _jail(self, spec: SessionSpec) -> JailSpec | None:
        """The session's jail, plus the agent's script (read) and its record files (written)."""
        writable: tuple[str, ...] = ()
        if self.hive_dir:
            records = os.path.join(self.hive_dir, "scripted")
            os.makedirs(records, exist_ok=True)
            writable = (records,)
        readable = (AGENT_PATH, self.python, *((self.script_path,) if self.script_path else ()))
        return session_jail(spec, self.name, writable=writable, readable=readable)

    def _argv(self, sid: str, spec: SessionSpec) -> list[str]:
        # `--opt=value` throughout: a label or prompt starting with "-" stays a value
        argv = [*module_process.argv(AGENT_PATH, self.python), f"--session-id={sid}",
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
        return argv

    async def abort_session(self, session_id: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.exited:
            return
        s.aborted = True
        await s.proc.kill()
        await self._reader_done(s.reader)

    async def _shut_down(self, s: _Session, patient: bool) -> None:
        if s.proc.returncode is None:
            s.proc.close_stdin()
            # an idle agent leaves at once when stdin closes; a busy one first ends its turn
            if patient or s.pending_turns == 0:
                await s.proc.wait_exit(self.kill_grace)
        await s.proc.kill()
        await self._reader_done(s.reader)

    # -- messages ------------------------------------------------------------------------------
    async def _send_turn(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        if s.state() == "exited":
            raise RuntimeError(f"scripted session {session_id} has exited")
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.pending_turns += 1
        s.last_activity = time.monotonic()
        try:
            await s.proc.write_json({"type": "user", "text": text})
        except (BrokenPipeError, ConnectionResetError) as e:
            s.pending_turns -= 1
            raise RuntimeError(f"scripted session {session_id} has exited") from e

    # -- permissions ---------------------------------------------------------------------------
    async def _reply_permission(self, session_id: str, request_id: str, allow: bool,
                                message: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.permissions.pop(request_id, None) is None:
            return
        try:
            await s.proc.write_json({"type": "permission_response", "request_id": request_id,
                                     "allow": bool(allow), "message": message})
        except (BrokenPipeError, ConnectionResetError):
            pass                                        # the agent is gone; its turn ends anyway

    # -- internals -----------------------------------------------------------------------------
    async def _read_stdout(self, s: _Session) -> None:
        await s.proc.read_json_lines(lambda msg: self._handle_message(s, msg))
        await s.proc.exited.wait()
        code = s.proc.returncode
        s.exit_code, s.exited = code, True
        s.last_activity = time.monotonic()
        s.permissions.clear()
        s.proc.terminate_leftovers()     # what the agent left behind (delete/abort SIGKILL it)
        if s.pending_turns > 0:
            s.pending_turns = 0
            if s.aborted:
                error = "aborted"
            else:
                error = f"agent exited with code {code} mid-turn"
                await s.proc.wait_stderr(1.0)
                tail = s.proc.last_stderr_line()
                if tail:
                    error += f": {tail}"
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
        await self._emit(s, EXITED, {"exit_code": code})

    async def _handle_message(self, s: _Session, msg: dict[str, Any]) -> None:
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
            s.usage = s.usage.plus(Usage(
                input_tokens=count(msg.get("input_tokens")), output_tokens=count(msg.get("output_tokens")),
                cost_usd=amount(msg.get("cost_usd")), cache_write_tokens=count(msg.get("cache_write_tokens")),
                cache_read_tokens=count(msg.get("cache_read_tokens"))))
            await self._emit(s, USAGE, replace(s.usage))
        elif kind == "permission":
            await self._permission(s, msg)
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
            s.unknown_lines += 1

    async def _permission(self, s: _Session, msg: dict[str, Any]) -> None:
        paths = msg.get("paths") or []
        req = PermissionRequest(
            request_id=str(msg.get("request_id", "")), tool=str(msg.get("tool", "")),
            input=table(msg, "input"),
            paths=[str(p) for p in paths] if isinstance(paths, list) else [],
            command=str(msg.get("command", "")))
        s.permissions[req.request_id] = req
        await self._emit(s, PERMISSION, req)
