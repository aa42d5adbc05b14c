"""git hive review / finalize: the merge step by hand (merge_mode = manual)."""

from __future__ import annotations

import click

from hive.cli.issues import open_project, resolve
from hive.cli.output import print_json, table
from hive.errors import HiveError


def _diffstat(project, issue_id: str) -> dict:
    import pygit2

    from hive.orchestrator import worktrees

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
    table([[r["id"], str(r["commits"]), f"{r['files']} files +{r['insertions']} -{r['deletions']}",
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
    from hive.merge import mechanical
    from hive.merge.pipeline import finalize_epics
    from hive.orchestrator import worktrees
    from hive import issues
    from hive.state.store import Refused

    project = open_project()
    issue_id = resolve(project, issue_id)
    issue = project.index.get(issue_id)
    config = project.config
    if issue is None or issue.status != "done":
        raise HiveError(f"{issue_id} is {issue.status if issue else 'unknown'}: only done issues can be finalized")
    head = worktrees.head_of(project.paths, issue_id)
    if head is None:
        raise HiveError(f"{issue_id} has no branch {worktrees.branch_name(issue_id)} to merge")
    if not worktrees.worktree_path(project.paths, issue_id).exists():
        from hive.merge.pipeline import _recreate_worktree

        _recreate_worktree(project.paths, issue_id)
    landing = mechanical.land(project.paths, config.target_branch, issue_id, head, "",
                              [c for c in (config.test_command,) if c], config.test_timeout_seconds)
    if landing.status != "merged":
        raise HiveError(f"{issue_id} not merged ({landing.status}): {landing.detail.splitlines()[0] if landing.detail else ''}")

    def still_done(current) -> None:
        if current.status != "done":
            raise Refused(f"{issue_id} is {current.status}")

    issues.update(project, issue_id, {"status": "finalized"}, event="finalized", check=still_done,
                  summary=f"finalize {issue_id}: merged into {config.target_branch} at {landing.commit[:10]}",
                  trailers={"Hive-Merged": landing.commit, "Hive-Target": config.target_branch})
    worktrees.remove(project.paths, issue_id)
    from hive.runtime import Runtime

    runtime = Runtime(project.paths)
    runtime.reset_budget(issue_id)   # kept from `done` until now (rejections count against it)
    runtime.close()
    finalize_epics(project, issue.parent)
    click.echo(f"{issue_id}: merged into {config.target_branch} ({landing.commit[:10]}) and finalized")
