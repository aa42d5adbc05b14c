"""git hive tell ID TEXT: a message to the agent working an issue.

The message waits in the runtime database (`hive/runtime/tells.py`); a running daemon is woken
(a line in `ref-events`) and passes it to the issue's session at work, queued behind its turn in
progress, or, when no session works the issue now, puts it in the prompt of its next attempt.
"""

from __future__ import annotations

import click

from hive.errors import BadInput, HiveError

FINISHED = ("finalized", "canceled")   # no agent will work these again


@click.command()
@click.argument("issue_id")
@click.argument("text")
def tell(issue_id: str, text: str) -> None:
    """Send TEXT to the agent working ISSUE_ID (or to its next attempt, if none works it now)."""
    from hive.issues import resolve_id
    from hive.project import Project
    from hive.runtime import DaemonLock, Runtime
    from hive.state.store import notify

    if not text.strip():
        raise BadInput("the message is empty")
    project = Project.open()
    project.sync(warn=False)
    issue_id = resolve_id(project, issue_id)
    issue = project.index.get(issue_id)
    assert issue is not None
    if issue.status in FINISHED:
        raise HiveError(f"{issue_id} is {issue.status}: no agent will work it again")
    runtime = Runtime(project.paths)
    try:
        runtime.tell(issue_id, text)
        working = DaemonLock(project.paths).holder() and any(
            a["issue_id"] == issue_id and a["session_id"] for a in runtime.agents())
    finally:
        runtime.close()
    notify(project.paths)                 # wakes a running daemon
    if working:
        click.echo(f"told {issue_id}: its running agent gets the message now")
    else:
        click.echo(f"told {issue_id}: no agent works it now; the message goes in its next attempt's prompt")
