"""Checks made before `run` or `plan` starts anything it would have to undo: the roles' agent
CLIs are there, and their agents can be jailed."""

from __future__ import annotations

from hive.agents.jails import start_problem
from hive.backends.registry import agent_cli_problem
from hive.config import Config
from hive.errors import HiveError

__all__ = ["require_agents"]


def require_agents(config: Config, roles: tuple[str, ...]) -> str | None:
    """Raise `HiveError` (one line) if a role's agent CLI is missing or its agents cannot be
    jailed here; otherwise the jail's warning, if any (agents run, but unjailed)."""
    for role in roles:
        problem = agent_cli_problem(config, role)
        if problem:
            raise HiveError(problem)
    refusal, warning = start_problem(config, roles)
    if refusal:
        raise HiveError(refusal)          # no jail, no real agents
    return warning
