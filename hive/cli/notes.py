"""git hive note / notes"""

from __future__ import annotations

import click

from hive.cli.issues import resolve
from hive.cli.listing import open_project, print_json
from hive.cli.output import escaped

CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")


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


@click.command()
@click.option("--issue", "issue_id", default="", help="Only notes of this issue.")
@click.option("--json", "as_json", is_flag=True)
def notes(issue_id: str, as_json: bool) -> None:
    """List notes, oldest first."""
    project = open_project()
    found = project.index.notes(issue=resolve(project, issue_id) if issue_id else None)
    if as_json:
        print_json([{k: n[k] for k in ("category", "content", "issue", "agent", "at")} for n in found])
        return
    if not found:
        click.echo("no notes")
    for n in found:
        where = n["issue"] or "project"
        click.echo(escaped(f"{n['at']}  [{n['category']}] {where}: {n['content']}"))
