"""git hive plan / plans / approve: the Queen, plans as branches, review as pull requests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import click

from hive.cli.output import ISSUE_HEADERS, escaped, issue_rows, print_json, table
from hive.errors import BadInput, HiveError


def _queen_backend(project, backend: str | None):
    import dataclasses

    from hive.agents.jails import start_problem
    from hive.backends.registry import backend_for_role
    from hive.cli.preflight import require_agent_clis

    config = project.config
    if backend:
        config = dataclasses.replace(config, queen_backend=backend)
    require_agent_clis(config, ("queen",))   # before a plan branch exists that would need removing
    refusal, warning = start_problem(config, ("queen",))
    if refusal:
        raise HiveError(refusal)          # no jail, no real agents
    if warning:
        click.echo(f"git-hive: {warning}", err=True)
    paths = project.paths
    return backend_for_role(config, "queen", str(paths.hive_dir), str(paths.main_worktree))


def _start_daemon(project) -> None:
    from hive.runtime import DaemonLock

    if DaemonLock(project.paths).holder():
        click.echo("the running daemon starts the new issues now")
        return
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--detach"], cwd=project.paths.worktree,
                          capture_output=True, text=True)
    click.echo(proc.stdout.strip() or proc.stderr.strip())


def _show(result, slug: str) -> None:
    from hive.queen import ascii_tree

    table(issue_rows(result.issues), ISSUE_HEADERS)
    click.echo("\n" + escaped(ascii_tree(result.issues)))
    click.echo(f"\nplan branch: hive/plan/{slug}")


@click.command()
@click.argument("spec", required=False)
@click.option("--headless", is_flag=True, help="No prompts: plan, approve (unless --no-approve), print.")
@click.option("-p", "--prompt", "prompt", default=None, help="The spec (same as SPEC).")
@click.option("--no-approve", is_flag=True, help="Leave the plan branch for review (e.g. a pull request).")
@click.option("--run", "start", is_flag=True, help="After approval, start a daemon if none runs.")
@click.option("--backend", type=click.Choice(["claude", "codex", "scripted"]), default=None,
              help="The Queen's backend (config queen_backend / backend).")
@click.option("--json", "as_json", is_flag=True, help="Print the proposed issues as JSON (headless).")
def plan(spec: str | None, headless: bool, prompt: str | None, no_approve: bool, start: bool,
         backend: str | None, as_json: bool) -> None:
    """Have the Queen turn a spec into issues on a plan branch; review; approve."""
    from hive import queen as queen_mod
    from hive.project import Project

    text = prompt or spec
    if not text:
        raise BadInput("give the spec: git hive plan \"...\" (or --headless -p \"...\")")
    project = Project.open()
    project.sync()
    slug = queen_mod.slugify(text)
    log = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    queen = queen_mod.Queen(project, _queen_backend(project, backend), text, slug, log=log)

    async def session() -> None:
        result = await queen.propose()
        try:
            while True:
                if not result.ok and result.session_failed:
                    raise HiveError(f"the Queen's session failed (branch hive/plan/{slug} kept): "
                                    f"{result.session_failed}")
                if not result.ok:
                    raise HiveError(f"the plan is not valid after {queen_mod.MAX_ROUNDS} rounds "
                                    f"(branch hive/plan/{slug} kept, the Queen's files in "
                                    f"{queen.directory}): {result.errors[0]}")
                if headless:
                    break
                _show(result, slug)
                choice = click.prompt("\n[a]pprove, [f]eedback, [e]dit in $EDITOR, [r]eject",
                                      type=click.Choice(["a", "f", "e", "r"]), default="a")
                if choice == "a":
                    break
                if choice == "r":
                    queen_mod.reject(project, slug)
                    click.echo(f"plan {slug} rejected; its branch is deleted")
                    sys.exit(1)
                if choice == "f":
                    feedback = click.prompt("feedback for the Queen")
                    result = await queen.propose(f"Revise the plan in {queen.directory}: {feedback}")
                else:
                    files = sorted(str(p) for p in (queen.directory / "issues").glob("*.md"))
                    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
                    import shlex

                    subprocess.call([*shlex.split(editor), *files])
                    issues, errors = queen_mod.proposed_issues(project, slug, queen.directory)
                    if errors:
                        click.echo("\n".join(f"problem: {e}" for e in errors), err=True)
                        result = await queen.propose("A person edited the plan and left these problems; fix "
                                                     "them:\n" + "\n".join(errors))
                    else:
                        queen_mod.commit_plan(project, slug, queen.directory, text, issues,
                                              f"plan {slug}: edited by hand")
                        result = queen_mod.PlanResult(True, issues)
        finally:
            await queen.close()
        approved = False
        if headless and no_approve:
            click.echo(f"plan left for review on hive/plan/{slug} "
                       f"(`git push origin hive/plan/{slug}` to open a pull request)", err=as_json)
        else:
            queen_mod.approve(project, slug)
            queen_mod.remove_plan_worktree(project, slug)
            approved = True
            click.echo(f"plan {slug} approved: {len(result.issues)} issue(s) on hive/state", err=as_json)
        if as_json:
            print_json([i.to_json(with_body=True) for i in result.issues])
        elif headless:
            table(issue_rows(result.issues), ISSUE_HEADERS)
        if approved and (start or (not headless and click.confirm("start the agents now?", default=False))):
            _start_daemon(project)

    asyncio.run(session())


@click.command()
@click.option("--json", "as_json", is_flag=True)
def plans(as_json: bool) -> None:
    """Plan branches: name, issues, status."""
    from hive.project import Project
    from hive.queen import list_plans

    project = Project.open()
    found = list_plans(project)
    if as_json:
        print_json([{"name": p.name, "issues": p.issues, "status": p.status, "commit": p.commit} for p in found])
        return
    if not found:
        click.echo("no plans")
        return
    table([[p.name, str(p.issues), p.status] for p in found], ("PLAN", "ISSUES", "STATUS"))


@click.command()
@click.argument("name")
def approve(name: str) -> None:
    """Merge a plan branch into hive/state (works even if hive/state moved meanwhile)."""
    from hive.project import Project
    from hive.queen import approve as approve_plan, remove_plan_worktree

    project = Project.open()
    project.sync()
    name = name.removeprefix("hive/plan/")
    commit, warnings = approve_plan(project, name)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    remove_plan_worktree(project, name)
    click.echo(f"plan {name} approved" + ("" if commit else " (it already was)"))
