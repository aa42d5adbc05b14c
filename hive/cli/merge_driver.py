"""git hive merge-driver: the `hive` merge driver git runs for files on hive/state (plumbing: it
goes straight to `hive.state.merge_driver`, so that a merge of many files pays for nothing else)."""

from __future__ import annotations

import sys

import click

from hive.errors import BadInput


@click.command("merge-driver", hidden=True)
@click.argument("args", nargs=-1)
def merge_driver(args: tuple[str, ...]) -> None:
    """Called by git as `<python> -P -m hive merge-driver %O %A %B %P` (registered by init)."""
    from hive.state import merge_driver as driver

    if len(args) != 4:
        raise BadInput("usage: git hive merge-driver BASE OURS THEIRS PATH (git calls it; `init` registers it)")
    sys.exit(driver.main(list(args)))
