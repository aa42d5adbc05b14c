"""Usage errors and help as a newcomer meets them: one line, pointing at `-h` (git takes
`git hive --help` for its manual page: "No manual entry for git-hive"), exit 2; every command and
subcommand says in one line what it does."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from hive.cli.group import cli

MISUSES = [
    (("create",), "Missing argument 'TITLE'", "git hive create -h"),
    (("nosuch",), "No such command 'nosuch'", "git hive -h"),
    (("ui", "--port", "x"), "'x' is not a valid integer", "git hive ui -h"),
    (("dep", "add", "hv-aaaaaa"), "Missing argument 'BLOCKER'", "git hive dep add -h"),
    (("list", "--nosuch"), "No such option '--nosuch'", "git hive list -h"),
]


@pytest.mark.parametrize("args,said,pointer", MISUSES, ids=[" ".join(m[0]) for m in MISUSES])
def test_a_usage_error_is_one_line_pointing_at_dash_h(hive, tmp_path: Path, args, said, pointer) -> None:
    done = hive(*args, cwd=tmp_path, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("git hive: "), done.stderr
    assert said in done.stderr and f"(see `{pointer}`)" in done.stderr, done.stderr
    assert "--help" not in done.stderr and "Usage:" not in done.stderr


def test_bare_merge_driver_is_a_usage_error(hive, tmp_path: Path) -> None:
    done = hive("merge-driver", cwd=tmp_path, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "usage: git hive merge-driver BASE OURS THEIRS PATH" in done.stderr


def _commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        found.append((f"{path} {name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{path} {name}")
    return found


def test_every_command_and_subcommand_says_what_it_does() -> None:
    commands = _commands(cli, "git hive")
    assert len(commands) > 30
    silent = [path for path, command in commands if not (command.help or command.short_help or "").strip()]
    assert not silent, silent
