"""`git hive run` and `stop` through the API: a run of the daemon in a repository — checked
before it starts anything it would have to undo, in the foreground or detached — and its end."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hive import git
from hive.api.preflight import require_agents
from hive.errors import HiveError
from hive.initialize import missing_target_branch
from hive.orchestrator.assemble import build_daemon
from hive.orchestrator.progress import RunProgress, RunSummary
from hive.project import Project
from hive.runtime import DaemonLock

__all__ = ["Detached", "Ended", "InBackground", "Run", "RunProgress", "RunSummary", "Stopped", "WaitingMerge",
           "start_in_background", "stop"]

START_SECONDS = 30      # how long `detach` waits for the daemon to hold its lock


@dataclass(frozen=True)
class WaitingMerge:
    issue_id: str
    detail: str          # why it waits for a person


@dataclass(frozen=True)
class Ended:
    """How a foreground run ended."""
    summary: RunSummary
    exit_code: int                    # not 0: stopped by a signal, or its output was gone
    stop_cause: str                   # what stopped it (with `exit_code`)
    waiting_merges: list[WaitingMerge]   # `until_idle`: the merges still waiting for a person


@dataclass(frozen=True)
class Detached:
    pid: int
    log: Path            # where the background daemon writes


@dataclass(frozen=True)
class Stopped:
    pid: int | None      # the daemon stopped; None when none was running


@dataclass(frozen=True)
class InBackground:
    already_running: bool    # a daemon was running: it takes the new issues itself
    said: str                # otherwise what `git hive run --detach` said


class Run:
    """One run of the agents in a repository (`git hive run`): `prepare` checks it can start,
    then `run` (in this process, until it ends) or `detach` (in a background process)."""

    def __init__(self, project: Project, *, backend: str | None, max_agents: int | None, until_idle: bool,
                 remote: str | None, warnings: list[str]) -> None:
        self.project = project
        self.backend, self.max_agents, self.until_idle, self.remote = backend, max_agents, until_idle, remote
        self.warnings = warnings      # worth telling the person, none stops the run

    @classmethod
    def prepare(cls, path: Path | str | None = None, *, backend: str | None = None, max_agents: int | None = None,
                until_idle: bool = False, remote: str | None = None) -> Run:
        """Open the repository at `path` and check the run can start: the target branch, the
        agent CLIs of the workers and the refinery, their jail (`HiveError` saying why not)."""
        project = Project.open(path)
        try:
            project.sync()
            missing = missing_target_branch(project.paths, project.config.target_branch)
            if missing:
                raise HiveError(missing)
            config = project.config
            if backend:
                config = dataclasses.replace(config, backend=backend, worker_backend="", refinery_backend="")
            require_agents(config, ("worker", "refinery"))   # before a detached daemon starts
        except BaseException:
            project.close()
            raise
        unsigned = git.unsigned_warning(project.paths.worktree)
        return cls(project, backend=backend, max_agents=max_agents, until_idle=until_idle, remote=remote,
                   warnings=[unsigned] if unsigned else [])

    def run(self, log: Callable[[str], None] | None = None,
            on_progress: Callable[[RunProgress], None] | None = None) -> Ended:
        """Run the daemon here until it stops (`until_idle`: once nothing is left to do; else a
        signal); `log` hears its lines (default: printed), `on_progress` each change of progress."""
        daemon = build_daemon(self.project, backend=self.backend, max_agents=self.max_agents,
                              until_idle=self.until_idle, remote=self.remote, log=log)
        daemon.on_progress = on_progress
        asyncio.run(daemon.run())
        return Ended(daemon.summary(), daemon.stop.exit_code, daemon.stop.cause,
                     [WaitingMerge(entry.issue_id, entry.detail) for entry in daemon.waiting_merges])

    def detach(self) -> Detached:
        """The same run in a background process (`git hive stop` ends it), once it holds the
        daemon's lock."""
        paths = self.project.paths
        holder = DaemonLock(paths).holder()
        if holder:
            raise HiveError(f"a hive daemon is already running for this repository (pid {holder})")
        args = [sys.executable, "-m", "hive", "run"]
        if self.max_agents:
            args += ["--max-agents", str(self.max_agents)]
        if self.backend:
            args += ["--backend", self.backend]
        if self.until_idle:
            args.append("--until-idle")
        if self.remote:
            args += ["--remote", self.remote]
        with open(paths.daemon_log, "ab") as log_file:
            proc = subprocess.Popen(args, cwd=paths.worktree, stdin=subprocess.DEVNULL,
                                    stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if DaemonLock(paths).holder() == proc.pid:
                return Detached(proc.pid, paths.daemon_log)
            if proc.poll() is not None:
                raise HiveError(f"the daemon exited at once (code {proc.returncode}); see {paths.daemon_log}")
            time.sleep(0.05)
        raise HiveError(f"the daemon did not start within {START_SECONDS} s; see {paths.daemon_log}")

    def title(self, issue_id: str) -> str:
        """An issue's title ('' if it is not known)."""
        issue = self.project.index.get(issue_id)
        return issue.title if issue is not None else ""

    def close(self) -> None:
        self.project.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def stop(timeout: float = 60, path: Path | str | None = None) -> Stopped:
    """Stop the daemon running for the repository at `path` (`git hive stop`): its agents end, the
    issues stay where the next run continues; `HiveError` if it has not ended within `timeout` s."""
    lock = DaemonLock(git.discover(path))
    pid = lock.holder()
    if not pid or pid < 0:
        return Stopped(None)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.holder() is None:
            return Stopped(pid)
        time.sleep(0.05)
    raise HiveError(f"the daemon (pid {pid}) did not stop within {timeout:.0f} s")


def start_in_background(path: Path | str | None = None) -> InBackground:
    """Have a daemon work the repository at `path`: the running one, or `git hive run --detach`."""
    paths = git.discover(path)
    if DaemonLock(paths).holder():
        return InBackground(True, "")
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--detach"], cwd=paths.worktree,
                          capture_output=True, text=True)
    return InBackground(False, proc.stdout.strip() or proc.stderr.strip())
