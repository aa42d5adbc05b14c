"""git hive watch"""

from __future__ import annotations

import click


@click.command()
def watch() -> None:
    """Commit valid edits saved in .hive/ as they happen; report invalid ones. Ctrl-C stops."""
    from hive.api import Hive

    hive = Hive.open(warn=True)
    click.echo(f"watching {hive.checkout} (Ctrl-C to stop)")
    hive.watch(committed=lambda path: click.echo(f"committed .hive/{path}"),
               refused=lambda problem: click.echo(f"not committed: {problem}", err=True))
    click.echo("stopped")
