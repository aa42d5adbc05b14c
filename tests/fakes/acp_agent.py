"""A small ACP agent for the `acp` backend's tests: JSON-RPC 2.0 on stdio as the real adapters
speak it (docs/acp-protocols.md), with no model behind it. Stdlib only; run as a script.

Each turn follows the next entry of the JSON list in `$FAKE_ACP_SCRIPT` (consumed: the file is
rewritten without it), or, with none left, says the prompt's last text block. An entry may hold:

    {"say": "text"}                       the reply (default: the prompt's last text block)
    {"sleep": 2}                          wait that long first (a session/cancel ends it)
    {"hang": true}                        never answer until session/cancel
    {"ask": {toolCall...}}                a session/request_permission first; the reply then
                                          says "allowed <optionId>" / "denied" / "cancelled"
    {"write": ["path", "text"]}           write a file (relative to the session's cwd) after
                                          the permission was granted (with "ask")
    {"exit": 3}                           exit with that code mid-turn
    {"usage": false}                      no usage in the answer (default: 10 in, 2 out)

Every turn streams its reply in two `agent_message_chunk`s, one `usage_update` with a cost of
0.01 USD per turn so far, then answers `{stopReason, usage}`. `session/load` of a session this
process does not know replays nothing and succeeds (sessions are kept on disk by id only as far
as `$FAKE_ACP_SCRIPT`'s folder holds a `sessions` file). The requests received are appended to
`$FAKE_ACP_LOG` (JSON lines) when set.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import uuid
from typing import Any

_out_lock = threading.Lock()
_inbox: "queue.Queue[dict[str, Any] | None]" = queue.Queue()
_answers: dict[Any, "queue.Queue[dict[str, Any]]"] = {}
_cancelled = threading.Event()
_turns = [0]


def send(obj: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **obj}) + "\n")
        sys.stdout.flush()


def log(msg: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_ACP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(msg) + "\n")


def next_step() -> dict[str, Any]:
    path = os.environ.get("FAKE_ACP_SCRIPT", "")
    try:
        with open(path, encoding="utf-8") as f:
            steps = json.load(f)
    except (OSError, ValueError):
        return {}
    if not steps:
        return {}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(steps[1:], f)
    os.replace(path + ".tmp", path)
    return steps[0]


def update(sid: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def wait(seconds: float | None) -> bool:
    """Wait (None: forever) unless the turn is cancelled; whether it was."""
    return _cancelled.wait(seconds)


def ask(sid: str, tool_call: dict[str, Any]) -> dict[str, Any]:
    rpc_id = f"perm-{uuid.uuid4()}"
    box: "queue.Queue[dict[str, Any]]" = queue.Queue()
    _answers[rpc_id] = box
    update(sid, {"sessionUpdate": "tool_call", "status": "pending", **tool_call})
    send({"id": rpc_id, "method": "session/request_permission", "params": {
        "sessionId": sid, "toolCall": tool_call,
        "options": [{"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                    {"optionId": "always", "name": "Always", "kind": "allow_always"},
                    {"optionId": "no", "name": "No", "kind": "reject_once"}]}})
    answer = box.get()
    return answer.get("result", {}).get("outcome", {}) if isinstance(answer.get("result"), dict) else {}


def prompt(rpc_id: Any, params: dict[str, Any], cwd: str) -> None:
    sid = params.get("sessionId", "")
    blocks = [b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict)]
    step = next_step()
    reply = step.get("say", blocks[-1].splitlines()[0] if blocks and blocks[-1] else "")
    if "exit" in step:
        os._exit(int(step["exit"]))
    if (step.get("hang") and wait(None)) or (step.get("sleep") and wait(float(step["sleep"]))):
        send({"id": rpc_id, "result": {"stopReason": "cancelled"}})
        return
    if "ask" in step:
        outcome = ask(sid, step["ask"])
        if outcome.get("outcome") == "selected" and outcome.get("optionId") in ("yes", "always"):
            reply = f"allowed {outcome['optionId']}"
            if step.get("write"):
                target, text = step["write"]
                with open(os.path.join(cwd, target), "w", encoding="utf-8") as f:
                    f.write(text)
        else:
            reply = "cancelled" if outcome.get("outcome") == "cancelled" else "denied"
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": step["ask"].get("toolCallId", "t1"),
                     "status": "completed" if reply.startswith("allowed") else "failed"})
        if _cancelled.is_set():
            send({"id": rpc_id, "result": {"stopReason": "cancelled"}})
            return
    _turns[0] += 1
    half = len(reply) // 2
    for piece in (reply[:half], reply[half:]):
        update(sid, {"sessionUpdate": "agent_message_chunk", "messageId": f"m{_turns[0]}",
                     "content": {"type": "text", "text": piece}})
    update(sid, {"sessionUpdate": "usage_update", "used": 12 * _turns[0], "size": 1000,
                 "cost": {"amount": 0.01 * _turns[0], "currency": "USD"}})
    result: dict[str, Any] = {"stopReason": "end_turn"}
    if step.get("usage", True):
        result["usage"] = {"inputTokens": 10, "outputTokens": 2, "cachedReadTokens": 0,
                           "cachedWriteTokens": 0, "totalTokens": 12}
    send({"id": rpc_id, "result": result})


def serve() -> None:
    cwds: dict[str, str] = {}
    turn: threading.Thread | None = None
    while (msg := _inbox.get()) is not None:
        log(msg)
        method, params, rpc_id = msg.get("method"), msg.get("params") or {}, msg.get("id")
        if method is None and rpc_id in _answers:
            _answers.pop(rpc_id).put(msg)
        elif method == "initialize":
            send({"id": rpc_id, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True},
                                           "agentInfo": {"name": "fake-acp", "version": "1"}, "authMethods": []}})
        elif method in ("session/new", "session/load"):
            sid = params.get("sessionId") or str(uuid.uuid4())
            cwds[sid] = params.get("cwd", ".")
            modes = {"currentModeId": "auto", "availableModes": [{"id": "auto", "name": "Auto"},
                                                                 {"id": "default", "name": "Ask"}]}
            send({"id": rpc_id, "result": {"sessionId": sid, "modes": modes} if method == "session/new" else {}})
        elif method == "session/set_mode":
            send({"id": rpc_id, "result": {}})
        elif method == "session/prompt":
            if turn is not None:
                turn.join()
            _cancelled.clear()
            turn = threading.Thread(target=prompt, args=(rpc_id, params, cwds.get(params.get("sessionId"), ".")),
                                    daemon=True)
            turn.start()
        elif method == "session/cancel":
            _cancelled.set()
        elif rpc_id is not None:
            send({"id": rpc_id, "error": {"code": -32601, "message": f"no {method}"}})


def read() -> None:
    for line in sys.stdin:
        try:
            _inbox.put(json.loads(line))
        except ValueError:
            continue
    _inbox.put(None)


if __name__ == "__main__":
    threading.Thread(target=read, daemon=True).start()
    serve()
