"""`AgentProcess`: started without waiting for the event loop, stdin written directly."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from hive.backends.agent_process import AgentProcess

# reads JSON lines; answers each with its length, as one JSON line
ECHO_LENGTHS = ("import json, sys\n"
                "for line in sys.stdin:\n"
                "    print(json.dumps({'length': len(line)}), flush=True)\n")


async def _start(code: str) -> AgentProcess:
    return await AgentProcess.start([sys.executable, "-I", "-S", "-c", code], cwd=".", env={},
                                    line_limit=1 << 20, kill_grace=2.0, stderr_limit=4096)


def test_the_start_and_the_first_prompt_take_no_turn_of_the_event_loop() -> None:
    # other work on a busy daemon's loop (a commit, a refresh) cannot delay an agent's start or
    # its prompt: neither waits for the loop
    async def scenario() -> None:
        ran: list[bool] = []
        other = asyncio.get_running_loop().call_soon(ran.append, True)
        proc = await _start(ECHO_LENGTHS)
        await proc.write_json({"prompt": "x" * 1000})
        assert not ran, "the loop turned while the agent was started and sent its prompt"
        other.cancel()
        answers: list[dict[str, Any]] = []

        async def answered(message: dict[str, Any]) -> None:
            answers.append(message)
            proc.close_stdin()

        await asyncio.wait_for(proc.read_json_lines(answered), 30)
        assert answers == [{"length": len('{"prompt": ""}\n') + 1000}]
        assert await proc.wait_exit(30) and proc.returncode == 0

    asyncio.run(scenario())


def test_a_line_longer_than_the_pipe_holds_is_written_whole_as_the_agent_reads() -> None:
    async def scenario() -> None:
        proc = await _start(ECHO_LENGTHS)
        answers: list[dict[str, Any]] = []

        async def answered(message: dict[str, Any]) -> None:
            answers.append(message)
            if len(answers) == 2:
                proc.close_stdin()

        reading = asyncio.create_task(proc.read_json_lines(answered))
        big = "y" * 300_000                    # several times a pipe's 64 KiB
        await asyncio.wait_for(proc.write_json({"a": big}), 30)
        await asyncio.wait_for(proc.write_json({"b": 1}), 30)
        await asyncio.wait_for(reading, 30)
        assert answers == [{"length": len(f'{{"a": "{big}"}}\n')}, {"length": len('{"b": 1}\n')}]
        await proc.kill()

    asyncio.run(scenario())


def test_closing_stdin_ends_a_write_waiting_for_room_and_later_writes_are_refused() -> None:
    async def scenario() -> None:
        proc = await _start("import time; time.sleep(60)")      # never reads
        writing = asyncio.create_task(proc.write_json({"a": "z" * 300_000}))
        await asyncio.sleep(0.05)
        assert not writing.done()                                # the pipe is full
        proc.close_stdin()
        with pytest.raises(BrokenPipeError):
            await asyncio.wait_for(writing, 10)
        with pytest.raises(BrokenPipeError):
            await proc.write_json({"b": 1})
        await proc.kill()
        assert proc.returncode is not None

    asyncio.run(scenario())


def test_a_write_to_an_agent_that_exited_is_refused() -> None:
    async def scenario() -> None:
        proc = await _start("pass")
        assert await proc.wait_exit(30)
        with pytest.raises(BrokenPipeError):
            await proc.write_json({"late": True})
        await proc.kill()

    asyncio.run(scenario())
