"""Issue commands: create, list, show, log, edit, update, dep, cancel, retry."""

from __future__ import annotations

import os
import subprocess

import click

from hive.cli.params import Whole

from hive.cli import listing
from hive.cli.listing import open_project, print_json
from hive.cli.output import ISSUE_HEADERS, escaped, issue_rows, one_line, show_issue, table
from hive.errors import BadInput, HiveError
from hive.project import Project
from hive.state import issue_file, layout

STATUS = click.Choice(issue_file.STATUSES)
TYPE = click.Choice(issue_file.TYPES)
PRIORITY = Whole(min(issue_file.PRIORITIES), max(issue_file.PRIORITIES))


def checked_title(title: str) -> str:
    """A title as given on the command line, refused (exit 2) if empty or not one line."""
    if not title.strip():
        raise BadInput("the title is empty")
    if "\n" in title.strip() or "\r" in title.strip():
        raise BadInput("the title must be one line (put the details in the description: -d TEXT)")
    return title


def checked_touches(given: tuple[str, ...]) -> list[str]:
    """`--touches` as given (an empty one clears the list), refused (exit 2) if a glob is invalid."""
    from hive.state import globs

    touches = [glob for glob in given if glob]
    problem = globs.problems(touches)
    if problem:
        raise BadInput(f"--touches: {problem}")
    return touches


def description_text(description: str) -> str:
    """`-d -` reads the description from standard input."""
    if description != "-":
        return description
    import sys

    return sys.stdin.read()


def resolve(project: Project, given: str) -> str:
    from hive.issues import resolve_id

    return resolve_id(project, given)


@click.command()
@click.argument("title")
@click.option("-d", "--description", default="", help="The description (Markdown); - reads it from stdin.")
@click.option("-p", "--priority", type=PRIORITY, default=issue_file.DEFAULT_PRIORITY, show_default=True,
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
    from hive import issues

    title, description = checked_title(title), description_text(description)
    project = open_project()
    blockers = [resolve(project, d) for d in depends_on]
    parent_id = resolve(project, parent) if parent else ""
    issue = issues.create(project, title, description=description, priority=priority, type=kind,
                          parent=parent_id, depends_on=blockers, labels=labels, touches=checked_touches(touches))
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
    project = open_project()
    parent_id = resolve(project, parent) if parent else None
    if as_json and not ready:
        listing.list_json(project, statuses, parent_id)
        return
    if ready:
        found = [i for i in project.index.ready() if not statuses or i.status in statuses]
    else:
        found = project.index.list(statuses or None, parent=parent_id, with_body=False)
    if as_json:
        held = _touch_waits(project, found) if ready else {}
        print_json([{**i.to_json(), **({"waits": held[i.id]} if i.id in held else {})} for i in found])
    elif found:
        listed = {i.id: i.status for i in found}

        def status_of(issue_id: str) -> str | None:
            if issue_id not in listed:
                other = project.index.get(issue_id)
                listed[issue_id] = other.status if other else None
            return listed[issue_id]

        rows = issue_rows(found, status_of)
        if ready:
            held = _touch_waits(project, found)
            for row in rows:
                if row[0] in held:
                    row[-1] = f"waits: {held[row[0]]} · {row[-1]}"   # the reason first: a long title is cut
        table(rows, ISSUE_HEADERS)
    else:
        click.echo("no issues" + (" ready" if ready else ""))


def _touch_waits(project: Project, ready: list[issue_file.Issue]) -> dict[str, str]:
    """Why each ready issue that waits for files another's work changes does so."""
    from hive import touches   # pygit2 (what busy work changed): only for --ready

    return {issue_id: str(wait) for issue_id, wait in touches.waits(project, ready).items()}


@click.command()
@click.argument("issue_id")
@click.option("--prompt", "with_prompt", is_flag=True,
              help="The prompt and notes a worker would get for a first attempt, with their token counts.")
@click.option("--json", "as_json", is_flag=True)
def show(issue_id: str, with_prompt: bool, as_json: bool) -> None:
    """Show one issue, with its description."""
    project = open_project()
    issue = project.index.get(resolve(project, issue_id))
    assert issue is not None
    if with_prompt:
        show_prompt(project, issue, as_json)
        return
    if as_json:
        data = issue.to_json(with_body=True)
        data["path"] = project.index.path_of(issue.id)
        data["dependents"] = project.index.dependents_of(issue.id)
        needs = attention(project, issue)
        if needs is not None:
            data["attention"] = needs
        waits = merge_waits(project, issue)
        if waits:
            data["merge_waits"] = waits
        print_json(data)
        return
    show_issue(issue)
    waits = merge_waits(project, issue)
    if waits:
        click.echo(f"\nmerge waits: {one_line(waits)}")
    dependents = project.index.dependents_of(issue.id)
    if dependents:
        click.echo(f"\nblocks: {', '.join(sorted(dependents))}")
    for line in recovery_steps(project, issue):
        click.echo(line)


def show_prompt(project: Project, issue: issue_file.Issue, as_json: bool) -> None:
    """`show --prompt`: what `hive.agents.briefing` gives a worker, sizes estimated (bytes / 3.5)."""
    from hive.agents.briefing import brief

    budget = project.config.notes_prompt_tokens
    briefing = brief(project, issue, budget)
    chosen = briefing.selection.chosen
    notes = [{"key": c.note["key"], "reason": c.reason, "tokens": c.tokens, "category": c.note["category"],
              "issue": c.note["issue"], "content": c.note["content"]} for c in chosen]
    if as_json:
        print_json({"id": issue.id, "prompt": briefing.prompt, "prompt_tokens": briefing.prompt_tokens,
                    "system_tokens": briefing.system_tokens, "context_tokens": briefing.context_tokens,
                    "notes_budget": budget, "notes_tokens": briefing.selection.tokens,
                    "notes_candidates": briefing.selection.candidates, "notes_left_out": briefing.selection.left_out,
                    "notes": notes})
        return
    click.echo(f"prompt of a first attempt at {issue.id}: ~{briefing.prompt_tokens:,} tokens "
               f"(+ ~{briefing.system_tokens:,} of hive's standing instructions); estimated as UTF-8 bytes / 3.5")
    click.echo(f"context.md: ~{briefing.context_tokens:,} tokens")
    click.echo(f"notes: {len(chosen)} of {briefing.selection.candidates} live, ~{briefing.selection.tokens:,} tokens "
               f"of notes_prompt_tokens {budget:,}; {briefing.selection.left_out} left out")
    if notes:
        table([[n["key"], n["reason"], str(n["tokens"]), n["category"], n["issue"] or "project", n["content"]]
               for n in notes], ("KEY", "WHY", "TOKENS", "CATEGORY", "OF", "CONTENT"))
    click.echo("\n--- the prompt ---")
    click.echo(escaped(briefing.prompt), nl=False)


def merge_waits(project: Project, issue: issue_file.Issue) -> str:
    """Why this machine's merge of a done issue waits (for a person, often: say how), or ''."""
    if issue.status != "done" or not project.paths.runtime_db.exists():
        return ""
    from hive.runtime import Runtime

    runtime = Runtime(project.paths)
    try:
        entry = runtime.merge_queue.get(issue.id)
    finally:
        runtime.close()
    return entry.detail if entry is not None and entry.state == "waiting" else ""


def attention(project: Project, issue: issue_file.Issue) -> dict | None:
    """Why an escalated or failed issue needs a person, the kept worktree, the commands that go
    on from here (README: "When hive asks for you"); None for other statuses."""
    if issue.status not in ("escalated", "failed"):
        return None
    from hive.state import history
    from hive.workspace import worktrees

    event = history.last_event(project.paths, issue.id, issue.status)
    worktree = worktrees.worktree_path(project.paths, issue.id)
    kept = worktree.exists()
    return {"reason": (event.trailers.get("Hive-Reason", "") if event else "") or "(no reason recorded)",
            "worktree": str(worktree) if kept else None,
            "branch": worktrees.branch_name(issue.id) if kept else None,
            "next": ([f"git hive update {issue.id} --status done"] if kept else [])
            + [f"git hive retry {issue.id}", f"git hive cancel {issue.id}", f"git hive logs {issue.id}"]}


def recovery_steps(project: Project, issue: issue_file.Issue) -> list[str]:
    """`attention` as lines for a person."""
    found = attention(project, issue)
    if found is None:
        return []
    steps = [f"\n{issue.status}: hive needs you. Why: {one_line(found['reason'])}",
             f"What its agents did: `git hive logs {issue.id}`. To recover:"]
    if found["worktree"]:
        steps.append(f"  - fix it yourself: the work is in {found['worktree']} (on a detached HEAD: its HEAD is"
                     f" what lands); commit there, then `git hive update {issue.id} --status done`: `git hive run`"
                     f" merges it (with merge_mode manual: `git hive finalize {issue.id}`)")
    more = "or " if found["worktree"] else ""
    steps += [f"  - {more}give it back to the agents with a fresh budget: `git hive retry {issue.id}`",
              f"  - or drop it: `git hive cancel {issue.id}`"]
    return steps


@click.command()
@click.argument("issue_id")
@click.option("--json", "as_json", is_flag=True)
def log(issue_id: str, as_json: bool) -> None:
    """The history of one issue: every commit of hive/state that touched it."""
    from hive.state import history

    project = open_project()
    issue_id = resolve(project, issue_id)
    entries = list(history.events(project.paths, issue_id))
    kept = kept_attempts(project, issue_id)
    if as_json:
        print_json([e.to_json() for e in entries] + kept)
        return
    for e in entries:
        who = e.agent or e.author
        reason = e.trailers.get("Hive-Reason", "")
        click.echo(f"{e.at}  {e.commit[:10]}  {e.event:<12} {who:<16} {e.summary}"
                   + (f"\n{'':>36}reason: {reason}" if reason else ""))
    for k in kept:
        click.echo(one_line(f"{k['at']}  {k['commit'][:10]}  {'kept':<12} {k['author']:<16} {k['summary']}"))


def kept_attempts(project: Project, issue_id: str) -> list[dict[str, object]]:
    """The issue's kept attempts (refs/hive/attempts/<id>/<n>) shaped as `log --json` entries,
    event "kept": the head commit, when it was made and by whom, the ref in the summary."""
    from datetime import datetime, timezone

    from hive.workspace import attempts

    found = attempts.kept(project.paths.common_dir, issue_id)
    if not found:
        return []
    from hive.workspace import worktrees   # pygit2: only when there is a kept commit to read

    repo = worktrees.open_repo(project.paths)
    rows = []
    for attempt in found:
        try:
            commit = repo[attempt.commit]
            subject, author = commit.message.split("\n", 1)[0], commit.author.name
        except (KeyError, ValueError):
            subject, author = "(the commit is missing)", ""
        at = datetime.fromtimestamp(attempts.committed_at(repo, attempt.commit), timezone.utc)
        rows.append({"commit": attempt.commit, "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "author": author,
                     "event": "kept", "agent": "", "summary": f"{attempt.ref}: {subject}",
                     "trailers": {"Hive-Ref": attempt.ref}})
    return rows


@click.command()
@click.argument("issue_id")
def edit(issue_id: str) -> None:
    """Open the issue's file in $EDITOR; on save it is validated and committed.

    An invalid file is left exactly as you wrote it in .hive/ (nothing is lost) and the command
    exits 2 naming the file and line; run `git hive edit` again to fix it. A finished issue's
    file (the archive, not checked out in .hive/) is checked out first, and stays.
    """
    project = open_project()
    issue_id = resolve(project, issue_id)
    if not project.checkout.exists:
        raise HiveError("the .hive/ checkout is missing: run `git hive doctor --fix`")
    relative = project.index.path_of(issue_id)
    if layout.is_archived(relative):
        path = project.checkout.check_out(relative)
    else:
        path = project.paths.state_checkout / relative
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    while True:
        try:
            code = subprocess.call([*_split(editor), str(path)])
        except OSError as exc:
            raise HiveError(f"cannot start the editor {editor!r} (from $VISUAL/$EDITOR): "
                            f"{exc.strerror or exc}; {path} is left as it is") from None
        if code != 0:
            raise HiveError(f"{editor} exited with an error; {path} is left as it is")
        problems = project.absorb(only=[relative]).problems
        mine = [p for p in problems if (p.where or "").startswith(f".hive/{relative}")]
        if not mine:
            project.checkout.refresh()
            click.echo(f"saved {issue_id}")
            return
        click.echo(f"git hive: {mine[0]}", err=True)
        if not (os.isatty(0) and click.confirm("edit again?", default=True)):
            raise BadInput(str(mine[0]).split(": ", 1)[-1], mine[0].where)


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
    from hive import lifecycle

    project = open_project()
    issue_id = resolve(project, issue_id)
    current = project.index.get(issue_id)
    assert current is not None
    changes: dict[str, object] = {}
    if title is not None:
        checked_title(title)
    if description is not None:
        description = description_text(description)
    for key, value in (("status", status), ("priority", priority), ("title", title), ("type", kind),
                       ("assignee", assignee)):
        if value is not None:
            changes[key] = value
    if parent is not None:
        changes["parent"] = resolve(project, parent) if parent else ""
    if touches:
        changes["touches"] = checked_touches(touches)
    if add_labels or remove_labels:
        changes["labels"] = [l for l in dict.fromkeys([*current.labels, *add_labels]) if l not in remove_labels]
    if not changes and description is None:
        raise BadInput("nothing to change: give at least one option (see --help)")

    def on_tip(tip_issue: issue_file.Issue) -> dict[str, object]:
        # labels from the issue as it is on the tip, so a label added meanwhile is kept
        if "labels" not in changes:
            return changes
        labels = [l for l in dict.fromkeys([*tip_issue.labels, *add_labels]) if l not in remove_labels]
        return {**changes, "labels": labels}

    event, summary = lifecycle.edit_record(issue_id, changes)
    updated = lifecycle.edit(project, issue_id, on_tip, force=force, event=event, body=description,
                             summary=summary)
    if status == "done":   # a person's hand-off on this machine: its merge pipeline may take it
        from hive.runtime import Runtime

        runtime = Runtime(project.paths)
        try:
            runtime.record_handoff(issue_id)
        finally:
            runtime.close()
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
    from hive import issues

    project = open_project()
    issue_id, blocker = resolve(project, issue_id), resolve(project, blocker)
    issues.add_dependency(project, issue_id, blocker)
    click.echo(f"{issue_id} now depends on {blocker}")


@dep.command("rm")
@click.argument("issue_id")
@click.argument("blocker")
def dep_rm(issue_id: str, blocker: str) -> None:
    """ISSUE_ID no longer waits for BLOCKER."""
    from hive import issues

    project = open_project()
    issue_id, blocker = resolve(project, issue_id), resolve(project, blocker)
    issues.remove_dependency(project, issue_id, blocker)
    click.echo(f"{issue_id} no longer depends on {blocker}")


@click.command()
@click.argument("issue_id")
def cancel(issue_id: str) -> None:
    """Cancel an issue; a running agent on it is stopped by the daemon."""
    from hive import lifecycle

    project = open_project()
    issue_id = resolve(project, issue_id)
    lifecycle.cancel(project, issue_id)
    click.echo(f"{issue_id}: canceled")


@click.command()
@click.argument("issue_id")
def retry(issue_id: str) -> None:
    """Put an escalated, failed or canceled issue back in the queue with a fresh retry budget."""
    from hive import lifecycle
    from hive.runtime import Runtime

    project = open_project()
    issue_id = resolve(project, issue_id)
    runtime = Runtime(project.paths)
    try:
        lifecycle.retry(project, runtime, issue_id)
    finally:
        runtime.close()
    click.echo(f"{issue_id}: open")
