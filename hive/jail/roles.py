"""The jail of each kind of agent, from the repository's places.

A worker (and the test commands run for it) may write its worktree and the worktree's own git
admin folder (`<common>/worktrees/<id>`: HEAD, index, logs, and `hive-objects`, where its git
writes new objects — `GIT_OBJECT_DIRECTORY`, the shared store an alternate it only reads): what a
commit on the worktree's detached HEAD writes. Nothing else of the repository — not `objects/`,
`refs/`, `packed-refs`, `config` or `hooks` — so it can move no ref and damage no object; hive
copies the new objects over and moves the work branch to the worktree's HEAD afterwards
(`hive.workspace.worktrees.adopt_head`). The refinery gets the
same jail for the worktree of its task. The Queen may write only its plan directory and reads the
main worktree. Hidden from all: the user's home (but for what the agent CLI needs, which the
backend adds), /tmp (each jail has its own), hive's runtime folder (`<common>/hive`) and — for
workers and the refinery — the main worktree (its untracked files, `.env` and such).
"""

from __future__ import annotations

import os
import stat
import sys
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from hive import git
from hive.jail.spec import JailSpec

_HIVE_PACKAGE = str(Path(__file__).resolve().parent.parent)


def _system_readable(paths: git.RepoPaths) -> tuple[str, ...]:
    """What commands need that may lie in the hidden home, shown again read-only: hive's own
    Python (a venv in ~) and the folders of the tools on PATH (see `tool_folders`)."""
    return _readable_for(os.environ.get("PATH", ""), os.path.expanduser("~"),
                         (str(paths.main_worktree), str(paths.common_dir)))


@lru_cache(maxsize=4)
def _readable_for(search_path: str, home: str, repository: tuple[str, ...]) -> tuple[str, ...]:
    """`_system_readable` for one PATH, home and repository: worked out once (each agent start asks)."""
    return tuple(dict.fromkeys((sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                                _HIVE_PACKAGE, *tool_folders(search_path, home, repository))))


TOOL_BIN_FOLDERS = ("bin", "sbin", "shims", ".bin")   # a tool's launchers, beside the rest of it


def tool_folders(search_path: str, home: str, repository: tuple[str, ...]) -> list[str]:
    """The folders in the home that the commands on `search_path` need: for a launcher folder
    (`~/.pyenv/shims`, `~/.cargo/bin`, a venv's `bin`, `node_modules/.bin`) the tool it belongs
    to (a shim needs its whole tree; the credentials inside stay hidden, see
    `JailSpec.credentials`), else the folder itself. Never the home, nor a folder holding the
    repository: `~/code/proj/.venv/bin` on PATH shows that venv, not `~/code` with the person's
    other projects (and their `.env` files) in it. A relative entry names a folder of each
    command's own working directory (in the jail: its worktree, shown already)."""
    home = os.path.realpath(home)
    repository = tuple(os.path.realpath(folder) for folder in repository)

    def holds_repository(folder: str) -> bool:
        return any(inside == folder or inside.startswith(folder + os.sep) for inside in repository)

    folders = []
    for entry in search_path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        real = os.path.realpath(entry)
        if not real.startswith(home + os.sep) or holds_repository(real):
            continue
        tool = os.path.dirname(real) if os.path.basename(real) in TOOL_BIN_FOLDERS else real
        folders.append(real if tool == home or holds_repository(tool) else tool)
    return folders


def _git_admin(worktree: Path) -> Path | None:
    """The worktree's own git dir, as its `.git` file names it (before any agent ran in it)."""
    dot_git = worktree / ".git"
    try:
        text = dot_git.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    return (worktree / text[len("gitdir:"):].strip()).resolve()


def _identity(paths: git.RepoPaths) -> tuple[tuple[str, str], ...]:
    """The user's git identity as environment: their global config is hidden with their home."""
    try:
        signature = git.repository(paths.common_dir).default_signature
    except Exception:                 # noqa: BLE001 - pygit2.GitError: no identity configured
        return ()
    return tuple((f"GIT_{who}_{what.upper()}", value) for who in ("AUTHOR", "COMMITTER")
                 for what, value in (("name", signature.name), ("email", signature.email)))


SCRATCH = ("/tmp", "/var/tmp")      # empty and writable in each jail, its own
# the tools' caches in the jail's own /tmp: the home is read-only there, and uv, go and pip fail
# where they cannot make theirs ("Failed to initialize cache at ~/.cache/uv")
CACHE = ("XDG_CACHE_HOME", "/tmp/.cache")


def _hidden(paths: git.RepoPaths, *, main_worktree: bool) -> tuple[str, ...]:
    hidden = [os.path.expanduser("~"), str(paths.hive_dir)]
    if main_worktree:
        hidden.append(str(paths.main_worktree))
    return tuple(hidden)


def _plain_empty_file(path: Path) -> None:
    """`path` a regular file before the jail starts, so that it can be frozen: git reads a
    worktree's `config.worktree` (with `extensions.worktreeConfig`, as `git sparse-checkout` sets
    it) and runs what it names (`core.fsmonitor`) as the person. One missing would be the agent's
    to write; anything but a regular file there (a link, say) is not one a person made."""
    try:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            path.unlink()
        with open(path, "x", encoding="utf-8"):
            pass
    except FileExistsError:
        pass
    except OSError:
        pass                         # the admin folder is gone: there is no worktree to jail


def worktree_jail(paths: git.RepoPaths, worktree: Path) -> JailSpec:
    """A worker's (or the refinery's, or a test command's) jail for one worktree."""
    worktree = worktree.resolve()
    admin = _git_admin(worktree)
    writable = [str(worktree)]
    frozen = [str(worktree / ".git")]
    env = [*_identity(paths), CACHE]
    dependencies = dependency_folders(paths.main_worktree)
    readable = [str(paths.common_dir), *_system_readable(paths),
                *(str(paths.main_worktree / name) for name in dependencies)]
    if any(name != NODE_MODULES for name in dependencies):
        env.append(NO_SYNC)
    store = pre_commit_store(os.environ, os.path.expanduser("~"))
    if store is not None:
        readable.append(store)
        env.append(("PRE_COMMIT_HOME", store))
    if admin is not None:
        writable.append(str(admin))
        _plain_empty_file(admin / "config.worktree")
        frozen += [str(admin / "gitdir"), str(admin / "commondir"), str(admin / "config.worktree")]
        objects = git.private_objects(paths.common_dir, admin.name)
        # not parents=True: an admin folder removed meanwhile (the worktree with it) is not made
        # again half, as a folder git would take for a broken worktree
        objects.mkdir(exist_ok=True)
        (objects / "pack").mkdir(exist_ok=True)
        env += [("GIT_OBJECT_DIRECTORY", str(objects)),
                ("GIT_ALTERNATE_OBJECT_DIRECTORIES", str(paths.common_dir / "objects"))]
    return JailSpec(writable=tuple(writable), readable=tuple(readable),
                    hidden=_hidden(paths, main_worktree=True), scratch=SCRATCH, frozen=tuple(frozen),
                    env=tuple(env), git_config=_filters(paths, admin),
                    views=project_views(paths, worktree, dependencies))


NODE_MODULES = "node_modules"
# the project's venv is the person's, read-only in the jail: `uv run` uses it as it is, where it
# would install the worktree's copy of the project into it first (and fail: read-only)
NO_SYNC = ("UV_NO_SYNC", "1")


def dependency_folders(main_worktree: Path) -> list[str]:
    """The names of the folders at the top of the main worktree that hold installed
    dependencies: Node's `node_modules` and Python's venvs (a folder with `pyvenv.cfg`: `.venv`,
    `venv`...). Real folders only: a link there may be a landed commit's, leading anywhere."""
    try:
        with os.scandir(main_worktree) as listing:
            entries = list(listing)
    except OSError:
        return []
    return sorted(entry.name for entry in entries if entry.is_dir(follow_symlinks=False) and (
        entry.name == NODE_MODULES or os.path.isfile(os.path.join(entry.path, "pyvenv.cfg"))))


def editable_installs(main_worktree: Path, dependencies: list[str]) -> list[tuple[str, str]]:
    """(venv, folder) for each folder of the main worktree that a venv of it puts on Python's
    path (an editable install's `.pth`: `pip install -e .`, `uv sync`). Jailed, a worktree's
    commands find the worktree's version there (`project_views`); unjailed, the main worktree's."""
    main = os.path.realpath(main_worktree)
    found = []
    for venv in dependencies:
        if venv == NODE_MODULES:
            continue
        for pth in sorted(Path(main_worktree, venv).glob("lib/python*/site-packages/*.pth")):
            try:
                with open(pth, "rb") as listing:
                    lines = listing.read(1 << 16).decode("utf-8", "replace").splitlines()
            except OSError:
                continue
            for line in lines:
                folder = os.path.realpath(line.strip()) if line.startswith("/") else ""
                if folder.startswith(main + os.sep) and not folder.startswith(os.path.join(main, venv) + os.sep):
                    found.append((venv, os.path.relpath(folder, main)))
    return found


def project_views(paths: git.RepoPaths, worktree: Path, dependencies: list[str]) -> tuple[tuple[str, str], ...]:
    """What makes a worktree's commands find the project as they do in the person's checkout,
    read-only (`JailSpec.views`):

    - the worktree's own folders shown at the main worktree's place, each of its top ones: what
      names the project's folders by that path finds this worktree's version, not nothing (the
      hidden main worktree) — an editable install (`pip install -e .`, `uv sync`), whose `.pth`
      names the main worktree's `src`, then imports the code under test. Not its files, nor its
      dot folders: an agent CLI that reads instructions in every folder above its own
      (`CLAUDE.md`) would read its worktree's twice;
    - the main worktree's installed `dependencies` (its `.venv`, its `node_modules`) shown in the
      worktree, where a command looks for them (`.venv/bin/pytest`, `uv run`, `npm test`), when
      the person's checkout ignores them (an agent's `git add -A` adds none of it) and the
      worktree has none of its own (an empty folder is the mount point a jail left)."""
    main = paths.main_worktree.resolve()
    if worktree == main:
        return ()
    try:
        with os.scandir(worktree) as listing:
            entries = {entry.name: entry.is_dir(follow_symlinks=False) for entry in listing}
    except OSError:
        entries = {}
    views = [(str(worktree / name), str(main / name)) for name, folder in sorted(entries.items())
             if folder and not name.startswith(".")]
    ignored = git.repository(paths.common_dir).path_is_ignored
    for name in dependencies:
        if name in entries and not _empty_folder(worktree / name):
            continue
        if ignored(name) or ignored(f"{name}/pyvenv.cfg"):
            views.append((str(main / name), str(worktree / name)))
    return tuple(views)


def _empty_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode) and not os.listdir(path)
    except OSError:
        return False


def pre_commit_store(env: Mapping[str, str], home: str) -> str | None:
    """The store of the pre-commit framework (`PRE_COMMIT_HOME`, else `pre-commit` in the cache
    folder), when the person's own commits made one: the person's hooks run for the agent's
    commits too, with the hook environments installed there. Shown read-only (pre-commit then
    uses it as it is, installing nothing) and named in `PRE_COMMIT_HOME` (the jail passes no
    `XDG_CACHE_HOME`); where pre-commit found none, it failed every commit on the read-only home
    ("Read-only file system: ~/.cache")."""
    cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    store = os.path.realpath(env.get("PRE_COMMIT_HOME") or os.path.join(cache, "pre-commit"))
    return store if os.path.isfile(os.path.join(store, "db.db")) else None


def _filters(paths: git.RepoPaths, admin: Path | None) -> tuple[tuple[str, str], ...]:
    """The person's filter drivers (git-lfs's): their global config is hidden with their home,
    and without them the agent's git would store an LFS file's content as a plain blob. git-lfs
    then keeps what it cleans in a store of the worktree's (`git.private_lfs`): the shared one
    is read-only here (it reads that one through the objects' alternate)."""
    settings = dict(git.filter_config(paths).settings)
    if admin is not None and any(name.startswith("filter.lfs.") for name in settings):
        lfs = git.private_lfs(paths.common_dir, admin.name)
        try:
            lfs.mkdir(exist_ok=True)
        except OSError:
            pass                     # the admin folder is gone: there is no worktree to jail
        settings["lfs.storage"] = str(lfs)
    return tuple(settings.items())


def queen_jail(paths: git.RepoPaths, plan_directory: Path) -> JailSpec:
    """The Queen's jail: it reads the repository and writes only its plan directory."""
    plan = plan_directory.resolve()
    return JailSpec(writable=(str(plan),),
                    readable=(str(paths.main_worktree), str(paths.common_dir), *_system_readable(paths)),
                    hidden=_hidden(paths, main_worktree=False), scratch=SCRATCH,
                    frozen=(str(plan / ".git"),), env=(*_identity(paths), CACHE))
