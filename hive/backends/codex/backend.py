"""The `codex` backend: one `codex app-server` process per session (see the package docstring)."""

from __future__ import annotations

import asyncio
import collections
import copy
import itertools
import logging
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hive.backends.agent_process import AgentProcess
from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, PermissionRequest, SessionSpec,
    TurnResult, Usage,
)
from hive.backends.codex.health import probe, probe_target, provider_access
from hive.backends.codex.home import codex_home_for, prepare_home
from hive.backends.codex.pricing import PRICE_KEY, estimate_cost, price_of, price_table
from hive.backends.codex.errors import classify_error, one_line
from hive.backends.codex.rpc import AppServer, RpcError, ServerGone
from hive.backends.codex.sandbox import bundled_bwrap_dir, git_writable_roots
from hive.backends.jails import cli_install, session_jail
from hive.backends.reports import count, table
from hive.backends.sessions import SessionBackend
from hive.errors import HiveError
from hive.jail import JailSpec, NoJail

log = logging.getLogger(__name__)

CLIENT_INFO = {"name": "git-hive", "title": "git hive", "version": "0.1.0"}
LINE_LIMIT = 16 * 1024 * 1024     # longest stdout line kept (diffs, command output); longer ones dropped
MAX_MESSAGES = 500                # message history kept per session
MAX_MESSAGE_CHARS = 64 * 1024
MAX_ITEMS = 256                   # file-change items remembered per session (for approval paths)
STDERR_TAIL = 8192
JAILED_SANDBOX = "danger-full-access"   # Codex's own sandbox inside hive's jail: see _thread_params
PROGRESS_EVERY = 30.0             # seconds between "tool" progress messages of a long command


# -- one session (thread) ---------------------------------------------------------------------

@dataclass
class _Session:
    id: str
    spec: SessionSpec
    proc: AppServer | None = None
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    usage_base: Usage | None = None        # after a restart: totals before it, until Codex reports
    usage_offset: Usage = field(default_factory=Usage)
    messages: collections.deque = field(default_factory=lambda: collections.deque(maxlen=MAX_MESSAGES))
    permissions: dict[str, PermissionRequest] = field(default_factory=dict)
    rpc_of: dict[str, tuple[AppServer, Any, str]] = field(default_factory=dict)
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


class CodexBackend(SessionBackend):
    """Runs `codex app-server` processes; see the package docstring."""

    name = "codex"
    kill_grace = 2.0             # seconds between SIGTERM and SIGKILL, and for a clean exit
    init_timeout = 60.0          # starting the process and `initialize`
    request_timeout = 30.0       # any other request; no answer in time = "stopped answering"
    interrupt_timeout = 10.0     # `turn/interrupt` and the `turn/completed` that follows
    probe_timeout = 5.0          # health_check's GET

    def __init__(self, command: str = "codex", hive_dir: str | None = None,
                 codex_config: dict[str, Any] | None = None):
        super().__init__()
        self.command = command or "codex"
        self.argv = shlex.split(self.command)
        if not self.argv:
            raise HiveError("codex_command is empty")
        self.hive_dir = str(Path(hive_dir).resolve()) if hive_dir else None
        raw = copy.deepcopy(codex_config) if isinstance(codex_config, dict) else {}
        self.prices = price_table(raw.pop(PRICE_KEY, None))
        self.codex_config = raw                          # the user's [codex] table, hive keys removed
        self.codex_home = codex_home_for(self.hive_dir)
        self._generations = itertools.count(1)
        self._home_ready = False

    @classmethod
    def from_settings(cls, config: Any, *, hive_dir: str, repo_root: str) -> CodexBackend:
        return cls(command=config.codex_command, hive_dir=hive_dir, codex_config=config.codex)

    async def connect_with_reconnect(self) -> None:
        """Check that the CLI exists and write the private CODEX_HOME; processes start per session."""
        if shutil.which(self.argv[0]) is None:
            raise HiveError(f"codex CLI not found: {self.argv[0]!r} (set codex_command, or install "
                            "@openai/codex from npm)")
        await asyncio.to_thread(self.prepare_home)

    async def health_check(self) -> bool:
        url, headers = self.probe_target()
        return await asyncio.to_thread(probe, url, headers, self.probe_timeout)

    # -- configuration -------------------------------------------------------------------------
    def prepare_home(self) -> Path:
        """Write `<codex-home>/config.toml` (defaults + the user's [codex] table) and link auth."""
        path = prepare_home(self.codex_home, self.codex_config)
        self._home_ready = True
        return path

    def probe_target(self) -> tuple[str, dict[str, str]]:
        """The URL and headers of the health probe (GET <base_url>/models)."""
        return probe_target(self.codex_config, self.codex_home)

    def price_of(self, model: str) -> tuple[float, float, float]:
        return price_of(self.prices, model)

    def estimate_cost(self, model: str, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        return estimate_cost(self.price_of(model), input_tokens, cached_tokens, output_tokens)

    def _model_for(self, spec: SessionSpec) -> str:
        model = spec.model or ""
        if model and not model.lower().startswith("claude"):
            return model
        return str(self.codex_config.get("model") or "")

    def _thread_params(self, spec: SessionSpec) -> dict[str, Any]:
        approval = self.codex_config.get("approval_policy") or "untrusted"
        sandbox = self.codex_config.get("sandbox_mode") or "workspace-write"
        if spec.jail is not None:
            # inside hive's jail (the guarantee) Codex's own bwrap sandbox is not nested: it would
            # take the first `bwrap` on PATH, and an old system one (no --argv0) makes every
            # patch and command silently do nothing; the approvals still ask hive's policy
            sandbox = JAILED_SANDBOX
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
            past = self._past.pop(spec.resume, None) or spec.usage   # (a daemon restart: hive's record)
            if past.total_tokens or past.cost_usd:
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

    def _jail(self, spec: SessionSpec) -> JailSpec | None:
        """The session's jail plus the CLI's install (read) and hive's private CODEX_HOME (written;
        a user login linked into it is read where it lies)."""
        home = Path(self.codex_home)
        home.mkdir(parents=True, exist_ok=True)
        linked = tuple(os.path.realpath(p) for p in home.iterdir() if p.is_symlink())
        urls, names = provider_access(self.codex_config)
        return session_jail(spec, self.name, writable=(str(home),),
                            readable=(*cli_install(self.argv[0]), *linked), endpoints=urls, provider_env=names)

    async def _spawn(self, s: _Session) -> AppServer:
        env = {**os.environ, **s.spec.env, "CODEX_HOME": self.codex_home}
        bwrap_dir = bundled_bwrap_dir(self.argv[0])
        if bwrap_dir:                         # Codex's sandbox takes the first bwrap on PATH
            env["PATH"] = os.pathsep.join([bwrap_dir, *[p for p in env.get("PATH", "").split(os.pathsep) if p]])
        try:
            agent = await AgentProcess.start([*self.argv, "app-server"], cwd=s.spec.cwd, env=env,
                                             line_limit=LINE_LIMIT, kill_grace=self.kill_grace,
                                             stderr_limit=STDERR_TAIL, jail=self._jail(s.spec))
        except FileNotFoundError as e:
            raise RuntimeError(f"codex CLI not found: {self.argv[0]!r} ({e.strerror})") from None
        except (OSError, NoJail) as e:
            raise RuntimeError(f"cannot start {self.argv[0]!r}: {e}") from None
        proc = AppServer(agent, next(self._generations))
        if s.proc is not None:   # alive, or ended leaving children that ignored its SIGTERM
            await self._kill(s.proc)
        s.proc = proc
        proc.reader = asyncio.create_task(self._read_stdout(s, proc), name=f"codex-{proc.pid}-stdout")
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
        if s.turn_active and not s.turn_id and (s.lock.locked() or proc is None or not proc.alive()):
            # sent while the app-server (re)starts (the new one may be up, not yet ready): it
            # ends here, and is never started
            await self._finish_turn(s, TurnResult(ok=False, error="aborted"))
        elif s.turn_active and proc is not None and proc.alive():
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

    # -- messages ------------------------------------------------------------------------------
    async def _send_turn(self, session_id: str, text: str) -> None:
        s = self._get(session_id)
        s.messages.append({"role": "user", "text": text[:MAX_MESSAGE_CHARS], "at": time.time()})
        s.last_activity = time.monotonic()
        if s.turn_active:
            s.queue.append(text)
            return
        s.turn_active = True                      # busy at once: no race with get_session_status
        seq = s.turn_seq
        try:
            if not s.alive():
                async with s.lock:
                    if not s.alive():
                        await self._restart(s)
        except Exception as e:
            if s.turn_seq != seq:
                return                            # aborted during the restart: ended already
            s.turn_active = False
            raise RuntimeError(f"codex session {session_id}: cannot restart the app-server: {e}") from e
        if s.turn_seq != seq:
            return                                # aborted during the restart: ended already
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
    async def _reply_permission(self, session_id: str, request_id: str, allow: bool,
                                message: str) -> None:
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
    async def _request(self, s: _Session, proc: AppServer, method: str, params: dict[str, Any],
                       timeout: float | None = None) -> Any:
        return await proc.request(method, params, timeout or self.request_timeout)

    async def _kill(self, proc: AppServer) -> None:
        await proc.kill()

    async def _read_stdout(self, s: _Session, proc: AppServer) -> None:
        try:
            await proc.agent.read_json_lines(lambda msg: self._handle_message(s, proc, msg))
        finally:
            await self._process_ended(s, proc)

    async def _process_ended(self, s: _Session, proc: AppServer) -> None:
        try:
            await self._wind_up(s, proc)
        finally:
            proc.ended.set()

    async def _wind_up(self, s: _Session, proc: AppServer) -> None:
        """The process ended: fail what waits on it; end the open turn (idle), then `exited`."""
        await proc.agent.exited.wait()
        code = proc.exit_code = proc.agent.returncode
        await proc.agent.wait_stderr(1.0)
        proc.agent.terminate_leftovers()            # what the app-server left behind
        proc.fail_pending()
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
            tail = proc.agent.last_stderr_line()
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

    async def _handle_message(self, s: _Session, proc: AppServer, msg: dict[str, Any]) -> None:
        if proc.take_answer(msg):                                 # an answer to one of ours
            return
        method = msg.get("method")
        if not isinstance(method, str):
            proc.agent.discarded_lines += 1
            return
        if s.proc is not proc:
            return
        s.last_activity = time.monotonic()
        params = table(msg, "params")
        if "id" in msg:
            await self._on_server_request(s, proc, msg["id"], method, params)
        else:
            await self._on_notification(s, method, params)

    # -- what the app-server says --------------------------------------------------------------
    async def _on_server_request(self, s: _Session, proc: AppServer, rpc_id: Any, method: str,
                                 params: dict[str, Any]) -> None:
        if method == "item/commandExecution/requestApproval":
            command = _unwrap_shell(params.get("command"), params.get("commandActions"))
            cwd = params.get("cwd")
            request = PermissionRequest(request_id=f"{proc.generation}-{rpc_id}", tool="commandExecution",
                                        input=dict(params), command=command,
                                        cwd=str(cwd) if isinstance(cwd, str) else "")
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

    async def _refuse_server_request(self, proc: AppServer, rpc_id: Any, method: str) -> None:
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
            turn = table(params, "turn")
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
        # OpenAI's input_tokens include the cached ones (and any cache writes): uncached = the rest
        cached = min(cached, reported_in)
        written = min(count(total.get("cacheWriteInputTokens")), reported_in - cached)
        cost = self.estimate_cost(s.model, reported_in, cached, reported_out)
        usage = s.usage_offset.plus(Usage(input_tokens=reported_in - cached - written, output_tokens=reported_out,
                                          cost_usd=cost, cache_write_tokens=written, cache_read_tokens=cached))
        if usage == s.usage:
            return
        s.usage = usage
        await self._emit(s, USAGE, replace(usage))

    async def _error(self, s: _Session, params: dict[str, Any]) -> None:
        error = table(params, "error")
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
            await self._finish_turn(s, TurnResult(ok=False, error=one_line(message), provider_error=provider,
                                                  text=s.last_text[:MAX_MESSAGE_CHARS]))


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
