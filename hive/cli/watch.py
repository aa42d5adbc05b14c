"""git hive watch"""

from __future__ import annotations

import asyncio

import click

from hive.project import Project

SAFETY_TICK_MS = 1000


@click.command()
def watch() -> None:
    """Commit valid edits saved in .hive/ as they happen; report invalid ones. Ctrl-C stops."""
    from hive.state.watch import wakeups

    project = Project.open()
    project.sync()
    click.echo(f"watching {project.paths.state_checkout} (Ctrl-C to stop)")

    async def loop() -> None:
        first = True
        # The slow tick is a safety net, not the hot path: the first wakeup (a tick or an event)
        # comes once the watcher is live, and then sweeps up what was saved while it started.
        async for wake in wakeups(project, timeout_ms=SAFETY_TICK_MS):
            if wake.checkout_paths or first:
                result = project.absorb(full=first, only=None if first else wake.checkout_paths)
                first = False
                for path in result.committed:
                    click.echo(f"committed .hive/{path}")
                for problem in result.problems:
                    click.echo(f"not committed: {problem}", err=True)
            project.checkout.refresh()
            project.update_index()

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        click.echo("stopped")
