"""git hive tell ID TEXT: a message to the agent working an issue.

The message waits in the runtime database (`hive/runtime/tells.py`); a running daemon is woken
(a line in `ref-events`) and passes it to the issue's session at work, queued behind its turn in
progress, or, when no session works the issue now, puts it in the prompt of its next attempt.
"""

from __future__ import annotations

import click


@click.command()
@click.argument("issue_id")
@click.argument("text")
def tell(issue_id: str, text: str) -> None:
    """Send TEXT to the agent working ISSUE_ID (or to its next attempt, if none works it now)."""
    from hive.api import Hive

    with Hive.open() as hive:
        told = hive.tell(issue_id, text)
    if told.now:
        click.echo(f"told {told.issue_id}: its running agent gets the message now")
    else:
        click.echo(f"told {told.issue_id}: no agent works it now; the message goes in its next attempt's prompt")
