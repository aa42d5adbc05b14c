"""Configuration through the API (`git hive config get|set|unset|approve|list`): the effective
value of each key and the layer it comes from, writing `.hive.toml` or the global file (tomlkit:
comments kept), and a person's approval of what `.hive.toml` sets for the keys that weaken
containment or name a command. Outside a repository only the global layer and the environment
apply."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hive import config as cfg
from hive import git
from hive.errors import BadInput, HiveError

__all__ = ["Setting", "Written", "approve", "get", "settings", "set_value", "unset_value"]


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any                 # in effect
    source: str                # the layer it comes from ("default", a file, "env: HIVE_…")
    pending: Any = None        # what `.hive.toml` sets instead, not in effect (None: nothing)
    why_pending: str = ""      # why not


@dataclass(frozen=True)
class Written:
    key: str
    value: str
    file: Path
    in_effect: bool            # False: it waits (why_pending says for what)
    why_pending: str = ""


def _paths() -> git.RepoPaths | None:
    try:
        return git.discover()
    except HiveError:
        return None  # outside a repository only the global layer and env apply


def _why_pending(paths: git.RepoPaths, key: str) -> str:
    source = cfg.sources(paths)[key]
    if source.startswith("env: "):
        return f"but {source[5:]} overrides it"
    target = cfg.load(paths).target_branch
    return f"it takes effect once committed on {target} (hive reads .hive.toml from the target branch)"


def settings() -> list[Setting]:
    """Every key: its effective value, the layer it comes from, and what waits in `.hive.toml`."""
    paths = _paths()
    origin = cfg.sources(paths)
    waiting = cfg.pending(paths) if paths is not None else {}
    return [Setting(key, value, origin.get(key, "default"), waiting.get(key),
                    _why_pending(paths, key) if paths is not None and key in waiting else "")
            for key, value in cfg.load(paths).as_dict().items()]


def get(key: str) -> Setting:
    found = {setting.key: setting for setting in settings()}
    if key not in found:
        raise BadInput(f"unknown config key {key!r}")
    return found[key]


def project_file() -> Path:
    """`.hive.toml` of this repository (`HiveError` outside one)."""
    paths = _paths()
    if paths is None:
        raise HiveError("not in a git repository: use --global")
    return cfg.project_path(paths)


def set_value(key: str, value: str, is_global: bool = False) -> Written:
    """KEY = VALUE in `.hive.toml` (approved: a person's own setting) or the global file."""
    target = cfg.global_path() if is_global else project_file()
    cfg.set_value(target, key, value)
    base, paths = key.split(".")[0], _paths()
    if not is_global and paths is not None:
        cfg.approve(paths, [base], target)
    waiting = cfg.pending(paths) if paths is not None else {}
    if paths is not None and base in waiting:
        return Written(key, value, target, False, _why_pending(paths, base))
    return Written(key, value, target, True)


def unset_value(key: str, is_global: bool = False) -> Path:
    """KEY removed from `.hive.toml` (or the global file); the file."""
    target = cfg.global_path() if is_global else project_file()
    if not cfg.unset_value(target, key):
        raise HiveError(f"{key} is not set in {target}")
    paths = _paths()
    if not is_global and paths is not None:
        cfg.approve(paths, [key.split(".")[0]], target)
    return target


def approve() -> list[tuple[str, bool, Any]]:
    """Approve, on this machine, what `.hive.toml` sets for the keys that need a person's word:
    (key, whether the file still sets it, the value approved) of each key that waited."""
    paths = _paths()
    if paths is None:
        raise HiveError("not in a git repository")
    waiting = cfg.unapproved(paths)
    approved = cfg.approve(paths)
    return [(key, key in approved, approved.get(key)) for key in sorted(waiting)]
