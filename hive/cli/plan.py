"""git hive plan / plans / approve: the Queen, plans as branches, review as pull requests.

The conversation itself is `hive.api.plan.PlanSession`; this module asks the person, shows what
the Queen does and says, and renders."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from hive.api.backends import names as backend_names
from hive.cli.listing import print_json
from hive.cli.output import ISSUE_HEADERS, escaped, issue_rows, table
from hive.errors import BadInput, HiveError

if TYPE_CHECKING:
    from hive.api.plan import PlanSession, Proposal


def _start_daemon() -> None:
    from hive.api.run import start_in_background

    started = start_in_background()
    click.echo("the running daemon starts the new issues now" if started.already_running else started.said)


def _show(proposal: Proposal) -> None:
    table(issue_rows(proposal.issues), ISSUE_HEADERS)
    click.echo("\n" + escaped(proposal.tree))
    click.echo(f"\nplan branch: hive/plan/{proposal.slug}")


def _prompt(text: str, **kwargs: Any) -> Any:
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


class _QueenStream:
    """What the Queen says and does, shown while she works (her transcript, followed by
    watchfiles), each line with the time since she started; her tokens and cost at the end."""

    def __init__(self, path: Path) -> None:
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


async def _converse(session: PlanSession, headless: bool, before_show: Callable[[], None]) -> Proposal | None:
    """Propose, then (interactive) show, ask and revise until approved; None when rejected."""
    proposal = await session.propose()
    while not headless:
        before_show()
        _show(proposal)
        choice = _prompt("\n[a]pprove, [f]eedback, [e]dit in $EDITOR, [r]eject",
                         type=click.Choice(["a", "f", "e", "r"]), default="a")
        if choice == "a":
            break
        if choice == "r":
            return None
        if choice == "f":
            proposal = await session.propose(_prompt("feedback for the Queen"))
            continue
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        subprocess.call([*shlex.split(editor), *map(str, session.issue_files())])
        edits = session.take_edits()
        if edits.proposal is not None:
            proposal = edits.proposal
        else:
            click.echo("\n".join(f"problem: {e}" for e in edits.problems), err=True)
            proposal = await session.fix(edits.problems)
    return proposal


@click.command()
@click.argument("spec", required=False)
@click.option("--headless", is_flag=True, help="No prompts: plan, approve (unless --no-approve), print.")
@click.option("-p", "--prompt", "prompt", default=None, help="The spec (same as SPEC).")
@click.option("--no-approve", is_flag=True, help="Leave the plan branch for review (e.g. a pull request).")
@click.option("--run", "start", is_flag=True, help="After approval, start a daemon if none runs.")
@click.option("--backend", type=click.Choice(backend_names()), default=None,
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
    from hive.api.plan import PlanSession

    text = prompt or spec
    if not text:
        raise BadInput("give the spec: git hive plan \"...\" (or --headless -p \"...\")")
    log = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    session = PlanSession.open(text, backend=backend, log=log)
    if session.warning:
        click.echo(f"git hive: {session.warning}", err=True)
    stream = None if headless else _QueenStream(session.transcript)

    async def converse() -> None:
        if stream is not None:
            stream.start()
        try:
            proposal = await _converse(session, headless, stream.so_far if stream is not None else lambda: None)
        except HiveError as exc:
            await session.close(abort=True)
            exc.args = (f"{exc} ({session.settle(keep)})",)
            raise
        except (asyncio.CancelledError, KeyboardInterrupt, click.exceptions.Abort) as exc:   # Ctrl-C
            await session.close(abort=True)
            click.echo(f"git hive: plan interrupted, the Queen stopped; {session.settle(keep)}", err=True)
            if isinstance(exc, click.exceptions.Abort):     # at a prompt: exit 130 like the rest
                raise KeyboardInterrupt from None
            raise
        except BaseException:
            await session.close(abort=True)
            click.echo(f"git hive: plan stopped: {session.settle(keep)}", err=True)
            raise
        await session.close()
        if stream is not None:
            await stream.end()
        if proposal is None:
            session.reject()
            click.echo(f"plan {session.slug} rejected; its branch is deleted")
            sys.exit(1)
        _conclude(session, proposal, headless and no_approve, as_json, headless, start)

    async def watched() -> None:
        try:
            await converse()
        finally:
            if stream is not None:
                stream.stop.set()

    try:
        asyncio.run(watched())
    except KeyboardInterrupt:     # said above; exit as an interrupted command does (no click "Aborted!")
        sys.exit(130)


def _conclude(session: PlanSession, proposal: Proposal, leave: bool, as_json: bool, headless: bool,
              start: bool) -> None:
    """Approve (or leave for review) a valid plan, print it, maybe start the daemon."""
    slug = proposal.slug
    if leave:
        click.echo(f"plan left for review on hive/plan/{slug} "
                   f"(`git push origin hive/plan/{slug}` to open a pull request)", err=as_json)
    else:
        for warning in session.approve().warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(f"plan {slug} approved: {len(proposal.issues)} issue(s) on hive/state", err=as_json)
    if as_json:
        print_json([i.to_json(with_body=True) for i in proposal.issues])
    elif headless:
        table(issue_rows(proposal.issues), ISSUE_HEADERS)
    if not leave and (start or (not headless and _confirm_no("start the agents now?"))):
        _start_daemon()


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def plans(ctx: click.Context, as_json: bool) -> None:
    """Plan branches: name, issues, status (proposed, approved, empty); `rm` and `prune` remove them."""
    if ctx.invoked_subcommand is not None:
        return
    from hive.api.plan import plans as list_plans

    found = list_plans()
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
    from hive.api.plan import remove

    removed = remove(name)
    note = ": its issues never reached hive/state" if removed.status == "proposed" else ""
    click.echo(f"plan {removed.name} removed ({removed.status}){note}")


@plans.command("prune")
def plans_prune() -> None:
    """Remove what plans left behind: approved plans (merged into hive/state: branch and
    worktree), empty plans (no valid plan was ever committed: a failed or interrupted Queen),
    worktree registrations whose folder is gone and plan folders whose branch is gone. Proposed
    plans (valid, not yet approved) are kept: `git hive plans rm NAME` removes one."""
    from hive.api.plan import prune

    removed = prune()
    for line in removed:
        click.echo(line)
    click.echo(f"{len(removed)} removed" if removed else "nothing to prune")


@click.command()
@click.argument("name")
def approve(name: str) -> None:
    """Merge a plan branch into hive/state (works even if hive/state moved meanwhile)."""
    from hive.api.plan import approve as approve_plan

    approved = approve_plan(name)
    for warning in approved.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"plan {approved.name} approved" + ("" if approved.commit else " (it already was)"))
