"""git hive init"""

from __future__ import annotations

import click


@click.command()
def init() -> None:
    """Set up this repository for hive (safe to run again: it changes nothing then)."""
    from hive.api import Hive

    done = Hive.init()
    if not done:
        click.echo("hive is already set up here: nothing to change")
        return
    for line in done:
        click.echo(f"- {line}")
    click.echo("hive is ready: `git hive create TITLE` adds an issue, `git hive run` starts the agents")
