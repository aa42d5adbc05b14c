"""git hive run / stop"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import click

from hive.backends import registry
from hive.cli.params import Whole
from hive.errors import HiveError, NeedsPerson


@click.command()
@click.option("--max-agents", type=Whole(min=1), default=None, help="Workers at once (config max_agents).")
@click.option("--backend", type=click.Choice(registry.names()), default=None,
              help="Use this backend for every role.")
@click.option("--until-idle", is_flag=True,
              help="Exit when nothing is ready, running or merging: 0 if every issue it ran finished, "
                   "3 if any escalated or failed, 1 naming a merge that waits for you.")
@click.option("--detach", is_flag=True, help="Run in the background; `git hive stop` ends it.")
@click.option("--remote", default=None, help="Share the queue through this remote (config sync_remote).")
@click.option("-C", "directories", multiple=True, metavar="DIR", help="Run in this repository (once).")
def run(max_agents: int | None, backend: str | None, until_idle: bool, detach: bool, remote: str | None,
        directories: tuple[str, ...]) -> None:
    """Run the agents: claim ready issues, work them in worktrees, merge the results."""
    import asyncio

    from hive.cli.group import enter_directory

    enter_directory(directories)

    from hive.cli.progress import LiveLine, print_summary
    from hive.orchestrator.assemble import build_daemon
    from hive import git
    from hive.initialize import missing_target_branch
    from hive.project import Project

    project = Project.open()
    project.sync()
    missing = missing_target_branch(project.paths, project.config.target_branch)
    if missing:
        raise HiveError(missing)
    _require_agent_clis(project, backend)
    unsigned = git.unsigned_warning(project.paths.worktree)
    if unsigned:
        click.echo(unsigned, err=True)
    if detach:
        _detach(project, max_agents, backend, until_idle, remote)
        return
    live = LiveLine(sys.stdout, sys.stderr if sys.stderr.isatty() else None) if sys.stdout.isatty() else None
    daemon = build_daemon(project, backend=backend, max_agents=max_agents, until_idle=until_idle, remote=remote,
                          log=live.log if live else None)
    if live:
        daemon.on_progress = live.progress
    try:
        asyncio.run(daemon.run())
    finally:
        if live:
            try:
                live.close()
            except OSError:
                pass
    summary = daemon.summary()
    try:
        print_summary(summary, lambda issue_id: _title(project, issue_id))
    except OSError:   # stdout gone (EPIPE): the run still ends as it should
        pass
    if daemon.exit_code:
        _say(f"git hive: stopped by {daemon.stop_cause}: its agents ended, the issues they held are open again")
        _drop_closed_stdout()
        sys.exit(daemon.exit_code)
    if until_idle and (summary.escalated or summary.failed):
        raise NeedsPerson(f"idle, but {len(summary.escalated)} escalated and {len(summary.failed)} failed "
                          "issue(s) need you: `git hive show ID` says how to go on")
    if daemon.waiting_merges:
        first = daemon.waiting_merges[0]
        more = f" (and {len(daemon.waiting_merges) - 1} more: `git hive status`)" if len(daemon.waiting_merges) > 1 else ""
        raise HiveError(f"idle, but the merge of {first.issue_id} waits: {first.detail}{more}")


def _detach(project, max_agents: int | None, backend: str | None, until_idle: bool, remote: str | None) -> None:
    """`run --detach`: the same run in a background process, once it holds the daemon lock."""
    from hive.runtime import DaemonLock

    holder = DaemonLock(project.paths).holder()
    if holder:
        raise HiveError(f"a hive daemon is already running for this repository (pid {holder})")
    args = [sys.executable, "-m", "hive", "run"]
    if max_agents:
        args += ["--max-agents", str(max_agents)]
    if backend:
        args += ["--backend", backend]
    if until_idle:
        args.append("--until-idle")
    if remote:
        args += ["--remote", remote]
    log_path = project.paths.daemon_log
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(args, cwd=project.paths.worktree, stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if DaemonLock(project.paths).holder() == proc.pid:
            click.echo(f"hive daemon running in the background (pid {proc.pid}); log: {log_path}")
            return
        if proc.poll() is not None:
            raise HiveError(f"the daemon exited at once (code {proc.returncode}); see {log_path}")
        time.sleep(0.05)
    raise HiveError(f"the daemon did not start within 30 s; see {log_path}")


def _say(line: str) -> None:
    """One line on stderr, if stderr is still there (a closed pipe takes it too, with `2>&1`)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _drop_closed_stdout() -> None:
    """A stdout whose reader is gone: pointed at /dev/null, so that the exit's own flush does not
    fail over it (Python would then exit 120, not with the code the run ended with)."""
    try:
        sys.stdout.flush()
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _title(project, issue_id: str) -> str:
    issue = project.index.get(issue_id)
    return issue.title if issue is not None else ""


def _require_agent_clis(project, backend: str | None) -> None:
    import dataclasses

    from hive.api.preflight import require_agents

    config = project.config
    if backend:
        config = dataclasses.replace(config, backend=backend, worker_backend="", refinery_backend="")
    require_agents(config, ("worker", "refinery"))   # before a detached daemon starts


@click.command()
@click.option("--timeout", type=float, default=60, show_default=True, help="Seconds to wait for it to end.")
def stop(timeout: float) -> None:
    """Stop the running daemon: agents end, issues stay where the next run continues."""
    import signal

    from hive import git
    from hive.runtime import DaemonLock

    lock = DaemonLock(git.discover())
    pid = lock.holder()
    if not pid or pid < 0:
        click.echo("no hive daemon is running here")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.holder() is None:
            click.echo(f"stopped the hive daemon (pid {pid})")
            return
        time.sleep(0.05)
    raise HiveError(f"the daemon (pid {pid}) did not stop within {timeout:.0f} s")
