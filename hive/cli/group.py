"""The click group of `git hive`. Each command lives in its own module, imported only when run.

Start-up matters (every `git hive` command pays it), so `--help` and dispatch need nothing but this
file and click; a command's module, and the heavy libraries it needs, load only when it runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from hive.errors import BadInput as BadUsage

# name -> (module under hive.cli, attribute, one-line help for `git hive --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("init", "init", "Set up this repository: state branch, .hive/ checkout, hooks, merge driver."),
    "create": ("issues", "create", "Create an issue; prints its id."),
    "list": ("issues", "list_issues", "List issues (every status unless filtered)."),
    "show": ("issues", "show", "Show one issue."),
    "log": ("issues", "log", "The history of one issue, from the commits of hive/state."),
    "edit": ("issues", "edit", "Open an issue file in $EDITOR; validate; commit."),
    "update": ("issues", "update", "Change fields of an issue."),
    "dep": ("issues", "dep", "Add or remove a dependency."),
    "cancel": ("issues", "cancel", "Cancel an issue (its agent, if any, is stopped)."),
    "retry": ("issues", "retry", "Put a failed or escalated issue back in the queue."),
    "finalize": ("review", "finalize", "Merge a done issue into the target branch and finalize it."),
    "plan": ("plan", "plan", "Have the Queen turn a spec into issues on a plan branch; approve it."),
    "plans": ("plan", "plans", "Plan branches: name, issues, status; plans rm NAME, plans prune."),
    "approve": ("plan", "approve", "Merge a plan branch into hive/state."),
    "review": ("review", "review", "Done issues waiting for a merge: diff stats, how to inspect."),
    "note": ("notes", "note", "Add a note for the agents (project-wide or for one issue)."),
    "notes": ("notes", "notes", "List notes; --effect, prune and restore judge and archive them."),
    "sync": ("sync", "sync", "Fetch, merge and push hive/state (share the queue through a remote)."),
    "status": ("status", "status", "Issues by status, agents, merge queue, needs-attention."),
    "cost": ("cost", "cost_command", "Tokens and USD spent: by issue, role, model or day."),
    "ui": ("ui", "ui", "Browse the queue, costs and merges in Datasette (optional extra `ui`)."),
    "run": ("run", "run", "Run the agents on the ready queue (foreground; --detach for background)."),
    "stop": ("run", "stop", "Stop the running daemon."),
    "watch": ("watch", "watch", "Commit valid edits saved in .hive/ as they happen."),
    "demo": ("demo", "demo", "A whole run in a temporary repository with scripted agents (no API key)."),
    "doctor": ("doctor", "doctor", "Check (and with --fix, repair) this repository's hive setup."),
    "reindex": ("doctor", "reindex", "Rebuild the SQLite index from hive/state."),
    "config": ("config", "config", "Read and change configuration (get | set | list)."),
    "merge-driver": ("merge_driver", "merge_driver", "The `hive` git merge driver (called by git)."),
    "logs": ("logs", "logs", "Transcripts of the sessions that worked an issue (no ID: the daemon's log)."),
    "tell": ("tell", "tell", "Send a message to the agent working an issue."),
    "prune": ("prune", "prune", "Remove kept attempts and session transcripts past their retention."),
}


ONE_REPOSITORY = ("a git hive process works on one repository; start one per repository "
                  "(`git hive -C A run --detach` and `git hive -C B run --detach`)")


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[name]
        return getattr(importlib.import_module(f"hive.cli.{module}"), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "directories", multiple=True, metavar="DIR",
              help="Run as if started in this directory.")
@click.version_option(package_name="git-hive", prog_name="git hive")
@click.pass_context
def cli(ctx: click.Context, directories: tuple[str, ...]) -> None:
    """git hive: run many LLM coding agents on one codebase, with the queue stored in git."""
    enter_directory(directories)


def enter_directory(directories: tuple[str, ...]) -> None:
    """`-C DIR` (of `git hive` or of `git hive run`): one repository per command."""
    if len(directories) > 1:
        raise BadUsage(f"-C is given more than once: {ONE_REPOSITORY}")
    if directories:
        try:
            os.chdir(directories[0])
        except OSError as exc:
            raise BadUsage(f"-C {directories[0]}: {exc.strerror or exc}") from None


def run(args: list[str]) -> Any:
    """Parse `args` and run the command; click's own errors (a bad option, --help) end here."""
    try:
        return cli.main(args=args, prog_name="git hive", standalone_mode=False)
    except click.exceptions.Abort:
        print("git hive: aborted", file=sys.stderr)
        sys.exit(1)
    except click.UsageError as exc:
        # one line in hive's style; `-h`, since git takes `git hive --help` for its manual page
        command = exc.ctx.command_path if exc.ctx is not None else "git hive"
        print(f"git hive: {exc.format_message().rstrip('.')} (see `{command} -h`)", file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        print(f"git hive: {exc.format_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
