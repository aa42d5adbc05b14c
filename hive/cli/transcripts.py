"""How a session transcript is shown to a person: one escaped line per entry (`logs`, `plan`).

Every text in a transcript is the agent's (or the provider's): it goes through `one_line`, so no
control character of it reaches the terminal. The entry types are `hive/backends/transcripts.py`'s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from hive.cli.output import one_line

SHOWN_CHARS = 400          # of one text on its line; `logs --json` has it whole


def elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _short(text: Any) -> str:
    line = one_line(str(text or "").strip())
    return line if len(line) <= SHOWN_CHARS else line[:SHOWN_CHARS] + "…"


def usage_line(usage: dict[str, Any]) -> str:
    def n(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    cost = usage.get("cost_usd")
    cost = cost if isinstance(cost, (int, float)) else 0.0
    return (f"{n('input_tokens'):,} in · {n('cache_write_tokens'):,} cache write · "
            f"{n('cache_read_tokens'):,} cache read · {n('output_tokens'):,} out · ${cost:.4f}")


def header(entry: dict[str, Any]) -> str:
    at = entry.get("at")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if isinstance(at, (int, float)) else "?"
    parts = [str(entry.get("label") or entry.get("role") or "session"), str(entry.get("backend") or ""),
             str(entry.get("model") or ""), f"session {str(entry.get('session') or '?')[:12]}",
             f"started {started}"]
    return one_line("── " + " · ".join(p for p in parts if p))


def describe(entry: dict[str, Any]) -> tuple[str, str]:
    """(what, the rest) of an entry other than the header."""
    kind = entry.get("type")
    if kind == "prompt":
        text = str(entry.get("text") or "")
        lines = text.strip().splitlines() or [""]
        return "prompt", _short(lines[0]) + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")
    if kind == "message":
        role = str(entry.get("role") or "")
        if entry.get("tool"):
            return "tool", _short(entry.get("text"))
        return {"assistant": "says", "tool": "result"}.get(role, _short(role) or "message"), _short(entry.get("text"))
    if kind == "permission":
        what = f"{entry.get('tool')}: {entry.get('command') or ', '.join(map(str, entry.get('paths') or []))}"
        if entry.get("allow"):
            return "allowed", _short(what)
        return "DENIED", _short(what) + (f" — {_short(entry.get('reason'))}" if entry.get("reason") else "")
    if kind == "error":
        status = entry.get("status")
        return "error", _short(f"provider{f' {status}' if status else ''}: {entry.get('message')}")
    if kind == "turn":
        outcome = "ok" if entry.get("ok") else f"failed: {_short(entry.get('error'))}"
        usage = entry.get("usage") if isinstance(entry.get("usage"), dict) else {}
        return "turn", f"{outcome} · {usage_line(usage)}"
    if kind == "exit":
        return "exit", _short(f"code {entry.get('code')}")
    if kind == "end":
        total = entry.get("total") if isinstance(entry.get("total"), dict) else {}
        return "end", f"session total: {usage_line(total)}"
    if kind == "truncated":
        return "…", "the transcript reached its size limit: only turn ends follow"
    return _short(kind or "?"), ""


def render(entry: dict[str, Any], start: float | None) -> str:
    """The line of one entry; `start`: the session's start time (elapsed times count from it)."""
    if entry.get("type") == "session":
        return header(entry)
    at = entry.get("at")
    when = elapsed(at - start) if isinstance(at, (int, float)) and start is not None else "?"
    what, rest = describe(entry)
    return f"  {when:>7}  {what:<8} {rest}".rstrip()


class Tail:
    """The entries appended to a set of transcript files since the last look, file by file. Each
    file stays open once seen: what was written before it was removed (with its issue's worktree)
    is still read."""

    def __init__(self) -> None:
        self.files: dict[Path, BinaryIO] = {}
        self.partial: dict[Path, bytes] = {}
        self.starts: dict[Path, float] = {}
        self.last: dict[Path, str] = {}         # the type of each file's last entry
        self.roles: dict[Path, str] = {}

    def ended(self) -> bool:
        """Whether every worker session seen so far was ended by hive (its `end` entry is in; the
        refinery's session may live on, for the project's next merge)."""
        return all(kind == "end" for path, kind in self.last.items() if self.roles.get(path) != "refinery")

    def new(self, paths: list[Path]) -> Iterator[tuple[Path, dict[str, Any]]]:
        for path in paths:
            if path not in self.files:
                try:
                    self.files[path] = open(path, "rb")
                except OSError:
                    continue
        for path, handle in self.files.items():
            data = self.partial.pop(path, b"") + handle.read()
            complete = data.rfind(b"\n") + 1
            if complete < len(data):
                self.partial[path] = data[complete:]      # a line being written: read next time
            for line in data[:complete].splitlines():
                entry = _entry(line)
                if entry is None:
                    continue
                if entry.get("type") == "session" and isinstance(entry.get("at"), (int, float)):
                    self.starts.setdefault(path, entry["at"])
                    self.roles.setdefault(path, str(entry.get("role")))
                self.last[path] = str(entry.get("type"))
                yield path, entry

    def line(self, path: Path, entry: dict[str, Any]) -> str:
        return render(entry, self.starts.get(path))

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()
        self.files.clear()


def _entry(line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None
