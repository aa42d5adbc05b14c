"""JSON-RPC 2.0 over one ACP agent process (newline-delimited JSON on stdio), hive as the client."""

from __future__ import annotations

from typing import Any

from hive.backends import jsonrpc
from hive.backends.agent_process import AgentProcess


class RpcError(RuntimeError):
    """A JSON-RPC error answer of the agent."""

    def __init__(self, method: str, error: Any):
        self.code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        data = error.get("data") if isinstance(error, dict) else None
        details = data.get("details") or data.get("message") if isinstance(data, dict) else data
        self.detail = " ".join(f"{message}{f': {details}' if details else ''}".split())[:500]
        super().__init__(f"{method}: {self.detail or error}")


class AgentGone(RuntimeError):
    """The agent process ended (or was killed because it stopped answering)."""


class Peer(jsonrpc.Peer):
    """One ACP agent process (see `jsonrpc.Peer`), and the capabilities it declared."""

    who = "the ACP agent"
    gone = AgentGone
    error = RpcError
    envelope = {"jsonrpc": "2.0"}

    def __init__(self, agent: AgentProcess, generation: int):
        super().__init__(agent, generation)
        self.capabilities: dict[str, Any] = {}      # the agent's `agentCapabilities`
