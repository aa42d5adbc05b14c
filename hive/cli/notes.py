"""git hive note / notes [--effect | --archived] / notes prune / notes restore"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from hive.cli.listing import open_project, print_json
from hive.cli.output import escaped, table

if TYPE_CHECKING:
    from hive.api import Effect, Group, NoteEffects

CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")   # hive.api.NOTE_CATEGORIES: --help loads nothing
MIN_COUNT = 5   # hive.api.MIN_COUNT, here so that --help loads nothing


@click.command()
@click.argument("text")
@click.option("-c", "--category", type=click.Choice(CATEGORIES), default="context", show_default=True)
@click.option("--issue", "issue_id", default="", help="Attach the note to this issue (default: the project).")
def note(text: str, category: str, issue_id: str) -> None:
    """Add a note that later agents get in their prompts."""
    from hive.api import Hive
    from hive.errors import BadInput

    if not text.strip():
        raise BadInput("the note is empty")
    issue_id = Hive(open_project()).note(text, category, issue_id)
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
    from hive.api import notes as reading

    if ctx.invoked_subcommand:
        return
    project = open_project()
    if effect:
        _show_effect(reading.effects(project), as_json)
        return
    found = reading.listed(project, _resolved(project, issue_id), archived=archived)
    if as_json:
        print_json(found)
        return
    if not found:
        click.echo("no archived notes" if archived else "no notes")
    for n in found:
        where = n["issue"] or "project"
        click.echo(escaped(f"{n['at']}  {n['key']}  [{n['category']}] {where}: {n['content']}"))


def _resolved(project: Any, issue_id: str) -> str:
    """The full id of a given prefix (only when one is given: the listing loads no more)."""
    if not issue_id:
        return ""
    from hive.api import Hive

    return Hive(project).resolve(issue_id)


def _show_effect(found: "NoteEffects", as_json: bool) -> None:
    if as_json:
        print_json({"attempts": found.attempts, "min_count": found.min_count,
                    "categories": {c: e.as_json() for c, e in found.categories.items()},
                    "notes": [{"key": key, **about, **e.as_json()} for key, about, e in found.notes]})
        return
    click.echo(f"{found.attempts} ended attempt(s) on this machine; comparable = same epic and labels; "
               f"under {found.min_count} attempts on a side is weak evidence")
    if not found.attempts:
        return
    headers = ("SEEN", "OK", "TOKENS", "UNSEEN", "OK", "TOKENS", "Δ OK")
    click.echo("\nby category")
    table([[c, *_cells(e)] for c, e in found.categories.items()], ("CATEGORY", *headers))
    click.echo("\nby note")
    table([[key, about["category"], *_cells(e), about["content"]] for key, about, e in found.notes],
          ("KEY", "CATEGORY", *headers, "CONTENT"))


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
    from hive.api import Hive
    from hive.errors import BadInput

    if unused_days is None and not harmful:
        raise BadInput("say what to prune: --unused DAYS and/or --harmful")
    done = Hive(open_project()).prune_notes(unused_days, harmful, min_count, dry_run)
    if as_json:
        print_json({"archived": done.archived, "dry_run": done.dry_run, "notes": done.notes})
        return
    for row in done.notes:
        click.echo(escaped(f"{row['key']}  [{row['category']}] {row['issue'] or 'project'}: {row['why']}: "
                           f"{row['content'][:80]}"))
    click.echo(f"{len(done.notes)} note(s) would be archived" if dry_run else
               f"{done.archived} note(s) archived (git hive notes --archived; git hive notes restore KEY)")


@notes.command("restore")
@click.argument("keys", nargs=-1, required=True)
def restore(keys: tuple[str, ...]) -> None:
    """Bring archived notes back (their KEY from `notes --archived`)."""
    from hive.api import Hive

    moved = Hive(open_project()).restore_notes(keys)
    click.echo(f"{moved} note(s) restored")
