"""git hive cost"""

from __future__ import annotations

import click

from hive.api import COST_GROUPS, CostReport, Hive, Usage, describe_usage
from hive.cli.listing import print_json
from hive.cli.output import one_line, table


@click.command(name="cost")
@click.option("--json", "as_json", is_flag=True)
@click.option("--by", "by", type=click.Choice(COST_GROUPS), default="issue", show_default=True,
              help="One row per issue, role, model or day (UTC).")
def cost_command(as_json: bool, by: str) -> None:
    """Tokens and USD spent, from the records on hive/state plus the sessions still running."""
    hive = Hive.open()
    spent = hive.cost(by)
    if spent.skipped:
        click.echo(one_line(f"git hive: warning: {len(spent.skipped)} usage record(s) on hive/state skipped "
                            f"(first: {spent.skipped[0]})"), err=True)
    if as_json:
        print_json(spent.to_json())
        return
    render(hive, spent)


def render(hive: Hive, spent: CostReport) -> None:
    rows = [[row.group + (" *" if row.running else ""), *_cells(row.usage)] for row in spent.rows]
    headers = [spent.by.upper(), "INPUT", "CACHE WRITE", "CACHE READ", "OUTPUT", "USD"]
    if spent.by == "issue":
        titles = {issue.id: issue.title for issue in hive.issues()}
        rows = [[*cells, titles.get(row.group, "")] for cells, row in zip(rows, spent.rows)]
        headers.append("TITLE")
    if rows:
        table(rows, headers)
    else:
        click.echo("no usage recorded yet")
        return
    click.echo(one_line(f"total: {describe_usage(spent.total)}"))
    if any(row.running for row in spent.rows):
        click.echo("* includes sessions still running")


def _cells(usage: Usage) -> list[str]:
    return [f"{usage.input_tokens:,}", f"{usage.cache_write_tokens:,}", f"{usage.cache_read_tokens:,}",
            f"{usage.output_tokens:,}", f"${usage.cost_usd:.4f}"]

