"""git hive doctor / reindex / merge-driver"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

import click

from hive.backends import registry
from hive.errors import BadInput, HiveError


def checks(fix: bool) -> list[tuple[bool, str]]:
    """(ok, message) for every part of the setup."""
    from hive import git
    from hive.initialize import (CHAINED_SUFFIX, EXCLUDES, hook_sources, hooks_dir, initialize,
                                 missing_target_branch)
    from hive.project import Project

    paths = git.discover()
    damaged_index = git.damaged_checkout_index(paths)
    if fix:
        for worktree in git.repair_worktree_links(paths, force=True):
            click.echo(f"repaired the link of {worktree} (the repository folder moved)")
        if damaged_index is not None and git.read_ref(paths.common_dir, git.STATE_REF):
            git.rebuild_checkout_index(paths, damaged_index)
            click.echo(f"rebuilt the damaged git index of .hive/ ({damaged_index})")
            damaged_index = None
        initialize()
    results: list[tuple[bool, str]] = []
    tip = git.read_ref(paths.common_dir, git.STATE_REF)
    if tip is None:
        from hive.state import lost

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
    hook_dir = hooks_dir(paths)
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
        results.append((False, f"  {problem}"))
    results.append(_archive_check(project, fix))
    results.append(_runtime_check(paths, fix))
    from hive.state.history import double_claims

    doubles = double_claims(paths)
    results.append((not doubles, "history: no issue held by two agents at once" if not doubles
                    else f"history: {len(doubles)} double claim(s): {doubles[0]}"))
    try:
        config = project.config
    except BadInput as exc:
        results.append((False, f"config: {exc}"))
        return results
    results.append((True, "config"))
    missing = missing_target_branch(paths, config.target_branch)
    results.append((missing is None, missing or f"target branch {config.target_branch}"))
    results.append(_check_jail(config))
    results.append(_orphans_check(project, config, fix))
    for role in ("worker", "refinery", "queen"):
        backend = config.backend_for(role)
        if registry.kind(backend).command_setting:
            home = paths.hive_dir / "codex-home"
            home.mkdir(parents=True, exist_ok=True)
            results.append(_check_cli(config, role, str(home)))
    return results


def _orphans_check(project, config, fix: bool) -> tuple[bool, str]:
    """Issues in progress for a daemon of this machine that is gone (a SIGKILL, a crash)."""
    from hive.orchestrator import recovery
    from hive.orchestrator.orphans import orphaned_issues
    from hive.runtime import DaemonLock

    if DaemonLock(project.paths).holder():
        return True, "issues in progress: a daemon runs"
    if fix:
        found = recovery.recover_now(project, config, click.echo)
        if found > 0:
            return True, f"issues in progress: {found} left by a daemon that is gone, recovered"
    orphans = [i.id for i in orphaned_issues(project)]
    if orphans:
        return False, (f"{len(orphans)} issue(s) in_progress for a hive daemon that is gone "
                       f"({', '.join(orphans[:5])}): `git hive doctor --fix` or the next `git hive run` recovers them")
    return True, "issues in progress: none left by a daemon that is gone"


def _check_jail(config) -> tuple[bool, str]:
    """Whether agents run jailed here: a real agent CLI that cannot be jailed is a problem."""
    from hive.agents.jails import start_problem
    from hive.jail import support

    refusal, warning = start_problem(config, ("worker", "refinery", "queen"))
    if refusal:
        return False, f"jail: {refusal}"
    if warning:
        return True, f"jail: OFF ({warning})"
    found = support(config.sandbox)
    if found.ok:
        return True, f"jail: {found.describe()}"
    return True, f"jail: none here, the scripted agents run unjailed: {found.reason} — {found.fix}"


def _archive_check(project, fix: bool) -> tuple[bool, str]:
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


def _runtime_check(paths, fix: bool) -> tuple[bool, str]:
    from hive.runtime import DaemonLock, Runtime

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


def _check_cli(config, role: str, codex_home: str = "") -> tuple[bool, str]:
    """The role's agent CLI is there (the same check as `run`'s) and answers `--version`."""
    from hive.cli.preflight import agent_cli_problem

    problem = agent_cli_problem(config, role)
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


def _merge_driver_check(paths) -> tuple[bool, str]:
    from hive import git
    from hive.initialize import merge_driver_runs

    driver = git.config_get(paths.common_dir, "merge.hive.driver")
    if not driver:
        return False, "merge driver `hive` is not registered (doctor --fix registers it)"
    if not merge_driver_runs(driver):
        return False, (f"merge driver `hive` is registered as `{driver}`, which a shell without hive "
                       "on PATH cannot run (doctor --fix registers it by absolute path)")
    return True, f"merge driver `hive`: {driver}"


@click.command()
@click.option("--fix", is_flag=True, help="Repair what can be repaired (re-run init, rebuild the index).")
def doctor(fix: bool) -> None:
    """Check this repository's hive setup; exit 2 if an issue file is invalid, 1 on other problems."""
    results = checks(fix)
    for ok, message in results:
        mark = click.style("ok ", fg="green") if ok else click.style("!! ", fg="red")
        click.echo(f"{mark} {message}")
    bad = [m for ok, m in results if not ok]
    if any(m.startswith("  ") for m in bad):
        sys.exit(2)
    if bad:
        sys.exit(1)


@click.command()
def reindex() -> None:
    """Rebuild the SQLite index from hive/state."""
    from hive.project import Project

    project = Project.open()
    unsaved = project.absorb(full=True).problems  # invalid edits in .hive/: not indexed
    project.checkout.refresh()
    started = time.perf_counter()
    problems = project.index.rebuild()
    took = time.perf_counter() - started
    total = sum(project.index.counts().values())
    click.echo(f"indexed {total} issues in {took:.2f}s")
    for problem in [*unsaved, *problems]:
        click.echo(f"warning: {problem}", err=True)


@click.command("merge-driver", hidden=True)
@click.argument("args", nargs=-1)
def merge_driver(args: tuple[str, ...]) -> None:
    """Called by git as `<python> -P -m hive merge-driver %O %A %B %P` (registered by init)."""
    from hive.state import merge_driver as driver

    if len(args) != 4:
        raise BadInput("usage: git hive merge-driver BASE OURS THEIRS PATH (git calls it; `init` registers it)")
    sys.exit(driver.main(list(args)))
