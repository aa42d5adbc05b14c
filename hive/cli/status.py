"""git hive status"""

from __future__ import annotations

import time

import click

from hive.api import Hive
from hive.cli.listing import print_json
from hive.cli.output import one_line, unpushed_target

AGE_REFRESH_MS = 1000   # --watch: redraw this often without news, so that ages tick


def render(data: dict) -> None:
    for section in (render_issues, render_target, render_daemon, render_run, render_agents, render_claims, render_merge_queue,
                    render_attention, render_problems):
        section(data)


def render_issues(data: dict) -> None:
    counts = data["counts"]
    click.echo("issues: " + " · ".join(f"{s} {n}" for s, n in counts.items() if n) if data["total"] else "issues: none")
    click.echo(f"ready: {len(data['ready'])}" + (f" (next: {', '.join(data['ready'][:5])})" if data["ready"] else ""))


def render_target(data: dict) -> None:
    unpushed = data.get("target_unpushed")
    if unpushed:
        click.echo("target: " + unpushed_target(unpushed["remote"], unpushed["branch"], unpushed["commits"]))


def render_daemon(data: dict) -> None:
    daemon = data["daemon"]
    click.echo("daemon: " + (f"running (pid {daemon['pid']})" if daemon["running"] else "not running"))
    if daemon.get("remote"):
        click.echo(f"shared queue: remote {daemon['remote']}")
    if daemon["degraded"]:
        click.echo(click.style(f"degraded: {daemon['degraded']} — new agents paused", fg="yellow"))


def render_run(data: dict) -> None:
    run = data.get("run")
    if run:
        click.echo(f"run: {run['finalized']} of {run['total']} finalized · {run['busy']} busy · "
                   f"{run['tokens']:,} tokens · ${run['cost_usd']:.4f} · "
                   f"{_age(round(time.time() - run['started_at']))}")


def render_agents(data: dict) -> None:
    if not data["agents"]:
        click.echo("agents: none")
        return
    click.echo("agents:")
    for agent in data["agents"]:
        click.echo(one_line(agent_line(agent)))


def agent_line(agent: dict) -> str:
    return (f"  {agent['issue'] or '-':<9}  {agent['agent'][:17]:<10} {agent['role']:<8} "
            f"{_age(agent['age_seconds']):>6}  {agent['tokens']:>8} tokens  ${agent['cost_usd']:.4f}  {agent['title']}"
            + (f"  — {one_line(agent['last_message'])[:80]}" if agent.get("last_message") else ""))


def render_claims(data: dict) -> None:
    if any(claim["machine"] or claim["lease_expires"] for claim in data["claims"]):
        click.echo("claims:")
        for claim in data["claims"]:
            click.echo(one_line(f"  {claim['issue']}  {claim['agent']:<10} on {claim['machine'] or '?'}"
                                f"  lease until {claim['lease_expires'] or '?'}"))


def render_merge_queue(data: dict) -> None:
    if data["merge_queue"]:
        click.echo("merge queue:")
        for entry in data["merge_queue"]:
            click.echo(one_line(f"  {entry['issue']}  {entry['state']:<8} {entry['detail']}"))


def render_attention(data: dict) -> None:
    if data["needs_attention"]:
        click.echo("needs attention:")
        for item in data["needs_attention"]:
            why = item["reason"] if item["reason"] and item["reason"] != item["title"] else ""
            click.echo(one_line(f"  {item['issue']}  {item['status']:<10} {item['title']}"
                                + (f" — {why}" if why else "")))


def render_problems(data: dict) -> None:
    if data["problems"]:
        click.echo("problems:")
        for line in data["problems"]:
            click.echo(f"  {one_line(line)}")


def _age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--watch", "watch", is_flag=True, help="Refresh live until Ctrl-C.")
def status(as_json: bool, watch: bool) -> None:
    """Issues by status, ready queue, agents, merge queue, what needs a person."""
    hive = Hive.open(sync=False)       # status catches up itself, and names what it could not read
    if not watch:
        data = hive.status()
        print_json(data) if as_json else render(data)
        return
    with hive.watching() as watcher:   # one runtime handle, held open: see hive/runtime/watch.py
        def show() -> None:
            data = watcher.status()
            click.clear()
            render(data)

        show()
        try:
            # refreshed on each change of the state or of runtime.db; the timeout only renews ages
            for _ in watcher.changes(timeout_ms=AGE_REFRESH_MS):
                show()
        except KeyboardInterrupt:
            pass
