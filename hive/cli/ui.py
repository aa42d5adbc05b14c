"""git hive ui (`hive.api.browsing.serve`)"""

from __future__ import annotations

import sys

import click

from hive.cli.params import Whole


@click.command()
@click.option("--port", type=Whole(1, 65535), default=8001, show_default=True,
              help="Serve on 127.0.0.1 at this port.")
def ui(port: int) -> None:
    """Browse the queue, costs, escalations and merges in Datasette (127.0.0.1 only, at the URL
    with a token it prints; Ctrl-C ends it)."""
    from hive.api import browsing

    def announce(url: str) -> None:
        click.echo(f"git hive ui: {url} (this URL only: Ctrl-C stops it)", err=True)
        sys.stderr.flush()

    browsing.serve(port, announce)
