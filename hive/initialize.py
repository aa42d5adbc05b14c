"""`git hive init`: set a repository up for hive. Idempotent: a second run changes nothing.

Creates the orphan branch `hive/state` (or adopts `origin`'s), the `.hive/` checkout, the fetch
refspec, the `hive` merge driver, the hooks (chained to any already there) and the runtime dir.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pygit2

from hive import config, git
from hive.errors import HiveError
from hive.project import Project
from hive.state import layout, lost, trust
from hive.state.store import Change, StateStore

HOOK_MARKER = "git-hive hook"
CHAINED_SUFFIX = ".hive-chained"
EXCLUDES = ("/.hive/", ".hive-result.jsonl", ".hive-notes.jsonl")
STATE_REFSPEC = "+refs/heads/hive/state:refs/remotes/{remote}/hive/state"


def hook_sources() -> dict[str, bytes]:
    """The hook scripts: `hive/hooks/` in an installed wheel, `hooks/` in a source checkout."""
    packaged = Path(__file__).parent / "hooks"
    folder = packaged if packaged.is_dir() else Path(__file__).parent.parent / "hooks"
    return {entry.name: entry.read_bytes() for entry in sorted(folder.iterdir())
            if entry.is_file() and not entry.name.startswith(("_", ".")) and not entry.name.endswith(".py")}


def merge_driver_command() -> str:
    """The driver by this interpreter's absolute path, so that a plain `git merge` works from a
    shell without hive on PATH; -P: never a `hive` module of the folder git runs it in."""
    return f"{shlex.quote(sys.executable)} -P -m hive merge-driver %O %A %B %P"


def merge_driver_runs(command: str) -> bool:
    """Whether a registered driver command starts with an executable by absolute path."""
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):
        return False
    return os.path.isabs(program) and os.access(program, os.X_OK)


def initialize(where: Path | str | None = None) -> list[str]:
    """Set the repository up; return what was done (empty: it already was)."""
    paths = git.discover(where)
    repo = git.open_repository(paths.common_dir)
    if repo.is_bare:
        raise HiveError(f"{paths.common_dir} is a bare repository: git hive needs a worktree")
    if repo.head_is_unborn:
        raise HiveError("this repository has no commit yet: make a first commit, then run `git hive init`")
    target = detect_target_branch(repo, paths)
    if target is None:
        branches = ", ".join(n for n in sorted(repo.branches.local) if not n.startswith("hive/")) or "none"
        raise HiveError(f"cannot tell which branch finished work should merge into (branches here: {branches}): "
                        "set it with `git hive config set target_branch BRANCH`, then run `git hive init`")
    done: list[str] = []
    paths.make_hive_dir().chmod(0o700)   # made by an older hive: private from now on
    paths.worktrees_dir.mkdir(parents=True, exist_ok=True)
    _add_fetch_refspecs(paths, done)
    _fetch_shared_state(repo, paths)
    _create_state_branch(StateStore(paths, repo=repo), done)
    _register_merge_driver(paths, done)
    _add_excludes(paths, done)
    _install_hooks(paths, done)
    recorded = config.recorded_target_branch(paths)
    record_target_branch(paths, target)
    _approve_settings(paths, done)   # of the target's `.hive.toml`, before the settings are read whole
    if recorded is None:
        done.append(f"target branch: {config.load(paths).target_branch}")
    _create_checkout(repo, paths, done)
    return done


def _approve_settings(paths: git.RepoPaths, done: list[str]) -> None:
    """The first `init` here approves what `.hive.toml` sets for the keys a person must approve
    (DESIGN §7: the person setting hive up chose this project); later changes need
    `git hive config approve`."""
    if (paths.common_dir / "hive" / config.APPROVALS_FILE).exists():
        return
    approved = config.approve(paths)
    if approved:
        done.append("approved on this machine: " + ", ".join(f"{k} = {v!r}" for k, v in sorted(approved.items())))


def record_target_branch(paths: git.RepoPaths, target: str | None = None) -> None:
    """Record the target branch (`hive.targetBranch`): the per-repository default of the
    `target_branch` key, and the branch the guard hook lets no worker move."""
    if target is None:
        target = config.load(paths).target_branch
    if config.recorded_target_branch(paths) != target:
        git.run(["config", "--file", str(paths.common_dir / "config"), config.RECORDED_KEY, target],
                paths.worktree)


def detect_target_branch(repo: pygit2.Repository, paths: git.RepoPaths) -> str | None:
    """The configured target branch if a person chose one; else, of the branches that exist
    here, the remote's default branch, the branch checked out in the main worktree, `main` or
    `master`, the only one there is. None when none of these names one."""
    if config.sources(paths, warn=False)["target_branch"] != "default":
        return config.load(paths, warn=False).target_branch
    local = [name for name in repo.branches.local if name != "hive" and not name.startswith("hive/")]
    remotes = sorted((r.name for r in repo.remotes), key=lambda name: name != "origin")
    for remote in remotes:
        head = repo.references.get(f"refs/remotes/{remote}/HEAD")
        prefix = f"refs/remotes/{remote}/"
        if head is not None and isinstance(head.target, str) and head.target.startswith(prefix) and \
                head.target[len(prefix):] in local:
            return head.target[len(prefix):]
    if not repo.head_is_detached and not repo.head_is_unborn:
        checked_out = repo.head.shorthand
        if checked_out in local and config.valid_branch_name(checked_out):
            return checked_out
    for candidate in ("main", "master"):
        if candidate in local:
            return candidate
    named = [name for name in local if config.valid_branch_name(name)]
    return named[0] if len(named) == 1 else None


def missing_target_branch(paths: git.RepoPaths, target: str) -> str | None:
    """Why hive cannot work towards `target` (it does not exist here), or None if it can."""
    if git.read_ref(paths.common_dir, git.branch_ref(target)) is not None:
        return None
    listed = git.run(["for-each-ref", "--format=%(refname:short)", "refs/heads"], paths.common_dir, check=False)
    names = [n for n in listed.stdout.split() if n != "hive" and not n.startswith("hive/")]
    hint = f"; branches here: {', '.join(names[:5])}" if names else ""
    return (f"target branch {target!r} does not exist{hint} "
            f"(set it: `git hive config set target_branch BRANCH`)")


def _create_state_branch(store: StateStore, done: list[str]) -> None:
    repo = store.repo
    if store.tip() is not None:
        return
    if lost.had_state(store.paths):   # never an empty state over the data of an earlier one
        trace = Project(store.paths).recover_state()
        done.append(f"recovered {git.STATE_BRANCH} from {trace.where}")
        return
    for remote in repo.remotes:
        shared = repo.references.get(f"refs/remotes/{remote.name}/{git.STATE_BRANCH}")
        if shared is None:
            continue
        git.fetch_missing_objects(store.paths, [str(shared.target)])   # a partial clone's
        try:
            trust.check_commit(repo, str(shared.target), None, source=f"{remote.name}/{git.STATE_BRANCH}")
        except trust.Untrusted as exc:
            print(f"warning: {exc}; started a new {git.STATE_BRANCH} instead", file=sys.stderr)
            break
        if store.adopt(str(shared.target), f"hive: from {remote.name}"):
            done.append(f"created {git.STATE_BRANCH} from {remote.name}/{git.STATE_BRANCH}")
        return
    files: dict[str, bytes | None] = {
        layout.ATTRIBUTES_FILE: layout.ATTRIBUTES.encode(),
        layout.CONTEXT_FILE: layout.CONTEXT_TEMPLATE.encode(),
        f"{layout.ISSUES_DIR}/.gitkeep": b"",
        f"{layout.NOTES_DIR}/.gitkeep": b"",
    }
    if store.start(Change(files, summary="hive: start the state branch", event="initialized")):
        done.append(f"created branch {git.STATE_BRANCH}")


def _add_fetch_refspecs(paths: git.RepoPaths, done: list[str]) -> None:
    remotes = git.run(["remote"], paths.worktree).stdout.split()
    for remote in remotes:
        specs = git.run(["config", "--get-all", f"remote.{remote}.fetch"], paths.worktree, check=False).stdout.split()
        wanted = STATE_REFSPEC.format(remote=remote)
        if wanted in specs or f"+refs/heads/*:refs/remotes/{remote}/*" in specs:
            continue
        git.run(["config", "--add", f"remote.{remote}.fetch", wanted], paths.worktree)
        done.append(f"`git fetch {remote}` now also fetches {git.STATE_BRANCH}")


def _fetch_shared_state(repo: pygit2.Repository, paths: git.RepoPaths) -> None:
    """Bring a remote's hive/state before creating one (a single-branch clone has not got it)."""
    if repo.references.get(git.STATE_REF) is not None:
        return
    for remote in repo.remotes:
        tracking = f"refs/remotes/{remote.name}/{git.STATE_BRANCH}"
        if repo.references.get(tracking) is None:
            try:  # offline or no such branch there: start a new state branch
                fetch = ["fetch", "--quiet", "--no-tags", remote.name, f"+{git.STATE_REF}:{tracking}"]
                git.run(git.own_command(paths, fetch), paths.worktree, check=False, timeout=120,
                        env={"GIT_TERMINAL_PROMPT": "0"})
            except subprocess.TimeoutExpired:
                pass


def _register_merge_driver(paths: git.RepoPaths, done: list[str]) -> None:
    wanted = {"merge.hive.name": "git-hive: issue files field by field, notes as a union",
              "merge.hive.driver": merge_driver_command()}
    for key, value in wanted.items():
        if git.config_get(paths.common_dir, key) != value:
            git.run(["config", "--file", str(paths.common_dir / "config"), key, value], paths.worktree)
            if key == "merge.hive.driver":
                done.append("registered the `hive` merge driver")


def _add_excludes(paths: git.RepoPaths, done: list[str]) -> None:
    if _exclude(paths, list(EXCLUDES), []):
        done.append("excluded .hive/ and the worker protocol files in .git/info/exclude")


def _exclude(paths: git.RepoPaths, patterns: list[str], done: list[str]) -> bool:
    """Add `patterns` to `.git/info/exclude` (those not there yet); whether any was added."""
    exclude = paths.common_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    current = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    missing = [line for line in patterns if line not in current.splitlines()]
    if not missing:
        return False
    with open(exclude, "a", encoding="utf-8") as out:
        if current and not current.endswith("\n"):
            out.write("\n")
        out.write("# git-hive\n" + "".join(line + "\n" for line in missing))
    if not all(line in EXCLUDES for line in missing):
        done.append(f"excluded hive's hook files in .git/info/exclude ({', '.join(missing)})")
    return True


def _install_hooks(paths: git.RepoPaths, done: list[str]) -> None:
    """hive's hooks in the repository's hooks folder, whatever `core.hooksPath` names (it stays as
    the person set it). One the person had is kept and run first (renamed `.hive-chained`), unless
    it is a tracked file: then theirs stays and hive's is not installed. A hooks folder inside the
    main worktree (husky's `.husky/_`, a `.githooks`) gets hive's files excluded from git."""
    target_dir = git.hooks_dir(paths)
    inside = _inside_worktree(paths, target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    for name, content in hook_sources().items():
        target = target_dir / name
        if inside is not None:
            _exclude(paths, [f"/{inside}/{name}", f"/{inside}/{name}{CHAINED_SUFFIX}"], done)
        if target.exists():
            existing = target.read_bytes()
            if existing == content:
                continue
            if HOOK_MARKER.encode() not in existing:
                if inside is not None and _tracked(paths, f"{inside}/{name}"):
                    done.append(f"kept your tracked {inside}/{name}: hive's {name} hook is not installed "
                                "(the agents' jail still keeps them from moving refs)")
                    continue
                chained = target_dir / (name + CHAINED_SUFFIX)
                if chained.exists():
                    raise HiveError(f"{target} exists and so does {chained}: move one away, then re-run init")
                target.rename(chained)
                done.append(f"kept your {name} hook: it now runs from {chained.name}")
        target.write_bytes(content)
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        if inside is None and not target_dir.resolve().is_relative_to(paths.common_dir.resolve()):
            done.append(f"installed the {name} hook in {target_dir}, the hooks folder core.hooksPath names: "
                        "other repositories that use that folder run it too (it acts only where hive "
                        "is set up)")
        else:
            done.append(f"installed the {name} hook")


def _inside_worktree(paths: git.RepoPaths, folder: Path) -> str | None:
    """`folder` relative to the main worktree (posix), or None when it lies outside it."""
    try:
        return folder.resolve().relative_to(paths.main_worktree.resolve()).as_posix()
    except ValueError:
        return None


def _tracked(paths: git.RepoPaths, rel: str) -> bool:
    listed = git.run(["ls-files", "--error-unmatch", "--", rel], paths.main_worktree, check=False)
    return listed.returncode == 0


def _create_checkout(repo: pygit2.Repository, paths: git.RepoPaths, done: list[str]) -> None:
    project = Project(paths)
    try:
        if project.checkout.create(repo):
            done.append("checked hive/state out at .hive/")
    finally:
        project.close()
