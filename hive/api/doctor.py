"""`git hive doctor` through the API: every part of a repository's hive setup checked (the state
branch, `.hive/`, the merge driver, hooks, excludes, issue files, the archive, kept saves, the
runtime database, the history, config, the target branch, the jail, orphaned issues, the agent
CLIs), and with `fix` repaired where it can be."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hive import git
from hive.agents.jails import start_problem
from hive.backends import registry
from hive.config import Config
from hive.errors import BadInput
from hive.initialize import (CHAINED_SUFFIX, EXCLUDES, hook_sources, initialize, merge_driver_runs,
                             missing_target_branch)
from hive.jail import support
from hive.orchestrator import recovery
from hive.orchestrator.orphans import orphaned_issues
from hive.project import Project
from hive.runtime import DaemonLock, Runtime
from hive.state import lost
from hive.state.history import double_claims

__all__ = ["Check", "checks"]


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str
    invalid_file: bool = False     # an issue file that is not valid (the command's exit 2)


def checks(fix: bool = False, say: Callable[[str], None] = lambda _: None,
           path: Path | str | None = None) -> list[Check]:
    """Every part of the repository's hive setup, checked (`git hive doctor`); with `fix`,
    repaired first where it can be (`say` hears each repair)."""
    return [Check(ok, message, not ok and message.startswith(ISSUE_FILE_PROBLEM))
            for ok, message in _checks(fix, say, git.discover(path))]


ISSUE_FILE_PROBLEM = "  "   # an invalid issue file's line, under "issue files: N problem(s)"


def _checks(fix: bool, say: Callable[[str], None], paths: git.RepoPaths) -> list[tuple[bool, str]]:
    damaged_index = git.damaged_checkout_index(paths)
    if fix:
        for worktree in git.repair_worktree_links(paths, force=True):
            say(f"repaired the link of {worktree} (the repository folder moved)")
        if damaged_index is not None and git.read_ref(paths.common_dir, git.STATE_REF):
            git.rebuild_checkout_index(paths, damaged_index)
            say(f"rebuilt the damaged git index of .hive/ ({damaged_index})")
            damaged_index = None
        initialize()
    results: list[tuple[bool, str]] = []
    tip = git.read_ref(paths.common_dir, git.STATE_REF)
    if tip is None:
        if not lost.had_state(paths):
            return [(False, f"branch {git.STATE_BRANCH} is missing: run `git hive init`")]
        trace = lost.best_trace(Project(paths).store)
        return [(False, f"branch {git.STATE_BRANCH} is missing: " + (
            f"`git hive doctor --fix` recovers it at {trace.commit[:10]} from {trace.where}" if trace
            else lost.lost_message(paths)))]
    results.append((True, f"branch {git.STATE_BRANCH}"))
    project = Project(paths)
    results.append((project.checkout.exists, ".hive/ checkout" + ("" if project.checkout.exists else
                                                                   " is missing (doctor --fix recreates it)")))
    if damaged_index is not None:
        results.append((False, f".hive/ git index {damaged_index} is damaged (doctor --fix rebuilds it)"))
        return results
    results.append(_merge_driver_check(paths))
    hook_dir = git.hooks_dir(paths)
    for name, content in hook_sources().items():
        installed = (hook_dir / name).exists() and (hook_dir / name).read_bytes() == content
        chained = (hook_dir / (name + CHAINED_SUFFIX)).exists()
        results.append((installed, f"hook {name}" + (" (chained to your previous hook)" if chained else "")
                        + ("" if installed else f" is missing or outdated in {hook_dir}")))
    exclude = paths.common_dir / "info" / "exclude"
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    missing = [e for e in EXCLUDES if e not in text.splitlines()]
    results.append((not missing, "excludes" + (f": missing {', '.join(missing)}" if missing else "")))
    if fix:
        project.index.rebuild()
    problems = project.sync(full=True, warn=False)
    problems += [p for p in project.index.problems() if str(p) not in {str(q) for q in problems}]
    results.append((not problems, f"issue files: {len(problems)} problem(s)" if problems else "issue files"))
    for problem in problems:
        results.append((False, f"{ISSUE_FILE_PROBLEM}{problem}"))
    results.append(_archive_check(project, fix))
    results.append(_kept_saves_check(project, fix))
    results.append(_runtime_check(paths, fix))
    doubles = double_claims(paths)
    results.append((not doubles, "history: no issue held by two agents at once" if not doubles
                    else f"history: {len(doubles)} double claim(s): {doubles[0]}"))
    try:
        config = project.config
    except BadInput as exc:
        results.append((False, f"config: {exc}"))
        return results
    results.append((True, "config"))
    no_target = missing_target_branch(paths, config.target_branch)
    results.append((no_target is None, no_target or f"target branch {config.target_branch}"))
    results.append(_check_jail(config))
    results.append(_orphans_check(project, config, fix, say))
    for role in ("worker", "refinery", "queen"):
        backend = config.backend_for(role)
        if registry.kind(backend).command_setting:
            home = paths.hive_dir / "codex-home"
            home.mkdir(parents=True, exist_ok=True)
            results.append(_check_cli(config, role, str(home)))
    return results


def _orphans_check(project: Project, config: Config, fix: bool, say: Callable[[str], None]) -> tuple[bool, str]:
    """Issues in progress for a daemon of this machine that is gone (a SIGKILL, a crash)."""
    if DaemonLock(project.paths).holder():
        return True, "issues in progress: a daemon runs"
    if fix:
        found = recovery.recover_now(project, config, say)
        if found > 0:
            return True, f"issues in progress: {found} left by a daemon that is gone, recovered"
    orphans = [i.id for i in orphaned_issues(project)]
    if orphans:
        return False, (f"{len(orphans)} issue(s) in_progress for a hive daemon that is gone "
                       f"({', '.join(orphans[:5])}): `git hive doctor --fix` or the next `git hive run` recovers them")
    return True, "issues in progress: none left by a daemon that is gone"


def _check_jail(config: Config) -> tuple[bool, str]:
    """Whether agents run jailed here: a real agent CLI that cannot be jailed is a problem."""
    refusal, warning = start_problem(config, ("worker", "refinery", "queen"))
    if refusal:
        return False, f"jail: {refusal}"
    if warning:
        return True, f"jail: OFF ({warning})"
    found = support(config.sandbox)
    if found.ok:
        return True, f"jail: {found.describe()}"
    return True, f"jail: none here, the scripted agents run unjailed: {found.reason} — {found.fix}"


def _archive_check(project: Project, fix: bool) -> tuple[bool, str]:
    """The archive is not checked out in .hive/: what an older hive (or git) left there, and
    missing archived files git would take for deleted (no skip-worktree bit)."""
    state = project.checkout.tidy_archive(fix)
    kept = state.on_disk - state.removed
    if fix:
        done = [f"removed {state.removed} clean archived issue file(s)"] if state.removed else []
        done += [f"marked {state.unmarked} as not checked out"] if state.unmarked else []
        done += [f"kept {kept} checked out (edited, or a person's)"] if kept else []
        return True, ".hive/ archive: " + ("; ".join(done) if done else "not checked out")
    if state.unmarked:
        return False, (f".hive/ archive: {state.unmarked} archived issue file(s) not checked out and not "
                       "marked so: `git status` in .hive/ shows them deleted (doctor --fix marks them)")
    if state.on_disk:
        return True, (f".hive/ archive: {state.on_disk} archived issue file(s) checked out (by an older "
                      "hive, `git hive edit` or git; doctor --fix removes the clean ones)")
    return True, ".hive/ archive: not checked out"


def _kept_saves_check(project: Project, fix: bool) -> tuple[bool, str]:
    """Saves of a person's that a newer save replaced while hive looked, kept beside their file:
    one may hold an edit that was never committed, so only a person deletes one that differs."""
    kept = project.checkout.kept_saves(fix)
    removed = f"; removed {kept.removed} that held nothing the file beside it or the branch lacks" \
        if kept.removed else ""
    if not kept.paths:
        return True, ".hive/ kept saves: none" + removed
    shown = ", ".join(kept.paths[:3]) + (f" and {len(kept.paths) - 3} more" if len(kept.paths) > 3 else "")
    return False, (f".hive/ kept saves: {len(kept.paths)} older save(s) that a newer one replaced while hive "
                   f"looked ({shown}): compare each with the file beside it, keep what you need, delete it"
                   + removed)


def _runtime_check(paths: git.RepoPaths, fix: bool) -> tuple[bool, str]:
    runtime = Runtime(paths)
    problem = runtime.problem()
    if problem is None:
        runtime.close()
        return True, "runtime database"
    if not fix:
        return False, problem
    if DaemonLock(paths).holder():
        return False, f"{problem}; stop the daemon (`git hive stop`) before `doctor --fix`"
    aside = runtime.set_aside()
    return True, f"runtime database: the damaged one is kept as {aside.name}; a new one starts now"


def _check_cli(config: Config, role: str, codex_home: str = "") -> tuple[bool, str]:
    """The role's agent CLI is there (the same check as `run`'s) and answers `--version`."""
    problem = registry.agent_cli_problem(config, role)
    if problem:
        return False, problem
    backend = config.backend_for(role)
    command = getattr(config, registry.kind(backend).command_setting)
    env = None
    if backend == "codex" and codex_home:  # else codex writes into ~/.codex
        env = {**os.environ, "CODEX_HOME": codex_home}
    try:
        version = registry.cli_version(backend, shlex.split(command), env, 30)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{role} backend {backend}: `{command}` does not say what it is: {exc}"
    return True, f"{role} backend {backend}: {version}"


def _merge_driver_check(paths: git.RepoPaths) -> tuple[bool, str]:
    driver = git.config_get(paths.common_dir, "merge.hive.driver")
    if not driver:
        return False, "merge driver `hive` is not registered (doctor --fix registers it)"
    if not merge_driver_runs(driver):
        return False, (f"merge driver `hive` is registered as `{driver}`, which a shell without hive "
                       "on PATH cannot run (doctor --fix registers it by absolute path)")
    return True, f"merge driver `hive`: {driver}"
