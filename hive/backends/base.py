"""The backend protocol: everything the orchestrator may ask of an agent runtime.

The orchestrator, the merge pipeline and the Queen only ever talk to this protocol; they never
know whether `claude`, `codex` or the `scripted` test agents run behind it. A backend owns agent
processes and turns their output into `Event`s; hive owns the decisions.

Sessions are long-lived conversations with one agent in one working directory. A *turn* starts
with `send_message_async` and ends when the session goes idle again (event `idle`), with a
`TurnResult` saying whether the turn itself failed (crash, API error, budget) — the work's own
outcome is in the worker's `.hive-result.jsonl`, which the orchestrator reads. `run_turn` does
both and returns the turn's result.

The backends live in `hive/backends/registry.py` (name → class); their shared plumbing in
`sessions.py` (events, turns, the end of sessions) and `agent_process.py` (the CLI processes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, runtime_checkable

from hive.jail import JailSpec
from hive.usage import Usage

# Event types a backend emits (Event.type).
BUSY = "busy"                  # a turn started
IDLE = "idle"                  # the turn ended; data: TurnResult
MESSAGE = "message"            # the agent said something; data: {"role", "text"}
USAGE = "usage"                # token usage grew; data: Usage (totals for the session)
PERMISSION = "permission"      # the agent asks for permission; data: PermissionRequest
EXITED = "exited"              # the agent process ended; data: {"exit_code": int | None}
PROVIDER_ERROR = "provider_error"  # the LLM provider failed (5xx, 529, refused); data: {"status", "message"}

EVENT_TYPES = (BUSY, IDLE, MESSAGE, USAGE, PERMISSION, EXITED, PROVIDER_ERROR)

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
    cwd: str = ""                     # the folder the action runs in, when the CLI says


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
    jail: JailSpec | None = None      # the OS jail the agent runs in (None: unjailed, sandbox = "off")
    # hive's record of `resume`'s usage totals: a backend that does not know the session (a daemon
    # restart) carries its totals on from these, so USAGE events stay totals of the whole session
    usage: Usage = field(default_factory=Usage)
    transcript: str = ""              # the file the session's transcript goes to ("": none; transcripts.py)


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
    """What the orchestrator, the merge pipeline and the Queen may ask of an agent runtime.

    Unknown session ids raise KeyError wherever a session id is taken, except in the calls that
    end things (`abort_session`, `delete_session`, `reply_permission`): those are idempotent and
    do nothing for a session (or request) that is gone.
    """

    name: str

    # -- the backend ----------------------------------------------------------------------------
    def on(self, event_type: str, handler: Handler) -> None:
        """Call `handler` for every event of `event_type` ("*": all). ValueError: unknown type."""

    def on_session(self, session_id: str, handler: Handler | None) -> None:
        """Call `handler` for every event of that session (one handler per session, replaced by a
        later call; None: none). A permission request no handler hears is refused."""

    async def connect_with_reconnect(self) -> None:
        """Get ready to start sessions. HiveError when the agent CLI is missing or unusable."""

    async def stop(self) -> None:
        """End every session at once (busy ones are killed). Never raises."""

    async def health_check(self) -> bool:
        """Whether the provider answers, spending no tokens. Never raises."""

    # -- sessions -------------------------------------------------------------------------------
    async def create_session(self, spec: SessionSpec) -> str:
        """Start a session (or continue `spec.resume`); its id. RuntimeError: it cannot start."""

    async def abort_session(self, session_id: str) -> None:
        """End the turns in progress (each gets its `idle`, not ok) before returning. Idempotent."""

    async def delete_session(self, session_id: str) -> None:
        """End and forget the session; no event of it follows. Idempotent."""

    async def get_session_status(self, session_id: str) -> SessionStatus:
        """The session's state, usage and pid. KeyError: unknown session."""

    # -- turns ----------------------------------------------------------------------------------
    async def send_message_async(self, session_id: str, text: str) -> None:
        """Start a turn (queued behind a running one); it ends with one `idle` event.
        KeyError: unknown session; RuntimeError: the session has exited and cannot restart."""

    async def run_turn(self, session_id: str, text: str) -> TurnResult:
        """Send a turn and wait for its end (idle, process exit or delete); its TurnResult.
        Raises as `send_message_async`; a turn that fails as a turn is a result, not an error."""

    # -- permissions ----------------------------------------------------------------------------
    async def reply_permission(self, session_id: str, request_id: str, allow: bool,
                               message: str = "") -> None:
        """Answer a `permission` event. Does nothing for an unknown session or request."""
