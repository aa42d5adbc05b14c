"""Agent ids: `w-xxxxxx` for a worker (one letter of role, six of the issue-id alphabet)."""

from __future__ import annotations

import re
import secrets

from hive.state.issue_file import ID_ALPHABET

AGENT_ID_RE = re.compile(r"^[a-z]-[0-9a-z]{6}\Z")   # \Z: `$` would accept a trailing newline


def new_agent_id(prefix: str = "w") -> str:
    return f"{prefix}-" + "".join(secrets.choice(ID_ALPHABET) for _ in range(6))


def is_agent_id(value: str) -> bool:
    """Whether an assignee is one of hive's agents (not a person's name)."""
    return bool(AGENT_ID_RE.match(value or ""))
