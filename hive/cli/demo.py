"""git hive demo"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command()
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Build the demo repository here and keep it (default: a temp dir, removed).")
def demo(keep: Path | None) -> None:
    """A whole run in a temporary repository: scripted agents, no API key needed."""
    from hive.demo import run_demo
    from hive.errors import BadInput

    if keep is not None and keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise BadInput(f"--keep {keep}: it exists and is not empty; give a new directory")
    sys.exit(run_demo(keep))
