"""git hive note / notes [--effect | --archived] / notes prune / notes restore"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from hive.cli.issues import resolve
from hive.cli.listing import open_project, print_json
from hive.cli.output import escaped, table

if TYPE_CHECKING:
    from hive.agents.note_effect import Effect, Group
    from hive.project import Project
    from hive.runtime.attempt_log import Attempt

CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")
LISTED = ("category", "content", "issue", "agent", "at", "attempt", "tokens", "key")
MIN_COUNT = 5   # hive.agents.note_effect.MIN_COUNT, here so that --help loads nothing


@click.command()
@click.argument("text")
@click.option("-c", "--category", type=click.Choice(CATEGORIES), default="context", show_default=True)
@click.option("--issue", "issue_id", default="", help="Attach the note to this issue (default: the project).")
def note(text: str, category: str, issue_id: str) -> None:
    """Add a note that later agents get in their prompts."""
    from hive import issues

    if not text.strip():
        from hive.errors import BadInput

        raise BadInput("the note is empty")
    project = open_project()
    issue_id = resolve(project, issue_id) if issue_id else ""
    line = issues.note_line(text, category, issue=issue_id)
    issues.add_notes(project, [line], file_id=issue_id or issues.PROJECT_NOTES)
    click.echo(f"noted ({category}) for {issue_id or 'the project'}")


@click.group(invoke_without_command=True)
@click.option("--issue", "issue_id", default="", help="Only notes of this issue.")
@click.option("--archived", is_flag=True, help="The archived notes (pruned; `notes restore KEY` brings one back).")
@click.option("--effect", is_flag=True,
              help="Outcomes of attempts that received each note (and category) against comparable ones that did not.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def notes(ctx: click.Context, issue_id: str, archived: bool, effect: bool, as_json: bool) -> None:
    """List notes, oldest first; `notes prune`, `notes restore`."""
    if ctx.invoked_subcommand:
        return
    project = open_project()
    if effect:
        _show_effect(project, as_json)
        return
    found = project.index.notes(issue=resolve(project, issue_id) if issue_id else None, archived=archived)
    if as_json:
        print_json([{k: n[k] for k in LISTED} for n in found])
        return
    if not found:
        click.echo("no archived notes" if archived else "no notes")
    for n in found:
        where = n["issue"] or "project"
        click.echo(escaped(f"{n['at']}  {n['key']}  [{n['category']}] {where}: {n['content']}"))


def _attempts(project: "Project") -> tuple[list["Attempt"], dict[str, float]]:
    """This machine's ended attempts and when each note was last received (none: no runtime.db)."""
    if not (project.paths.hive_dir / "runtime.db").exists():
        return [], {}
    from hive.runtime import Runtime

    runtime = Runtime(project.paths)
    try:
        return runtime.attempt_log.ended(), runtime.attempt_log.last_seen()
    finally:
        runtime.close()


def _show_effect(project: "Project", as_json: bool) -> None:
    from hive.agents import note_effect

    attempts, _ = _attempts(project)
    categories, per_note = note_effect.by_category(attempts), note_effect.by_note(attempts)
    known = {n["key"]: n for n in [*project.index.notes(archived=True), *project.index.notes()]}
    if as_json:
        print_json({"attempts": len(attempts), "min_count": note_effect.MIN_COUNT,
                    "categories": {c: e.as_json() for c, e in categories.items()},
                    "notes": [{"key": key, **_about(known.get(key)), **e.as_json()} for key, e in per_note.items()]})
        return
    click.echo(f"{len(attempts)} ended attempt(s) on this machine; comparable = same epic and labels; "
               f"under {note_effect.MIN_COUNT} attempts on a side is weak evidence")
    if not attempts:
        return
    headers = ("SEEN", "OK", "TOKENS", "UNSEEN", "OK", "TOKENS", "Δ OK")
    click.echo("\nby category")
    table([[c, *_cells(e)] for c, e in categories.items()], ("CATEGORY", *headers))
    click.echo("\nby note")
    table([[key, _about(known.get(key))["category"], *_cells(e), _about(known.get(key))["content"]]
           for key, e in per_note.items()], ("KEY", "CATEGORY", *headers, "CONTENT"))


def _about(note: dict[str, Any] | None) -> dict[str, Any]:
    if note is None:
        return {"category": "?", "issue": "", "content": "(no longer on hive/state)", "archived": False}
    return {"category": note["category"], "issue": note["issue"], "content": note["content"],
            "archived": bool(note["archived"])}


def _cells(effect: "Effect") -> list[str]:
    def side(group: "Group") -> list[str]:
        ok, tokens = group.ok, group.mean_tokens
        return [str(group.attempts), "-" if ok is None else f"{ok:.0%}", "-" if tokens is None else f"{tokens:,.0f}"]

    delta = effect.delta
    return [*side(effect.seen), *side(effect.unseen), "-" if delta is None else f"{delta * 100:+.0f}"]


@notes.command("prune")
@click.option("--unused", "unused_days", type=click.FloatRange(min=0), default=None, metavar="DAYS",
              help="Archive notes no attempt received in DAYS days (and written before then).")
@click.option("--harmful", is_flag=True, help="Archive notes whose attempts did worse than comparable ones.")
@click.option("--min-count", type=click.IntRange(min=1), default=MIN_COUNT, show_default=True,
              help="Attempts needed on each side before --harmful judges a note.")
@click.option("--dry-run", is_flag=True, help="Say what would be archived; change nothing.")
@click.option("--json", "as_json", is_flag=True)
def prune(unused_days: float | None, harmful: bool, min_count: int, dry_run: bool, as_json: bool) -> None:
    """Archive notes (to notes/archive/ on hive/state: listed by --archived, reversible)."""
    from hive import issues
    from hive.agents import note_effect
    from hive.errors import BadInput

    if unused_days is None and not harmful:
        raise BadInput("say what to prune: --unused DAYS and/or --harmful")
    project = open_project()
    attempts, last_seen = _attempts(project)
    live = {n["key"]: n for n in project.index.notes()}
    why: dict[str, str] = {}
    if unused_days is not None:
        for n in note_effect.unused(live.values(), last_seen, unused_days, time.time()):
            why[n["key"]] = f"unused for {unused_days:g} days"
    if harmful:
        for key in note_effect.harmful(note_effect.by_note(attempts), min_count):
            if key in live:
                why[key] = why.get(key, "") + ("; " if key in why else "") + f"harmful (min count {min_count})"
    moved = 0 if dry_run else sum(
        issues.archive_notes(project, {k: live[k]["issue"] for k in why if why[k] == reason}, reason)
        for reason in sorted(set(why.values())))
    rows = [{"key": k, "why": why[k], **{f: live[k][f] for f in ("category", "issue", "content")}} for k in sorted(why)]
    if as_json:
        print_json({"archived": moved, "dry_run": dry_run, "notes": rows})
        return
    for row in rows:
        click.echo(escaped(f"{row['key']}  [{row['category']}] {row['issue'] or 'project'}: {row['why']}: "
                           f"{row['content'][:80]}"))
    click.echo(f"{len(rows)} note(s) would be archived" if dry_run else
               f"{moved} note(s) archived (git hive notes --archived; git hive notes restore KEY)")


@notes.command("restore")
@click.argument("keys", nargs=-1, required=True)
def restore(keys: tuple[str, ...]) -> None:
    """Bring archived notes back (their KEY from `notes --archived`)."""
    from hive import issues
    from hive.errors import BadInput

    project = open_project()
    archived = {n["key"]: n for n in project.index.notes(archived=True)}
    unknown = [k for k in keys if k not in archived]
    if unknown:
        raise BadInput(f"no archived note {unknown[0]} (see git hive notes --archived)")
    moved = issues.restore_notes(project, {k: archived[k]["issue"] for k in keys})
    click.echo(f"{moved} note(s) restored")
