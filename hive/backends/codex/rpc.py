"""A JSON-RPC client over one `codex app-server` process (newline-delimited JSON on stdio)."""

from __future__ import annotations

from typing import Any

from hive.backends import jsonrpc
from hive.backends.agent_process import AgentProcess


class RpcError(RuntimeError):
    """A JSON-RPC error answer of the app-server."""

    def __init__(self, method: str, error: Any):
        self.code = error.get("code") if isinstance(error, dict) else None
        self.detail = error.get("message", "") if isinstance(error, dict) else str(error)
        super().__init__(f"{method}: {self.detail or error}")


class ServerGone(RuntimeError):
    """The app-server process ended (or was killed because it stopped answering)."""


class AppServer(jsonrpc.Peer):
    """One app-server process (see `jsonrpc.Peer`); a request that times out restarts it."""

    who = "codex app-server"
    gone = ServerGone
    error = RpcError
    on_timeout = "restarting the app-server"

    def __init__(self, agent: AgentProcess, generation: int):
        super().__init__(agent, generation)
        self.exit_code: int | None = None

    async def kill_on_timeout(self) -> None:
        await self.kill()
