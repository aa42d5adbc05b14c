"""git hive demo (`hive.api.demo.run`)"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Build the demo repository here and keep it (default: a temp dir, removed).")
def demo(keep: Path | None) -> None:
    """A whole run in a temporary repository: scripted agents, no API key needed."""
    from hive.api import demo as the_demo

    sys.exit(the_demo.run(keep))
