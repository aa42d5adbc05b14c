"""git hive review / finalize: the merge step by hand (merge_mode = manual)."""

from __future__ import annotations

import click

from hive.cli.issues import resolve
from hive.cli.listing import open_project, print_json
from hive.cli.output import table
from hive.errors import HiveError


def _diffstat(project, issue_id: str) -> dict:
    import pygit2

    from hive.workspace import worktrees

    repo = worktrees.open_repo(project.paths)
    head = worktrees.head_of(project.paths, issue_id)
    target = repo.references.get(f"refs/heads/{project.config.target_branch}")
    if head is None or target is None:
        return {"branch": None, "commits": 0, "files": 0, "insertions": 0, "deletions": 0}
    base = repo.merge_base(head, target.target)
    walker = repo.walk(head)
    if base:
        walker.hide(base)
    commits = sum(1 for _ in walker)
    stats = repo.diff(repo[base].peel(pygit2.Commit).tree if base else None,
                      repo[head].peel(pygit2.Commit).tree).stats
    return {"branch": worktrees.branch_name(issue_id), "commits": commits, "files": stats.files_changed,
            "insertions": stats.insertions, "deletions": stats.deletions}


@click.command()
@click.option("--json", "as_json", is_flag=True)
def review(as_json: bool) -> None:
    """Done issues waiting to be merged, with diff stats and how to inspect each."""
    project = open_project()
    target = project.config.target_branch
    rows = []
    for issue in project.index.list(["done"]):
        stat = _diffstat(project, issue.id)
        stat.update({"id": issue.id, "title": issue.title,
                     "inspect": f"git diff {target}...{stat['branch']}" if stat["branch"] else "",
                     "merge": f"git hive finalize {issue.id}"})
        rows.append(stat)
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
    from hive import lifecycle
    from hive.agents import jails
    from hive.merge import mechanical
    from hive.merge.pipeline import done_base, test_gate
    from hive.workspace import landings, worktrees
    from hive.runtime import Runtime

    project = open_project()
    issue_id = resolve(project, issue_id)
    issue = project.index.get(issue_id)
    config = project.config
    if issue is None or issue.status != "done":
        raise HiveError(f"{issue_id} is {issue.status if issue else 'unknown'}: only done issues can be finalized")
    head = worktrees.follow_worktree(project.paths, issue_id)   # a person's commit in the worktree lands
    if head is None:
        raise HiveError(f"{issue_id} has no branch {worktrees.branch_name(issue_id)} to merge")
    if not worktrees.worktree_path(project.paths, issue_id).exists():
        worktrees.recreate(project.paths, issue_id)
    runtime = Runtime(project.paths)
    try:
        # replayed from the base the worker started from and gated by its tests, as the pipeline does
        landing = mechanical.land(project.paths, config.target_branch, issue_id, head, done_base(project, issue_id),
                                  test_gate(runtime.handoffs().get(issue_id, ""), config),
                                  config.test_timeout_seconds,
                                  jail=lambda worktree: jails.worktree_jail(config, project.paths, worktree),
                                  recorded=landings.recorded_of(issue),
                                  blockers={b: project.index.get(b) for b in issue.depends_on}, by_person=True)
        if landing.status != "merged":
            raise HiveError(f"{issue_id} not merged ({landing.status}): "
                            f"{landing.detail.splitlines()[0] if landing.detail else ''}")
        lifecycle.finalize(project, runtime, issue_id, landing.commit, config.target_branch)
    finally:
        runtime.close()
    worktrees.retire(project.paths, issue_id, config.target_branch)
    click.echo(f"{issue_id}: merged into {config.target_branch} ({landing.commit[:10]}) and finalized")
