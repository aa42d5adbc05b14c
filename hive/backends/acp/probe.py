"""What an ACP agent says it is: `initialize` alone, for `git hive doctor` (ACP agents need not
answer `--version`: codex-acp refuses it). No session is opened, so no model is called."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hive.backends.acp.backend import INITIALIZE, LINE_LIMIT, STDERR_TAIL
from hive.backends.acp.rpc import AgentGone, Peer, RpcError
from hive.backends.agent_process import AgentProcess


def agent_version(argv: list[str], env: dict[str, str] | None, timeout: float) -> str:
    """"<name> <version>" from the agent's answer to `initialize` (its protocol version if it
    names neither); OSError if it cannot be started or does not answer in time."""
    return _describe(asyncio.run(_initialize(argv, dict(env or os.environ), timeout)))


async def _initialize(argv: list[str], env: dict[str, str], timeout: float) -> Any:
    agent = await AgentProcess.start(argv, cwd=os.getcwd(), env=env, line_limit=LINE_LIMIT, kill_grace=1.0,
                                     stderr_limit=STDERR_TAIL)
    peer = Peer(agent, 0)

    async def read() -> None:
        async def take(message: dict[str, Any]) -> None:
            peer.take_answer(message)
        try:
            await agent.read_json_lines(take)
        finally:
            peer.fail_pending()

    peer.reader = asyncio.create_task(read())
    try:
        return await peer.request("initialize", INITIALIZE, timeout)
    except (AgentGone, RpcError) as e:
        tail = agent.last_stderr_line()
        raise OSError(f"{e}{f' ({tail})' if tail else ''}") from None
    finally:
        await agent.kill()
        peer.reader.cancel()


def _describe(answer: Any) -> str:
    info = answer.get("agentInfo") if isinstance(answer, dict) else None
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        version = info.get("version")
        return " ".join(str(part)[:80] for part in (info["name"], version if isinstance(version, str) else "") if part)
    protocol = answer.get("protocolVersion", "?") if isinstance(answer, dict) else "?"
    return f"ACP protocol {str(protocol)[:20]}"
