"""git hive status"""

from __future__ import annotations

import time

import click

from hive.cli.output import print_json
from hive.project import Project
from hive.state.issue_file import STATUSES


def collect(project: Project) -> dict:
    """Everything `status` shows, as data."""
    problems = project.sync(warn=False)
    counts = project.index.counts()
    ready = project.index.ready()
    attention = [{"issue": i.id, "status": i.status, "title": i.title}
                 for i in project.index.list(["escalated", "failed"])]
    return {
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
    for key, title in (("agents", "agents"), ("merge_queue", "merge queue")):
        if key in data:
            click.echo(f"{title}: " + (", ".join(map(str, data[key])) if data[key] else "none"))
    if data["needs_attention"]:
        click.echo("needs attention:")
        for item in data["needs_attention"]:
            click.echo(f"  {item['issue']}  {item['status']:<10} {item['title']}")
    if data["problems"]:
        click.echo("problems:")
        for line in data["problems"]:
            click.echo(f"  {line}")


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
    while True:
        data = collect(project)
        click.clear()
        render(data)
        time.sleep(1)
