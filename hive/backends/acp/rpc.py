"""JSON-RPC 2.0 over one ACP agent process (newline-delimited JSON on stdio), hive as the client."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from hive.backends.agent_process import AgentProcess

log = logging.getLogger(__name__)


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


class Peer:
    """One agent process: hive's requests and their answers, and the end of the process.

    `generation` numbers the processes of a backend, so a permission request id names the
    process it came from. `ended` is set once the session's reader has wound the process up.
    """

    def __init__(self, agent: AgentProcess, generation: int):
        self.agent = agent
        self.generation = generation
        self.pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()
        self.capabilities: dict[str, Any] = {}      # the agent's `agentCapabilities`
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int:
        return self.agent.pid

    def alive(self) -> bool:
        return not self.ended.is_set() and self.agent.returncode is None

    async def send(self, obj: dict[str, Any]) -> None:
        """One JSON-RPC message; AgentGone when the process can no longer read it."""
        try:
            await self.agent.write_json({"jsonrpc": "2.0", **obj})
        except (BrokenPipeError, ConnectionResetError) as e:
            raise AgentGone("the ACP agent has exited") from e

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        """One request and its result. No answer within `timeout` (None: wait as long as the
        process lives) means the agent stopped answering: it is killed and AgentGone raised.
        RpcError: the agent answered with an error."""
        if not self.alive():
            raise AgentGone(f"the ACP agent has exited ({method})")
        rpc_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rpc_id] = (method, future)
        try:
            await self.send({"id": rpc_id, "method": method, "params": params})
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            log.warning("acp backend: %s got no answer in %ss: killing the agent", method, timeout)
            await self.agent.kill()
            raise AgentGone(f"the ACP agent stopped answering ({method})") from None
        finally:
            self.pending.pop(rpc_id, None)

    def take_answer(self, msg: dict[str, Any]) -> bool:
        """If `msg` answers one of hive's requests, hand it to the waiting request; whether it did."""
        if msg.get("method") is not None or "id" not in msg:
            return False
        entry = self.pending.get(msg["id"]) if isinstance(msg["id"], int) else None
        if entry is not None and not entry[1].done():
            if "error" in msg:
                entry[1].set_exception(RpcError(entry[0], msg["error"]))
            else:
                entry[1].set_result(msg.get("result"))
        return True

    def fail_pending(self) -> None:
        """The process ended: every request still waiting fails with AgentGone."""
        for method, future in list(self.pending.values()):
            if not future.done():
                future.set_exception(AgentGone(f"the ACP agent exited ({method})"))
        self.pending.clear()

    async def answer(self, rpc_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
        """Answer a request of the agent; nothing when the agent is gone."""
        reply: dict[str, Any] = {"id": rpc_id}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        try:
            await self.send(reply)
        except AgentGone:
            pass

    async def kill(self) -> None:
        """Kill the process group; wait (a little) for the reader to wind the process up."""
        await self.agent.kill()
        reader = self.reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.ended.wait()), self.agent.kill_grace + 2)
            except asyncio.TimeoutError:
                pass
