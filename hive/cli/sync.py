"""git hive sync"""

from __future__ import annotations

import click

from hive.cli.listing import print_json
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
    from hive.project import Project
    from hive.remote import Remote

    project = Project.open()
    project.sync()
    name = remote or project.config.sync_remote or "origin"
    shared = Remote(project, name)
    shared.log = lambda line: click.echo(line, err=True)
    if reset_remote:
        for line in shared.reset():
            click.echo(line, err=True)
        click.echo(f"{name}: hive/state reset to this machine's ({(project.store.tip() or '')[:12]})")
        return
    report = shared.sync()
    pruned = shared.prune_work_branches() if prune and not report.offline else []
    target = project.config.target_branch
    if push_target and not report.offline:
        pushed = shared.push_branch(target)
        if not pushed.ok:
            raise HiveError(f"could not push {target} to {name}: {pushed.message}")
        click.echo(f"pushed {target} to {name}", err=True)
    elif not report.offline and shared.fetch(target):
        _say_unpushed(shared, name, target)
    if as_json:
        print_json(report.to_json() | ({"pruned": pruned} if prune else {}))
    else:
        for decision in report.decisions:
            click.echo(f"merged: {decision}")
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
        if report.offline:
            raise HiveError(f"{name} is unreachable: nothing was exchanged (local state is intact)")
        changed = f" ({len(report.changed_issues)} issue(s) changed)" if report.changed_issues else ""
        click.echo(f"{name}: {report.incoming} commit(s) in{changed}, {report.outgoing} out")
        if prune:
            click.echo(f"pruned {len(pruned)} finished work branch(es)" + (f": {', '.join(pruned)}" if pruned else ""))
    if report.offline:
        raise SystemExit(1)


def _say_unpushed(shared, name: str, target: str) -> None:
    """The landings on the target branch that the remote lacks (sync shares hive/state only)."""
    missing = shared.unpushed(target)
    if missing:
        click.echo(f"warning: {unpushed_target(name, target, missing)}", err=True)