"""git hive sync"""

from __future__ import annotations

import click

from hive.cli.output import print_json
from hive.errors import HiveError


@click.command()
@click.argument("remote", required=False)
@click.option("--json", "as_json", is_flag=True)
def sync(remote: str | None, as_json: bool) -> None:
    """Fetch hive/state from REMOTE, merge it with the hive rules, push; retried if someone pushed."""
    from hive.project import Project
    from hive.remote import Remote

    project = Project.open()
    project.sync()
    name = remote or project.config.sync_remote or "origin"
    report = Remote(project, name).sync()
    if as_json:
        print_json(report.to_json())
    else:
        for decision in report.decisions:
            click.echo(f"merged: {decision}")
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
        if report.offline:
            raise HiveError(f"{name} is unreachable: nothing was exchanged (local state is intact)")
        changed = f" ({len(report.changed_issues)} issue(s) changed)" if report.changed_issues else ""
        click.echo(f"{name}: {report.incoming} commit(s) in{changed}, {report.outgoing} out")
    if report.offline:
        raise SystemExit(1)
