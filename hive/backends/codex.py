"""The `codex` backend: drives `codex app-server` (newline-delimited JSON-RPC on stdio).

Process model — **one app-server process per session**, started in the session's worktree, in its
own process group. Reasons: a session's environment (`SessionSpec.env`: HIVE_ISSUE, ...) reaches
the agent's commands only as the environment of the process that runs them, and app-server has no
per-thread environment; a crash, a hang or a kill touches one session only; abort-by-kill and
hive's crash recovery (`killpg(pid)` of the agents table) need one process group per agent; and a
process costs ~0.5 s to start, which is nothing next to a turn. The session id is Codex's thread id.

Protocol, per process (facts in `../shared/reference/cli-protocols.md`):

    >> initialize {clientInfo: {name: "git-hive", ...}, capabilities: {experimentalApi: false}}
    >> initialized
    >> thread/start {cwd, approvalPolicy, sandbox, model, developerInstructions,
                     config: {sandbox_workspace_write: {writable_roots: [git dirs]}}}
       or thread/resume {threadId, excludeTurns: true, cwd, approvalPolicy, sandbox, model, config}
    >> turn/start {threadId, input: [{type: "text", text, text_elements: []}]}
    << turn/started, item/started|completed, thread/tokenUsage/updated, error, turn/completed
    << item/commandExecution/requestApproval | item/fileChange/requestApproval  (server requests)
    >> {id, result: {decision: "accept" | "decline"}}                         (reply_permission)
    >> turn/interrupt {threadId, turnId}                                      (abort_session)

Events (the same contract as `hive/backends/scripted.py`):

    busy              a turn starts (each `send_message_async` gets one busy and one idle)
    message           {"role": "assistant", "text"} for agent messages; {"role": "tool", "text"}
                      for finished commands / file changes and long commands' progress;
                      {"role": "system", "text"} for errors Codex retries by itself
    usage             Usage: session totals (`tokenUsage.total`), cost estimated (see below)
    permission        PermissionRequest: tool "commandExecution" (command = the shell line without
                      the `/bin/bash -lc` wrapper, paths = [its cwd]) or "fileChange" (paths = the
                      files the patch touches, plus a requested grantRoot)
    provider_error    {"status": int | None, "message"} when the API fails (codexErrorInfo such as
                      internalServerError, serverOverloaded, rateLimitExceeded, unauthorized,
                      httpConnectionFailed / responseStream*{httpStatusCode}); the turn then ends
                      with TurnResult(ok=False, provider_error=True). Errors Codex will retry
                      itself (`willRetry`) are only `message`s.
    idle              TurnResult at `turn/completed`: completed → ok; interrupted → not ok
                      ("aborted" when hive asked); failed → not ok with Codex's error message
    exited            {"exit_code"} when the app-server process ends; an open turn first gets
                      idle(ok=False) (and every queued turn one too)

Semantics: turns sent while one runs are queued here and started in order (app-server would fold
them into the running turn). `abort_session` interrupts the running turn (`turn/interrupt`), drops
queued ones and returns once their idles were emitted; if Codex does not answer within
`interrupt_timeout` the process group is killed. The process stays alive after an interrupt.
`delete_session` closes stdin, waits `kill_grace`, kills the group; no events of that session
follow. A session whose process died (crash, kill, a request that timed out — "stopped answering")
reports state "exited"; `create_session(spec with resume=<id>)` or `send_message_async` restart
the app-server and `thread/resume` the thread (history from `$CODEX_HOME/sessions`), so usage and
context carry on. If the thread cannot be resumed, a new thread starts and its new id is returned.

Sandbox and approvals: `approvalPolicy` "untrusted" — Codex asks before every command that is not
known to be read-only and before every patch, so hive's policy (hive/orchestrator/permissions.py)
decides — and `sandbox` "workspace-write" with the git directories a commit in a linked worktree
needs made writable (the worktree's admin dir `<common>/worktrees/<name>` and the common dir
`<common>`, found from the cwd's `.git` file; for a cwd that is not a worktree, such as the
refinery's directory of worktrees, those of the worktrees directly inside it). The common dir holds
refs and hooks, so its writability is a trade-off (commands are still approved one by one).
`approval_policy` / `sandbox_mode` in the user's `[codex]` table override these two.

Model: `SessionSpec.model` unless it names a Claude model (hive's defaults are Claude models);
then the `[codex]` table's `model`; else Codex's own default.

CODEX_HOME: a private one per project at `<hive_dir>/codex-home/`, with a `config.toml` that hive
rewrites on start: these defaults (offline and quiet), with the user's `[codex]` table merged over
them (the user wins, key by key, tables recursively):

    check_for_update_on_startup = false
    [analytics]  enabled = false          # no ab.chatgpt.com
    [feedback]   enabled = false
    [features]   plugins = false          # no git clone of openai/plugins, no api.github.com
                 remote_plugin = false
                 apps = false
                 shell_snapshot = false   # no `bash -lc` snapshot helpers outliving codex

Auth: the environment is passed through (OPENAI_API_KEY, a provider's `env_key`, proxies). A user
login is honoured: `<hive_dir>/codex-home/auth.json` is made a symlink to the user's own
`$CODEX_HOME/auth.json` (else `~/.codex/auth.json`) when that exists and hive's has none. To log
in for hive only: `CODEX_HOME=<git-common-dir>/hive/codex-home codex login` (or
`... codex login --with-api-key < keyfile`).

Cost: Codex reports tokens, never money. hive estimates USD from a price table ($ per million
tokens: input, output, cached input) by model slug — exact match, else the longest known prefix,
else the default. Override or extend it in the `[codex]` table with the key `hive_prices` (hive
removes it before writing Codex's config.toml):

    [codex.hive_prices]
    "gpt-5.5" = [1.25, 10.0]          # input, output (cached input defaults to input / 10)
    "my-model" = [0.5, 2.0, 0.05]     # input, output, cached input
    default = [1.0, 4.0]              # any other model

Health: `health_check()` spends no tokens: GET `<base_url>/models` of the configured provider
(`model_providers.<model_provider>.base_url` of the `[codex]` table, else OPENAI_BASE_URL, else
https://api.openai.com/v1) with `Authorization: Bearer $<env_key>` (OPENAI_API_KEY for openai);
healthy when it connects and answers a status below 500 that is not 429.

`command` may carry arguments (shlex-split), e.g. `codex_command = "/opt/codex/bin/codex -c x=y"`.
The npm launcher (`bin/codex.js`) works: on Node 20 it stays resident as the parent of the native
binary, and killing the process group ends both. Running the native binary directly
(`node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`) saves a node
process per session.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import itertools
import json
import logging
import os
import shlex
import shutil
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive.backends.processes import count, group_gone, killpg
from hive.backends.sessions import SessionBook
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, Event, EventBus, Handler,
    PermissionRequest, SessionSpec, TurnResult, Usage,
)
from hive.errors import HiveError

log = logging.getLogger(__name__)

CLIENT_INFO = {"name": "git-hive", "title": "git hive", "version": "0.1.0"}
LINE_LIMIT = 16 * 1024 * 1024     # longest stdout line kept (diffs, command output); longer ones dropped
MAX_MESSAGES = 500                # message history kept per session
MAX_MESSAGE_CHARS = 64 * 1024
MAX_ITEMS = 256                   # file-change items remembered per session (for approval paths)
MAX_PAST_SESSIONS = 1000
STDERR_TAIL = 8192
PROGRESS_EVERY = 30.0             # seconds between "tool" progress messages of a long command
MAX_CHILD_SCAN = 500              # worktrees looked at below a cwd that is not one itself
PRICE_KEY = "hive_prices"
HOME_DIR_NAME = "codex-home"

DEFAULT_CONFIG: dict[str, Any] = {
    "check_for_update_on_startup": False,
    "analytics": {"enabled": False},
    "feedback": {"enabled": False},
    "features": {"plugins": False, "remote_plugin": False, "apps": False, "shell_snapshot": False},
}

# USD per million tokens: (input, output, cached input). Estimates; override with [codex.hive_prices].
DEFAULT_PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-5": (1.25, 10.0, 0.125),
    "gpt-5-mini": (0.25, 2.0, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "gpt-5-codex-mini": (0.25, 2.0, 0.025),
    "gpt-5.1-codex-mini": (0.25, 2.0, 0.025),
    "codex-mini": (1.50, 6.0, 0.375),
    "gpt-4.1": (2.0, 8.0, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    "gpt-4o": (2.50, 10.0, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "o3": (2.0, 8.0, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
}
DEFAULT_PRICE = (1.25, 10.0, 0.125)

# codexErrorInfo values that mean the provider failed (not the work), with the HTTP status they stand for.
PROVIDER_ERRORS: dict[str, int | None] = {
    "internalServerError": 500, "serverOverloaded": 503, "rateLimitExceeded": 429,
    "usageLimitExceeded": 429, "unauthorized": 401, "flexUnavailable": 503,
    "policyCapacityUnavailable": 503,
}
PROVIDER_ERROR_VARIANTS = ("httpConnectionFailed", "responseStreamConnectionFailed",
                           "responseStreamDisconnected", "responseTooManyFailedAttempts")
BUILTIN_PROVIDERS = {"openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
                     "ollama": ("http://localhost:11434/v1", ""),
                     "lmstudio": ("http://localhost:1234/v1", "")}


class RpcError(RuntimeError):
    """A JSON-RPC error answer of the app-server."""

    def __init__(self, method: str, error: Any):
        self.code = error.get("code") if isinstance(error, dict) else None
        self.detail = error.get("message", "") if isinstance(error, dict) else str(error)
        super().__init__(f"{method}: {self.detail or error}")


class ServerGone(RuntimeError):
    """The app-server process ended (or was killed because it stopped answering)."""


# -- one app-server process -------------------------------------------------------------------

@dataclass
class _Proc:
    proc: asyncio.subprocess.Process
    generation: int
    ids: Any = field(default_factory=lambda: itertools.count(1))
    pending: dict[int, tuple[str, asyncio.Future]] = field(default_factory=dict)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    reader: asyncio.Task | None = None
    stderr_reader: asyncio.Task | None = None
    stderr_tail: bytes = b""
    ended: asyncio.Event = field(default_factory=asyncio.Event)   # the reader finished
    exit_code: int | None = None
    discarded_lines: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self.ended.is_set() and self.proc.returncode is None

    async def send(self, obj: dict) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise ServerGone("codex app-server stdin is closed")
        async with self.write_lock:
            try:
                stdin.write(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as e:
                raise ServerGone("codex app-server has exited") from e

    def stderr_line(self) -> str:
        lines = [ln.strip() for ln in self.stderr_tail.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""


# -- one session (thread) ---------------------------------------------------------------------

@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: _Proc | None = None
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    usage_base: Usage | None = None        # after a restart: totals before it, until Codex reports
    usage_offset: Usage = field(default_factory=Usage)
    messages: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_MESSAGES))
    permissions: dict[str, PermissionRequest] = field(default_factory=dict)
    rpc_of: dict[str, tuple[_Proc, Any, str]] = field(default_factory=dict)
    items: collections.OrderedDict = field(default_factory=collections.OrderedDict)
    queue: collections.deque = field(default_factory=collections.deque)
    turn_active: bool = False
    turn_seq: int = 0
    turn_id: str = ""
    turn_id_known: asyncio.Event = field(default_factory=asyncio.Event)
    turn_done: asyncio.Event = field(default_factory=asyncio.Event)
    turn_error: dict | None = None
    provider_error_sent: bool = False
    last_text: str = ""
    aborting: bool = False
    deleted: bool = False
    last_activity: float = field(default_factory=time.monotonic)
    last_progress: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)   # (re)starting the process
    tasks: set = field(default_factory=set)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def state(self) -> str:
        if not self.alive():
            return "exited"
        return "busy" if self.turn_active or self.queue else "idle"


class CodexBackend(SessionBook):
    """Runs `codex app-server` processes; see the module docstring."""

    name = "codex"
    kill_grace = 2.0             # seconds between SIGTERM and SIGKILL, and for a clean exit
    init_timeout = 60.0          # starting the process and `initialize`
    request_timeout = 30.0       # any other request; no answer in time = "stopped answering"
    interrupt_timeout = 10.0     # `turn/interrupt` and the `turn/completed` that follows
    probe_timeout = 5.0          # health_check's GET

    def __init__(self, command: str = "codex", hive_dir: str | None = None,
                 codex_config: dict[str, Any] | None = None):
        self.command = command or "codex"
        self.argv = shlex.split(self.command)
        if not self.argv:
            raise HiveError("codex_command is empty")
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        raw = copy.deepcopy(codex_config) if isinstance(codex_config, dict) else {}
        self.prices = _price_table(raw.pop(PRICE_KEY, None))
        self.codex_config = raw                          # the user's [codex] table, hive keys removed
        self.codex_home = str(Path(self.hive_dir) / HOME_DIR_NAME) if self.hive_dir else str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "git-hive" / HOME_DIR_NAME)
        self._bus = EventBus()
        self._sessions: dict[str, _Session] = {}
        self._past_usage: dict[str, Usage] = {}
        self._generations = itertools.count(1)
        self._home_ready = False

    # -- events --------------------------------------------------------------------------------
    def on(self, event_type: str, handler: Handler) -> None:
        self._bus.on(event_type, handler)

    async def _emit(self, s: _Session, type_: str, data: Any = None) -> None:
        if s.deleted or not s.id:
            return
        try:
            await self._bus.emit(Event(type_, s.id, data))
        except Exception:                                # a bad handler must not kill the reader
            log.exception("codex backend: %s handler failed for session %s", type_, s.id)

    async def connect_with_reconnect(self) -> None:
        """Check that the CLI exists and write the private CODEX_HOME; processes start per session."""
        if shutil.which(self.argv[0]) is None:
            raise HiveError(f"codex CLI not found: {self.argv[0]!r} (set codex_command, or install "
                            "@openai/codex from npm)")
        await asyncio.to_thread(self.prepare_home)

    async def health_check(self) -> bool:
        url, headers = self.probe_target()
        return await asyncio.to_thread(_probe, url, headers, self.probe_timeout)

    async def stop(self) -> None:
        """End every session at once: busy processes are killed, idle ones leave cleanly."""
        await asyncio.gather(*(self._end(sid, patient=False) for sid in list(self._sessions)),
                             return_exceptions=True)

    # -- configuration -------------------------------------------------------------------------
    def prepare_home(self) -> Path:
        """Write `<codex-home>/config.toml` (defaults + the user's [codex] table) and link auth."""
        home = Path(self.codex_home)
        home.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(home, 0o700)
        except OSError:
            pass
        import tomlkit

        merged = _deep_merge(DEFAULT_CONFIG, self.codex_config)
        text = ("# Written by git-hive at every start: edit the [codex] table of .hive.toml or\n"
                "# ~/.config/hive/config.toml instead (it is merged over hive's defaults).\n"
                + tomlkit.dumps(merged))
        target = home / "config.toml"
        try:
            current = target.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != text:
            tmp = home / f".config.toml.{os.getpid()}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        self._link_auth(home)
        self._home_ready = True
        return home

    def _link_auth(self, home: Path) -> None:
        """Point hive's CODEX_HOME at the user's login (auth.json), unless it has its own."""
        own = os.environ.get("CODEX_HOME")
        source = Path(own) / "auth.json" if own else Path.home() / ".codex" / "auth.json"
        dest = home / "auth.json"
        try:
            if not source.is_file() or source.resolve() == dest.resolve():
                return
            if dest.is_symlink() and not dest.exists():
                dest.unlink()                           # a dangling link: point it again
            if dest.exists():
                return                                  # hive's own login, or linked already
            os.symlink(source, dest)
        except OSError:
            try:
                shutil.copy2(source, dest)
                os.chmod(dest, 0o600)
            except OSError as e:
                log.warning("codex backend: could not use %s: %s", source, e)

    def probe_target(self) -> tuple[str, dict[str, str]]:
        """The URL and headers of the health probe (GET <base_url>/models)."""
        cfg = self.codex_config
        provider = str(cfg.get("model_provider") or "openai")
        providers = cfg.get("model_providers") if isinstance(cfg.get("model_providers"), dict) else {}
        entry = providers.get(provider) if isinstance(providers.get(provider), dict) else {}
        default_url, default_key = BUILTIN_PROVIDERS.get(provider, ("", ""))
        base = str(entry.get("base_url") or "")
        if not base and provider == "openai":
            base = os.environ.get("OPENAI_BASE_URL") or str(cfg.get("openai_base_url") or "")
        base = base or default_url or BUILTIN_PROVIDERS["openai"][0]
        url = base.rstrip("/") + "/models"
        query = entry.get("query_params")
        if isinstance(query, dict) and query:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode({str(k): str(v) for k, v in query.items()})
        headers = {"User-Agent": "git-hive", "Accept": "application/json"}
        static = entry.get("http_headers")
        if isinstance(static, dict):
            headers.update({str(k): str(v) for k, v in static.items()})
        env_key = str(entry.get("env_key") or default_key)
        key = os.environ.get(env_key, "") if env_key else ""
        if not key and provider == "openai":
            key = _auth_file_key(Path(self.codex_home) / "auth.json")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return url, headers

    def _model_for(self, spec: SessionSpec) -> str:
        model = spec.model or ""
        if model and not model.lower().startswith("claude"):
            return model
        return str(self.codex_config.get("model") or "")

    def _thread_params(self, spec: SessionSpec) -> dict[str, Any]:
        approval = self.codex_config.get("approval_policy") or "untrusted"
        sandbox = self.codex_config.get("sandbox_mode") or "workspace-write"
        params: dict[str, Any] = {"cwd": spec.cwd, "approvalPolicy": approval, "sandbox": sandbox}
        model = self._model_for(spec)
        if model:
            params["model"] = model
        if sandbox == "workspace-write":
            user = self.codex_config.get("sandbox_workspace_write")
            user_roots = user.get("writable_roots") if isinstance(user, dict) else None
            roots = [str(r) for r in user_roots] if isinstance(user_roots, list) else []
            for root in git_writable_roots(spec.cwd):
                if root not in roots:
                    roots.append(root)
            if roots:
                params["config"] = {"sandbox_workspace_write": {"writable_roots": roots}}
        return params

    def price_of(self, model: str) -> tuple[float, float, float]:
        if model in self.prices:
            return self.prices[model]
        best = ""
        for slug in self.prices:
            if slug != "default" and model.startswith(slug) and len(slug) > len(best):
                best = slug
        return self.prices[best] if best else self.prices.get("default", DEFAULT_PRICE)

    def estimate_cost(self, model: str, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        price_in, price_out, price_cached = self.price_of(model)
        cached = min(max(0, cached_tokens), max(0, input_tokens))
        return ((input_tokens - cached) * price_in + cached * price_cached
                + output_tokens * price_out) / 1_000_000

    # -- sessions ------------------------------------------------------------------------------
    async def create_session(self, spec: SessionSpec) -> str:
        if not self._home_ready:
            await asyncio.to_thread(self.prepare_home)
        if spec.resume:
            old = self._sessions.get(spec.resume)
            if old is not None and not old.deleted:
                async with old.lock:
                    if not old.alive():
                        old.spec = replace(spec, resume=old.id)
                        await self._restart(old)
                return old.id
        s = _Session(id="", spec=replace(spec))
        if spec.resume:
            # the id first: Codex reports the thread's usage right after thread/resume answers
            s.id = spec.resume
            past = self._past_usage.pop(spec.resume, None)
            if past is not None:
                s.usage, s.usage_base = replace(past), replace(past)
        async with s.lock:
            proc = await self._spawn(s)
            try:
                result = None
                if spec.resume:
                    try:
                        result = await self._request(s, proc, "thread/resume", {
                            "threadId": spec.resume, "excludeTurns": True, **self._thread_params(spec)})
                    except RpcError as e:
                        log.warning("codex backend: cannot resume thread %s (%s): starting a new one",
                                    spec.resume, e)
                if result is None:
                    s.id, s.usage, s.usage_base = "", Usage(), None
                    params = self._thread_params(spec)
                    if spec.system_prompt:
                        params["developerInstructions"] = spec.system_prompt
                    result = await self._request(s, proc, "thread/start", params)
                thread = result.get("thread") if isinstance(result, dict) else None
                if not isinstance(thread, dict) or not thread.get("id"):
                    raise RuntimeError(f"codex app-server answered thread/start without a thread: {result!r:.200}")
            except BaseException:
                await self._kill(proc)
                raise
            s.id = str(thread["id"])
            s.model = str(result.get("model") or self._model_for(spec))
            s.spec = replace(spec, resume=s.id)
            self._sessions[s.id] = s
        return s.id

    async def _restart(self, s: _Session) -> None:
        """A new app-server for a session whose process ended: thread/resume its thread."""
        s.usage_base = replace(s.usage)
        proc = await self._spawn(s)
        try:
            result = await self._request(s, proc, "thread/resume", {
                "threadId": s.id, "excludeTurns": True, **self._thread_params(s.spec)})
        except BaseException:
            await self._kill(proc)
            raise
        if isinstance(result, dict) and result.get("model"):
            s.model = str(result["model"])

    async def _spawn(self, s: _Session) -> _Proc:
        env = {**os.environ, **s.spec.env, "CODEX_HOME": self.codex_home}
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv, "app-server", cwd=s.spec.cwd, env=env, start_new_session=True,
                limit=LINE_LIMIT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError as e:
            raise RuntimeError(f"codex CLI not found: {self.argv[0]!r} ({e.strerror})") from None
        except OSError as e:
            raise RuntimeError(f"cannot start {self.argv[0]!r}: {e}") from None
        proc = _Proc(process, next(self._generations))
        if s.proc is not None:   # alive, or ended leaving children that ignored its SIGTERM
            await self._kill(s.proc)
        s.proc = proc
        proc.reader = asyncio.create_task(self._read_stdout(s, proc), name=f"codex-{proc.pid}-stdout")
        proc.stderr_reader = asyncio.create_task(self._read_stderr(proc), name=f"codex-{proc.pid}-stderr")
        try:
            await self._request(s, proc, "initialize", {
                "clientInfo": CLIENT_INFO,
                "capabilities": {"experimentalApi": False, "requestAttestation": False}},
                timeout=self.init_timeout)
            await proc.send({"method": "initialized"})
        except BaseException:
            await self._kill(proc)
            raise
        return proc

    async def abort_session(self, session_id: str) -> None:
        s = self._sessions.get(session_id)
        if s is None or s.deleted:
            return
        dropped = len(s.queue)
        s.queue.clear()
        proc = s.proc
        if s.turn_active and proc is not None and proc.alive():
            s.aborting = True
            try:
                if not s.turn_id:
                    await asyncio.wait_for(s.turn_id_known.wait(), self.interrupt_timeout)
                if s.turn_id:
                    await self._request(s, proc, "turn/interrupt", {"threadId": s.id, "turnId": s.turn_id},
                                        timeout=self.interrupt_timeout)
                await asyncio.wait_for(s.turn_done.wait(), self.interrupt_timeout)
            except RpcError as e:                    # e.g. the turn had just ended
                log.debug("codex backend: turn/interrupt: %s", e)
                try:
                    await asyncio.wait_for(s.turn_done.wait(), self.interrupt_timeout)
                except asyncio.TimeoutError:
                    await self._kill(proc)
            except (asyncio.TimeoutError, ServerGone):
                await self._kill(proc)
            finally:
                s.aborting = False
        for _ in range(dropped):
            await self._emit(s, IDLE, TurnResult(ok=False, error="aborted"))

    async def delete_session(self, session_id: str) -> None:
        await self._end(session_id, patient=True)

    async def _end(self, session_id: str, patient: bool) -> None:
        s = self._sessions.pop(session_id, None)
        if s is None:
            return
        s.deleted = True
        s.queue.clear()
        self._past_usage[s.id] = s.usage
        while len(self._past_usage) > MAX_PAST_SESSIONS:
            self._past_usage.pop(next(iter(self._past_usage)))
        proc = s.proc
        if proc is not None:
            if proc.alive() and proc.proc.stdin is not None and not proc.proc.stdin.is_closing():
                proc.proc.stdin.close()
                if patient or not s.turn_active:
                    try:
                        await asyncio.wait_for(proc.proc.wait(), self.kill_grace)
                    except asyncio.TimeoutError:
                        pass
            await self._kill(proc)
        for task in list(s.tasks):
            task.cancel()

    # -- messages ------------------------------------------------------------------------------
    async def send_message_async(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.last_activity = time.monotonic()
        if s.turn_active:
            s.queue.append(text)
            return
        s.turn_active = True                      # busy at once: no race with get_session_status
        try:
            if not s.alive():
                async with s.lock:
                    if not s.alive():
                        await self._restart(s)
        except Exception as e:
            s.turn_active = False
            raise RuntimeError(f"codex session {session_id}: cannot restart the app-server: {e}") from e
        await self._start_turn(s, text)

    async def _start_turn(self, s: _Session, text: str) -> None:
        s.turn_active = True
        s.turn_seq += 1
        seq = s.turn_seq
        s.turn_id = ""
        s.turn_id_known.clear()
        s.turn_done.clear()
        s.turn_error = None
        s.provider_error_sent = False
        s.last_text = ""
        proc = s.proc
        await self._emit(s, BUSY)
        if proc is None or not proc.alive():
            await self._finish_turn(s, TurnResult(ok=False, error="codex app-server has exited"))
            return
        try:
            result = await self._request(s, proc, "turn/start", {
                "threadId": s.id, "input": [{"type": "text", "text": text, "text_elements": []}]})
        except RpcError as e:
            if s.turn_seq == seq:
                await self._finish_turn(s, TurnResult(ok=False, error=f"codex refused the turn: {e}"))
            return
        except ServerGone:
            return                                  # the reader ends the turn (idle, then exited)
        turn = result.get("turn") if isinstance(result, dict) else None
        if s.turn_seq == seq and s.turn_active and not s.turn_id and isinstance(turn, dict):
            s.turn_id = str(turn.get("id") or "")
            if s.turn_id:
                s.turn_id_known.set()

    async def _finish_turn(self, s: _Session, result: TurnResult) -> None:
        if not s.turn_active:
            return
        s.turn_active = False
        s.turn_seq += 1
        s.turn_id = ""
        s.turn_id_known.set()                        # nobody waits for an id that will not come
        await self._emit(s, IDLE, result)
        s.turn_done.set()
        if s.queue and not s.deleted and s.alive():
            text = s.queue.popleft()
            s.turn_active = True
            task = asyncio.create_task(self._start_turn(s, text), name=f"codex-{s.id[:8]}-turn")
            s.tasks.add(task)
            task.add_done_callback(s.tasks.discard)

    # -- permissions ---------------------------------------------------------------------------
    async def reply_permission(self, session_id: str, request_id: str, allow: bool,
                               message: str = "") -> None:
        s = self._sessions.get(session_id)
        if s is None or s.permissions.pop(request_id, None) is None:
            log.debug("codex backend: no pending permission %s/%s", session_id, request_id)
            return
        proc, rpc_id, _method = s.rpc_of.pop(request_id)
        if not allow:
            s.messages.append({"role": "hive", "text": f"declined: {message}"[:MAX_MESSAGE_CHARS],
                               "at": time.time()})
        if not proc.alive():
            return
        try:
            await proc.send({"id": rpc_id, "result": {"decision": "accept" if allow else "decline"}})
        except ServerGone:
            pass                                    # the process is gone; its turn ends anyway

    # -- JSON-RPC ------------------------------------------------------------------------------
    async def _request(self, s: _Session, proc: _Proc, method: str, params: dict[str, Any],
                       timeout: float | None = None) -> Any:
        """One request; no answer within the timeout means the server stopped answering: kill it."""
        if not proc.alive():
            raise ServerGone(f"codex app-server has exited ({method})")
        rpc_id = next(proc.ids)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        proc.pending[rpc_id] = (method, future)
        try:
            await proc.send({"id": rpc_id, "method": method, "params": params})
            return await asyncio.wait_for(asyncio.shield(future), timeout or self.request_timeout)
        except asyncio.TimeoutError:
            log.warning("codex backend: %s got no answer in %ss: restarting the app-server", method,
                        timeout or self.request_timeout)
            await self._kill(proc)
            raise ServerGone(f"codex app-server stopped answering ({method})") from None
        finally:
            proc.pending.pop(rpc_id, None)

    async def _kill(self, proc: _Proc) -> None:
        """SIGTERM the process group, SIGKILL after the grace; wait for the reader to finish."""
        pgid = proc.pid
        if proc.proc.returncode is None:
            killpg(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.proc.wait(), self.kill_grace)
            except asyncio.TimeoutError:
                killpg(pgid, signal.SIGKILL)
                await proc.proc.wait()
        if killpg(pgid, signal.SIGTERM) and not await group_gone(pgid, self.kill_grace):
            killpg(pgid, signal.SIGKILL)
            await group_gone(pgid, self.kill_grace)
        current = asyncio.current_task()
        if proc.reader is not None and proc.reader is not current and not proc.reader.done():
            try:
                await asyncio.wait_for(asyncio.shield(proc.ended.wait()), self.kill_grace + 2)
            except asyncio.TimeoutError:
                pass

    async def _read_stderr(self, proc: _Proc) -> None:
        stream = proc.proc.stderr
        assert stream is not None
        while chunk := await stream.read(65536):
            proc.stderr_tail = (proc.stderr_tail + chunk)[-STDERR_TAIL:]

    async def _read_stdout(self, s: _Session, proc: _Proc) -> None:
        stream = proc.proc.stdout
        assert stream is not None
        discarding = False
        try:
            while True:
                try:
                    line = await stream.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:
                    if e.partial and not discarding:
                        await self._handle_line(s, proc, e.partial)
                    break
                except asyncio.LimitOverrunError as e:
                    if not discarding:
                        proc.discarded_lines += 1
                    discarding = True
                    await stream.readexactly(e.consumed)
                    continue
                if discarding:
                    discarding = False
                    continue
                await self._handle_line(s, proc, line)
        finally:
            await self._process_ended(s, proc)

    async def _process_ended(self, s: _Session, proc: _Proc) -> None:
        try:
            await self._wind_up(s, proc)
        finally:
            proc.ended.set()

    async def _wind_up(self, s: _Session, proc: _Proc) -> None:
        """The process ended: fail what waits on it; end the open turn (idle), then `exited`."""
        code = await proc.proc.wait()
        proc.exit_code = code
        if proc.stderr_reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(proc.stderr_reader), 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        killpg(proc.pid, signal.SIGTERM)            # what the app-server left behind
        for method, future in list(proc.pending.values()):
            if not future.done():
                future.set_exception(ServerGone(f"codex app-server exited ({method})"))
        proc.pending.clear()
        for rid, (owner, _rpc, _m) in list(s.rpc_of.items()):
            if owner is proc:
                s.rpc_of.pop(rid, None)
                s.permissions.pop(rid, None)
        if s.proc is not proc:                       # replaced already: this one is history
            return
        s.last_activity = time.monotonic()
        if s.aborting:
            error = "aborted"
        else:
            error = f"codex app-server exited with code {code} mid-turn"
            tail = proc.stderr_line()
            if tail:
                error += f": {tail}"
        queued = len(s.queue)
        s.queue.clear()
        if s.turn_active:
            s.turn_active = False
            s.turn_seq += 1
            s.turn_id = ""
            s.turn_id_known.set()
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
            s.turn_done.set()
        for _ in range(queued):                      # every message sent gets its idle
            await self._emit(s, IDLE, TurnResult(ok=False, error=error))
        await self._emit(s, EXITED, {"exit_code": code})

    async def _handle_line(self, s: _Session, proc: _Proc, raw: bytes) -> None:
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            proc.discarded_lines += 1
            return
        method = msg.get("method")
        if method is None and "id" in msg:                        # an answer to one of ours
            entry = proc.pending.get(msg["id"]) if isinstance(msg["id"], int) else None
            if entry is not None and not entry[1].done():
                if "error" in msg:
                    entry[1].set_exception(RpcError(entry[0], msg["error"]))
                else:
                    entry[1].set_result(msg.get("result"))
            return
        if not isinstance(method, str):
            proc.discarded_lines += 1
            return
        if s.proc is not proc:
            return
        s.last_activity = time.monotonic()
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if "id" in msg:
            await self._on_server_request(s, proc, msg["id"], method, params)
        else:
            await self._on_notification(s, method, params)

    # -- what the app-server says --------------------------------------------------------------
    async def _on_server_request(self, s: _Session, proc: _Proc, rpc_id: Any, method: str,
                                 params: dict[str, Any]) -> None:
        if method == "item/commandExecution/requestApproval":
            command = _unwrap_shell(params.get("command"), params.get("commandActions"))
            cwd = params.get("cwd")
            request = PermissionRequest(request_id=f"{proc.generation}-{rpc_id}", tool="commandExecution",
                                        input=dict(params), paths=[str(cwd)] if cwd else [],
                                        command=command)
        elif method == "item/fileChange/requestApproval":
            item_id = str(params.get("itemId", ""))
            changes = s.items.get(item_id) or []
            paths = list(changes)
            if params.get("grantRoot"):
                paths.append(str(params["grantRoot"]))
            request = PermissionRequest(request_id=f"{proc.generation}-{rpc_id}", tool="fileChange",
                                        input={**params, "paths": paths}, paths=paths)
        else:
            await self._refuse_server_request(proc, rpc_id, method)
            return
        s.permissions[request.request_id] = request
        s.rpc_of[request.request_id] = (proc, rpc_id, method)
        await self._emit(s, PERMISSION, request)

    async def _refuse_server_request(self, proc: _Proc, rpc_id: Any, method: str) -> None:
        """Server requests hive does not serve get the answer that grants nothing."""
        answers = {
            "item/permissions/requestApproval": {"permissions": {}, "scope": "turn"},
            "item/tool/requestUserInput": {"answers": {}},
            "mcpServer/elicitation/request": {"action": "decline"},
            "item/tool/call": {"contentItems": [], "success": False},
            "applyPatchApproval": {"decision": "denied"},
            "execCommandApproval": {"decision": "denied"},
        }
        reply: dict[str, Any] = {"id": rpc_id}
        if method in answers:
            reply["result"] = answers[method]
        else:
            reply["error"] = {"code": -32601, "message": f"git-hive does not handle {method}"}
        log.info("codex backend: refused server request %s", method)
        try:
            await proc.send(reply)
        except ServerGone:
            pass

    async def _on_notification(self, s: _Session, method: str, params: dict[str, Any]) -> None:
        thread_id = params.get("threadId")
        if thread_id is not None and thread_id != s.id:
            return                                  # another thread (a sub-agent): not ours
        if method == "turn/started":
            turn = params.get("turn") if isinstance(params.get("turn"), dict) else {}
            if s.turn_active and not s.turn_id and turn.get("id"):
                s.turn_id = str(turn["id"])
                s.turn_id_known.set()
        elif method == "item/started":
            await self._item_started(s, params.get("item"))
        elif method == "item/completed":
            await self._item_completed(s, params.get("item"))
        elif method == "item/commandExecution/outputDelta":
            now = time.monotonic()
            if now - s.last_progress >= PROGRESS_EVERY:
                s.last_progress = now
                delta = str(params.get("delta") or "").strip().splitlines()
                await self._message(s, "tool", "… " + (delta[-1][:200] if delta else "(running)"))
        elif method == "thread/tokenUsage/updated":
            await self._usage(s, params.get("tokenUsage"))
        elif method == "error":
            await self._error(s, params)
        elif method == "turn/completed":
            await self._turn_completed(s, params.get("turn"))
        elif method == "serverRequest/resolved":
            rpc_id = params.get("requestId")
            for rid, (_proc, known, _m) in list(s.rpc_of.items()):
                if known == rpc_id:
                    s.rpc_of.pop(rid, None)
                    s.permissions.pop(rid, None)

    async def _message(self, s: _Session, role: str, text: str) -> None:
        text = text[:MAX_MESSAGE_CHARS]
        s.messages.append({"role": role, "text": text, "at": time.time()})
        await self._emit(s, MESSAGE, {"role": role, "text": text})

    async def _item_started(self, s: _Session, item: Any) -> None:
        if not isinstance(item, dict):
            return
        if item.get("type") == "fileChange":
            paths = []
            for change in item.get("changes") or []:
                if not isinstance(change, dict):
                    continue
                if change.get("path"):
                    paths.append(str(change["path"]))
                kind = change.get("kind")
                if isinstance(kind, dict) and kind.get("move_path"):
                    paths.append(str(kind["move_path"]))
            s.items[str(item.get("id", ""))] = paths
            while len(s.items) > MAX_ITEMS:
                s.items.popitem(last=False)
        elif item.get("type") == "commandExecution":
            s.last_progress = time.monotonic()

    async def _item_completed(self, s: _Session, item: Any) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind == "agentMessage":
            text = str(item.get("text") or "")
            s.last_text = text
            await self._message(s, "assistant", text)
        elif kind == "commandExecution":
            command = _unwrap_shell(item.get("command"), item.get("commandActions"))
            status = item.get("status")
            code = item.get("exitCode")
            what = f"exit {code}" if code is not None else str(status)
            await self._message(s, "tool", f"$ {command} ({what})")
        elif kind == "fileChange":
            paths = s.items.pop(str(item.get("id", "")), None)
            if paths is None:
                paths = [str(c.get("path")) for c in item.get("changes") or [] if isinstance(c, dict)]
            await self._message(s, "tool", f"patch {item.get('status')}: {', '.join(paths)}")

    async def _usage(self, s: _Session, token_usage: Any) -> None:
        total = token_usage.get("total") if isinstance(token_usage, dict) else None
        if not isinstance(total, dict):
            return
        reported_in = count(total.get("inputTokens"))
        reported_out = count(total.get("outputTokens"))
        cached = count(total.get("cachedInputTokens"))
        if s.usage_base is not None:                # first report after a (re)start
            base = s.usage_base
            s.usage_base = None
            if reported_in + reported_out < base.total_tokens:
                s.usage_offset = replace(base)       # Codex restarted its count: add to ours
            else:
                s.usage_offset = Usage()             # Codex carried the thread's totals over
        cost = self.estimate_cost(s.model, reported_in, cached, reported_out)
        usage = Usage(input_tokens=s.usage_offset.input_tokens + reported_in,
                      output_tokens=s.usage_offset.output_tokens + reported_out,
                      cost_usd=s.usage_offset.cost_usd + cost)
        if usage == s.usage:
            return
        s.usage = usage
        await self._emit(s, USAGE, replace(usage))

    async def _error(self, s: _Session, params: dict[str, Any]) -> None:
        error = params.get("error") if isinstance(params.get("error"), dict) else {}
        message = str(error.get("message") or "codex reported an error")
        if params.get("willRetry"):
            await self._message(s, "system", f"retrying: {message}")
            return
        s.turn_error = error
        provider, status = classify_error(error)
        if provider and not s.provider_error_sent:
            s.provider_error_sent = True
            await self._emit(s, PROVIDER_ERROR, {"status": status, "message": message})

    async def _turn_completed(self, s: _Session, turn: Any) -> None:
        turn = turn if isinstance(turn, dict) else {}
        status = turn.get("status")
        if status == "completed":
            text = s.last_text
            for item in turn.get("items") or []:
                if isinstance(item, dict) and item.get("type") == "agentMessage" and item.get("text"):
                    text = str(item["text"])
            await self._finish_turn(s, TurnResult(ok=True, text=text[:MAX_MESSAGE_CHARS]))
        elif status == "interrupted":
            await self._finish_turn(s, TurnResult(ok=False, error="aborted" if s.aborting else "interrupted",
                                                  text=s.last_text[:MAX_MESSAGE_CHARS]))
        else:
            error = turn.get("error") if isinstance(turn.get("error"), dict) else (s.turn_error or {})
            message = str(error.get("message") or f"codex turn {status or 'failed'}")
            provider, code = classify_error(error)
            if provider and not s.provider_error_sent:
                s.provider_error_sent = True
                await self._emit(s, PROVIDER_ERROR, {"status": code, "message": message})
            await self._finish_turn(s, TurnResult(ok=False, error=_one_line(message), provider_error=provider,
                                                  text=s.last_text[:MAX_MESSAGE_CHARS]))


# -- helpers ----------------------------------------------------------------------------------

def classify_error(error: Any) -> tuple[bool, int | None]:
    """(is it the provider's failure, the HTTP status when known) for a Codex error object."""
    if not isinstance(error, dict):
        return False, None
    info = error.get("codexErrorInfo")
    if isinstance(info, str):
        if info in PROVIDER_ERRORS:
            return True, PROVIDER_ERRORS[info]
        if info == "other":
            text = str(error.get("message") or "").lower()
            if any(word in text for word in ("stream disconnected", "connection", "timed out", "timeout")):
                return True, None
        return False, None
    if isinstance(info, dict) and len(info) == 1:
        kind, detail = next(iter(info.items()))
        if kind in PROVIDER_ERROR_VARIANTS:
            status = detail.get("httpStatusCode") if isinstance(detail, dict) else None
            return True, status if isinstance(status, int) else None
    return False, None


def git_writable_roots(cwd: str) -> list[str]:
    """The git directories a commit from `cwd` (or from worktrees directly in it) writes to."""
    roots: list[str] = []

    def add(path: Path) -> None:
        text = str(path)
        if text not in roots:
            roots.append(text)

    def from_dotgit(dotgit: Path) -> None:
        if dotgit.is_dir():
            add(dotgit.resolve())
            return
        try:
            content = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return
        if not content.startswith("gitdir:"):
            return
        gitdir = (dotgit.parent / content[len("gitdir:"):].strip()).resolve()
        add(gitdir)
        try:
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        except OSError:
            return
        add(common)

    start = Path(cwd).resolve()
    for directory in (start, *start.parents):
        dotgit = directory / ".git"
        if dotgit.exists():
            from_dotgit(dotgit)
            break
        if (directory / "HEAD").is_file() and (directory / "objects").is_dir() and (directory / "refs").is_dir():
            add(directory)                           # cwd lies inside a git dir (hive's worktrees dir)
            break
    if not (start / ".git").exists():
        try:
            children = sorted(start.iterdir())[:MAX_CHILD_SCAN]
        except OSError:
            children = []
        for child in children:
            if (child / ".git").is_file():
                from_dotgit(child / ".git")
    # the common dir after the worktree admin dirs, as `[<common>, <admin>...]` reads best
    commons = [r for r in roots if not Path(r, "commondir").is_file()]
    return commons + [r for r in roots if r not in commons]


def _unwrap_shell(command: Any, actions: Any = None) -> str:
    """`/bin/bash -lc "<line>"` → `<line>`: the shell line the policy must judge."""
    text = str(command or "")
    try:
        words = shlex.split(text)
    except ValueError:
        words = []
    if len(words) == 3 and os.path.basename(words[0]) in ("bash", "sh", "zsh", "dash") \
            and words[1] in ("-lc", "-c"):
        return words[2]
    if isinstance(actions, list) and len(actions) == 1 and isinstance(actions[0], dict) \
            and isinstance(actions[0].get("command"), str) and not words:
        return actions[0]["command"]
    return text


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _price_table(user: Any) -> dict[str, tuple[float, float, float]]:
    table = dict(DEFAULT_PRICES)
    if not isinstance(user, dict):
        if user is not None:
            log.warning("codex backend: [codex] %s must be a table of model = [input, output]", PRICE_KEY)
        return table
    for slug, value in user.items():
        try:
            numbers = [float(v) for v in value]
            if len(numbers) == 2:
                numbers.append(numbers[0] / 10)
            if len(numbers) != 3 or min(numbers) < 0:
                raise ValueError
        except (TypeError, ValueError):
            log.warning("codex backend: ignoring [codex.%s] %s = %r (want [input, output(, cached)] "
                        "in $ per million tokens)", PRICE_KEY, slug, value)
            continue
        table[str(slug)] = (numbers[0], numbers[1], numbers[2])
    return table


def _auth_file_key(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    key = data.get("OPENAI_API_KEY") if isinstance(data, dict) else None
    return key if isinstance(key, str) else ""


def _probe(url: str, headers: dict[str, str], timeout: float) -> bool:
    """GET url: True when it connects and answers a status below 500 that is not 429."""
    request = urllib.request.Request(url, headers=headers, method="GET")
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers = [urllib.request.ProxyHandler({})] if host in ("127.0.0.1", "localhost", "::1") else []
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return status < 500 and status != 429


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
