"""git hive status"""

from __future__ import annotations

import time

import click

from hive.cli.output import one_line, print_json
from hive.project import Project
from hive.state.issue_file import STATUSES


def collect(project: Project) -> dict:
    """Everything `status` shows, as data."""
    problems = project.sync(warn=False)
    counts = project.index.counts()
    ready = project.index.ready()
    attention = [{"issue": i.id, "status": i.status, "title": i.title}
                 for i in project.index.list(["escalated", "failed"])]
    from hive.runtime import DaemonLock, Runtime

    runtime = Runtime(project.paths)
    now = time.time()
    daemon_pid = DaemonLock(project.paths).holder()
    agents = [{"issue": a["issue_id"], "agent": a["id"], "role": a["role"], "state": a["state"],
               "age_seconds": round(now - (a["started_at"] or now)), "tokens": a["tokens"] or 0}
              for a in runtime.agents()] if daemon_pid else []
    queue = [{"issue": entry.issue_id, "state": entry.state, "detail": entry.detail}
             for entry in runtime.merge_queue.entries()]
    for entry in queue:
        if entry["state"] == "waiting":
            attention.append({"issue": entry["issue"], "status": "merge waiting", "title": entry["detail"]})
    # who holds what: in shared mode a claim names its machine and its lease (any machine's)
    claims = [{"issue": i.id, "agent": i.assignee, "machine": str(i.extra.get("machine", ""))[:80],
               "lease_expires": str(i.extra.get("lease_expires", ""))[:40]}
              for i in project.index.list(["in_progress"])]
    degraded = runtime.get("degraded")
    remote_state = runtime.get("remote_state") if daemon_pid else ""
    runtime.close()
    return {
        "daemon": {"running": bool(daemon_pid), "pid": daemon_pid or None,
                   "degraded": degraded or None, "remote": remote_state or None},
        "agents": agents,
        "claims": claims,
        "merge_queue": queue,
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "total": sum(counts.values()),
        "ready": [i.id for i in ready],
        "needs_attention": attention,
        "problems": [str(p) for p in problems] + [str(p) for p in project.index.problems()
                                                   if str(p) not in {str(q) for q in problems}],
        "state_commit": project.index.indexed_commit,
    }


def render(data: dict) -> None:
    counts = data["counts"]
    click.echo("issues: " + " · ".join(f"{s} {n}" for s, n in counts.items() if n) if data["total"] else "issues: none")
    click.echo(f"ready: {len(data['ready'])}" + (f" (next: {', '.join(data['ready'][:5])})" if data["ready"] else ""))
    daemon = data["daemon"]
    click.echo("daemon: " + (f"running (pid {daemon['pid']})" if daemon["running"] else "not running"))
    if daemon.get("remote"):
        click.echo(f"shared queue: remote {daemon['remote']}")
    if daemon["degraded"]:
        click.echo(click.style(f"degraded: {daemon['degraded']} — new agents paused", fg="yellow"))
    if data["agents"]:
        click.echo("agents:")
        for agent in data["agents"]:
            click.echo(f"  {agent['issue']}  {agent['agent']:<10} {agent['role']:<8} "
                       f"{_age(agent['age_seconds']):>6}  {agent['tokens']:>8} tokens")
    else:
        click.echo("agents: none")
    if any(claim["machine"] or claim["lease_expires"] for claim in data["claims"]):
        click.echo("claims:")
        for claim in data["claims"]:
            click.echo(one_line(f"  {claim['issue']}  {claim['agent']:<10} on {claim['machine'] or '?'}"
                                f"  lease until {claim['lease_expires'] or '?'}"))
    if data["merge_queue"]:
        click.echo("merge queue:")
        for entry in data["merge_queue"]:
            click.echo(one_line(f"  {entry['issue']}  {entry['state']:<8} {entry['detail']}"))
    if data["needs_attention"]:
        click.echo("needs attention:")
        for item in data["needs_attention"]:
            click.echo(one_line(f"  {item['issue']}  {item['status']:<10} {item['title']}"))
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
    project = Project.open()
    if not watch:
        data = collect(project)
        print_json(data) if as_json else render(data)
        return
    from watchfiles import watch as watch_files

    from hive.state.watch import watched_paths

    def show() -> None:
        data = collect(project)
        click.clear()
        render(data)

    show()
    try:
        # woken by any state change, and by the runtime database (agents, tokens; its WAL while a
        # daemon runs); the timeout keeps agent ages fresh and catches a daemon started later
        runtime = [project.paths.hive_dir / name for name in ("runtime.db", "runtime.db-wal")]
        for _ in watch_files(*watched_paths(project, runtime), watch_filter=None, debounce=100, step=20,
                             rust_timeout=5000, yield_on_timeout=True):
            show()
    except KeyboardInterrupt:
        pass
