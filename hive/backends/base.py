"""The backend protocol: everything the orchestrator may ask of an agent runtime.

The orchestrator, the merge pipeline and the Queen only ever talk to this protocol; they never
know whether `claude`, `codex` or the `scripted` test agents run behind it. A backend owns agent
processes and turns their output into `Event`s; hive owns the decisions.

Sessions are long-lived conversations with one agent in one working directory. A *turn* starts
with `send_message_async` and ends when the session goes idle again (event `idle`), with a
`TurnResult` saying whether the turn itself failed (crash, API error, budget) — the work's own
outcome is in the worker's `.hive-result.jsonl`, which the orchestrator reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, runtime_checkable

# Event types a backend emits (Event.type).
BUSY = "busy"                  # a turn started
IDLE = "idle"                  # the turn ended; data: TurnResult
MESSAGE = "message"            # the agent said something; data: {"role", "text"}
USAGE = "usage"                # token usage grew; data: Usage (totals for the session)
PERMISSION = "permission"      # the agent asks for permission; data: PermissionRequest
EXITED = "exited"              # the agent process ended; data: {"exit_code": int | None}
PROVIDER_ERROR = "provider_error"  # the LLM provider failed (5xx, 529, refused); data: {"status", "message"}

EVENT_TYPES = (BUSY, IDLE, MESSAGE, USAGE, PERMISSION, EXITED, PROVIDER_ERROR)

ROLES = ("worker", "refinery", "queen")


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class TurnResult:
    ok: bool                          # False: the turn failed as a turn (crash, API error, ...)
    error: str = ""                   # one line saying why, when not ok
    provider_error: bool = False      # the failure was the provider's, not the work's
    text: str = ""                    # the agent's last words


@dataclass
class PermissionRequest:
    request_id: str
    tool: str                         # e.g. "Bash", "Write", "commandExecution", "fileChange"
    input: dict[str, Any] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)   # files the action touches, when known
    command: str = ""                 # the shell command, when it is one


@dataclass
class SessionSpec:
    role: str                         # worker | refinery | queen
    cwd: str                          # the worktree the agent works in
    model: str = ""
    system_prompt: str = ""           # hive's instructions, appended to the agent's own
    resume: str = ""                  # a previous session id to continue (same-agent retry)
    issue_id: str = ""
    labels: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class SessionStatus:
    session_id: str
    state: str                        # "idle" | "busy" | "exited"
    usage: Usage = field(default_factory=Usage)
    pid: int | None = None
    last_activity: float = 0.0        # time.monotonic() of the last event


@dataclass
class Event:
    type: str
    session_id: str
    data: Any = None


Handler = Callable[[Event], "Awaitable[None] | None"]


@runtime_checkable
class Backend(Protocol):
    """~15 methods: sessions, messages, permissions, events, health."""

    name: str

    # events
    def on(self, event_type: str, handler: Handler) -> None: ...
    async def connect_with_reconnect(self) -> None: ...
    async def stop(self) -> None: ...
    async def health_check(self) -> bool: ...

    # sessions
    async def create_session(self, spec: SessionSpec) -> str: ...
    async def abort_session(self, session_id: str) -> None: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def get_session_status(self, session_id: str) -> SessionStatus: ...
    async def list_sessions(self) -> list[SessionStatus]: ...

    # messages
    async def send_message_async(self, session_id: str, text: str) -> None: ...
    async def get_messages(self, session_id: str) -> list[dict[str, Any]]: ...

    # permissions
    async def get_pending_permissions(self, session_id: str) -> list[PermissionRequest]: ...
    async def reply_permission(self, session_id: str, request_id: str, allow: bool,
                               message: str = "") -> None: ...


class EventBus:
    """The `on()`/emit half of the protocol, shared by every backend."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}

    def on(self, event_type: str, handler: Handler) -> None:
        if event_type not in EVENT_TYPES and event_type != "*":
            raise ValueError(f"unknown event type {event_type!r}")
        self._handlers.setdefault(event_type, []).append(handler)

    async def emit(self, event: Event) -> None:
        for handler in (*self._handlers.get(event.type, ()), *self._handlers.get("*", ())):
            outcome = handler(event)
            if outcome is not None:
                await outcome


def load_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name; only the chosen one's module is imported."""
    if name == "scripted":
        from hive.backends.scripted import ScriptedBackend
        return ScriptedBackend(**options)
    if name == "claude":
        from hive.backends.claude import ClaudeBackend
        return ClaudeBackend(**options)
    if name == "codex":
        from hive.backends.codex import CodexBackend
        return CodexBackend(**options)
    raise ValueError(f"unknown backend {name!r} (one of: claude, codex, scripted)")


def backend_for_role(config: Any, role: str, hive_dir: str, repo_root: str) -> Backend:
    """The backend configured for `role` (config keys `backend`, `<role>_backend`, ...)."""
    import os

    name = config.backend_for(role)
    if name == "scripted":
        script = config.scripted_script
        if script and not os.path.isabs(script):
            script = os.path.join(repo_root, script)
        return load_backend("scripted", script_path=script or None, hive_dir=hive_dir)
    if name == "claude":
        return load_backend("claude", command=config.claude_command, hive_dir=hive_dir)
    return load_backend("codex", command=config.codex_command, hive_dir=hive_dir, codex_config=config.codex)
