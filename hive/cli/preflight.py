"""Checks a command makes before it starts anything it would have to undo: the agent CLIs."""

from __future__ import annotations

from hive.backends.registry import agent_cli_problem
from hive.config import Config
from hive.errors import HiveError


def require_agent_clis(config: Config, roles: tuple[str, ...]) -> None:
    """Stop (one line, exit 1) before anything starts if a role's agent CLI is missing."""
    for role in roles:
        problem = agent_cli_problem(config, role)
        if problem:
            raise HiveError(problem)
