"""git hive run / stop"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from hive.api.backends import names as backend_names
from hive.cli.params import Whole
from hive.errors import HiveError, NeedsPerson

if TYPE_CHECKING:
    from hive.api.run import Run


@click.command()
@click.option("--max-agents", type=Whole(min=1), default=None, help="Workers at once (config max_agents).")
@click.option("--backend", type=click.Choice(backend_names()), default=None,
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
    from hive.cli.group import enter_directory

    enter_directory(directories)

    from hive.api.run import Run

    with Run.prepare(backend=backend, max_agents=max_agents, until_idle=until_idle, remote=remote) as agents:
        for warning in agents.warnings:
            click.echo(warning, err=True)
        if detach:
            started = agents.detach()
            click.echo(f"hive daemon running in the background (pid {started.pid}); log: {started.log}")
            return
        _foreground(agents, until_idle)


def _foreground(agents: Run, until_idle: bool) -> None:
    """The run in this process, its live line on a terminal, its summary and how it ended."""
    from hive.cli.progress import LiveLine, print_summary

    live = LiveLine(sys.stdout, sys.stderr if sys.stderr.isatty() else None) if sys.stdout.isatty() else None
    log = live.log if live else (lambda line: print(line, flush=True))   # lines escaped already (RunLog)
    try:
        ended = agents.run(log=log, on_progress=live.progress if live else None)
    finally:
        if live:
            try:
                live.close()
            except OSError:
                pass
    summary = ended.summary
    try:
        print_summary(summary, agents.title)
    except OSError:   # stdout gone (EPIPE): the run still ends as it should
        pass
    if ended.exit_code:
        _say(f"git hive: stopped by {ended.stop_cause}: its agents ended, the issues they held are open again")
        _drop_closed_stdout()
        sys.exit(ended.exit_code)
    if until_idle and (summary.escalated or summary.failed):
        raise NeedsPerson(f"idle, but {len(summary.escalated)} escalated and {len(summary.failed)} failed "
                          "issue(s) need you: `git hive show ID` says how to go on")
    if ended.waiting_merges:
        first = ended.waiting_merges[0]
        more = f" (and {len(ended.waiting_merges) - 1} more: `git hive status`)" if len(ended.waiting_merges) > 1 else ""
        raise HiveError(f"idle, but the merge of {first.issue_id} waits: {first.detail}{more}")


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


@click.command()
@click.option("--timeout", type=float, default=60, show_default=True, help="Seconds to wait for it to end.")
def stop(timeout: float) -> None:
    """Stop the running daemon: agents end, issues stay where the next run continues."""
    from hive.api.run import stop as stop_daemon

    stopped = stop_daemon(timeout)
    click.echo(f"stopped the hive daemon (pid {stopped.pid})" if stopped.pid else "no hive daemon is running here")
