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
    from hive.workspace import retention, worktrees

    project = open_project()
    config = project.config
    busy = {issue.id for issue in project.index.list(["in_progress"])}   # a session may be writing
    pruned = retention.prune(worktrees.open_repo(project.paths), project.paths.hive_dir,
                             config.attempt_retention_days if days is None else days,
                             config.transcript_retention_days if days is None else days,
                             config.transcript_max_mb * retention.MB, busy)
    if as_json:
        print_json({"attempts": [{"ref": a.ref, "commit": a.commit} for a in pruned.attempts],
                    "transcripts": [str(p) for p in pruned.transcripts]})
        return
    for attempt in pruned.attempts:
        click.echo(f"removed {attempt.ref} ({attempt.commit[:10]})")
    click.echo(f"pruned {len(pruned.attempts)} kept attempt(s) and {len(pruned.transcripts)} transcript(s)")
