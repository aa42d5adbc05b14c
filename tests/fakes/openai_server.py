"""A scripted fake of the OpenAI Responses API, for running the real `codex` CLI offline in tests.

Stdlib only: a `ThreadingHTTPServer` bound to 127.0.0.1 on a free port. It answers

* `POST /v1/responses` with a Server-Sent-Events stream (chunked transfer encoding), taking the
  next step of its script for each request. Events come in the order the real `codex` 0.171
  accepts: `response.created` → `response.output_item.added` → the deltas
  (`response.output_text.delta` | `response.function_call_arguments.delta` |
  `response.custom_tool_call_input.delta`) → `response.output_item.done` → `response.completed`
  with `usage` {input_tokens, input_tokens_details.cached_tokens, output_tokens,
  output_tokens_details.reasoning_tokens, total_tokens} — as OpenAI bills, `input_tokens`
  includes the cached ones (`billed_like_codex` gives a Codex session's figures);
* `GET /v1/models` with a model list (the health probe), or `models_status` when set.

A script is a queue of steps, one per request (`FakeOpenAI.script(...)` appends):

    exec_command(cmd, workdir=None)   a function call of codex's `exec_command` tool
    apply_patch(patch)                a custom (freeform) call of codex's `apply_patch` tool
    text(message)                     an assistant message: the model's turn ends
    http_error(status, message)       an HTTP error instead of a stream (500, 429, 401, ...)
    gate(step, release)               wait (bounded) until the `threading.Event` is set, then `step`
    hang()                            never answer (until the server closes); for interrupts

When the queue is empty, the fake answers `text("done")`, so a CLI never waits forever.
Every request is recorded (`requests`, bounded): method, path, headers (lower-case names) and the
parsed JSON body.
Clients that hang up mid-stream (an interrupt) are ignored: BrokenPipe / ConnectionReset.
"""

from __future__ import annotations

import collections
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 16 * 1024 * 1024        # the biggest request body read (codex re-sends the history)
MAX_RECORDED = 500                 # requests kept in `requests`
GATE_TIMEOUT = 60.0                # the longest a gate or hang step holds a request
DEFAULT_USAGE = {"input_tokens": 1000, "cached_tokens": 200, "output_tokens": 50, "reasoning_tokens": 10}


@dataclass
class Step:
    kind: str                                  # exec_command | apply_patch | text | http_error | hang
    data: dict[str, Any] = field(default_factory=dict)
    release: threading.Event | None = None     # for gates: answer only once this is set
    usage: dict[str, int] | None = None


CODEX_PREFIX_TOKENS = 10_000   # instructions + tool definitions Codex resends on every call


def billed_like_codex(call: int, growth: int = 400, output: int = 150) -> dict[str, int]:
    """The usage the Responses API reports for the `call`-th model call (0-based) of a Codex
    thread: the whole history as input (`input_tokens` includes the cached tokens), all of it but
    what the previous call added read from the prompt cache. Pass as `usage=` to a step."""
    prompt = CODEX_PREFIX_TOKENS + call * growth
    return {"input_tokens": prompt, "cached_tokens": prompt - growth if call else 0,
            "output_tokens": output, "reasoning_tokens": output // 5}


def exec_command(cmd: str, workdir: str | None = None, *, usage: dict[str, int] | None = None) -> Step:
    args: dict[str, Any] = {"cmd": cmd, "yield_time_ms": 10000}
    if workdir:
        args["workdir"] = workdir
    return Step("exec_command", {"arguments": args}, usage=usage)


def apply_patch(patch: str, *, usage: dict[str, int] | None = None) -> Step:
    return Step("apply_patch", {"input": patch}, usage=usage)


def add_file_patch(path: str, content: str) -> str:
    """An apply_patch body that creates `path` (relative to the agent's cwd, or absolute)."""
    lines = content.splitlines() or [""]
    return "*** Begin Patch\n*** Add File: " + path + "\n" + "".join(f"+{line}\n" for line in lines) \
        + "*** End Patch\n"


def text(message: str, *, usage: dict[str, int] | None = None) -> Step:
    return Step("text", {"text": message}, usage=usage)


def http_error(status: int = 500, message: str = "scripted failure") -> Step:
    return Step("http_error", {"status": status, "message": message})


def gate(step: Step, release: threading.Event) -> Step:
    step.release = release
    return step


def hang() -> Step:
    return Step("hang")


class FakeOpenAI:
    """The server; use as a context manager or call `close()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: collections.deque[Step] = collections.deque()
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_RECORDED)
        self.responses_served = 0
        self.models_status = 200                 # what GET /v1/models answers
        self.closing = threading.Event()
        self.request_seen = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()

    # -- test API -----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *steps: Step) -> "FakeOpenAI":
        with self._lock:
            self._steps.extend(steps)
        return self

    def pending_steps(self) -> int:
        with self._lock:
            return len(self._steps)

    def responses_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["path"].endswith("/responses")]

    def wait_requests(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Block until at least `count` /responses requests came in; return them."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                got = [r for r in self.requests if r["path"].endswith("/responses")]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake OpenAI: {len(got)} of {count} requests after {timeout}s")
                self.request_seen.wait(left)

    def codex_config(self, model: str = "gpt-5.5") -> dict[str, Any]:
        """The `[codex]` table that points codex at this server."""
        return {
            "model": model,
            "model_provider": "fake",
            "model_providers": {"fake": {
                "name": "Fake OpenAI (127.0.0.1)",
                "base_url": self.base_url,
                "wire_api": "responses",
                "env_key": "FAKE_OPENAI_API_KEY",
                "request_max_retries": 0,
                "stream_max_retries": 0,
            }},
        }

    def close(self) -> None:
        self.closing.set()
        with self._lock:
            for step in self._steps:
                if step.release is not None:
                    step.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAI":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            self.request_seen.notify_all()

    def _next_step(self) -> Step:
        with self._lock:
            self.responses_served += 1
            return self._steps.popleft() if self._steps else text("done")

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}{int(time.time() * 1000) % 100000:05d}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeOpenAI
    timeout = 30                                   # a silent client does not hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:    # quiet
        return

    # -- plumbing -----------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                total += size
                if total > MAX_BODY:
                    raise ValueError("request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, type_: str, payload: dict[str, Any]) -> None:
        payload = {"type": type_, **payload}
        self._chunk(f"event: {type_}\ndata: {json.dumps(payload)}\n\n".encode())

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self) -> None:
        fake = self.server_fake
        fake._record({"method": "GET", "path": self.path, "headers": self._headers(), "body": None,
                      "at": time.time()})
        try:
            if self.path.rstrip("/").endswith("/models"):
                if fake.models_status >= 400:
                    self._send_json(fake.models_status, {"error": {"message": "scripted", "type": "server_error"}})
                else:
                    self._send_json(200, {"object": "list", "data": [
                        {"id": "gpt-5.5", "object": "model", "created": 0, "owned_by": "fake"}]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True

    def do_POST(self) -> None:
        fake = self.server_fake
        try:
            raw = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        fake._record({"method": "POST", "path": self.path, "headers": self._headers(), "body": body,
                      "at": time.time()})
        if not self.path.rstrip("/").endswith("/responses"):
            try:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                self.close_connection = True
            return
        step = fake._next_step()
        try:
            if step.release is not None:
                deadline = time.monotonic() + GATE_TIMEOUT
                while not (step.release.is_set() or fake.closing.is_set()) and time.monotonic() < deadline:
                    step.release.wait(0.05)
            if step.kind == "hang":
                fake.closing.wait(GATE_TIMEOUT)
                self.close_connection = True
                return
            if fake.closing.is_set():
                self.close_connection = True
                return
            if step.kind == "http_error":
                status = int(step.data.get("status", 500))
                self._send_json(status, {"error": {"message": step.data.get("message", "error"),
                                                   "type": "server_error", "code": None}})
                return
            self._stream(step, (body or {}).get("model") or "gpt-5.5")
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True            # the client hung up (an interrupt): fine

    def _stream(self, step: Step, model: str) -> None:
        fake = self.server_fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        response_id = fake.new_id("resp")
        base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": model}
        self._event("response.created", {"response": {**base, "status": "in_progress", "output": []}})
        if step.kind == "exec_command":
            item_id, call_id = fake.new_id("fc"), fake.new_id("call")
            args = json.dumps(step.data["arguments"])
            item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "exec_command"}
            self._event("response.output_item.added", {"output_index": 0, "item": {
                **item, "arguments": "", "status": "in_progress"}})
            for piece in _pieces(args):
                self._event("response.function_call_arguments.delta",
                            {"item_id": item_id, "output_index": 0, "delta": piece})
            done = {**item, "arguments": args, "status": "completed"}
        elif step.kind == "apply_patch":
            item_id, call_id = fake.new_id("ctc"), fake.new_id("call")
            patch = step.data["input"]
            item = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": "apply_patch"}
            self._event("response.output_item.added", {"output_index": 0, "item": {
                **item, "input": "", "status": "in_progress"}})
            for piece in _pieces(patch):
                self._event("response.custom_tool_call_input.delta",
                            {"item_id": item_id, "output_index": 0, "delta": piece})
            done = {**item, "input": patch, "status": "completed"}
        else:                                         # text
            item_id = fake.new_id("msg")
            message = step.data.get("text", "")
            self._event("response.output_item.added", {"output_index": 0, "item": {
                "type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}})
            for piece in _pieces(message):
                self._event("response.output_text.delta", {"item_id": item_id, "output_index": 0,
                                                           "content_index": 0, "delta": piece})
            done = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": message, "annotations": []}]}
        self._event("response.output_item.done", {"output_index": 0, "item": done})
        u = {**DEFAULT_USAGE, **(step.usage or {})}
        usage = {"input_tokens": u["input_tokens"],
                 "input_tokens_details": {"cached_tokens": u["cached_tokens"]},
                 "output_tokens": u["output_tokens"],
                 "output_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]},
                 "total_tokens": u["input_tokens"] + u["output_tokens"]}
        self._event("response.completed", {"response": {**base, "status": "completed", "output": [done],
                                                        "usage": usage}})
        self._chunk(b"")                              # the last chunk: 0\r\n\r\n


def _pieces(text: str, size: int = 64) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]
