"""A fake Anthropic Messages API on 127.0.0.1, scripted per test, for driving the real `claude` CLI.

Stdlib only (`http.server`). It answers:

* `POST /v1/messages` (any query string, e.g. `?beta=true`): the next reply of the script, streamed
  (a request with `"stream": false`, the CLI's fallback after some errors, gets one JSON message)
  as Server-Sent Events in the order the CLI accepts (message_start → content_block_start →
  content_block_delta (text_delta | input_json_delta) → content_block_stop → message_delta
  (stop_reason, usage.output_tokens) → message_stop), with chunked transfer encoding; or an HTTP
  error (`error(529)`); or a stall that holds the stream open (for interrupts).
* `GET /v1/models`: a model list (the backend's health probe); `models_status` makes it fail.
* anything else: 404, recorded.

A *script* is a queue of replies for the conversation's own calls. Each entry is a `Reply` or a callable `(Request) -> Reply` that
decides from what the CLI sent (its working directory, the tool results it got back, ...). When the
queue is empty the server answers `default` (a short text reply ending the turn). Every request is
recorded in `requests` for assertions. The server is bounded: after `max_requests` message
requests it answers 400, so a CLI stuck in a loop ends; stalls end when the server stops.

Claude Code also makes calls of its own beside the conversation, whenever it likes (a session
title, a prompt suggestion after a turn: `Request.side_call`). They get `side_reply` and leave the
script alone, so a scripted reply always goes to the conversation, whatever the timing.

    with FakeAnthropic() as api:
        api.script(write("hello.txt", "hi\\n"), bash("git add -A && git commit -m hi"), text("done"))
        ... run claude with ANTHROPIC_BASE_URL=api.base_url ...
        assert api.requests[1].tool_results[0]["is_error"] is False
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

_CWD_RE = re.compile(r"Primary working directory: (\S[^\n]*)")


# -- replies --------------------------------------------------------------------------------------

@dataclass
class Reply:
    """One model answer: content blocks (`{"type": "text"}` / `{"type": "tool_use"}`), or an error."""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    input_tokens: int = 1000
    output_tokens: int = 50
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    status: int = 200                    # != 200: an HTTP error with an Anthropic error body
    error_type: str = ""
    error_message: str = ""
    stall_seconds: float = 0.0           # hold the stream open this long (pings) before answering


def text(message: str, **kw: Any) -> Reply:
    return Reply([{"type": "text", "text": message}], "end_turn", **kw)


def tool(name: str, input: dict[str, Any], **kw: Any) -> Reply:
    block = {"type": "tool_use", "id": "toolu_fake_" + uuid.uuid4().hex[:20], "name": name, "input": input}
    return Reply([block], "tool_use", **kw)


def bash(command: str, **kw: Any) -> Reply:
    return tool("Bash", {"command": command, "description": "scripted command"}, **kw)


CLAUDE_CODE_PREFIX_TOKENS = 25_000   # system prompt + tool definitions Claude Code resends on every call


def billed_like_claude_code(call: int, growth: int = 400, fresh: int = 5, output: int = 150) -> dict[str, int]:
    """The usage the Messages API reports for the `call`-th model call (0-based) of a Claude Code
    session: the ~25k-token prefix and the history so far read from the prompt cache, what the
    previous call added written to it, a few uncached tokens. Pass as `**` to a reply."""
    return {"input_tokens": fresh, "output_tokens": output,
            "cache_read_input_tokens": CLAUDE_CODE_PREFIX_TOKENS + call * growth if call else 0,
            "cache_creation_input_tokens": growth if call else CLAUDE_CODE_PREFIX_TOKENS}


def error(status: int, error_type: str = "", message: str = "") -> Reply:
    defaults = {529: ("overloaded_error", "Overloaded"), 500: ("api_error", "Internal server error"),
                429: ("rate_limit_error", "Rate limited"), 400: ("invalid_request_error", "Bad request"),
                401: ("authentication_error", "invalid x-api-key")}
    kind, words = defaults.get(status, ("api_error", f"HTTP {status}"))
    return Reply(status=status, error_type=error_type or kind, error_message=message or words)


def stall(seconds: float, then: str = "finally done") -> Reply:
    """Open the stream, then keep it open (pinging) for `seconds` or until the client hangs up."""
    return Reply([{"type": "text", "text": then}], "end_turn", stall_seconds=seconds)


def write(relative_path: str, content: str, **kw: Any) -> Callable[["Request"], Reply]:
    """A Write tool call for `relative_path` under the working directory the CLI reports."""
    def reply(request: Request) -> Reply:
        return tool("Write", {"file_path": os.path.join(request.cwd, relative_path), "content": content}, **kw)
    return reply


# -- what the CLI sent ------------------------------------------------------------------------------

@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", []) if isinstance(self.body, dict) else []

    @property
    def cwd(self) -> str:
        """The working directory the CLI announces in its environment section."""
        blocks: list[Any] = []
        if isinstance(self.body, dict):
            system = self.body.get("system")
            blocks += system if isinstance(system, list) else [system]
            for message in self.messages:
                content = message.get("content")
                blocks += content if isinstance(content, list) else [content]
        for block in blocks:
            value = block.get("text") if isinstance(block, dict) else block
            if isinstance(value, str):
                match = _CWD_RE.search(value)
                if match:
                    return match.group(1).strip()
        return ""

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message (the answers to the previous reply)."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if not isinstance(content, list):
                return []
            return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return []

    @property
    def all_tool_results(self) -> list[dict[str, Any]]:
        out = []
        for message in self.messages:
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, list):
                out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return out

    def text(self) -> str:
        """Every text of the conversation, joined (to look for a prompt's words)."""
        parts = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for block in content:
                    if isinstance(block, dict):
                        if isinstance(block.get("text"), str):
                            parts.append(block["text"])
                        if isinstance(block.get("content"), str):
                            parts.append(block["content"])
        return "\n".join(parts)

    @property
    def side_call(self) -> str:
        """Which of Claude Code's own calls beside the conversation this is ("" for none)."""
        if "You are naming a coding session" in self.system_text():
            return "title"
        last = self.messages[-1] if self.messages else {}
        content = last.get("content") if last.get("role") == "user" else None
        blocks = content if isinstance(content, list) else [{"text": content}]
        if any("Reply with ONLY the suggestion" in str(b.get("text", "")) for b in blocks if isinstance(b, dict)):
            return "suggestion"
        return ""

    def system_text(self) -> str:
        system = self.body.get("system") if isinstance(self.body, dict) else None
        if isinstance(system, str):
            return system
        return "\n".join(b.get("text", "") for b in system or [] if isinstance(b, dict))


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")


Step = Union[Reply, Callable[[Request], Reply]]


def _message(reply: Reply, model: str) -> dict[str, Any]:
    """A whole (non-streamed) Messages API response."""
    return {"id": "msg_fake_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant", "model": model,
            "content": reply.blocks, "stop_reason": reply.stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                      "cache_creation_input_tokens": reply.cache_creation_input_tokens,
                      "cache_read_input_tokens": reply.cache_read_input_tokens}}


# -- the server -------------------------------------------------------------------------------------

class FakeAnthropic:
    """The fake API; see the module docstring. Use as a context manager, or start()/stop()."""

    def __init__(self, *, default: Reply | None = None, max_requests: int = 200, model: str = "claude-fake"):
        self.default = default or text("Nothing more to do.")
        self.side_reply = text("Fake session")
        self.max_requests = max_requests
        self.model = model
        self.requests: list[Request] = []
        self.models_status = 200             # what GET /v1/models answers
        self._queue: collections.deque[Step] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # scripting
    def script(self, *steps: Step) -> None:
        with self._lock:
            self._queue.extend(steps)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def message_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.startswith("/v1/messages")]

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # lifecycle
    def start(self) -> "FakeAnthropic":
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeAnthropic":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # internals
    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            count = sum(1 for r in self.requests if r.method == "POST")
            if count > self.max_requests:
                return error(400, message=f"fake server: more than {self.max_requests} requests")
            if request.side_call:
                return self.side_reply
            step = self._queue.popleft() if self._queue else None
        if step is None:
            return self.default
        return step(request) if callable(step) else step


class _Handler(BaseHTTPRequestHandler):
    api: FakeAnthropic
    protocol_version = "HTTP/1.1"
    timeout = 60                              # an idle keep-alive connection is dropped after this

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _record(self, body: Any = None) -> Request:
        return Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:16])
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        try:
            request = self._record()
            with self.api._lock:
                self.api.requests.append(request)
            if self.path.split("?")[0] == "/v1/models":
                status = self.api.models_status
                if status != 200:
                    reply = error(status)
                    self._json(status, {"type": "error", "error": {"type": reply.error_type,
                                                                   "message": reply.error_message}})
                    return
                self._json(200, {"data": [{"type": "model", "id": self.api.model, "display_name": "Fake",
                                           "created_at": "2026-01-01T00:00:00Z"}],
                                 "has_more": False, "first_id": self.api.model, "last_id": self.api.model})
                return
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_HEAD(self) -> None:  # noqa: N802
        try:
            with self.api._lock:
                self.api.requests.append(self._record())
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:  # noqa: N802
        try:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = self._record(body)
            if not self.path.startswith("/v1/messages"):
                with self.api._lock:
                    self.api.requests.append(request)
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})
                return
            reply = self.api._next(request)
            if reply.status != 200:
                self._json(reply.status, {"type": "error", "error": {"type": reply.error_type,
                                                                     "message": reply.error_message}})
                return
            model = body.get("model", self.api.model) if isinstance(body, dict) else self.api.model
            if isinstance(body, dict) and body.get("stream") is False:
                self._json(200, _message(reply, model))     # the CLI's non-streaming fallback
                return
            self._stream(reply, model)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass

    # SSE
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        self._chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

    def _stream(self, reply: Reply, model: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:16])
        self.end_headers()
        self._event("message_start", {"type": "message_start", "message": {
            "id": "msg_fake_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": reply.cache_creation_input_tokens,
                      "cache_read_input_tokens": reply.cache_read_input_tokens}}})
        if reply.stall_seconds:
            waited = 0.0
            while waited < reply.stall_seconds and not self.api._stopping.is_set():
                self._event("ping", {"type": "ping"})          # raises once the client hung up
                self.api._stopping.wait(0.25)
                waited += 0.25
            if self.api._stopping.is_set():
                return
        for index, block in enumerate(reply.blocks):
            if block["type"] == "text":
                self._event("content_block_start", {"type": "content_block_start", "index": index,
                                                    "content_block": {"type": "text", "text": ""}})
                self._event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "text_delta", "text": block["text"]}})
            else:
                self._event("content_block_start", {"type": "content_block_start", "index": index,
                                                    "content_block": {"type": "tool_use", "id": block["id"],
                                                                      "name": block["name"], "input": {}}})
                self._event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": json.dumps(block["input"])}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                                      "usage": {"output_tokens": reply.output_tokens}})
        self._event("message_stop", {"type": "message_stop"})
        self._chunk(b"")                                        # the last chunk: end of the body
