"""Checks a command makes before it starts anything it would have to undo: the agent CLIs."""

from __future__ import annotations

import shlex
import shutil

from hive.backends import registry
from hive.config import Config
from hive.errors import HiveError


def agent_cli_problem(config: Config, role: str) -> str | None:
    """Why the CLI of `role`'s backend cannot be started (not found), or None if it can."""
    backend = config.backend_for(role)
    setting = registry.kind(backend).command_setting
    if not setting:
        return None
    command = getattr(config, setting)
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    if argv and shutil.which(argv[0]):
        return None
    return f"{role} backend {backend}: `{command}` not found (set {setting}, or choose --backend)"


def require_agent_clis(config: Config, roles: tuple[str, ...]) -> None:
    """Stop (one line, exit 1) before anything starts if a role's agent CLI is missing."""
    for role in roles:
        problem = agent_cli_problem(config, role)
        if problem:
            raise HiveError(problem)
