"""Issue commands: create, list, show, log, edit, update, dep, cancel, retry — parsed here, decided
in `hive.api` (`issues` and `moves`: the changes; `listing`; `detail`, `attention`, `waits` and
`prompt`: show; `history`: log), rendered here."""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from hive.api import DEFAULT_PRIORITY, PRIORITIES, STATUSES, TYPES
from hive.cli import listing
from hive.cli.listing import open_project, print_json
from hive.cli.output import ISSUE_HEADERS, escaped, issue_rows, one_line, show_issue, table
from hive.cli.params import Whole
from hive.errors import BadInput, HiveError

if TYPE_CHECKING:
    from hive.api import Attention, History
    from hive.api.prompt import PromptPreview

STATUS = click.Choice(STATUSES)
TYPE = click.Choice(TYPES)
PRIORITY = Whole(min(PRIORITIES), max(PRIORITIES))


def description_text(description: str) -> str:
    """`-d -` reads the description from standard input."""
    if description != "-":
        return description
    import sys

    return sys.stdin.read()


@click.command()
@click.argument("title")
@click.option("-d", "--description", default="", help="The description (Markdown); - reads it from stdin.")
@click.option("-p", "--priority", type=PRIORITY, default=DEFAULT_PRIORITY, show_default=True,
              help="0 = highest.")
@click.option("-t", "--type", "kind", type=TYPE, default="task", show_default=True)
@click.option("--parent", default="", help="The epic this issue belongs to.")
@click.option("--depends-on", "depends_on", multiple=True, help="A blocker (repeatable).")
@click.option("-l", "--label", "labels", multiple=True, help="A label (repeatable).")
@click.option("--touches", "touches", multiple=True, metavar="GLOB",
              help="A glob of the files the work will change, e.g. 'src/auth/**' (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the created issue as JSON.")
def create(title: str, description: str, priority: int, kind: str, parent: str,
           depends_on: tuple[str, ...], labels: tuple[str, ...], touches: tuple[str, ...], as_json: bool) -> None:
    """Create an issue and print its id."""
    from hive.api import issues

    title, description = issues.checked_title(title), description_text(description)
    issue = issues.create(open_project(), title, description=description, priority=priority, type=kind,
                          parent=parent, depends_on=depends_on, labels=labels, touches=touches)
    if as_json:
        print_json(issue.to_json(with_body=True))
    else:
        click.echo(issue.id)


@click.command("list")
@click.option("--status", "statuses", type=STATUS, multiple=True, help="Only these statuses (repeatable).")
@click.option("--ready", is_flag=True, help="Only issues an agent could take now, in queue order.")
@click.option("--parent", default=None, help="Only children of this epic.")
@click.option("--json", "as_json", is_flag=True)
def list_issues(statuses: tuple[str, ...], ready: bool, parent: str | None, as_json: bool) -> None:
    """List issues: every status unless filtered."""
    from hive.api import listing as listed

    project = open_project()
    parent_id = None
    if parent:
        from hive.api.issues import resolve   # the write path: only to resolve a prefix

        parent_id = resolve(project, parent)
    if as_json and not ready:
        listing.list_json(project, statuses, parent_id)
        return
    found = listed.ready(project, statuses) if ready else listed.issues(project, statuses, parent_id)
    held = {}
    if ready:
        from hive.api.touching import touch_waits   # pygit2 (what busy work changed): only for --ready

        held = touch_waits(project, found)
    if as_json:
        print_json([{**i.to_json(), **({"waits": held[i.id]} if i.id in held else {})} for i in found])
    elif found:
        rows = issue_rows(found, listed.blockers_left(project, found))
        for row in rows:
            if row[0] in held:
                row[-1] = f"waits: {held[row[0]]} · {row[-1]}"   # the reason first: a long title is cut
        table(rows, ISSUE_HEADERS)
    else:
        click.echo("no issues" + (" ready" if ready else ""))


@click.command()
@click.argument("issue_id")
@click.option("--prompt", "with_prompt", is_flag=True,
              help="The prompt and notes a worker would get for a first attempt, with their token counts.")
@click.option("--json", "as_json", is_flag=True)
def show(issue_id: str, with_prompt: bool, as_json: bool) -> None:
    """Show one issue, with its description."""
    if with_prompt:
        from hive.api.prompt import preview

        show_prompt(preview(open_project(), issue_id), as_json)
        return
    from hive.api.detail import detail

    project = open_project()
    found = detail(project, issue_id)
    needs, waits = None, ""
    if found.asks_a_person:   # each loaded only when it has something to tell
        from hive.api.attention import attention

        needs = attention(project, found.issue)
    if found.merge_may_wait:
        from hive.api.waits import merge_waits

        waits = merge_waits(project, found.issue)
    if as_json:
        data = {**found.issue.to_json(with_body=True), "path": found.path, "dependents": found.dependents}
        if needs is not None:
            data["attention"] = asdict(needs)
        if waits:
            data["merge_waits"] = waits
        print_json(data)
        return
    show_issue(found.issue)
    if waits:
        click.echo(f"\nmerge waits: {one_line(waits)}")
    if found.dependents:
        click.echo(f"\nblocks: {', '.join(sorted(found.dependents))}")
    if needs is not None:
        for line in recovery_steps(found.issue.id, found.issue.status, needs):
            click.echo(line)


def show_prompt(preview: PromptPreview, as_json: bool) -> None:
    """`show --prompt`: what a worker would be given, sizes estimated (bytes / 3.5)."""
    if as_json:
        print_json(asdict(preview))
        return
    click.echo(f"prompt of a first attempt at {preview.id}: ~{preview.prompt_tokens:,} tokens "
               f"(+ ~{preview.system_tokens:,} of hive's standing instructions); estimated as UTF-8 bytes / 3.5")
    click.echo(f"context.md: ~{preview.context_tokens:,} tokens")
    click.echo(f"notes: {len(preview.notes)} of {preview.notes_candidates} live, ~{preview.notes_tokens:,} tokens "
               f"of notes_prompt_tokens {preview.notes_budget:,}; {preview.notes_left_out} left out")
    if preview.notes:
        table([[n.key, n.reason, str(n.tokens), n.category, n.issue or "project", n.content] for n in preview.notes],
              ("KEY", "WHY", "TOKENS", "CATEGORY", "OF", "CONTENT"))
    click.echo("\n--- the prompt ---")
    click.echo(escaped(preview.prompt), nl=False)


def recovery_steps(issue_id: str, status: str, found: Attention) -> list[str]:
    """Why an escalated or failed issue needs a person and how to go on, as lines for a person."""
    steps = [f"\n{status}: hive needs you. Why: {one_line(found.reason)}",
             f"What its agents did: `git hive logs {issue_id}`. To recover:"]
    if found.worktree:
        steps.append(f"  - fix it yourself: the work is in {found.worktree} (on a detached HEAD: its HEAD is"
                     f" what lands); commit there, then `git hive update {issue_id} --status done`: `git hive run`"
                     f" merges it (with merge_mode manual: `git hive finalize {issue_id}`)")
    more = "or " if found.worktree else ""
    steps += [f"  - {more}give it back to the agents with a fresh budget: `git hive retry {issue_id}`",
              f"  - or drop it: `git hive cancel {issue_id}`"]
    return steps


@click.command()
@click.argument("issue_id")
@click.option("--json", "as_json", is_flag=True)
def log(issue_id: str, as_json: bool) -> None:
    """The history of one issue: every commit of hive/state that touched it."""
    from hive.api.history import history

    found = history(open_project(), issue_id)
    if as_json:
        print_json([e.to_json() for e in found.events + found.kept])
        return
    show_history(found)


def show_history(found: History) -> None:
    for e in found.events:
        who = e.agent or e.author
        reason = e.trailers.get("Hive-Reason", "")
        click.echo(f"{e.at}  {e.commit[:10]}  {e.event:<12} {who:<16} {e.summary}"
                   + (f"\n{'':>36}reason: {reason}" if reason else ""))
    for k in found.kept:
        click.echo(one_line(f"{k.at}  {k.commit[:10]}  {'kept':<12} {k.author:<16} {k.summary}"))


@click.command()
@click.argument("issue_id")
def edit(issue_id: str) -> None:
    """Open the issue's file in $EDITOR; on save it is validated and committed.

    An invalid file is left exactly as you wrote it in .hive/ (nothing is lost) and the command
    exits 2 naming the file and line; run `git hive edit` again to fix it. A finished issue's
    file (the archive, not checked out in .hive/) is checked out first, and stays.
    """
    from hive.api import issues

    project = open_project()
    editing = issues.start_edit(project, issue_id)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    while True:
        try:
            code = subprocess.call([*_split(editor), str(editing.path)])
        except OSError as exc:
            raise HiveError(f"cannot start the editor {editor!r} (from $VISUAL/$EDITOR): "
                            f"{exc.strerror or exc}; {editing.path} is left as it is") from None
        if code != 0:
            raise HiveError(f"{editor} exited with an error; {editing.path} is left as it is")
        problem = issues.finish_edit(project, editing)
        if problem is None:
            click.echo(f"saved {editing.issue_id}")
            return
        click.echo(f"git hive: {problem}", err=True)
        if not (os.isatty(0) and click.confirm("edit again?", default=True)):
            raise BadInput(str(problem).split(": ", 1)[-1], problem.where)


def _split(command: str) -> list[str]:
    import shlex

    try:
        return shlex.split(command)
    except ValueError as exc:
        raise BadInput(f"$VISUAL/$EDITOR {command!r} cannot be read as a command: {exc}") from None


@click.command()
@click.argument("issue_id")
@click.option("--status", type=STATUS)
@click.option("-p", "--priority", type=PRIORITY)
@click.option("--title")
@click.option("-t", "--type", "kind", type=TYPE)
@click.option("-d", "--description", default=None, help="Replace the description.")
@click.option("--parent", default=None, help="Set the epic ('' to clear).")
@click.option("--assignee", default=None)
@click.option("-l", "--add-label", "add_labels", multiple=True)
@click.option("--remove-label", "remove_labels", multiple=True)
@click.option("--touches", "touches", multiple=True, metavar="GLOB",
              help="Replace the globs of the files the work will change (repeatable; '' clears them).")
@click.option("--force", is_flag=True,
              help="Allow a status/assignee no daemon would ever move on from (in_progress with no assignee...).")
@click.option("--json", "as_json", is_flag=True)
def update(issue_id: str, status: str | None, priority: int | None, title: str | None, kind: str | None,
           description: str | None, parent: str | None, assignee: str | None,
           add_labels: tuple[str, ...], remove_labels: tuple[str, ...], touches: tuple[str, ...], force: bool,
           as_json: bool) -> None:
    """Change fields of an issue (one commit)."""
    from hive.api import issues, moves

    project = open_project()
    issue_id = issues.resolve(project, issue_id)
    if title is not None:
        issues.checked_title(title)
    if description is not None:
        description = description_text(description)
    fields = {key: value for key, value in (("status", status), ("priority", priority), ("title", title),
                                            ("type", kind), ("assignee", assignee), ("parent", parent))
              if value is not None}
    if touches:
        fields["touches"] = touches
    if not fields and description is None and not (add_labels or remove_labels):
        raise BadInput("nothing to change: give at least one option (see --help)")
    updated = moves.update(project, issue_id, fields, add_labels=add_labels, remove_labels=remove_labels,
                            description=description, force=force)
    if as_json:
        print_json(updated.to_json(with_body=True))
    else:
        click.echo(f"{issue_id}: {updated.status}")


@click.group()
def dep() -> None:
    """Add or remove a dependency (ID is blocked by BLOCKER)."""


@dep.command("add")
@click.argument("issue_id")
@click.argument("blocker")
def dep_add(issue_id: str, blocker: str) -> None:
    """ISSUE_ID waits for BLOCKER (refused where it would make a cycle)."""
    from hive.api import issues

    project = open_project()
    issue_id, blocker = issues.resolve(project, issue_id), issues.resolve(project, blocker)
    issues.depend(project, issue_id, blocker)
    click.echo(f"{issue_id} now depends on {blocker}")


@dep.command("rm")
@click.argument("issue_id")
@click.argument("blocker")
def dep_rm(issue_id: str, blocker: str) -> None:
    """ISSUE_ID no longer waits for BLOCKER."""
    from hive.api import issues

    project = open_project()
    issue_id, blocker = issues.resolve(project, issue_id), issues.resolve(project, blocker)
    issues.undepend(project, issue_id, blocker)
    click.echo(f"{issue_id} no longer depends on {blocker}")


@click.command()
@click.argument("issue_id")
def cancel(issue_id: str) -> None:
    """Cancel an issue; a running agent on it is stopped by the daemon."""
    from hive.api import moves

    click.echo(f"{moves.cancel(open_project(), issue_id).id}: canceled")


@click.command()
@click.argument("issue_id")
def retry(issue_id: str) -> None:
    """Put an escalated, failed or canceled issue back in the queue with a fresh retry budget."""
    from hive.api import moves

    click.echo(f"{moves.retry(open_project(), issue_id).id}: open")
