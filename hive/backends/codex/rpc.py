"""A JSON-RPC client over one `codex app-server` process (newline-delimited JSON on stdio)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from hive.backends.agent_process import AgentProcess

log = logging.getLogger(__name__)


class RpcError(RuntimeError):
    """A JSON-RPC error answer of the app-server."""

    def __init__(self, method: str, error: Any):
        self.code = error.get("code") if isinstance(error, dict) else None
        self.detail = error.get("message", "") if isinstance(error, dict) else str(error)
        super().__init__(f"{method}: {self.detail or error}")


class ServerGone(RuntimeError):
    """The app-server process ended (or was killed because it stopped answering)."""


class AppServer:
    """One app-server process: hive's requests, their answers, and the end of the process.

    `generation` numbers the processes of a backend, so a permission request id names the
    process it came from. `ended` is set once the session's reader has wound the process up.
    """

    def __init__(self, agent: AgentProcess, generation: int):
        self.agent = agent
        self.generation = generation
        self.pending: dict[int, tuple[str, asyncio.Future]] = {}
        self.reader: asyncio.Task | None = None
        self.ended = asyncio.Event()
        self.exit_code: int | None = None
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int:
        return self.agent.pid

    def alive(self) -> bool:
        return not self.ended.is_set() and self.agent.returncode is None

    async def send(self, obj: dict[str, Any]) -> None:
        """One JSON-RPC message; ServerGone when the process can no longer read it."""
        try:
            await self.agent.write_json(obj)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ServerGone("codex app-server has exited") from e

    async def request(self, method: str, params: dict[str, Any], timeout: float) -> Any:
        """One request; no answer within the timeout means the server stopped answering: it is
        killed and ServerGone raised. RpcError: the server answered with an error."""
        if not self.alive():
            raise ServerGone(f"codex app-server has exited ({method})")
        rpc_id = next(self._ids)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.pending[rpc_id] = (method, future)
        try:
            await self.send({"id": rpc_id, "method": method, "params": params})
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            log.warning("codex backend: %s got no answer in %ss: restarting the app-server", method, timeout)
            await self.kill()
            raise ServerGone(f"codex app-server stopped answering ({method})") from None
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
        """The process ended: every request still waiting fails with ServerGone."""
        for method, future in list(self.pending.values()):
            if not future.done():
                future.set_exception(ServerGone(f"codex app-server exited ({method})"))
        self.pending.clear()

    async def kill(self) -> None:
        """Kill the process group; wait (a little) for the reader to wind the process up."""
        await self.agent.kill()
        reader = self.reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.ended.wait()), self.agent.kill_grace + 2)
            except asyncio.TimeoutError:
                pass
