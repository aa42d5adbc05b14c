"""What the next attempt of an issue is handed when the merge step took its work back (a
rejection): kept in the `kv` table as `handover:<id>` until the next worker takes it.

With the same agent (`agent_id`, `session_id` set), the worker resumes that session in the kept
worktree, at the rejected commit; after an agent switch it starts clean, told where the last
attempt is kept (`kept_ref`). Either way `failure` is what its prompt says went wrong.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hive.runtime.database import Runtime


@dataclass
class Handover:
    issue_id: str
    failure: str                 # what went wrong, for the next prompt
    agent_id: str = ""           # the same agent goes on: its id, its session
    session_id: str = ""
    kept_ref: str = ""           # a fresh agent: where the last attempt is kept

    @property
    def same_agent(self) -> bool:
        return bool(self.agent_id and self.session_id)


def _key(issue_id: str) -> str:
    return f"handover:{issue_id}"


def put(runtime: "Runtime", handover: Handover) -> None:
    runtime.put(_key(handover.issue_id), json.dumps(asdict(handover)))


def peek(runtime: "Runtime", issue_id: str) -> Handover | None:
    try:
        data = json.loads(runtime.get(_key(issue_id)) or "null")
        return Handover(**data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None


def take(runtime: "Runtime", issue_id: str) -> Handover | None:
    handover = peek(runtime, issue_id)
    runtime.delete(_key(issue_id))
    return handover
