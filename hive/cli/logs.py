"""git hive logs [ID] [-f] [--json]: the transcripts of the sessions that worked an issue, or the
daemon's own log (`Hive.transcripts`, `follow_transcripts`, `daemon_log`).

Following an issue ends once it is finalized, canceled, escalated or failed and its sessions have
ended; following the daemon's log ends with Ctrl-C.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hive.cli.listing import print_json
from hive.cli.output import escaped
from hive.cli.transcripts import Tail

if TYPE_CHECKING:
    from hive.api import Hive


@click.command()
@click.argument("issue_id", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep showing what the sessions do, live.")
@click.option("--json", "as_json", is_flag=True, help="JSON: the sessions and their entries (-f: one entry a line).")
def logs(issue_id: str | None, follow: bool, as_json: bool) -> None:
    """The transcripts of every session that worked an issue, in order; no ID: the daemon's log."""
    from hive.api import Hive, transcript_entries

    hive = Hive.open(sync=issue_id is not None)
    if issue_id is None:
        _daemon_log(hive, follow, as_json)
        return
    issue_id = hive.resolve(issue_id)
    if follow:
        tail = Tail()
        try:
            for files in hive.follow_transcripts(issue_id, tail.ended):
                _emit(tail, files, as_json)
        except KeyboardInterrupt:
            return
        return
    files = hive.transcripts(issue_id)
    if as_json:
        print_json([{"transcript": path.name, "entries": [entry for _, entry in transcript_entries(path)]}
                    for path in files])
    elif not files:
        click.echo(f"{issue_id}: no session transcripts (no session has worked it yet, or they were "
                   "pruned: transcript_retention_days, transcript_max_mb, `git hive prune`)")
    else:
        _emit(Tail(), files, False)


def _emit(tail: Tail, files: list[Path], as_json: bool) -> None:
    for path, entry in tail.new(files):
        if as_json:
            click.echo(json.dumps({"transcript": path.name, **entry}, ensure_ascii=False))
        else:
            click.echo(tail.line(path, entry))
    sys.stdout.flush()


def _daemon_log(hive: "Hive", follow: bool, as_json: bool) -> None:
    from hive.api import follow_file

    path = hive.daemon_log
    if not path.exists() and not follow:
        if as_json:
            print_json([])
        else:
            click.echo(f"no daemon log yet ({path}: written by `git hive run`)")
        return
    offset = _print_from(path, 0, as_json, collect=not follow)
    if not follow:
        return
    try:
        for _ in follow_file(path):
            offset = _print_from(path, offset, as_json, collect=False)
    except KeyboardInterrupt:
        return


def _print_from(path: Path, offset: int, as_json: bool, collect: bool) -> int:
    """Print the complete lines of the log after `offset` (escaped: agents' words are in it);
    the new offset. `collect` with `as_json`: one JSON array of the lines."""
    from hive.api import log_lines

    collected = []
    for end, line in log_lines(path, offset):
        offset = end
        if as_json and collect:
            collected.append(line)
        elif as_json:
            click.echo(json.dumps({"line": line}, ensure_ascii=False))
        else:
            click.echo(escaped(line))
    if as_json and collect:
        print_json(collected)
    sys.stdout.flush()
    return offset
