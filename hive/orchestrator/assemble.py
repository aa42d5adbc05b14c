"""Putting a daemon together: its backends, its config overrides and the merge pipeline.

`git hive run` and `git hive demo` (and the tests and bench) start a daemon the same way; this
module is that way, below both so that neither command imports the other.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from hive.agents.jails import start_problem, unjailed_imports_warning
from hive.backends.registry import backend_for_role
from hive.errors import HiveError
from hive.merge.pipeline import attach
from hive.orchestrator.daemon import Daemon
from hive.project import Project


def build_daemon(project: Project, *, backend: str | None, max_agents: int | None, until_idle: bool,
                 log: Callable[[str], None] | None = None, remote: str | None = None) -> Daemon:
    """A daemon for `project` with the configured (or overridden) backends and merge pipeline."""
    config = project.config
    if backend:
        config = dataclasses.replace(config, backend=backend, worker_backend="", refinery_backend="",
                                     queen_backend="")
    if max_agents:
        config = dataclasses.replace(config, max_agents=max_agents)
    refusal, warning = start_problem(config, ("worker", "refinery"))
    if refusal:
        raise HiveError(refusal)          # no jail, no real agents
    paths = project.paths
    worker_backend = backend_for_role(config, "worker", str(paths.hive_dir), str(paths.main_worktree))
    daemon = Daemon(project, worker_backend, config, until_idle=until_idle, log=log,
                    remote=remote or config.sync_remote or None)
    for said in (warning, unjailed_imports_warning(config, paths)):
        if said:
            daemon.log(said)
    daemon.use_merge(attach(daemon))
    return daemon
