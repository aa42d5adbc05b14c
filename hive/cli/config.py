"""git hive config get | set | unset | list"""

from __future__ import annotations

import json

import click

from hive.cli.listing import print_json


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

    paths = _paths()
    values = cfg.load(paths).as_dict()
    if key not in values:
        raise BadInput(f"unknown config key {key!r}")
    value = values[key]
    click.echo(_shown(value))
    waiting = cfg.pending(paths) if paths is not None else {}
    if key in waiting:
        click.echo(f"note: {_pending_note(paths, key, waiting[key])}", err=True)


def _shown(value) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _pending_note(paths, key: str, value) -> str:
    """Why the value `.hive.toml` sets for `key` is not the one in effect."""
    from hive import config as cfg

    return f"{cfg.project_path(paths)} sets {key} = {_shown(value)}; {_why_pending(paths, key)}"


def _why_pending(paths, key: str) -> str:
    from hive import config as cfg

    source = cfg.sources(paths)[key]
    if source.startswith("env: "):
        return f"but {source[5:]} overrides it"
    target = cfg.load(paths).target_branch
    return f"it takes effect once committed on {target} (hive reads .hive.toml from the target branch)"


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
    base = key.split(".")[0]
    if not is_global:
        cfg.approve(paths, [base], target)   # a person's own setting
    waiting = cfg.pending(paths) if paths is not None else {}
    if base in waiting:
        click.echo(f"wrote {key} = {value} to {target}, not in effect yet: {_why_pending(paths, base)}")
    elif is_global:
        click.echo(f"{key} = {value} in {target}")
    else:
        click.echo(f"{key} = {value} in {target} (in effect now; commit it to share it)")


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
    if not is_global:
        cfg.approve(paths, [key.split(".")[0]], target)
    click.echo(f"removed {key} from {target}")


@config.command("approve")
def approve() -> None:
    """Approve what .hive.toml sets for the keys that weaken containment or name a command
    (sandbox, backends, *_command, test_command, scripted_script, codex, merge_mode), on this
    machine: until then a changed value is ignored."""
    from hive import config as cfg
    from hive.errors import HiveError

    paths = _paths()
    if paths is None:
        raise HiveError("not in a git repository")
    waiting = cfg.unapproved(paths)
    approved = cfg.approve(paths)
    for key in sorted(waiting):
        click.echo(f"approved {key} = {_shown(approved[key])}" if key in approved else f"approved: no {key}")
    if not waiting:
        click.echo("nothing to approve: every such setting of .hive.toml is approved")


@config.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json: bool) -> None:
    """Every key with its effective value and the layer it comes from."""
    from hive import config as cfg

    paths = _paths()
    values = cfg.load(paths).as_dict()
    origin = cfg.sources(paths)
    waiting = cfg.pending(paths) if paths is not None else {}
    if as_json:
        print_json({k: {"value": v, "source": origin.get(k, "default"),
                        **({"pending": waiting[k]} if k in waiting else {})} for k, v in values.items()})
        return
    width = max(map(len, values))
    for key, value in values.items():
        later = f" (pending in .hive.toml: {_shown(waiting[key])})" if key in waiting else ""
        click.echo(f"{key:<{width}}  {_shown(value):<24}  # {origin.get(key, 'default')}{later}")
    for key, value in waiting.items():
        click.echo(f"note: {_pending_note(paths, key, value)}", err=True)
