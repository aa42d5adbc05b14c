"""git hive review / finalize: the merge step by hand (merge_mode = manual)."""

from __future__ import annotations

import click

from hive.cli.listing import open_project, print_json
from hive.cli.output import table


@click.command()
@click.option("--json", "as_json", is_flag=True)
def review(as_json: bool) -> None:
    """Done issues waiting to be merged, with diff stats and how to inspect each."""
    from dataclasses import asdict

    from hive.api import Hive

    rows = [asdict(review) for review in Hive(open_project()).reviews()]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("nothing to review: no done issues")
        return
    table([[r["id"], str(r["commits"]), f"{r['files']} file{'' if r['files'] == 1 else 's'} +{r['insertions']} -{r['deletions']}",
            r["title"]] for r in rows], ("ID", "COMMITS", "CHANGES", "TITLE"))
    click.echo("")
    for r in rows:
        if r["branch"]:
            click.echo(f"{r['id']}: inspect with `{r['inspect']}`, merge with `{r['merge']}`")
        else:
            click.echo(f"{r['id']}: its branch is gone; `git hive update {r['id']} --status finalized` if merged")


@click.command()
@click.argument("issue_id")
def finalize(issue_id: str) -> None:
    """Merge a done issue's branch into the target (replay, tests, fast-forward) and finalize it."""
    from hive.api import Hive

    done = Hive(open_project()).finalize(issue_id)
    click.echo(f"{done.issue_id}: merged into {done.target} ({done.commit[:10]}) and finalized")
