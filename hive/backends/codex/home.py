"""hive's private CODEX_HOME: Codex's config.toml (hive's defaults + the user's `[codex]` table)
and the user's login linked in. See the package docstring."""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import tomlkit

log = logging.getLogger(__name__)

HOME_DIR_NAME = "codex-home"

DEFAULT_CONFIG: dict[str, Any] = {
    "check_for_update_on_startup": False,
    "analytics": {"enabled": False},
    "feedback": {"enabled": False},
    "features": {"plugins": False, "remote_plugin": False, "apps": False, "shell_snapshot": False},
}


def codex_home_for(hive_dir: str | None) -> str:
    """`<hive_dir>/codex-home`, or a per-user one when there is no hive directory."""
    if hive_dir:
        return str(Path(hive_dir) / HOME_DIR_NAME)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "git-hive" / HOME_DIR_NAME)


def prepare_home(codex_home: str, user_config: dict[str, Any]) -> Path:
    """Write `<codex-home>/config.toml` (defaults + the user's [codex] table) and link auth."""
    home = Path(codex_home)
    home.mkdir(parents=True, exist_ok=True)
    try:
        os.chmod(home, 0o700)
    except OSError:
        pass
    merged = deep_merge(DEFAULT_CONFIG, user_config)
    text = ("# Written by git-hive at every start: edit the [codex] table of .hive.toml or\n"
            "# ~/.config/hive/config.toml instead (it is merged over hive's defaults).\n"
            + tomlkit.dumps(merged))
    target = home / "config.toml"
    try:
        current = target.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != text:
        tmp = home / f".config.toml.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    link_auth(home)
    return home


def link_auth(home: Path) -> None:
    """Point hive's CODEX_HOME at the user's login (auth.json), unless it has its own."""
    own = os.environ.get("CODEX_HOME")
    source = Path(own) / "auth.json" if own else Path.home() / ".codex" / "auth.json"
    dest = home / "auth.json"
    try:
        if not source.is_file() or source.resolve() == dest.resolve():
            return
        if dest.is_symlink() and not dest.exists():
            dest.unlink()                           # a dangling link: point it again
        if dest.exists():
            return                                  # hive's own login, or linked already
        os.symlink(source, dest)
    except OSError:
        try:
            shutil.copy2(source, dest)
            os.chmod(dest, 0o600)
        except OSError as e:
            log.warning("codex backend: could not use %s: %s", source, e)


def auth_file_key(path: Path) -> str:
    """The API key an `auth.json` holds (a `codex login --with-api-key`), or ""."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    key = data.get("OPENAI_API_KEY") if isinstance(data, dict) else None
    return key if isinstance(key, str) else ""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
