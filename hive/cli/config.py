"""git hive config get | set | unset | approve | list (`hive.api.settings` rendered)"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from hive.cli.listing import print_json

if TYPE_CHECKING:
    from hive.api.settings import Setting


@click.group()
def config() -> None:
    """Read and change configuration: defaults < global < .hive.toml < HIVE_* env."""


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _pending_note(setting: "Setting") -> str:
    """Why the value `.hive.toml` sets for a key is not the one in effect."""
    from hive.api import settings

    return f"{settings.project_file()} sets {setting.key} = {_shown(setting.pending)}; {setting.why_pending}"


@config.command("get")
@click.argument("key")
def get(key: str) -> None:
    """Print the effective value of KEY."""
    from hive.api import settings

    setting = settings.get(key)
    click.echo(_shown(setting.value))
    if setting.why_pending:
        click.echo(f"note: {_pending_note(setting)}", err=True)


@config.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--global", "is_global", is_flag=True, help="Write the global file instead of .hive.toml.")
def set_(key: str, value: str, is_global: bool) -> None:
    """Set KEY in .hive.toml (or the global file), keeping its comments and layout."""
    from hive.api import settings

    written = settings.set_value(key, value, is_global)
    if not written.in_effect:
        click.echo(f"wrote {key} = {value} to {written.file}, not in effect yet: {written.why_pending}")
    elif is_global:
        click.echo(f"{key} = {value} in {written.file}")
    else:
        click.echo(f"{key} = {value} in {written.file} (in effect now; commit it to share it)")


@config.command("unset")
@click.argument("key")
@click.option("--global", "is_global", is_flag=True)
def unset(key: str, is_global: bool) -> None:
    """Remove KEY from .hive.toml (or the global file)."""
    from hive.api import settings

    click.echo(f"removed {key} from {settings.unset_value(key, is_global)}")


@config.command("approve")
def approve() -> None:
    """Approve what .hive.toml sets for the keys that weaken containment or name a command
    (sandbox, backends, *_command, test_command, scripted_script, codex, merge_mode), on this
    machine: until then a changed value is ignored."""
    from hive.api import settings

    approved = settings.approve()
    for key, present, value in approved:
        click.echo(f"approved {key} = {_shown(value)}" if present else f"approved: no {key}")
    if not approved:
        click.echo("nothing to approve: every such setting of .hive.toml is approved")


@config.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json: bool) -> None:
    """Every key with its effective value and the layer it comes from."""
    from hive.api import settings

    found = settings.settings()
    if as_json:
        print_json({s.key: {"value": s.value, "source": s.source,
                            **({"pending": s.pending} if s.why_pending else {})} for s in found})
        return
    width = max(len(s.key) for s in found)
    for s in found:
        later = f" (pending in .hive.toml: {_shown(s.pending)})" if s.why_pending else ""
        click.echo(f"{s.key:<{width}}  {_shown(s.value):<24}  # {s.source}{later}")
    for s in found:
        if s.why_pending:
            click.echo(f"note: {_pending_note(s)}", err=True)
