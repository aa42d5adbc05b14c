"""The agent kinds: the one place that knows which backends exist and what each one is.

A new backend is one module under `hive/backends/` whose class follows `base.Backend` and has a
`from_settings` class method, plus one `Kind` line in `KINDS`: its name, where the class lives,
whether its CLI is untrusted (it runs what a model chooses: jailed, or not started at all), the
config key naming its CLI, and the folders in a worktree that configure it (which the permission
policy keeps from agents). Config validation, the `--backend` choices, the CLI checks of
`run`/`plan`/`doctor`, the no-jail-no-agent rule and the policy all read it from here. Only the
chosen backend's module is imported (a `git hive` command that starts no agent never pays for
the others).
"""

from __future__ import annotations

import importlib
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:        # the facts above are read by `config` and the CLI, which start no agent
    from hive.backends.base import Backend


@dataclass(frozen=True)
class Kind:
    name: str
    target: str                              # "module:Class"
    untrusted: bool                          # runs model-chosen commands: jailed or not at all
    command_setting: str = ""                # the config key naming its CLI ("" for none)
    settings_dirs: tuple[str, ...] = ()      # worktree folders that configure it: not the agent's
    version_probe: str = ""                  # "module:function(argv, env, timeout) -> str" ("": `--version`)


KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind("claude", "hive.backends.claude:ClaudeBackend", untrusted=True, command_setting="claude_command",
         settings_dirs=(".claude",)),
    Kind("codex", "hive.backends.codex:CodexBackend", untrusted=True, command_setting="codex_command",
         settings_dirs=(".codex",)),
    Kind("scripted", "hive.backends.scripted:ScriptedBackend", untrusted=False),
    Kind("acp", "hive.backends.acp:AcpBackend", untrusted=True, command_setting="acp_command",
         settings_dirs=(".claude", ".codex"), version_probe="hive.backends.acp.probe:agent_version"),
)}
# name → "module:Class"
BACKENDS: dict[str, str] = {name: kind.target for name, kind in KINDS.items()}


def names() -> tuple[str, ...]:
    return tuple(KINDS)


def untrusted_names() -> tuple[str, ...]:
    """The backends whose CLI must run in a jail (no jail: they do not start)."""
    return tuple(name for name, kind in KINDS.items() if kind.untrusted)


def settings_dirs() -> tuple[str, ...]:
    """Every agent CLI's settings folders (an agent may change none of them)."""
    return tuple(d for kind in KINDS.values() for d in kind.settings_dirs)


def kind(name: str) -> Kind:
    """The kind registered as `name`; ValueError for an unknown name."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (one of: {', '.join(sorted(KINDS))})") from None


class BackendSettings(Protocol):
    """What a backend reads of hive's configuration (`hive.config.Config` has all of it), read-only."""

    @property
    def scripted_script(self) -> str: ...
    @property
    def claude_command(self) -> str: ...
    @property
    def codex_command(self) -> str: ...
    @property
    def codex(self) -> dict[str, Any]: ...
    @property
    def acp_command(self) -> str: ...
    @property
    def acp_endpoints(self) -> str: ...
    @property
    def acp_env(self) -> str: ...
    @property
    def acp_mode(self) -> str: ...

    def backend_for(self, role: str) -> str: ...


def agent_cli_problem(config: BackendSettings, role: str) -> str | None:
    """Why the CLI of `role`'s backend cannot be started (not found), or None if it can (what
    `run` and `plan` check before they start anything, and `doctor` reports)."""
    backend = config.backend_for(role)
    setting = kind(backend).command_setting
    if not setting:
        return None
    command = getattr(config, setting)
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []
    if argv and shutil.which(argv[0]):
        return None
    return f"{role} backend {backend}: `{command}` not found (set {setting}, or choose --backend)"


def cli_version(name: str, argv: list[str], env: dict[str, str] | None, timeout: float) -> str:
    """What backend `name`'s CLI `argv` says it is (the first line of `--version`, or its kind's
    own probe); OSError or subprocess.SubprocessError when it cannot say."""
    probe = kind(name).version_probe
    if probe:
        module_name, _, function = probe.partition(":")
        return str(getattr(importlib.import_module(module_name), function)(argv, env, timeout))
    proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise subprocess.SubprocessError(f"`--version` exited {proc.returncode}")
    lines = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    return lines[0] if lines else "ok"


def backend_class(name: str) -> type:
    """The class registered as `name`; ValueError for an unknown name."""
    module_name, _, class_name = kind(name).target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def load_backend(name: str, **options: Any) -> "Backend":
    """Instantiate a backend by name with its constructor's options."""
    return backend_class(name)(**options)


def backend_for_role(config: BackendSettings, role: str, hive_dir: str, repo_root: str) -> "Backend":
    """The backend configured for `role` (config keys `backend`, `<role>_backend`, ...)."""
    chosen: Any = backend_class(config.backend_for(role))     # a class with `from_settings`
    return chosen.from_settings(config, hive_dir=hive_dir, repo_root=repo_root)
