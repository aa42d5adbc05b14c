"""How commands print: JSON for scripts, aligned text for people."""

from __future__ import annotations

import re
import shutil
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import click

if TYPE_CHECKING:
    from hive.api import Issue


# C0 controls but newline and tab, DEL, C1 controls: a title or note from hive/state could move the
# cursor, retitle the window or write the clipboard (OSC 52) of whoever lists it
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_UNSAFE_IN_CELL = re.compile(r"[\x00-\x1f\x7f-\x9f]")   # the controls, newline and tab too: `one_line`


def escaped(text: str) -> str:
    """`text` safe for a terminal: each control character written as its escape (`\\x1b`)."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def one_line(text: str) -> str:
    """`escaped`, newlines and tabs included: for one cell or one line of output."""
    return escaped(text).replace("\n", "\\n").replace("\t", " ")


def unpushed_target(remote: str, branch: str, commits: int) -> str:
    """What `status` and `sync` say of landings on the target that `remote` lacks (`commits` > 0)
    or a target that has diverged from it (< 0)."""
    where = f"{remote}/{branch}"
    if commits < 0:
        return f"{branch} and {where} have diverged: merge {where} into {branch}, then `git hive sync --push-target`"
    return f"{branch} has {commits} commit(s) {where} lacks (what hive merged is not pushed): " \
           "`git hive sync --push-target` pushes them"


def table(rows: Iterable[Sequence[str]], headers: Sequence[str]) -> None:
    rows = [[str(cell) for cell in r] for r in rows]
    if _UNSAFE_IN_CELL.search("".join("".join(r) for r in rows)):   # one search for the common case
        rows = [[one_line(cell) for cell in r] for r in rows]
    width = shutil.get_terminal_size((120, 20)).columns
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    fixed = sum(widths[:-1]) + 2 * (len(widths) - 1)
    widths[-1] = max(10, min(widths[-1], width - fixed))
    def line(cells: Sequence[str]) -> str:
        out = []
        for cell, w in zip(cells, widths):
            out.append(cell if len(cell) <= w else cell[: w - 1] + "…")
        return "  ".join(c.ljust(w) for c, w in zip(out[:-1], widths[:-1])) + ("  " if len(out) > 1 else "") + out[-1]
    click.echo(click.style(line(headers), bold=True))
    if rows:   # one write: an echo per line adds up on a queue of thousands
        click.echo("\n".join(line(row) for row in rows))


def issue_rows(issues: Iterable[Issue], blocking: Mapping[str, list[str]] | None = None) -> list[list[str]]:
    """Table rows; BLOCKED BY: an issue's blockers in `blocking` (`hive.api.listing.blockers_left`:
    those not finished), else all of them."""
    def blockers(issue: Issue) -> str:
        return ",".join(issue.depends_on if blocking is None else blocking.get(issue.id, issue.depends_on)) or "-"

    return [[i.id, i.status, f"P{i.priority}", i.type, i.assignee or "-", blockers(i), i.title]
            for i in issues]


ISSUE_HEADERS = ("ID", "STATUS", "PRI", "TYPE", "ASSIGNEE", "BLOCKED BY", "TITLE")


def show_issue(issue: Issue) -> None:
    click.echo(click.style(f"{issue.id}  {one_line(issue.title)}", bold=True))
    click.echo(one_line(f"status {issue.status} · priority {issue.priority} · type {issue.type}"
                        + (f" · assignee {issue.assignee}" if issue.assignee else "")))
    if issue.parent:
        click.echo(f"parent: {one_line(issue.parent)}")
    if issue.depends_on:
        click.echo(one_line(f"depends on: {', '.join(issue.depends_on)}"))
    if issue.labels:
        click.echo(one_line(f"labels: {', '.join(issue.labels)}"))
    if issue.touches:
        click.echo(one_line(f"touches: {', '.join(issue.touches)}"))
    click.echo(one_line(f"created {issue.created} · updated {issue.updated}"))
    if issue.body.strip():
        click.echo("")
        click.echo(escaped(issue.body.rstrip()))
