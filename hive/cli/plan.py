"""git hive plan / plans / approve: the Queen, plans as branches, review as pull requests."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time

import click

from hive.backends import registry

from hive.cli.listing import print_json
from hive.cli.output import ISSUE_HEADERS, escaped, issue_rows, table
from hive.errors import BadInput, HiveError


def _queen_backend(project, backend: str | None):
    import dataclasses

    from hive.api.preflight import require_agents
    from hive.backends.registry import backend_for_role

    config = project.config
    if backend:
        config = dataclasses.replace(config, queen_backend=backend)
    warning = require_agents(config, ("queen",))   # before a plan branch exists that would need removing
    if warning:
        click.echo(f"git hive: {warning}", err=True)
    paths = project.paths
    return backend_for_role(config, "queen", str(paths.hive_dir), str(paths.main_worktree))


def _start_daemon(project) -> None:
    from hive.api.run import start_in_background

    started = start_in_background(project.paths.worktree)
    click.echo("the running daemon starts the new issues now" if started.already_running else started.said)


def _show(result, slug: str) -> None:
    from hive.queen import ascii_tree

    table(issue_rows(result.issues), ISSUE_HEADERS)
    click.echo("\n" + escaped(ascii_tree(result.issues)))
    click.echo(f"\nplan branch: hive/plan/{slug}")


def _prompt(text: str, **kwargs):
    """click.prompt where Ctrl-C interrupts at once (asyncio's own SIGINT handler only cancels
    the task, which a blocking read does not notice until Enter)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return click.prompt(text, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def _confirm_no(text: str) -> bool:
    """click.confirm with No as the default, where the end of a piped stdin answers No (click's
    own aborts: `echo a | git hive plan ...` would end in "aborted", exit 1, after approving)."""
    if sys.stdin.isatty():
        return click.confirm(text, default=False)
    click.echo(f"{text} [y/N]: ", nl=False)
    answer = sys.stdin.readline()
    click.echo("" if answer.endswith("\n") else "\n", nl=False)
    return answer.strip().lower() in ("y", "yes")


def _unfinished(project, slug: str, keep: bool, directory) -> str:
    """Settle the branch of a plan that was not approved; say what was left behind."""
    from hive import queen as queen_mod

    if queen_mod.has_valid_plan(project, slug):
        return (f"the valid plan is kept on hive/plan/{slug}: `git hive approve {slug}` or "
                f"`git hive plans rm {slug}`")
    if keep:
        return f"branch hive/plan/{slug} and the Queen's files in {directory} kept (--keep)"
    queen_mod.reject(project, slug)
    return f"nothing kept: hive/plan/{slug} and its worktree removed (--keep keeps them)"


class _QueenStream:
    """What the Queen says and does, shown while she works (her transcript, followed by
    watchfiles), each line with the time since she started; her tokens and cost at the end."""

    def __init__(self, path) -> None:
        from hive.cli.transcripts import Tail

        self.path = path
        self.tail = Tail()
        self.total: dict = {}
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None

    def flush(self) -> None:
        for path, entry in self.tail.new([self.path]):
            if entry.get("type") in ("turn", "end") and isinstance(entry.get("total"), dict):
                self.total = entry["total"]
            click.echo(self.tail.line(path, entry))

    async def _follow(self) -> None:
        from watchfiles import awatch

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush()
        async for _ in awatch(self.path.parent, stop_event=self.stop, debounce=50, step=50,
                              watch_filter=lambda _, changed: changed == str(self.path)):
            self.flush()

    def start(self) -> None:
        self.task = asyncio.create_task(self._follow())

    def summary(self, what: str = "the Queen") -> None:
        from hive.cli.transcripts import elapsed, usage_line

        self.flush()
        started = self.tail.starts.get(self.path)
        took = f" in {elapsed(time.time() - started)}" if started else ""
        click.echo(f"{what}: {usage_line(self.total)}{took}")

    def so_far(self) -> None:
        """Before the plan is shown: what the Queen did until now and what it cost."""
        self.summary("the Queen so far")

    async def end(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
        self.summary()


async def _converse(queen, project, slug: str, text: str, headless: bool, before_show=lambda: None):
    """Propose, then (interactive) show, ask and revise until approved; None when rejected."""
    from hive import queen as queen_mod

    result = await queen.propose()
    while True:
        if not result.ok and result.session_failed:
            raise HiveError(f"the Queen's session failed: {result.session_failed}")
        if not result.ok:
            raise HiveError(f"the plan is not valid after {queen_mod.MAX_ROUNDS} rounds: {result.errors[0]}")
        if headless:
            return result
        before_show()
        _show(result, slug)
        choice = _prompt("\n[a]pprove, [f]eedback, [e]dit in $EDITOR, [r]eject",
                         type=click.Choice(["a", "f", "e", "r"]), default="a")
        if choice == "a":
            return result
        if choice == "r":
            return None
        if choice == "f":
            feedback = _prompt("feedback for the Queen")
            result = await queen.propose(f"Revise the plan in {queen.directory}: {feedback}")
            continue
        files = sorted(str(p) for p in (queen.directory / "issues").glob("*.md"))
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        subprocess.call([*shlex.split(editor), *files])
        issues, errors = queen_mod.proposed_issues(project, slug, queen.directory)
        if errors:
            click.echo("\n".join(f"problem: {e}" for e in errors), err=True)
            result = await queen.propose("A person edited the plan and left these problems; fix "
                                         "them:\n" + "\n".join(errors))
        else:
            queen_mod.commit_plan(project, slug, queen.directory, text, issues, f"plan {slug}: edited by hand")
            result = queen_mod.PlanResult(True, issues)


@click.command()
@click.argument("spec", required=False)
@click.option("--headless", is_flag=True, help="No prompts: plan, approve (unless --no-approve), print.")
@click.option("-p", "--prompt", "prompt", default=None, help="The spec (same as SPEC).")
@click.option("--no-approve", is_flag=True, help="Leave the plan branch for review (e.g. a pull request).")
@click.option("--run", "start", is_flag=True, help="After approval, start a daemon if none runs.")
@click.option("--backend", type=click.Choice(registry.names()), default=None,
              help="The Queen's backend (config queen_backend / backend).")
@click.option("--json", "as_json", is_flag=True, help="Print the proposed issues as JSON (headless).")
@click.option("--keep", is_flag=True,
              help="Keep the plan branch and the Queen's files when the plan fails or is interrupted "
                   "(a valid plan that was not approved is always kept).")
def plan(spec: str | None, headless: bool, prompt: str | None, no_approve: bool, start: bool,
         backend: str | None, as_json: bool, keep: bool) -> None:
    """Have the Queen turn a spec into issues on a plan branch; review; approve.

    A plan that fails or is interrupted (Ctrl-C ends the Queen first) leaves nothing behind
    unless --keep; a valid plan not approved stays on its branch (`git hive plans`)."""
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

    stream = None if headless else _QueenStream(queen.transcript)

    async def session() -> None:
        if stream is not None:
            stream.start()
        try:
            result = await _converse(queen, project, slug, text, headless,
                                     stream.so_far if stream is not None else lambda: None)
        except HiveError as exc:
            await queen.close(abort=True)
            exc.args = (f"{exc} ({_unfinished(project, slug, keep, queen.directory)})",)
            raise
        except (asyncio.CancelledError, KeyboardInterrupt, click.exceptions.Abort) as exc:   # Ctrl-C
            await queen.close(abort=True)
            click.echo(f"git hive: plan interrupted, the Queen stopped; "
                       f"{_unfinished(project, slug, keep, queen.directory)}", err=True)
            if isinstance(exc, click.exceptions.Abort):     # at a prompt: exit 130 like the rest
                raise KeyboardInterrupt from None
            raise
        except BaseException:
            await queen.close(abort=True)
            click.echo(f"git hive: plan stopped: {_unfinished(project, slug, keep, queen.directory)}", err=True)
            raise
        await queen.close()
        if stream is not None:
            await stream.end()
        if result is None:
            queen_mod.reject(project, slug)
            click.echo(f"plan {slug} rejected; its branch is deleted")
            sys.exit(1)
        _conclude(project, queen_mod, result, slug, headless and no_approve, as_json, headless, start)

    async def watched_session() -> None:
        try:
            await session()
        finally:
            if stream is not None:
                stream.stop.set()

    try:
        asyncio.run(watched_session())
    except KeyboardInterrupt:     # said above; exit as an interrupted command does (no click "Aborted!")
        sys.exit(130)


def _conclude(project, queen_mod, result, slug: str, leave: bool, as_json: bool, headless: bool,
              start: bool) -> None:
    """Approve (or leave for review) a valid plan, print it, maybe start the daemon."""
    if leave:
        click.echo(f"plan left for review on hive/plan/{slug} "
                   f"(`git push origin hive/plan/{slug}` to open a pull request)", err=as_json)
    else:
        queen_mod.approve(project, slug)
        queen_mod.remove_plan_worktree(project, slug)
        click.echo(f"plan {slug} approved: {len(result.issues)} issue(s) on hive/state", err=as_json)
    if as_json:
        print_json([i.to_json(with_body=True) for i in result.issues])
    elif headless:
        table(issue_rows(result.issues), ISSUE_HEADERS)
    if not leave and (start or (not headless and _confirm_no("start the agents now?"))):
        _start_daemon(project)


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def plans(ctx: click.Context, as_json: bool) -> None:
    """Plan branches: name, issues, status (proposed, approved, empty); `rm` and `prune` remove them."""
    if ctx.invoked_subcommand is not None:
        return
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


@plans.command("rm")
@click.argument("name")
def plans_rm(name: str) -> None:
    """Remove a plan: its branch hive/plan/NAME and its worktree (a proposed plan's issues never
    reach hive/state; an approved plan's issues stay there)."""
    from hive.project import Project
    from hive.queen import list_plans, plan_ref, reject

    project = Project.open()
    name = name.removeprefix("hive/plan/")
    if project.store.repo.references.get(plan_ref(name)) is None:
        raise BadInput(f"no plan named {name!r} (see `git hive plans`)")
    status = next((p.status for p in list_plans(project) if p.name == name), "")
    reject(project, name)
    note = ": its issues never reached hive/state" if status == "proposed" else ""
    click.echo(f"plan {name} removed ({status}){note}")


@plans.command("prune")
def plans_prune() -> None:
    """Remove what plans left behind: approved plans (merged into hive/state: branch and
    worktree), empty plans (no valid plan was ever committed: a failed or interrupted Queen),
    worktree registrations whose folder is gone and plan folders whose branch is gone. Proposed
    plans (valid, not yet approved) are kept: `git hive plans rm NAME` removes one."""
    from hive.project import Project
    from hive.queen import prune_plans

    removed = prune_plans(Project.open())
    for line in removed:
        click.echo(line)
    click.echo(f"{len(removed)} removed" if removed else "nothing to prune")


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
