"""The `claude` backend: the real Claude Code CLI through its stream-json stdio protocol.

Each session is one long-lived `claude` process in the session's working directory, started in its
own process group (the CLI may be a launcher with children) with:

    claude -p --input-format stream-json --output-format stream-json --verbose
           --permission-prompt-tool stdio --permission-mode default
           (--session-id <uuid> | --resume <uuid>) [--model M] [--append-system-prompt TEXT]

User turns go to stdin as `{"type":"user","message":{"role":"user","content":...},
"parent_tool_use_id":null}` lines; stdout is NDJSON. How its lines become `Event`s:

    CLI line                                        event
    system/init (one per turn)                      busy
    assistant: text / tool_use blocks               message {"role": "assistant", "text"(, "tool")}
    user: tool_result blocks                        message {"role": "tool", "text"}
    control_request can_use_tool                    permission PermissionRequest (reply_permission
                                                    writes the control_response: allow with
                                                    updatedInput = the original input, or deny)
    assistant: a model call's first line            usage (session totals: the call's input so far)
    assistant with is_api_error_message             (remembered for the turn's result)
    system/api_retry with a provider status         provider_error {"status", "message"}
    result                                          usage (session totals), provider_error when the
                                                    API failed, then idle TurnResult
    end of the process                              idle TurnResult(ok=False, ...) first if a turn
                                                    was open, then exited {"exit_code"}

Every stdout line refreshes `last_activity` (the orchestrator's stall detection reads it).

Accounting: each model call's usage is counted as its first assistant line arrives (output is
about 1 token then), so a turn that runs long or is killed is billed while it runs; the turn's
`result.usage` (that result only: uncached input, cache writes, cache reads, output, kept apart
in `Usage`) then adds what those lines did not show. The session totals are hive's sum, carried
over a resume (from `spec.usage` when this backend did not know the session: a daemon restart).
A turn's cost is `model_usage_since_last_result`'s, which covers that result only.
`total_cost_usd` is no ground to subtract from: it adds up over the process and over `--resume`
after a clean exit, but starts again from zero when the process before was killed; its growth is
used only when the CLI sends no per-result cost.

Failures: a result with `is_error` (an interrupted turn, `error_max_turns`, an API error), an API
error status (`api_error_status`, `terminal_reason: "api_error"`), a crash (the process ends
mid-turn). Provider failures (5xx, 529, 429, 408, no connection) also emit `provider_error` and end
the turn with `TurnResult(provider_error=True)`; a 4xx such as 400/401 is a plain failure.

Semantics shared with the scripted backend:
* `send_message_async` marks the session busy at once; turns sent while one runs are queued by the
  CLI and answered in order, each with its own busy/idle.
* `abort_session` sends an `interrupt` control request for the turn in progress (and for queued
  ones); if the turns have not ended within `interrupt_grace` seconds the process group is killed.
  When it returns, `idle` has been emitted for every open turn (and `exited`, when it was killed).
  An idle session is left as it is.
* `delete_session` closes stdin, waits up to `kill_grace`, kills the group if needed and forgets
  the session; no event of that session is emitted after `delete_session` is called.
* `create_session` with `spec.resume` returns a live session with that id as it is; otherwise it
  starts `claude --resume <id>` (or, when the CLI has no transcript for that id, a new conversation
  under the same id) and the session's usage totals carry on.
* Unknown session ids raise KeyError; sending to an exited session raises RuntimeError.

The environment is hive's own (so `ANTHROPIC_BASE_URL`, API keys and proxies pass through) plus
`extra_env` and `spec.env`, with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` unless set.
"""

from __future__ import annotations

import asyncio
import collections
import http.client
import json
import logging
import os
import re
import shlex
import shutil
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive.backends.agent_process import AgentProcess
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, PermissionRequest, SessionSpec,
    TurnResult, Usage,
)
from hive.backends.jails import cli_install, session_jail
from hive.backends.reports import amount, count, table
from hive.backends.sessions import SessionBackend
from hive.errors import HiveError
from hive.jail import JailSpec, NoJail

log = logging.getLogger(__name__)

LINE_LIMIT = 16 * 1024 * 1024     # longest stdout line read whole; longer ones are skipped
MAX_MESSAGES = 500                # message history kept per session
MAX_MESSAGE_CHARS = 64 * 1024     # longest message text kept
MAX_EVENT_CHARS = 4 * 1024        # longest tool input/result text put in a message event
STDERR_TAIL = 4096
MAX_ARG_BYTES = 96 * 1024         # a system prompt on argv (Linux: 128 KiB per argument)
PROBE_TIMEOUT = 5.0               # seconds for the health probe
DEFAULT_BASE_URL = "https://api.anthropic.com"
# where the CLI signs in with a subscription (OAuth) and renews its token, beside the API
LOGIN_URLS = ("https://console.anthropic.com", "https://platform.claude.com", "https://claude.ai")
PROVIDER_ENV = ("ANTHROPIC_*", "CLAUDE_*")    # what of the environment reaches the jailed CLI
ANTHROPIC_VERSION = "2023-06-01"
PROVIDER_STATUSES = {408, 429, 529}   # besides every 5xx: the provider's trouble, not the work's

_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_REQUEST_ID_RE = re.compile(rb'"request_id"\s*:\s*"([^"\\]{1,200})"')


def is_provider_status(status: int | None) -> bool:
    """Whether an HTTP status from the API is the provider's failure (retry later, elsewhere)."""
    return status is not None and (status >= 500 or status in PROVIDER_STATUSES)


@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: AgentProcess
    resumed: bool = False
    usage: Usage = field(default_factory=Usage)
    cli_cost: float | None = 0.0      # the CLI's last cumulative total_cost_usd (None: unknown)
    turn_usage: Usage = field(default_factory=Usage)   # this turn's model calls so far (assistant lines)
    turn_calls: set[str] = field(default_factory=set)  # their message ids (a call has a line per block)
    messages: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_MESSAGES))
    permissions: dict[str, PermissionRequest] = field(default_factory=dict)
    pending_turns: int = 0            # turns sent whose result has not come yet
    turn_api_error: tuple[int | None, str] | None = None   # a synthetic API-error message this turn
    last_activity: float = field(default_factory=time.monotonic)
    exit_code: int | None = None
    exited: bool = False
    aborting: bool = False
    killed: bool = False
    deleted: bool = False
    model: str = ""                   # as the CLI reports it (init)
    reader: asyncio.Task | None = None
    turn_ended: asyncio.Event = field(default_factory=asyncio.Event)   # set at each result / exit
    control_seq: int = 0

    @property
    def discarded_lines(self) -> int:
        return self.proc.discarded_lines

    def state(self) -> str:
        if self.exited or self.proc.returncode is not None:
            return "exited"
        return "busy" if self.pending_turns > 0 else "idle"


@dataclass
class _Past:
    usage: Usage
    cli_cost: float | None
    messages: list[dict[str, Any]]


class ClaudeBackend(SessionBackend):
    """Runs `claude` processes; see the module docstring."""

    name = "claude"
    kill_grace = 2.0                 # seconds between SIGTERM and SIGKILL, and for a clean exit
    interrupt_grace = 5.0            # seconds an interrupted turn has to end before the kill

    def __init__(self, command: str = "claude", hive_dir: str | None = None,
                 extra_env: dict[str, str] | None = None):
        super().__init__()
        self.argv0 = shlex.split(command) if command and command.strip() else ["claude"]
        self.command = command
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        self.extra_env = dict(extra_env or {})

    @classmethod
    def from_settings(cls, config: Any, *, hive_dir: str, repo_root: str) -> ClaudeBackend:
        return cls(command=config.claude_command, hive_dir=hive_dir)

    async def connect_with_reconnect(self) -> None:
        """Nothing to connect to (one process per session); fail early if the CLI is missing."""
        program = self.argv0[0]
        if not (shutil.which(program) or (os.sep in program and os.access(program, os.X_OK))):
            raise HiveError(f"claude CLI not found: {program!r} (set claude_command, or install "
                            "@anthropic-ai/claude-code from npm)")

    async def health_check(self) -> bool:
        """A cheap probe of the provider that spends no tokens: GET $ANTHROPIC_BASE_URL/v1/models.

        Healthy: the server answers with a status below 500 other than 429 (an auth error still
        means the provider is up). A refused connection, a timeout, 5xx, 429 or 529 is unhealthy.
        """
        return await asyncio.to_thread(self._probe)

    def _env_base(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env}

    def _probe(self) -> bool:
        env = self._env_base()
        base = (env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        headers = {"anthropic-version": ANTHROPIC_VERSION, "user-agent": "git-hive-health-probe"}
        if env.get("ANTHROPIC_API_KEY"):
            headers["x-api-key"] = env["ANTHROPIC_API_KEY"]
        if env.get("ANTHROPIC_AUTH_TOKEN"):
            headers["authorization"] = f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}"
        request = urllib.request.Request(f"{base}/v1/models", headers=headers, method="GET")
        try:
            with _opener(env, request.host).open(request, timeout=PROBE_TIMEOUT) as response:
                status = response.status
        except urllib.error.HTTPError as e:
            status = e.code
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
            return False
        return status < 500 and status != 429

    # -- sessions ------------------------------------------------------------------------------
    def _config_dir(self, env: dict[str, str]) -> Path:
        if env.get("CLAUDE_CONFIG_DIR"):
            return Path(env["CLAUDE_CONFIG_DIR"])
        return Path(env.get("HOME") or os.path.expanduser("~")) / ".claude"

    def _jail(self, spec: SessionSpec, env: dict[str, str]) -> JailSpec | None:
        """The session's jail plus the CLI's install (read) and its config folder (written)."""
        config = self._config_dir(env)
        config.mkdir(parents=True, exist_ok=True)
        writable = (str(config), *((str(config.parent / ".claude.json"),) if not env.get("CLAUDE_CONFIG_DIR") else ()))
        return session_jail(spec, self.name, writable=writable, readable=cli_install(self.argv0[0]),
                            endpoints=_endpoints(env), provider_env=PROVIDER_ENV)

    def _has_transcript(self, env: dict[str, str], sid: str) -> bool:
        """Whether the CLI kept the conversation `sid` (`--resume` fails without it)."""
        projects = self._config_dir(env) / "projects"
        try:
            return any(projects.glob(f"*/{sid}.jsonl"))
        except OSError:
            return False

    def _argv(self, spec: SessionSpec, sid: str, resumed: bool) -> list[str]:
        argv = [*self.argv0, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                "--verbose", "--permission-prompt-tool", "stdio", "--permission-mode", "default"]
        argv += ["--resume", sid] if resumed else ["--session-id", sid]
        if spec.model:
            argv.append(f"--model={spec.model}")
        if spec.system_prompt:
            prompt = spec.system_prompt.encode()[:MAX_ARG_BYTES].decode("utf-8", errors="ignore")
            argv.append(f"--append-system-prompt={prompt}")
        return argv

    async def create_session(self, spec: SessionSpec) -> str:
        resume = spec.resume if spec.resume and _UUID_RE.match(spec.resume) else ""
        sid = resume.lower() if resume else str(uuid.uuid4())
        old = self._sessions.get(sid)
        if old is not None:
            if old.state() != "exited":
                return sid
            await self._reader_done(old.reader)      # its last events come before the new ones
            await old.proc.kill()                    # what the ended CLI left running in its group
            old.deleted = True
        env = {**self._env_base(), **spec.env}
        env.setdefault("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        resumed = bool(resume) and self._has_transcript(env, sid)
        try:
            proc = await AgentProcess.start(self._argv(spec, sid, resumed), cwd=spec.cwd, env=env,
                                            line_limit=LINE_LIMIT, kill_grace=self.kill_grace,
                                            stderr_limit=STDERR_TAIL, jail=self._jail(spec, env))
        except (OSError, NoJail) as e:
            raise RuntimeError(f"cannot start the claude CLI ({self.argv0[0]!r}): {e}") from None
        s = _Session(sid, replace(spec, resume=sid), proc, resumed=resumed)
        past = self._past.pop(sid, None)
        if old is not None:
            s.usage, s.messages = replace(old.usage), old.messages
            s.cli_cost = old.cli_cost if resumed else 0.0
        elif past is not None:
            s.usage = past.usage
            s.messages.extend(past.messages)
            s.cli_cost = past.cli_cost if resumed else 0.0
        else:                                # a daemon restart: hive's record of the totals
            s.usage = replace(spec.usage)
            s.cli_cost = None if resumed else 0.0   # earlier cost of this conversation: unknown here
        self._sessions[sid] = s
        s.reader = asyncio.create_task(self._read_stdout(s), name=f"claude-{sid[:8]}-stdout")
        return sid

    async def abort_session(self, session_id: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.exited or s.proc.returncode is not None or s.pending_turns == 0:
            return
        s.aborting = True
        try:
            await self._interrupt(s)
            if s.pending_turns > 0 and not s.exited:
                s.killed = True
                await s.proc.kill()
                await self._reader_done(s.reader)
        finally:
            s.aborting = False

    async def _interrupt(self, s: _Session) -> None:
        """Interrupt the turns in progress, one after the other, within `interrupt_grace`."""
        deadline = time.monotonic() + self.interrupt_grace
        while s.pending_turns > 0 and not s.exited:
            s.turn_ended.clear()
            try:
                await self._control(s, {"subtype": "interrupt"})
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(s.turn_ended.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _remember(self, s: _Session) -> _Past:
        return _Past(s.usage, s.cli_cost, list(s.messages))

    async def _shut_down(self, s: _Session, patient: bool) -> None:
        if s.proc.returncode is None:
            s.proc.close_stdin()
            # an idle CLI leaves at once when stdin closes; a busy one first ends its turn
            if patient or s.pending_turns == 0:
                await s.proc.wait_exit(self.kill_grace)
        s.killed = True
        await s.proc.kill()
        await self._reader_done(s.reader)

    # -- messages ------------------------------------------------------------------------------
    async def _send_turn(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        if s.state() == "exited":
            raise RuntimeError(f"claude session {session_id} has exited")
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.pending_turns += 1
        s.last_activity = time.monotonic()
        try:
            await s.proc.write_json({"type": "user", "message": {"role": "user", "content": text},
                                     "parent_tool_use_id": None})
        except (BrokenPipeError, ConnectionResetError) as e:
            s.pending_turns = max(0, s.pending_turns - 1)
            raise RuntimeError(f"claude session {session_id} has exited") from e

    # -- permissions ---------------------------------------------------------------------------
    async def _reply_permission(self, session_id: str, request_id: str, allow: bool,
                                message: str) -> None:
        s = self._sessions.get(session_id)
        request = s.permissions.pop(request_id, None) if s is not None else None
        if s is None or request is None:
            log.debug("claude backend: no pending permission %s/%s", session_id, request_id)
            return
        if allow:
            answer: dict[str, Any] = {"behavior": "allow", "updatedInput": request.input}
        else:
            answer = {"behavior": "deny", "message": message or "denied by git-hive's permission policy"}
        try:
            await s.proc.write_json({"type": "control_response", "response": {
                "subtype": "success", "request_id": request_id, "response": answer}})
        except (BrokenPipeError, ConnectionResetError):
            pass                                        # the CLI is gone; its turn ends anyway

    # -- internals -----------------------------------------------------------------------------
    async def _control(self, s: _Session, request: dict[str, Any]) -> None:
        s.control_seq += 1
        await s.proc.write_json({"type": "control_request", "request_id": f"hive-{s.control_seq}",
                                 "request": request})

    async def _read_stdout(self, s: _Session) -> None:
        await s.proc.read_json_lines(lambda msg: self._handle_message(s, msg),
                                     lambda head: self._overlong(s, head))
        await s.proc.exited.wait()
        code = s.proc.returncode
        s.exit_code, s.exited = code, True
        s.last_activity = time.monotonic()
        s.permissions.clear()
        s.proc.terminate_leftovers()     # what the CLI left behind (delete/abort SIGKILL it)
        if s.pending_turns > 0:
            s.pending_turns = 0
            if s.aborting or s.killed:
                error = "aborted"
            else:
                error = f"claude exited with code {code} mid-turn"
                await s.proc.wait_stderr(1.0)
                tail = s.proc.last_stderr_line()
                if tail:
                    error += f": {tail}"
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
        s.turn_ended.set()
        await self._emit(s, EXITED, {"exit_code": code})

    async def _overlong(self, s: _Session, head: bytes) -> None:
        """A line too long to read: if it was a permission prompt, deny it so the CLI goes on."""
        s.last_activity = time.monotonic()
        if b'"control_request"' in head and b'"can_use_tool"' in head:
            match = _REQUEST_ID_RE.search(head)
            if match:
                request_id = match.group(1).decode("utf-8", errors="replace")
                try:
                    await s.proc.write_json({"type": "control_response", "response": {
                        "subtype": "success", "request_id": request_id,
                        "response": {"behavior": "deny",
                                     "message": "the request is too large for git-hive to review"}}})
                except (BrokenPipeError, ConnectionResetError):
                    pass

    async def _handle_message(self, s: _Session, msg: dict[str, Any]) -> None:
        s.last_activity = time.monotonic()
        kind = msg.get("type")
        if kind == "system":
            await self._on_system(s, msg)
        elif kind == "assistant":
            await self._on_assistant(s, msg)
        elif kind == "user":
            await self._on_user(s, msg)
        elif kind == "control_request":
            await self._on_control_request(s, msg)
        elif kind == "result":
            await self._on_result(s, msg)
        # control_response (acks of our interrupts), stream_event, ...: activity only

    async def _on_system(self, s: _Session, msg: dict[str, Any]) -> None:
        subtype = msg.get("subtype")
        if subtype == "init":
            s.model = str(msg.get("model") or "")
            s.turn_api_error = None
            await self._emit(s, BUSY)
        elif subtype == "api_retry":
            status = msg.get("error_status")
            status = status if isinstance(status, int) else None
            if is_provider_status(status):
                await self._emit(s, PROVIDER_ERROR, {"status": status,
                                                     "message": str(msg.get("error") or "retrying")[:500]})

    async def _message(self, s: _Session, role: str, text: str, **extra: Any) -> None:
        entry = {"role": role, "text": text[:MAX_MESSAGE_CHARS], **extra}
        s.messages.append({**entry, "at": time.time()})
        await self._emit(s, MESSAGE, {**entry, "text": text[:MAX_EVENT_CHARS]})

    async def _on_assistant(self, s: _Session, msg: dict[str, Any]) -> None:
        message = table(msg, "message")
        content = message.get("content")
        texts = []
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif block.get("type") == "tool_use":
                    name = str(block.get("name") or "")
                    await self._message(s, "assistant", f"[{name}] {_describe_input(block.get('input'))}",
                                        tool=name)
        elif isinstance(content, str):
            texts.append(content)
        text = "\n".join(texts)
        if msg.get("is_api_error_message") or msg.get("error"):
            status = msg.get("api_error_status")
            s.turn_api_error = (status if isinstance(status, int) else None, text)
        else:
            await self._count_call(s, message)
        if text:
            await self._message(s, "assistant", text)

    async def _on_user(self, s: _Session, msg: dict[str, Any]) -> None:
        message = table(msg, "message")
        content = message.get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                result = block.get("content")
                if isinstance(result, list):
                    result = "\n".join(str(c.get("text", "")) for c in result if isinstance(c, dict))
                prefix = "[error] " if block.get("is_error") else ""
                await self._message(s, "tool", prefix + str(result or ""))

    async def _on_control_request(self, s: _Session, msg: dict[str, Any]) -> None:
        request_id = str(msg.get("request_id") or "")
        request = table(msg, "request")
        if request.get("subtype") != "can_use_tool":
            try:                                     # nothing else is hive's to answer
                await s.proc.write_json({"type": "control_response", "response": {
                    "subtype": "error", "request_id": request_id,
                    "error": f"git-hive does not handle {request.get('subtype')!r} requests"}})
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        tool_input = table(request, "input")
        paths = [v for k in ("file_path", "path", "notebook_path")
                 if isinstance(v := tool_input.get(k), str) and v]
        command = tool_input.get("command")
        req = PermissionRequest(request_id=request_id, tool=str(request.get("tool_name") or ""),
                                input=tool_input, paths=paths,
                                command=command if isinstance(command, str) else "")
        s.permissions[request_id] = req
        await self._emit(s, PERMISSION, req)

    async def _count_call(self, s: _Session, message: dict[str, Any]) -> None:
        """A model call's usage as it starts (output not known yet): counted at once, so that a
        long or killed turn is billed while it runs; its result settles the figures."""
        call = message.get("id")
        if not isinstance(call, str) or not call or call in s.turn_calls or not isinstance(message.get("usage"), dict):
            return
        s.turn_calls.add(call)
        seen = _tokens(message["usage"])
        s.turn_usage, s.usage = s.turn_usage.plus(seen), s.usage.plus(seen)
        if seen.total_tokens:
            await self._emit(s, USAGE, replace(s.usage))

    async def _on_result(self, s: _Session, msg: dict[str, Any]) -> None:
        s.pending_turns = max(0, s.pending_turns - 1)
        # tokens: this result only, less what its calls counted already; cost: see the docstring
        turn = _tokens(table(msg, "usage")).growth_since(s.turn_usage)
        s.turn_usage, s.turn_calls = Usage(), set()
        total = msg.get("total_cost_usd")
        total = float(total) if isinstance(total, (int, float)) else None
        since = _since_last_cost(msg.get("model_usage_since_last_result"))
        if since is not None:
            turn_cost = since
        elif total is None:
            turn_cost = 0.0
        elif s.cli_cost is None or total < s.cli_cost:
            turn_cost = total                # the CLI's count started again (a killed process)
        else:
            turn_cost = total - s.cli_cost
        if total is not None:
            s.cli_cost = total
        turn.cost_usd = turn_cost
        if turn.total_tokens or turn_cost:
            s.usage = s.usage.plus(turn)
            await self._emit(s, USAGE, replace(s.usage))

        text = msg.get("result")
        text = str(text)[:MAX_MESSAGE_CHARS] if isinstance(text, str) else ""
        status = msg.get("api_error_status")
        status = status if isinstance(status, int) else None
        api_error = s.turn_api_error
        s.turn_api_error = None
        if status is None and api_error is not None:
            status = api_error[0]
        is_error = bool(msg.get("is_error")) or msg.get("subtype") not in (None, "success")
        api_failed = msg.get("terminal_reason") == "api_error" or status is not None or api_error is not None
        if s.aborting and is_error:
            result = TurnResult(ok=False, error="aborted (interrupted)", text=text)
        elif api_failed and (is_error or status is not None):
            provider = is_provider_status(status) or (status is None and
                                                      msg.get("terminal_reason") == "api_error")
            words = " ".join((text or (api_error[1] if api_error else "") or "API error").split())[:300]
            if provider:
                await self._emit(s, PROVIDER_ERROR, {"status": status, "message": words})
            result = TurnResult(ok=False, error=f"API error{f' {status}' if status else ''}: {words}",
                                provider_error=provider, text=text)
        elif is_error:
            errors = msg.get("errors")
            detail = text or ("; ".join(str(e) for e in errors) if isinstance(errors, list) else "")
            reason = msg.get("terminal_reason") or msg.get("subtype") or "error"
            result = TurnResult(ok=False, error=" ".join(f"{reason}: {detail}".split())[:300], text=text)
        else:
            result = TurnResult(ok=True, text=text)
        s.permissions.clear()                 # prompts of an ended turn can no longer be answered
        await self._emit(s, IDLE, result)
        s.turn_ended.set()


def _opener(env: dict[str, str], host: str) -> urllib.request.OpenerDirector:
    """A urllib opener using the proxies of `env` (the CLI's environment), as the CLI would."""
    proxies: dict[str, str] = {}
    for key in sorted(env, key=str.islower):              # lower-case names win, as in urllib
        if key.lower().endswith("_proxy") and env[key]:
            proxies[key.lower()[:-len("_proxy")]] = env[key]
    no_proxy = proxies.pop("no", "")
    if no_proxy and urllib.request.proxy_bypass_environment(host, {"no": no_proxy}):  # type: ignore[attr-defined]
        proxies = {}
    return urllib.request.build_opener(urllib.request.ProxyHandler(proxies))


def _describe_input(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("command", "file_path", "path", "notebook_path", "pattern", "url"):
            if isinstance(value.get(key), str):
                return value[key][:MAX_EVENT_CHARS]
        try:
            return json.dumps(value, ensure_ascii=False)[:MAX_EVENT_CHARS]
        except (TypeError, ValueError):
            return ""
    return str(value or "")[:MAX_EVENT_CHARS]


def _tokens(usage: dict[str, Any]) -> Usage:
    return Usage(input_tokens=count(usage.get("input_tokens")), output_tokens=count(usage.get("output_tokens")),
                 cache_write_tokens=count(usage.get("cache_creation_input_tokens")),
                 cache_read_tokens=count(usage.get("cache_read_input_tokens")))


def _since_last_cost(model_usage: Any) -> float | None:
    if not isinstance(model_usage, dict):
        return None
    return sum(amount(m.get("costUSD")) for m in model_usage.values() if isinstance(m, dict))


def _endpoints(env: dict[str, str]) -> tuple[str, ...]:
    """Where the jailed CLI may connect: `ANTHROPIC_BASE_URL` when it is set, else Anthropic's API
    and its sign-in hosts."""
    base = env.get("ANTHROPIC_BASE_URL", "").strip()
    return (base,) if base else (DEFAULT_BASE_URL, *LOGIN_URLS)
