"""The jail each agent role gets under the project's `sandbox` setting, and the start-up rule:
no jail, no real agents.

`sandbox = "on"` (the default): every agent session, and every command hive runs for an agent,
gets a `hive.jail` spec, built by the first mechanism that works here (`hive.jail.mechanisms`);
a mechanism's name: by that one or not at all; `"off"`: none, with a warning at every start. Where a jail cannot be
built, `git hive run` / `plan` refuse to start the claude or codex backends (one line: the cause
and the fix); the scripted test agents run unjailed then, with a warning.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hive import git
from hive.backends import registry
from hive.config import Config
from hive.jail import JailSpec, roles, support

OFF_WARNING = 'warning: sandbox = "off": agents run without the OS jail and can reach everything you can'


def worktree_jail(config: Config, paths: git.RepoPaths, worktree: Path) -> JailSpec | None:
    """A worker's, the refinery's or a test command's jail for `worktree` (None: sandbox off)."""
    return None if config.sandbox == "off" else replace(roles.worktree_jail(paths, worktree),
                                                        mechanism=config.sandbox)


def queen_jail(config: Config, paths: git.RepoPaths, plan_directory: Path) -> JailSpec | None:
    return None if config.sandbox == "off" else replace(roles.queen_jail(paths, plan_directory),
                                                        mechanism=config.sandbox)


def start_problem(config: Config, roles_started: tuple[str, ...]) -> tuple[str, str]:
    """(refusal, warning) for starting agents of `roles_started`: a refusal when a real agent
    CLI would run and no jail can be built; the warning to print at start when sandbox is off."""
    if config.sandbox == "off":
        return "", OFF_WARNING
    real = sorted({config.backend_for(role) for role in roles_started} & set(registry.untrusted_names()))
    found = support(config.sandbox)
    if real and not found.ok:
        return (f"cannot jail the {'/'.join(real)} agents: {found.reason} — {found.fix}"), ""
    return "", ""


def unjailed_imports_warning(config: Config, paths: git.RepoPaths) -> str:
    """Where agents run unjailed and a venv of the main worktree installs a folder of it
    editable: a worktree's test commands import the main worktree's code from there, not the
    code under test (jailed, the worktree's folders are shown at the main worktree's place)."""
    if config.sandbox != "off" and support(config.sandbox).ok:
        return ""
    main = paths.main_worktree
    installed = roles.editable_installs(main, roles.dependency_folders(main))
    if not installed:
        return ""
    venv, folder = installed[0]
    return (f"warning: {venv}/ installs {folder}/ of your checkout editable and agents run unjailed: a "
            f"worktree's test command imports your checkout's code from there, not the worktree's; run "
            f"them jailed, or put the worktree's first in test_command (PYTHONPATH={folder} ...)")
