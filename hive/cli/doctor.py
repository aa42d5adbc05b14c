"""git hive doctor / reindex (`hive.api.doctor` rendered)"""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--fix", is_flag=True, help="Repair what can be repaired (re-run init, rebuild the index).")
def doctor(fix: bool) -> None:
    """Check this repository's hive setup; exit 2 if an issue file is invalid, 1 on other problems."""
    from hive.api import doctor as checkup

    results = checkup.checks(fix, say=click.echo)
    for check in results:
        mark = click.style("ok ", fg="green") if check.ok else click.style("!! ", fg="red")
        click.echo(f"{mark} {check.message}")
    if any(check.invalid_file for check in results):
        sys.exit(2)
    if any(not check.ok for check in results):
        sys.exit(1)


@click.command()
def reindex() -> None:
    """Rebuild the SQLite index from hive/state."""
    from hive.api.reindex import reindex as rebuild

    done = rebuild()
    click.echo(f"indexed {done.issues} issues in {done.seconds:.2f}s")
    for problem in done.problems:
        click.echo(f"warning: {problem}", err=True)
