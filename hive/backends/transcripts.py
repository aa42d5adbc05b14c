"""Session transcripts: what every agent session said and did, one JSON line per entry.

Where: `<git-common-dir>/hive/transcripts/<issue-id>/<start ns>-<role>.jsonl` for the sessions
that worked an issue (worker attempts, the refinery), `transcripts/plans/<slug>/...` for the
Queen's. A caller names the file in `SessionSpec.transcript` (`issue_transcript`,
`plan_transcript`); `SessionBackend` writes it, the same for every backend, from the events and
calls that pass through it (`Recorder`). Entries (`"type"`):

    session     the first line: label, role, issue, backend, model, session id, cwd
    prompt      a turn sent to the agent ("text")
    message     the agent said something, called a tool or got its result ("role", "text", "tool")
    permission  a tool call or command hive was asked about, with hive's answer ("tool",
                "command", "paths", "allow", "reason")
    error       the provider failed ("status", "message")
    turn        a turn ended ("ok", "error"; "usage": what the turn spent, "total": the session's)
    exit        the agent process ended ("code")
    end         hive ended the session ("total")
    truncated   the file reached MAX_BYTES: from here on only turn, exit and end entries

Every entry has "at" (Unix time). Bounded: a text is cut at MAX_TEXT characters and a file stops
taking anything but the small closing entries at MAX_BYTES, so an issue's transcripts are at most
its number of sessions × MAX_BYTES (its retry budget bounds the sessions). An issue's folder is
removed with its worktree when the issue is finished with (`remove_issue`). Everything in a
transcript comes from an agent and is hostile: shown on a terminal it must be escaped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Iterator

from hive.backends.base import Usage
from hive.lines import iter_lines

log = logging.getLogger(__name__)

FOLDER = "transcripts"
MAX_TEXT = 8 * 1024                 # characters of one text kept
MAX_BYTES = 1024 * 1024             # a transcript file's size past which only closing entries go in
CLOSING = ("turn", "exit", "end")   # the entries still written past MAX_BYTES


def issue_folder(hive_dir: Path | str, issue_id: str) -> Path:
    """The folder of an issue's transcripts (the id is validated by the caller: an issue id)."""
    return Path(hive_dir) / FOLDER / issue_id


def plan_folder(hive_dir: Path | str, slug: str) -> Path:
    return Path(hive_dir) / FOLDER / "plans" / slug


def new_transcript(folder: Path, label: str) -> str:
    """The path of a new session's transcript in `folder`, named `<start ns>-<label>.jsonl` so that
    names sort by start; `label` says whose it is (`worker-w-1a2b3c`, `refinery`, `queen`)."""
    return str(folder / f"{time.time_ns():020d}-{label}.jsonl")


def label_of(path: Path | str) -> str:
    return Path(path).stem.partition("-")[2]


def issue_transcripts(hive_dir: Path | str, issue_id: str) -> list[Path]:
    """The transcript files of an issue, oldest session first."""
    folder = issue_folder(hive_dir, issue_id)
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".jsonl")
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_issue(hive_dir: Path | str, issue_id: str) -> None:
    shutil.rmtree(issue_folder(hive_dir, issue_id), ignore_errors=True)


def read_entries(path: Path, offset: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """(end offset, entry) for each complete JSON-object line after `offset`; others skipped."""
    for end, line in iter_lines(path, offset, max_line=4 * MAX_BYTES):
        try:
            entry = json.loads(line) if line else None
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            yield end, entry


def cut(text: Any) -> str:
    text = str(text or "")
    return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}… ({len(text) - MAX_TEXT} more characters)"


def usage_fields(usage: Usage) -> dict[str, Any]:
    return asdict(usage)


class Transcript:
    """One open transcript file, appended to a line at a time (a follower sees each at once)."""

    def __init__(self, path: str, usage: Usage):
        self.path = path
        self.mark = replace(usage)      # the session's usage when the current turn began
        self.size = 0
        self.truncated = False
        self._fd = -1
        self._broken = False

    def write(self, entry: dict[str, Any]) -> None:
        if self._broken:
            return
        if self.size >= MAX_BYTES and entry.get("type") not in CLOSING:
            if self.truncated:
                return
            self.truncated = True
            entry = {"type": "truncated", "at": entry.get("at", time.time())}
        data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        try:
            if self._fd < 0:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self.size = os.fstat(self._fd).st_size
            os.write(self._fd, data)
            self.size += len(data)
        except OSError as exc:          # a transcript never stops a session
            log.warning("transcript %s: %s; no more entries written to it", self.path, exc)
            self._broken = True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Recorder:
    """The transcripts of one backend's sessions, keyed by file (what `SessionBackend` calls)."""

    def __init__(self, backend: str):
        self.backend = backend
        self._open: dict[str, Transcript] = {}

    def _transcript(self, s: Any) -> Transcript | None:
        spec = getattr(s, "spec", None)
        path = getattr(spec, "transcript", "") if spec is not None else ""
        if not path or spec is None:
            return None
        found = self._open.get(path)
        if found is None:
            found = self._open[path] = Transcript(path, s.usage)
            found.write({"type": "session", "at": time.time(), "label": label_of(path),
                         "session": s.id, "role": spec.role,
                         "issue": spec.issue_id, "backend": self.backend,
                         "model": getattr(s, "model", "") or spec.model, "cwd": spec.cwd})
        return found

    def record(self, s: Any, kind: str, **fields: Any) -> None:
        transcript = self._transcript(s)
        if transcript is not None:
            transcript.write({"type": kind, "at": time.time(), **fields})

    def turn_ended(self, s: Any, ok: bool, error: str) -> None:
        transcript = self._transcript(s)
        if transcript is None:
            return
        spent = s.usage.growth_since(transcript.mark)
        transcript.mark = replace(s.usage)
        transcript.write({"type": "turn", "at": time.time(), "ok": ok, "error": cut(error),
                          "usage": usage_fields(spent), "total": usage_fields(s.usage)})

    def pause(self, s: Any) -> None:
        """The process ended: its file is closed until something more is written to it."""
        transcript = self._open.get(getattr(getattr(s, "spec", None), "transcript", "") or "")
        if transcript is not None:
            transcript.close()

    def close(self, s: Any) -> None:
        transcript = self._transcript(s)
        if transcript is None:
            return
        transcript.write({"type": "end", "at": time.time(), "total": usage_fields(s.usage)})
        transcript.close()
        self._open.pop(transcript.path, None)
