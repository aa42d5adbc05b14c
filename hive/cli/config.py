"""git hive config get | set | unset | list"""

from __future__ import annotations

import json

import click

from hive.cli.output import print_json


def _paths():
    from hive import git
    from hive.errors import HiveError

    try:
        return git.discover()
    except HiveError:
        return None  # outside a repository only the global layer and env apply


@click.group()
def config() -> None:
    """Read and change configuration: defaults < global < .hive.toml < HIVE_* env."""


@config.command("get")
@click.argument("key")
def get(key: str) -> None:
    """Print the effective value of KEY."""
    from hive import config as cfg
    from hive.errors import BadInput

    values = cfg.load(_paths()).as_dict()
    if key not in values:
        raise BadInput(f"unknown config key {key!r}")
    value = values[key]
    click.echo(json.dumps(value) if isinstance(value, (dict, list)) else value)


@config.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--global", "is_global", is_flag=True, help="Write the global file instead of .hive.toml.")
def set_(key: str, value: str, is_global: bool) -> None:
    """Set KEY in .hive.toml (or the global file), keeping its comments and layout."""
    from hive import config as cfg
    from hive.errors import HiveError

    paths = _paths()
    if not is_global and paths is None:
        raise HiveError("not in a git repository: use --global")
    target = cfg.global_path() if is_global else cfg.project_path(paths)
    cfg.set_value(target, key, value)
    note = "" if is_global else " (commit it on the target branch to share it)"
    click.echo(f"{key} = {value} in {target}{note}")


@config.command("unset")
@click.argument("key")
@click.option("--global", "is_global", is_flag=True)
def unset(key: str, is_global: bool) -> None:
    """Remove KEY from .hive.toml (or the global file)."""
    from hive import config as cfg
    from hive.errors import HiveError

    paths = _paths()
    if not is_global and paths is None:
        raise HiveError("not in a git repository: use --global")
    target = cfg.global_path() if is_global else cfg.project_path(paths)
    if not cfg.unset_value(target, key):
        raise HiveError(f"{key} is not set in {target}")
    click.echo(f"removed {key} from {target}")


@config.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json: bool) -> None:
    """Every key with its effective value and the layer it comes from."""
    from hive import config as cfg

    paths = _paths()
    values = cfg.load(paths).as_dict()
    origin = cfg.sources(paths)
    if as_json:
        print_json({k: {"value": v, "source": origin.get(k, "default")} for k, v in values.items()})
        return
    width = max(map(len, values))
    for key, value in values.items():
        shown = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        click.echo(f"{key:<{width}}  {shown:<24}  # {origin.get(key, 'default')}")
