"""A control request of the claude CLI that hive does not handle (anything but `can_use_tool`:
hook callbacks, MCP messages) is answered with an error `control_response`, so the CLI goes on;
before, the answer was written through a method the backend does not have (an AttributeError
in the reader task, and a CLI left waiting)."""

from __future__ import annotations

import asyncio
from typing import Any

from hive.backends.base import SessionSpec
from hive.backends.claude import ClaudeBackend, _Session


class _Stdin:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    async def write_json(self, obj: dict[str, Any]) -> None:
        self.lines.append(obj)


def test_an_unhandled_control_request_gets_an_error_response(tmp_path) -> None:
    backend = ClaudeBackend(hive_dir=str(tmp_path))
    stdin = _Stdin()
    session = _Session("s-1", SessionSpec(role="worker", cwd=str(tmp_path)), stdin)  # type: ignore[arg-type]
    request = {"type": "control_request", "request_id": "r-7", "request": {"subtype": "hook_callback"}}
    asyncio.run(backend._on_control_request(session, request))
    assert stdin.lines == [{"type": "control_response", "response": {
        "subtype": "error", "request_id": "r-7", "error": "git-hive does not handle 'hook_callback' requests"}}]
    assert session.permissions == {}
