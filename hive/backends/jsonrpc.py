"""JSON-RPC over one agent process (newline-delimited JSON on stdio), hive as the client: the part
the codex app-server (codex/rpc.py) and the ACP agents (acp/rpc.py) share — hive's requests and
their answers, answers to the agent's own requests, and the end of the process."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from hive.backends.agent_process import AgentProcess

log = logging.getLogger(__name__)


class Peer:
    """One agent process. A subclass names what it is (`who`, in messages), the exceptions it
    raises (`gone`: the process ended or stopped answering; `error(method, error)`: an error
    answer), what every message carries (`envelope`) and what a timeout does (`on_timeout`).

    `generation` numbers the processes of a backend, so a permission request id names the
    process it came from. `ended` is set once the session's reader has wound the process up.
    """

    who = "the agent"
    gone: type[Exception] = RuntimeError
    error: type[Exception] = RuntimeError
    envelope: dict[str, Any] = {}
    on_timeout = "killing it"

    def __init__(self, agent: AgentProcess, generation: int):
        self.agent = agent
        self.generation = generation
        self.pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.ended = asyncio.Event()
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int:
        return self.agent.pid

    def alive(self) -> bool:
        return not self.ended.is_set() and self.agent.returncode is None

    async def send(self, obj: dict[str, Any]) -> None:
        """One JSON-RPC message; `gone` when the process can no longer read it."""
        try:
            await self.agent.write_json({**self.envelope, **obj})
        except (BrokenPipeError, ConnectionResetError) as e:
            raise self.gone(f"{self.who} has exited") from e

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send({"method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        """One request and its result. No answer within `timeout` (None: as long as the process
        lives) means it stopped answering: it is killed and `gone` raised; `error` when it
        answered with an error."""
        if not self.alive():
            raise self.gone(f"{self.who} has exited ({method})")
        rpc_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rpc_id] = (method, future)
        try:
            await self.send({"id": rpc_id, "method": method, "params": params})
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            log.warning("%s: %s got no answer in %ss: %s", self.who, method, timeout, self.on_timeout)
            await self.kill_on_timeout()
            raise self.gone(f"{self.who} stopped answering ({method})") from None
        finally:
            self.pending.pop(rpc_id, None)

    async def kill_on_timeout(self) -> None:
        await self.agent.kill()

    def take_answer(self, msg: dict[str, Any]) -> bool:
        """If `msg` answers one of hive's requests, hand it to the waiting request; whether it did."""
        if msg.get("method") is not None or "id" not in msg:
            return False
        entry = self.pending.get(msg["id"]) if isinstance(msg["id"], int) else None
        if entry is not None and not entry[1].done():
            if "error" in msg:
                entry[1].set_exception(self.error(entry[0], msg["error"]))
            else:
                entry[1].set_result(msg.get("result"))
        return True

    def fail_pending(self) -> None:
        """The process ended: every request still waiting fails with `gone`."""
        for method, future in list(self.pending.values()):
            if not future.done():
                future.set_exception(self.gone(f"{self.who} exited ({method})"))
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
        except self.gone:
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
