"""What an ACP agent says it is: `initialize` alone, for `git hive doctor` (ACP agents need not
answer `--version`: codex-acp refuses it). No session is opened, so no model is called."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from typing import IO

from hive.backends.acp.backend import INITIALIZE

ANSWER_LIMIT = 1 << 20      # bytes of stdout read before the answer to `initialize`


def agent_version(argv: list[str], env: dict[str, str] | None, timeout: float) -> str:
    """"<name> <version>" from the agent's answer to `initialize` (its protocol version if it
    names neither); OSError if it cannot be started or does not answer in time."""
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}) + "\n"
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request.encode())
        proc.stdin.flush()
        return _describe(_answer(proc.stdout, time.monotonic() + timeout))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _answer(stdout: IO[bytes], deadline: float) -> dict[str, object]:
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stdout, selectors.EVENT_READ)
        while len(buffer) < ANSWER_LIMIT:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise OSError("no answer to `initialize` in time")
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                raise OSError("it exited before answering `initialize`")
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue       # a line of logging, not the protocol
                if isinstance(message, dict) and message.get("id") == 1:
                    if "error" in message:
                        raise OSError(f"`initialize` failed: {str(message['error'])[:200]}")
                    result = message.get("result")
                    return result if isinstance(result, dict) else {}
    raise OSError("no answer to `initialize` in its first MiB of output")


def _describe(answer: dict[str, object]) -> str:
    info = answer.get("agentInfo")
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        version = info.get("version")
        return " ".join(str(part)[:80] for part in (info["name"], version if isinstance(version, str) else "") if part)
    return f"ACP protocol {str(answer.get('protocolVersion', '?'))[:20]}"
