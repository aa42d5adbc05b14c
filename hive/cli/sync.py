"""git hive sync"""

from __future__ import annotations

import click

from hive.cli.listing import open_project, print_json
from hive.cli.output import unpushed_target
from hive.errors import HiveError


@click.command()
@click.argument("remote", required=False)
@click.option("--json", "as_json", is_flag=True)
@click.option("--prune", is_flag=True, help="Also delete the remote's hive/work/* branches of finished issues.")
@click.option("--push-target", is_flag=True, help="Also push the target branch (the work hive merged) to REMOTE.")
@click.option("--reset-remote", is_flag=True,
              help="Replace a hive/state this machine refused with this machine's (says what it drops).")
def sync(remote: str | None, as_json: bool, prune: bool, push_target: bool, reset_remote: bool) -> None:
    """Fetch hive/state from REMOTE, merge it with the hive rules, push; retried if someone pushed."""
    from hive.api import Hive

    hive = Hive(open_project())

    def say(line: str) -> None:
        click.echo(line, err=True)

    if reset_remote:
        name, dropped = hive.reset_remote(remote, log=say)
        for line in dropped:
            say(line)
        click.echo(f"{name}: hive/state reset to this machine's ({hive.state_tip()[:12]})")
        return
    done = hive.sync(remote, prune=prune, push_target=push_target, log=say)
    report = done.report
    if done.pushed_target:
        say(f"pushed {done.target} to {done.remote}")
    elif done.unpushed:
        say(f"warning: {unpushed_target(done.remote, done.target, done.unpushed)}")
    if as_json:
        print_json(report.to_json() | ({"pruned": done.pruned} if prune else {}))
    else:
        for decision in report.decisions:
            click.echo(f"merged: {decision}")
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
        if report.offline:
            raise HiveError(f"{done.remote} is unreachable: nothing was exchanged (local state is intact)")
        changed = f" ({len(report.changed_issues)} issue(s) changed)" if report.changed_issues else ""
        click.echo(f"{done.remote}: {report.incoming} commit(s) in{changed}, {report.outgoing} out")
        if prune:
            click.echo(f"pruned {len(done.pruned)} finished work branch(es)"
                       + (f": {', '.join(done.pruned)}" if done.pruned else ""))
    if report.offline:
        raise SystemExit(1)
