"""The `acp` backend: one ACP agent process per session (see the package docstring)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive.backends.acp.rpc import AgentGone, Peer, RpcError
from hive.backends.acp.translate import (
    MAX_EVENT_CHARS, content_text, permission_outcome, permission_request, provider_failure, session_cost,
    tool_call_text, turn_usage,
)
from hive.backends.agent_process import AgentProcess
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, PermissionRequest, SessionSpec,
    TurnResult, Usage,
)
from hive.backends.jails import cli_install, session_jail
from hive.backends.reports import count, table
from hive.backends.sessions import SessionBackend
from hive.errors import HiveError
from hive.jail import JailSpec, NoJail

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
CLIENT_INFO = {"name": "git-hive", "title": "git hive", "version": "0.1.0"}
# `_meta` is ACP's extension field (an agent ignores what it does not know). claude-agent-acp reads
# its SDK options there: no predicted next prompt, a model call after every turn no one reads.
SESSION_META = {"claudeCode": {"options": {"promptSuggestions": False}}}
INITIALIZE = {
    "protocolVersion": PROTOCOL_VERSION, "clientInfo": CLIENT_INFO,
    # files and terminals stay the agent's own, inside its jail (see the package docstring)
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
}
LINE_LIMIT = 16 * 1024 * 1024
MAX_MESSAGES = 500
MAX_MESSAGE_CHARS = 64 * 1024
STDERR_TAIL = 8192
# the modes, most asking first, that leave every edit and command to hive's policy
ASKING_MODES = ("default", "read-only", "ask", "manual")
DEFAULT_ENV = ("ANTHROPIC_*", "CLAUDE_*", "OPENAI_*", "CODEX_*")
DEFAULT_ENDPOINTS = ("https://api.anthropic.com", "https://api.openai.com")
BASE_URL_ENV = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL")
STOPS = {"max_tokens": "the model's output limit", "max_turn_requests": "too many model calls in one turn",
         "refusal": "the agent refused"}


@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: Peer | None = None
    usage: Usage = field(default_factory=Usage)
    cost_base: float = 0.0                 # the session's cost before this process (its count starts at 0)
    messages: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_MESSAGES))
    permissions: dict[str, PermissionRequest] = field(default_factory=dict)
    rpc_of: dict[str, tuple[Peer, Any, Any]] = field(default_factory=dict)   # request → (peer, rpc id, options)
    queue: collections.deque = field(default_factory=collections.deque)
    turn_active: bool = False
    turn_seq: int = 0
    prompt_sent: bool = False              # this turn's session/prompt is written
    cancelled: bool = False                # hive cancelled this turn: it ends not ok, whatever the agent says
    turn_done: asyncio.Event = field(default_factory=asyncio.Event)
    turn_used: int = 0                     # the most context tokens a usage_update named this turn
    text: list[str] = field(default_factory=list)   # the agent message being streamed
    message_id: str = ""
    last_text: str = ""
    instructions: str = ""                 # hive's instructions, sent with the first turn
    loading: bool = False                  # session/load replays history: not news
    aborting: bool = False
    deleted: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    tasks: set = field(default_factory=set)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def state(self) -> str:
        if not self.alive():
            return "exited"
        return "busy" if self.turn_active or self.queue else "idle"


class AcpBackend(SessionBackend):
    """Runs ACP agent processes; see the package docstring."""

    name = "acp"
    kill_grace = 2.0
    init_timeout = 60.0            # starting the process, `initialize`, session/new|load
    request_timeout = 30.0
    interrupt_grace = 10.0         # `session/cancel` until the prompt answers `cancelled`

    def __init__(self, command: str = "claude-agent-acp", hive_dir: str | None = None,
                 extra_env: dict[str, str] | None = None, endpoints: tuple[str, ...] = (),
                 provider_env: tuple[str, ...] = DEFAULT_ENV, mode: str = ""):
        super().__init__()
        self.argv = shlex.split(command or "")
        if not self.argv:
            raise HiveError("acp_command is empty")
        self.command = command
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        self.extra_env = dict(extra_env or {})
        self.endpoints = tuple(endpoints)
        self.provider_env = tuple(provider_env)
        self.mode = mode
        self._generations = itertools.count(1)

    @classmethod
    def from_settings(cls, config: Any, *, hive_dir: str, repo_root: str) -> AcpBackend:
        return cls(command=config.acp_command, hive_dir=hive_dir, endpoints=tuple(config.acp_endpoints.split()),
                   provider_env=tuple(config.acp_env.split()), mode=config.acp_mode)

    async def connect_with_reconnect(self) -> None:
        if shutil.which(self.argv[0]) is None:
            raise HiveError(f"ACP agent not found: {self.argv[0]!r} (set acp_command, e.g. to "
                            "claude-agent-acp or codex-acp from npm)")

    async def health_check(self) -> bool:
        """Whether the agent can start at all (an ACP agent names no provider hive could probe)."""
        return shutil.which(self.argv[0]) is not None

    # -- the process ---------------------------------------------------------------------------
    def _env(self, spec: SessionSpec) -> dict[str, str]:
        return {**os.environ, **self.extra_env, **spec.env}

    def _jail(self, spec: SessionSpec, env: dict[str, str]) -> JailSpec | None:
        """The session's jail plus the agent's install (read), the state folders of the agents
        ACP adapters drive (written: Claude Code's, Codex's), its endpoints and environment."""
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        claude = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
        codex = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        for folder in (claude, codex):
            folder.mkdir(parents=True, exist_ok=True)
        writable = (str(claude), str(codex), *(() if env.get("CLAUDE_CONFIG_DIR") else (str(home / ".claude.json"),)))
        endpoints = self.endpoints or tuple(env[k] for k in BASE_URL_ENV if env.get(k)) or DEFAULT_ENDPOINTS
        return session_jail(spec, self.name, writable=writable, readable=cli_install(self.argv[0]),
                            endpoints=endpoints, provider_env=self.provider_env)

    async def _spawn(self, s: _Session) -> Peer:
        env = self._env(s.spec)
        try:
            agent = await AgentProcess.start(self.argv, cwd=s.spec.cwd, env=env, line_limit=LINE_LIMIT,
                                             kill_grace=self.kill_grace, stderr_limit=STDERR_TAIL,
                                             jail=self._jail(s.spec, env))
        except FileNotFoundError as e:
            raise RuntimeError(f"ACP agent not found: {self.argv[0]!r} ({e.strerror})") from None
        except (OSError, NoJail) as e:
            raise RuntimeError(f"cannot start the ACP agent {self.argv[0]!r}: {e}") from None
        peer = Peer(agent, next(self._generations))
        old, s.proc = s.proc, peer
        if old is not None:
            await old.kill()
        s.cost_base = s.usage.cost_usd
        peer.reader = asyncio.create_task(self._read_stdout(s, peer), name=f"acp-{peer.pid}-stdout")
        try:
            answer = await peer.request("initialize", INITIALIZE, self.init_timeout)
        except BaseException as e:
            await peer.kill()
            if isinstance(e, (RpcError, AgentGone)):
                raise RuntimeError(f"the ACP agent {self.argv[0]!r} did not start: {self._why(peer, e)}") from None
            raise
        caps = answer.get("agentCapabilities") if isinstance(answer, dict) else None
        peer.capabilities = caps if isinstance(caps, dict) else {}
        return peer

    def _why(self, peer: Peer, error: Exception) -> str:
        tail = peer.agent.last_stderr_line()
        return f"{error}{f' ({tail})' if tail else ''}"

    # -- sessions ------------------------------------------------------------------------------
    async def create_session(self, spec: SessionSpec) -> str:
        old = self._sessions.get(spec.resume) if spec.resume else None
        if old is not None and old.alive():
            return old.id
        s = old or _Session(id="", spec=replace(spec))
        if old is None and spec.resume:
            past = self._past.pop(spec.resume, None) or spec.usage      # a daemon restart: hive's record
            s.usage = replace(past)
        s.spec = replace(spec)
        peer = await self._spawn(s)
        try:
            sid, result = await self._open(s, peer, spec)
            await self._configure(peer, sid, result, spec)
        except BaseException as e:
            await peer.kill()
            if isinstance(e, (RpcError, AgentGone)):
                raise RuntimeError(f"the ACP agent {self.argv[0]!r} opened no session: {self._why(peer, e)}") from None
            raise
        s.id = sid
        s.spec = replace(spec, resume=sid)
        self._sessions[sid] = s
        return sid

    async def _open(self, s: _Session, peer: Peer, spec: SessionSpec) -> tuple[str, Any]:
        """session/load of `spec.resume` when the agent can, else session/new (hive's
        instructions then go with the first turn)."""
        where = {"cwd": spec.cwd, "mcpServers": [], "_meta": SESSION_META}
        if spec.resume and peer.capabilities.get("loadSession"):
            s.id, s.loading = spec.resume, True
            try:
                result = await peer.request("session/load", {"sessionId": spec.resume, **where}, self.init_timeout)
                return spec.resume, result
            except RpcError as e:
                log.warning("acp backend: cannot load session %s (%s): starting a new one", spec.resume, e)
            finally:
                s.loading = False
        result = await peer.request("session/new", where, self.init_timeout)
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str) or not sid:
            raise RuntimeError(f"the ACP agent answered session/new without a session: {result!r:.200}")
        if s.id != sid:
            s.usage = Usage() if not spec.resume else s.usage
        s.instructions = spec.system_prompt
        return sid, result

    async def _configure(self, peer: Peer, sid: str, result: Any, spec: SessionSpec) -> None:
        """The mode that asks hive before edits and commands; the role's model when offered."""
        result = result if isinstance(result, dict) else {}
        modes = table(result, "modes")
        offered = [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]
        wanted = self.mode or next((m for m in ASKING_MODES if m in offered), "")
        if wanted and wanted in offered and wanted != modes.get("currentModeId"):
            await peer.request("session/set_mode", {"sessionId": sid, "modeId": wanted}, self.request_timeout)
        models = table(result, "models")
        ids = [m.get("modelId") for m in models.get("availableModels") or [] if isinstance(m, dict)]
        if spec.model and spec.model in ids and spec.model != models.get("currentModelId"):
            await peer.request("session/set_model", {"sessionId": sid, "modelId": spec.model}, self.request_timeout)

    async def abort_session(self, session_id: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.deleted:
            return
        dropped = len(s.queue)
        s.queue.clear()
        proc = s.proc
        if s.turn_active and (proc is None or not proc.alive() or not s.prompt_sent):
            await self._finish_turn(s, TurnResult(ok=False, error="aborted"))     # never reaches the agent
        elif s.turn_active and proc is not None:
            s.aborting = s.cancelled = True
            try:
                await self._cancel_permissions(s)
                await proc.notify("session/cancel", {"sessionId": s.id})
                await asyncio.wait_for(s.turn_done.wait(), self.interrupt_grace)
            except (asyncio.TimeoutError, AgentGone):
                await proc.kill()
            finally:
                s.aborting = False
        for _ in range(dropped):
            await self._emit(s, IDLE, TurnResult(ok=False, error="aborted"))

    async def _cancel_permissions(self, s: _Session) -> None:
        """A cancelled turn's open permission requests are answered `cancelled` (ACP's rule)."""
        for request_id in list(s.rpc_of):
            peer, rpc_id, _options = s.rpc_of.pop(request_id)
            s.permissions.pop(request_id, None)
            await peer.answer(rpc_id, {"outcome": {"outcome": "cancelled"}})

    async def _shut_down(self, s: _Session, patient: bool) -> None:
        s.queue.clear()
        proc = s.proc
        if proc is not None:
            if proc.alive():
                proc.agent.close_stdin()
                if patient or not s.turn_active:
                    await proc.agent.wait_exit(self.kill_grace)
            await proc.kill()
        for task in list(s.tasks):
            task.cancel()

    def _remember(self, s: _Session) -> Usage:
        return replace(s.usage)

    # -- turns ---------------------------------------------------------------------------------
    async def _send_turn(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        if not s.alive():
            raise RuntimeError(f"acp session {session_id} has exited")
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.last_activity = time.monotonic()
        if s.turn_active:
            s.queue.append(text)
            return
        self._start_turn(s, text)

    def _start_turn(self, s: _Session, text: str) -> None:
        s.turn_active, s.prompt_sent, s.cancelled = True, False, False
        s.turn_seq += 1
        s.turn_done.clear()
        task = asyncio.create_task(self._run_turn(s, s.turn_seq, text), name=f"acp-{s.id[:8]}-turn")
        s.tasks.add(task)
        task.add_done_callback(s.tasks.discard)

    async def _run_turn(self, s: _Session, seq: int, text: str) -> None:
        s.text, s.message_id, s.last_text, s.turn_used = [], "", "", 0
        await self._emit(s, BUSY)
        if s.turn_seq != seq:
            return                                  # aborted before it was sent
        proc = s.proc
        prompt = [{"type": "text", "text": text}]
        if s.instructions:
            prompt.insert(0, {"type": "text", "text": s.instructions})
            s.instructions = ""
        try:
            if proc is None:
                raise AgentGone("the ACP agent has exited")
            s.prompt_sent = True
            answer = await proc.request("session/prompt", {"sessionId": s.id, "prompt": prompt}, None)
        except AgentGone:
            return                                  # the reader ends the turn (idle, then exited)
        except RpcError as e:
            if s.turn_seq == seq:
                await self._failed(s, e.detail or str(e))
            return
        if s.turn_seq == seq:
            await self._answered(s, answer if isinstance(answer, dict) else {})

    async def _answered(self, s: _Session, answer: dict[str, Any]) -> None:
        """The prompt's answer: the turn's usage, then its end by its stop reason."""
        await self._flush_text(s)
        tokens = turn_usage(answer.get("usage"))
        if tokens is None and s.turn_used:
            tokens = Usage(input_tokens=s.turn_used)   # the context sent at least once: a floor
        if tokens is not None and tokens.total_tokens:
            s.usage = s.usage.plus(replace(tokens, cost_usd=0.0))
            await self._emit(s, USAGE, replace(s.usage))
        stop = answer.get("stopReason")
        if s.cancelled:
            result = TurnResult(ok=False, error="aborted", text=s.last_text)
        elif stop == "end_turn":
            result = TurnResult(ok=True, text=s.last_text[:MAX_MESSAGE_CHARS])
        elif stop == "cancelled":
            result = TurnResult(ok=False, error="aborted" if s.aborting else "cancelled", text=s.last_text)
        else:
            result = TurnResult(ok=False, error=f"{stop}: {STOPS.get(str(stop), 'the turn ended early')}",
                                text=s.last_text)
        await self._finish_turn(s, result)

    async def _failed(self, s: _Session, message: str) -> None:
        await self._flush_text(s)
        provider, status = provider_failure(message)
        if provider:
            await self._emit(s, PROVIDER_ERROR, {"status": status, "message": message[:500]})
        await self._finish_turn(s, TurnResult(ok=False, error=f"the ACP agent failed the turn: {message}"[:500],
                                              provider_error=provider, text=s.last_text))

    async def _finish_turn(self, s: _Session, result: TurnResult) -> None:
        if not s.turn_active:
            return
        s.turn_active = False
        s.turn_seq += 1
        s.permissions.clear()
        s.rpc_of.clear()
        await self._emit(s, IDLE, result)
        s.turn_done.set()
        if s.queue and not s.deleted and s.alive():
            self._start_turn(s, s.queue.popleft())

    # -- permissions ---------------------------------------------------------------------------
    async def _reply_permission(self, session_id: str, request_id: str, allow: bool, message: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.permissions.pop(request_id, None) is None or request_id not in s.rpc_of:
            log.debug("acp backend: no pending permission %s/%s", session_id, request_id)
            return
        peer, rpc_id, options = s.rpc_of.pop(request_id)
        if not allow:
            s.messages.append({"role": "hive", "text": f"declined: {message}"[:MAX_MESSAGE_CHARS], "at": time.time()})
        await peer.answer(rpc_id, permission_outcome(options, allow))

    # -- what the agent says -------------------------------------------------------------------
    async def _read_stdout(self, s: _Session, peer: Peer) -> None:
        try:
            await peer.agent.read_json_lines(lambda msg: self._handle(s, peer, msg))
        finally:
            try:
                await self._wind_up(s, peer)
            finally:
                peer.ended.set()

    async def _wind_up(self, s: _Session, peer: Peer) -> None:
        """The process ended: fail what waits on it; end the open turn (idle), then `exited`."""
        await peer.agent.exited.wait()
        code = peer.agent.returncode
        await peer.agent.wait_stderr(1.0)
        peer.agent.terminate_leftovers()
        peer.fail_pending()
        for rid, (owner, _rpc, _o) in list(s.rpc_of.items()):
            if owner is peer:
                s.rpc_of.pop(rid, None)
                s.permissions.pop(rid, None)
        if s.proc is not peer or not s.id:
            return
        s.last_activity = time.monotonic()
        error = "aborted" if s.aborting else f"the ACP agent exited with code {code} mid-turn"
        tail = peer.agent.last_stderr_line()
        if tail and not s.aborting:
            error += f": {tail}"
        queued = len(s.queue)
        s.queue.clear()
        await self._finish_turn(s, TurnResult(ok=False, error=error))
        for _ in range(queued):
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
        await self._emit(s, EXITED, {"exit_code": code})

    async def _handle(self, s: _Session, peer: Peer, msg: dict[str, Any]) -> None:
        if peer.take_answer(msg):
            return
        method = msg.get("method")
        if not isinstance(method, str) or s.proc is not peer:
            return
        s.last_activity = time.monotonic()
        params = table(msg, "params")
        if "id" not in msg:
            if method == "session/update" and not s.loading and params.get("sessionId") == s.id:
                await self._update(s, params.get("update"))
        elif method == "session/request_permission" and params.get("sessionId") == s.id and s.turn_active:
            request = permission_request(f"{peer.generation}-{msg['id']}", params)
            s.permissions[request.request_id] = request
            s.rpc_of[request.request_id] = (peer, msg["id"], params.get("options"))
            await self._emit(s, PERMISSION, request)
        elif method == "session/request_permission":
            await peer.answer(msg["id"], {"outcome": {"outcome": "cancelled"}})
        else:
            # files, terminals and extensions are not offered (initialize says so)
            await peer.answer(msg["id"], error={"code": -32601, "message": f"git-hive does not serve {method}"})

    async def _update(self, s: _Session, update: Any) -> None:
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            message_id = str(update.get("messageId") or "")
            if message_id != s.message_id:
                await self._flush_text(s)
                s.message_id = message_id
            s.text.append(content_text(update.get("content")))
            return
        if kind == "agent_thought_chunk":
            return
        await self._flush_text(s)
        if kind == "tool_call":
            s.last_text = ""
            await self._message(s, "assistant", tool_call_text(update), tool=str(update.get("kind") or "tool"))
        elif kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
            detail = content_text(update.get("content")) or str(update.get("title") or update.get("toolCallId"))
            prefix = "[error] " if update.get("status") == "failed" else ""
            await self._message(s, "tool", prefix + detail[:MAX_EVENT_CHARS])
        elif kind == "usage_update":
            await self._usage_update(s, update)

    async def _usage_update(self, s: _Session, update: dict[str, Any]) -> None:
        s.turn_used = max(s.turn_used, count(update.get("used")))
        cost = session_cost(update)
        if cost is not None and s.cost_base + cost > s.usage.cost_usd:
            s.usage = replace(s.usage, cost_usd=s.cost_base + cost)
            await self._emit(s, USAGE, replace(s.usage))

    async def _flush_text(self, s: _Session) -> None:
        text = "".join(s.text)
        s.text = []
        if text.strip():
            s.last_text = text
            await self._message(s, "assistant", text)

    async def _message(self, s: _Session, role: str, text: str, **extra: Any) -> None:
        entry = {"role": role, "text": text[:MAX_MESSAGE_CHARS], **extra}
        s.messages.append({**entry, "at": time.time()})
        await self._emit(s, MESSAGE, {**entry, "text": text[:MAX_EVENT_CHARS]})
