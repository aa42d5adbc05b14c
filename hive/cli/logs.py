"""git hive logs [ID] [-f] [--json]: the transcripts of the sessions that worked an issue, or the
daemon's own log.

`-f` follows: woken by watchfiles when a transcript grows or a new session starts (and by the
state's ref events, to notice the issue is finished with), never by a sleep loop. Following an
issue ends once it is finalized, canceled, escalated or failed and its sessions have ended;
following the daemon's log ends with Ctrl-C.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import click

from hive.backends.transcripts import FOLDER, issue_transcripts, read_entries
from hive.cli.listing import print_json
from hive.cli.output import escaped
from hive.cli.transcripts import Tail
from hive.project import Project

FINISHED = ("finalized", "canceled", "escalated", "failed")   # no session will work it again


@click.command()
@click.argument("issue_id", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep showing what the sessions do, live.")
@click.option("--json", "as_json", is_flag=True, help="JSON: the sessions and their entries (-f: one entry a line).")
def logs(issue_id: str | None, follow: bool, as_json: bool) -> None:
    """The transcripts of every session that worked an issue, in order; no ID: the daemon's log."""
    project = Project.open()
    if issue_id is None:
        _daemon_log(project, follow, as_json)
        return
    from hive.issues import resolve_id

    project.sync(warn=False)
    issue_id = resolve_id(project, issue_id)
    files: Callable[[], list[Path]] = lambda: issue_transcripts(project.paths.hive_dir, issue_id)
    if follow:
        _follow_issue(project, issue_id, files, as_json)
    elif as_json:
        print_json([{"transcript": path.name, "entries": [entry for _, entry in read_entries(path)]}
                    for path in files()])
    elif not files():
        click.echo(f"{issue_id}: no session transcripts (no session has worked it yet, or they were "
                   "pruned: transcript_retention_days, transcript_max_mb, `git hive prune`)")
    else:
        tail = Tail()
        for path, entry in tail.new(files()):
            click.echo(tail.line(path, entry))


def _emit(tail: Tail, files: list[Path], as_json: bool) -> None:
    for path, entry in tail.new(files):
        if as_json:
            click.echo(json.dumps({"transcript": path.name, **entry}, ensure_ascii=False))
        else:
            click.echo(tail.line(path, entry))
    sys.stdout.flush()


def _finished(project: Project, issue_id: str, tail: Tail) -> bool:
    """No session will write more: the issue is finished with, and each session seen has ended
    (or no daemon runs to end it: one killed leaves its sessions without their `end`)."""
    from hive.runtime import DaemonLock

    project.update_index()
    issue = project.index.get(issue_id)
    if issue is not None and issue.status not in FINISHED:
        return False
    return tail.ended() or not DaemonLock(project.paths).holder()


def _follow_issue(project: Project, issue_id: str, files: Callable[[], list[Path]], as_json: bool) -> None:
    from watchfiles import watch

    tail = Tail()
    folder = project.paths.hive_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    project.paths.ref_events.touch(exist_ok=True)
    mine, events = str(folder / issue_id), str(project.paths.ref_events)
    _emit(tail, files(), as_json)
    if _finished(project, issue_id, tail):
        return
    try:
        for _ in watch(folder, events, debounce=50, step=50,
                       watch_filter=lambda _, path: path.startswith(mine) or path == events):
            _emit(tail, files(), as_json)
            if _finished(project, issue_id, tail):
                return
    except KeyboardInterrupt:
        return


def _daemon_log(project: Project, follow: bool, as_json: bool) -> None:

    path = project.paths.daemon_log
    if not path.exists() and not follow:
        if as_json:
            print_json([])
        else:
            click.echo(f"no daemon log yet ({path}: written by `git hive run`)")
        return
    offset = _print_from(path, 0, as_json, collect=not follow)
    if not follow:
        return
    from watchfiles import watch

    try:
        for _ in watch(path.parent, recursive=False, debounce=50, step=50,
                       watch_filter=lambda _, changed: changed == str(path)):
            offset = _print_from(path, offset, as_json, collect=False)
    except KeyboardInterrupt:
        return


def _print_from(path: Path, offset: int, as_json: bool, collect: bool) -> int:
    """Print the complete lines of the log after `offset` (escaped: agents' words are in it);
    the new offset. `collect` with `as_json`: one JSON array of the lines."""
    from hive.lines import iter_lines

    lines = []
    for end, raw in iter_lines(path, offset):
        offset = end
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if as_json and collect:
            lines.append(line)
        elif as_json:
            click.echo(json.dumps({"line": line}, ensure_ascii=False))
        else:
            click.echo(escaped(line))
    if as_json and collect:
        print_json(lines)
    sys.stdout.flush()
    return offset
