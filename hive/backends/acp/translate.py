"""What ACP messages mean to hive: permission requests, the answers to them, usage, tool calls.

Pure functions over the JSON the agent sends (facts measured in docs/acp-protocols.md).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any

from hive.backends.base import PermissionRequest, Usage
from hive.backends.reports import amount, count, table

MAX_EVENT_CHARS = 4 * 1024

# ACP's tool kinds, as the tools hive's permission policy (hive/agents/permissions.py) judges
POLICY_TOOLS = {"read": "Read", "search": "Grep", "think": "Read", "fetch": "WebFetch",
                "edit": "Write", "delete": "Write", "move": "Write", "execute": "Bash"}
_PATH_KEYS = ("file_path", "path", "notebook_path", "abs_path", "destination", "new_path")
_PROVIDER_RE = re.compile(r"\b(5\d\d|429|408)\b|overloaded|rate.?limit|connection (refused|reset|error)|"
                          r"timed out|stream disconnected", re.IGNORECASE)
_STATUS_RE = re.compile(r"\b([45]\d\d)\b")


def _shell_line(command: Any) -> str:
    """The shell line a tool runs: a list is joined, `bash -lc "<line>"` unwrapped."""
    words = [str(w) for w in command] if isinstance(command, list) else None
    if words is None:
        try:
            words = shlex.split(str(command or ""))
        except ValueError:
            return str(command or "")
    if len(words) == 3 and os.path.basename(words[0]) in ("bash", "sh", "zsh", "dash") and words[1] in ("-lc", "-c"):
        return words[2]
    return shlex.join(words) if isinstance(command, list) else str(command or "")


def permission_request(request_id: str, params: dict[str, Any]) -> PermissionRequest:
    """A `session/request_permission` as hive's PermissionRequest: the tool named by its ACP kind
    (an unknown kind keeps its own name, which the policy refuses), the paths of its locations
    and raw input, its shell line and working folder."""
    call = table(params, "toolCall")
    raw = table(call, "rawInput")
    kind = str(call.get("kind") or "other")
    paths = [str(loc["path"]) for loc in call.get("locations") or []
             if isinstance(loc, dict) and isinstance(loc.get("path"), str) and loc["path"]]
    paths += [v for k in _PATH_KEYS if isinstance(v := raw.get(k), str) and v]
    changes = raw.get("changes")
    if isinstance(changes, dict):
        paths += [str(p) for p in changes]
    for item in call.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "diff" and isinstance(item.get("path"), str):
            paths.append(item["path"])
    command = raw.get("command", raw.get("cmd"))
    cwd = raw.get("cwd", raw.get("workdir"))
    line = _shell_line(command) if command else ""
    # the policy judges `input["command"]` too: the unwrapped line, never a `bash -lc` list
    shown = {**raw, "title": str(call.get("title") or ""), **({"command": line} if command else {})}
    return PermissionRequest(request_id=request_id, tool=POLICY_TOOLS.get(kind, f"acp:{kind}"),
                             input=shown, paths=list(dict.fromkeys(paths)), command=line,
                             cwd=cwd if isinstance(cwd, str) else "")


def permission_outcome(options: Any, allow: bool) -> dict[str, Any]:
    """The answer to a permission request: the agent's option of the kind hive chose (once rather
    than always: hive judges each call), or `cancelled` when it offers none."""
    wanted = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    offered = [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
    for kind in wanted:
        for option in offered:
            if option.get("kind") == kind and option.get("optionId") is not None:
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return {"outcome": {"outcome": "cancelled"}}


def turn_usage(usage: Any) -> Usage | None:
    """A prompt response's `usage` (the turn's tokens) as hive's Usage; None when not reported.
    `inputTokens` is taken as uncached input unless `totalTokens` shows it includes the cached."""
    if not isinstance(usage, dict):
        return None
    read, write = count(usage.get("cachedReadTokens")), count(usage.get("cachedWriteTokens"))
    fresh, output = count(usage.get("inputTokens")), count(usage.get("outputTokens"))
    total = count(usage.get("totalTokens"))
    if (read or write) and total and total < fresh + output + read + write:
        fresh = max(0, fresh - read - write)
    return Usage(input_tokens=fresh, output_tokens=output, cache_read_tokens=read, cache_write_tokens=write)


def session_cost(update: dict[str, Any]) -> float | None:
    """A `usage_update`'s cumulative cost in USD (None: none reported, or not in USD)."""
    cost = update.get("cost")
    if not isinstance(cost, dict) or str(cost.get("currency") or "USD").upper() != "USD":
        return None
    return amount(cost.get("amount"))


def content_text(content: Any) -> str:
    """The text of an ACP content block (or of a tool call's content list)."""
    if isinstance(content, dict):
        if content.get("type") == "text" and isinstance(content.get("text"), str):
            return content["text"]
        if content.get("type") == "content":
            return content_text(content.get("content"))
        if content.get("type") == "diff" and isinstance(content.get("path"), str):
            return f"diff {content['path']}"
        return ""
    if isinstance(content, list):
        return "\n".join(t for t in (content_text(c) for c in content) if t)
    return ""


def tool_call_text(update: dict[str, Any]) -> str:
    """A tool call in one line: its kind and title, or its raw input."""
    title = str(update.get("title") or "")
    if not title and isinstance(update.get("rawInput"), dict):
        try:
            title = json.dumps(update["rawInput"], ensure_ascii=False)
        except (TypeError, ValueError):
            title = ""
    return f"[{update.get('kind') or 'tool'}] {title}"[:MAX_EVENT_CHARS]


def provider_failure(message: str) -> tuple[bool, int | None]:
    """(whether an error the agent reports is the provider's failure, its HTTP status if named)."""
    match = _STATUS_RE.search(message)
    status = int(match.group(1)) if match else None
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return False, status
    return bool(_PROVIDER_RE.search(message)), status
