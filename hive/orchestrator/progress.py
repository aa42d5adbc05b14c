"""A run's progress while it runs, and its summary when it ends.

`RunProgress` is what `git hive run` redraws on a terminal and what the daemon publishes in
runtime.db (`PROGRESS_KEY`) for `git hive status`: issues finalized of all issues, agents busy, and
what this run spent (workers and the refinery). `summarize` tells what the run did from the audit
trail itself — the commits of `hive/state` made since the run started — so it counts every way
an issue ended (the merge step, a worker, recovery) without any of them reporting here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from hive import git
from hive.backends.base import Usage
from hive.state import history

PROGRESS_KEY = "run_progress"


@dataclass
class RunProgress:
    started_at: float          # time.time() when the run began
    finalized: int = 0         # issues finalized (of every issue but the canceled ones)
    total: int = 0
    busy: int = 0              # agents working now
    usage: Usage = field(default_factory=Usage)

    def to_json(self) -> dict[str, object]:
        return {"started_at": self.started_at, "finalized": self.finalized, "total": self.total,
                "busy": self.busy, "tokens": self.usage.total_tokens, "cost_usd": round(self.usage.cost_usd, 4),
                "usage": asdict(self.usage)}

    @classmethod
    def from_json(cls, text: str) -> "RunProgress | None":
        """A published progress (runtime.db is local, but a damaged value is not trusted)."""
        try:
            data = json.loads(text)
            usage = Usage(**{k: type(v)(data["usage"][k]) for k, v in asdict(Usage()).items()})
            return cls(float(data["started_at"]), int(data["finalized"]), int(data["total"]), int(data["busy"]),
                       usage)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


@dataclass
class RunSummary:
    finalized: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)       # issue -> reason
    escalated: dict[str, str] = field(default_factory=dict)    # issue -> reason
    usage: Usage = field(default_factory=Usage)
    wall_seconds: float = 0.0


def summarize(paths: git.RepoPaths, since: str, usage: Usage, started_at: float,
              status_of: Callable[[str], str | None]) -> RunSummary:
    """The issues the commits on `hive/state` after `since` (the tip when the run began) moved,
    by the status they are in now (`status_of`), with the last reason recorded for each."""
    reasons: dict[str, str] = {}
    for event in history.events(paths, since=since):
        if event.issue:
            reasons[event.issue] = event.trailers.get("Hive-Reason", "") or reasons.get(event.issue, "")
    summary = RunSummary(usage=usage, wall_seconds=time.time() - started_at)
    for issue_id, reason in reasons.items():
        status = status_of(issue_id)
        if status == "finalized":
            summary.finalized.append(issue_id)
        elif status in ("failed", "escalated"):
            (summary.failed if status == "failed" else summary.escalated)[issue_id] = reason
    return summary


class Publisher:
    """A run's progress for `git hive status` (runtime.db, `PROGRESS_KEY`), each time it changed."""

    def __init__(self, put: Callable[[str, str], None]):
        self.put = put
        self._published = ""

    def publish(self, progress: RunProgress) -> bool:
        """Store `progress`; whether it changed since the last one."""
        text = json.dumps(progress.to_json())
        if text == self._published:
            return False
        self._published = text
        self.put(PROGRESS_KEY, text)
        return True
