"""git hive prune [--older-than DAYS]: kept attempts and transcripts past their retention."""

from __future__ import annotations

import click

from hive.cli.listing import open_project, print_json


@click.command()
@click.option("--older-than", "days", type=click.FloatRange(min=0), default=None, metavar="DAYS",
              help="Remove what is older than this many days (default: attempt_retention_days for "
                   "kept attempts, transcript_retention_days for transcripts).")
@click.option("--json", "as_json", is_flag=True)
def prune(days: float | None, as_json: bool) -> None:
    """Remove kept attempts (refs/hive/attempts/*) and session transcripts older than DAYS."""
    from hive.api import Hive

    pruned = Hive(open_project()).prune(days)
    if as_json:
        print_json({"attempts": [{"ref": ref, "commit": commit} for ref, commit in pruned.attempts],
                    "transcripts": pruned.transcripts})
        return
    for ref, commit in pruned.attempts:
        click.echo(f"removed {ref} ({commit[:10]})")
    click.echo(f"pruned {len(pruned.attempts)} kept attempt(s) and {len(pruned.transcripts)} transcript(s)")
