"""A thin layer over git: where a repository's parts are, reading refs, running the git CLI.

Discovery and ref reads are plain file reads so that read-only commands stay fast: importing
pygit2 costs ~170 ms, and most commands only need to know whether `hive/state` moved.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Mapping

from hive.errors import HiveError

if TYPE_CHECKING:
    import subprocess

    import pygit2

STATE_BRANCH = "hive/state"
BRANCH_PREFIX = "refs/heads/"
STATE_REF = BRANCH_PREFIX + STATE_BRANCH
PLAN_REF_PREFIX = BRANCH_PREFIX + "hive/plan/"


def branch_ref(branch: str) -> str:
    """The full ref name of a local branch: `refs/heads/<branch>`."""
    return BRANCH_PREFIX + branch


@dataclass(frozen=True)
class RepoPaths:
    """The places of one repository, as seen from wherever a command was started."""

    worktree: Path      # top of the worktree the command runs in (may be a linked one)
    git_dir: Path       # that worktree's own git dir
    common_dir: Path    # the shared git dir (objects, refs, config)
    main: Path | None = None   # the main worktree, when the command runs in it

    @cached_property
    def main_worktree(self) -> Path:
        """The repository's own worktree: the one the command runs in when that is it (its git
        folder may be kept apart: a submodule's in the superproject's `.git/modules`, one made by
        `git init --separate-git-dir`); else where `core.worktree` says, or the folder that
        holds the git folder."""
        return self.main or core_worktree(self.common_dir) or self.common_dir.parent

    @cached_property
    def hive_dir(self) -> Path:
        """Runtime files that are never shared: index, daemon lock, logs, worker worktrees."""
        return self.common_dir / "hive"

    def make_hive_dir(self) -> Path:
        """`hive_dir`, created readable by its owner only (prompts, transcripts, the runtime
        database: nothing another user of the machine should read)."""
        self.hive_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.hive_dir

    @cached_property
    def state_checkout(self) -> Path:
        """`.hive/`: the editable linked worktree of `hive/state` at the root of the main worktree."""
        return self.main_worktree / ".hive"

    @cached_property
    def index_db(self) -> Path:
        return self.hive_dir / "index.db"

    @cached_property
    def runtime_db(self) -> Path:
        return self.hive_dir / "runtime.db"

    @cached_property
    def checkout_db(self) -> Path:
        """The `.hive/` checkout's records (what each file was when last read)."""
        return self.hive_dir / "checkout.db"

    @cached_property
    def daemon_log(self) -> Path:
        return self.hive_dir / "daemon.log"

    @cached_property
    def worktrees_dir(self) -> Path:
        return self.hive_dir / "worktrees"

    @cached_property
    def ref_events(self) -> Path:
        """Appended to by hive's writers and the `reference-transaction` hook: a daemon watches it."""
        return self.hive_dir / "ref-events"


def _gitdir_of(dot_git: Path) -> Path | None:
    if dot_git.is_dir():
        # as git does: an empty or foreign `.git` folder is not a repository
        return dot_git if _looks_like_git_dir(dot_git) else None
    if dot_git.is_file():
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            target = Path(text[len("gitdir:"):].strip())
            return (dot_git.parent / target).resolve() if not target.is_absolute() else target
    return None


def common_dir_of(git_dir: Path) -> Path:
    commondir = git_dir / "commondir"
    if commondir.is_file():
        target = Path(commondir.read_text(encoding="utf-8").strip())
        return (git_dir / target).resolve() if not target.is_absolute() else target
    return git_dir


def _looks_like_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


_BARE = re.compile(r"^\s*bare\s*=\s*([^\s#;]*)\s*(?:[#;].*)?$", re.IGNORECASE | re.MULTILINE)


def _sections(common_dir: Path, wanted: str) -> list[str]:
    """The bodies of the `[wanted]` sections of the repository's config, in order, read as text
    (every command discovers its repository, and a git subprocess would cost more than the rest)."""
    try:
        text = (common_dir / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    bodies = []
    for section in re.split(r"^\s*\[", text, flags=re.MULTILINE)[1:]:
        name, _, body = section.partition("]")
        if name.strip().lower() == wanted:
            bodies.append(body)
    return bodies


def _core_setting(common_dir: Path, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The last match of `pattern` in the `[core]` sections of the repository's config."""
    found: re.Match[str] | None = None
    for body in _sections(common_dir, "core"):
        for found in pattern.finditer(body):   # the last one set wins, as git reads it
            pass
    return found


_WORKTREE = re.compile(r"^\s*worktree\s*=\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)


def core_worktree(common_dir: Path) -> Path | None:
    """Where the repository's `core.worktree` puts its worktree (relative to the git folder, as
    git reads it); None when it is not set."""
    found = _core_setting(common_dir, _WORKTREE)
    if found is None or not found.group(1):
        return None
    value = found.group(1).strip('"')
    return Path(os.path.normpath(common_dir / os.path.expanduser(value)))


def is_bare(common_dir: Path) -> bool:
    """Whether the repository's config says `core.bare = true` (the last value set)."""
    found = _core_setting(common_dir, _BARE)
    return found is not None and found.group(1).lower() in ("true", "yes", "on", "1")


_FORMAT_VERSION = re.compile(r"^\s*repositoryformatversion\s*=\s*([^\s#;]*)", re.IGNORECASE | re.MULTILINE)
_SETTING = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*(?:[#;].*)?$", re.MULTILINE)

# The repository extensions libgit2 opens a repository with (`partialclone` as hive sets it up:
# `libgit2`); with any other it refuses the repository, as git does one it does not know.
READABLE_EXTENSIONS = frozenset({"noop", "objectformat", "worktreeconfig", "preciousobjects", "relativeworktrees",
                                 "partialclone"})


def _refuse_unreadable_format(common_dir: Path) -> None:
    """Refuse a repository whose format hive's git library cannot read (git 2.29's SHA-256
    object names, git 2.45's reftable, a format version above 1, an extension it does not know),
    in one line naming the setting, before libgit2 meets it. A format-0 repository (most) costs
    one read of the config: git and libgit2 read no extension there."""
    found = _core_setting(common_dir, _FORMAT_VERSION)
    version = found.group(1) if found is not None else ""
    if version in ("", "0"):
        return
    if version != "1":
        raise HiveError(f"{common_dir} has repository format version {version} "
                        "(core.repositoryformatversion): git hive works in format 0 and 1 only")
    extensions: dict[str, str] = {}   # names lowercased, the last value set
    for body in _sections(common_dir, "extensions"):
        for setting in _SETTING.finditer(body):
            extensions[setting.group(1).lower()] = (setting.group(2) or "true").strip('"')
    object_format = extensions.get("objectformat", "sha1").lower()
    if object_format != "sha1":
        raise HiveError(f"{common_dir} names its objects with {object_format} (extensions.objectFormat): "
                        "git hive works in SHA-1 repositories only, the only kind its git library "
                        "(libgit2) reads")
    unknown = sorted(set(extensions) - READABLE_EXTENSIONS)
    if unknown:
        settings = ", ".join(f"extensions.{name} = {extensions[name]}" for name in unknown)
        raise HiveError(f"{common_dir} uses a repository extension git hive's git library (libgit2) "
                        f"cannot read ({settings}): git hive cannot work in it")


def discover(start: Path | str | None = None) -> RepoPaths:
    """Find the repository containing `start` (default: the current directory).

    Refuses bare repositories: hive needs a worktree to put `.hive/` in.
    """
    here = Path(start or os.getcwd()).resolve()
    env_git_dir = os.environ.get("GIT_DIR")
    if env_git_dir and start is None:
        git_dir = Path(env_git_dir).resolve()
        common = common_dir_of(git_dir)
        top = Path(os.environ.get("GIT_WORK_TREE") or core_worktree(common) or common.parent).resolve()
        paths = RepoPaths(top, git_dir, common, main=top if git_dir == common else None)
        _refuse_if_not_owned(paths)
        _refuse_unreadable_format(common)
        return paths
    for candidate in (here, *here.parents):
        found = _gitdir_of(candidate / ".git")
        if found is not None and not found.exists():
            continue   # a linked worktree whose repository moved: its main worktree is further up
        if found is not None:
            git_dir = found
            common = common_dir_of(git_dir)
            paths = RepoPaths(candidate, git_dir, common, main=candidate if git_dir == common else None)
            if paths.common_dir != git_dir and is_bare(paths.common_dir):
                raise HiveError(f"{candidate} is a worktree of the bare repository {paths.common_dir}: git hive "
                                "needs a repository with a main worktree (clone it: `git clone "
                                f"{paths.common_dir} DIR`, and run git hive there)")
            _refuse_if_not_owned(paths)
            _refuse_unreadable_format(common)
            repair_worktree_links(paths)
            return paths
        if _looks_like_git_dir(candidate):
            if _gitdir_of(candidate.parent / ".git") == candidate and not is_bare(candidate):
                raise HiveError(f"{here} is in the git folder of {candidate.parent}: run git hive in "
                                f"{candidate.parent}, or in a folder of it outside .git")
            raise HiveError(f"{candidate} is a bare repository: git hive needs a repository with a worktree")
    raise HiveError(f"not a git repository (or any parent up to /): {here}")


def _refuse_if_not_owned(paths: RepoPaths) -> None:
    """Refuse a repository of another user's that git and libgit2 would refuse (a volume mounted
    into a container, run as root): they work in one only once it is marked safe
    (`safe.directory`). One `stat` each of the worktree and the git folder when they are the
    user's own; otherwise libgit2 decides for the repository, and git for the worktree the
    command runs in (a linked one is marked on its own), as each reads `safe.directory` itself."""
    try:
        owners = {os.stat(paths.worktree).st_uid, os.stat(paths.common_dir).st_uid}
    except OSError:
        return                          # not there to look at: the command meets it itself
    if owners == {os.geteuid()}:
        return
    import pygit2

    to_mark: list[str] = []
    try:
        repository(paths.common_dir)
    except pygit2.GitError as exc:
        if "not owned by current user" in str(exc):
            named = _NOT_OWNED.search(str(exc))     # the path libgit2 checked: the one to mark
            to_mark.append(named.group(1) if named else str(paths.main_worktree))
    checked = run(["rev-parse", "--git-dir"], paths.worktree, check=False, here=True)
    if "dubious ownership" in checked.stderr and str(paths.worktree) not in to_mark:
        to_mark.append(str(paths.worktree))
    if to_mark:
        owner = ", ".join(str(uid) for uid in sorted(owners - {os.geteuid()}))
        commands = " and ".join(f"`git config --global --add safe.directory {path}`" for path in to_mark)
        raise HiveError(f"{to_mark[0]} belongs to another user (uid {owner}; you are uid {os.geteuid()}), "
                        "and git works in such a repository only once it is marked safe: if you trust "
                        f"it, run {commands} and try again")


_NOT_OWNED = re.compile(r"repository path '([^']+)' is not owned by current user")


def worktree_admin(common_dir: Path, name: str) -> Path:
    """git's admin folder of the linked worktree `name`: `<common>/worktrees/<name>`."""
    return common_dir / "worktrees" / name


def link_worktree(admin: Path, worktree: Path) -> None:
    """Make a linked worktree's `.git` file and its admin folder's `gitdir` name each other."""
    (worktree / ".git").write_text(f"gitdir: {admin}\n", encoding="utf-8")
    (admin / "gitdir").write_text(f"{worktree / '.git'}\n", encoding="utf-8")


def repair_worktree_links(paths: RepoPaths, *, force: bool = False) -> list[Path]:
    """Re-point `.hive/` and the worker worktrees at the repository after its folder moved.

    A linked worktree's `.git` file and its admin dir (`<common>/worktrees/<name>/gitdir`) name
    each other by absolute path; once the folder is moved or renamed both point at the old place
    and every git and pygit2 call on them fails. Each link is rewritten to the new place, as
    `git worktree repair` would (which cannot when both sides moved, before git 2.41). Looks only
    at `.hive/` (two small reads) unless it is broken or `force`. Returns the worktrees repaired.
    """
    if not force and not _link_broken(paths.state_checkout / ".git"):
        return []
    candidates = [paths.state_checkout]
    if paths.worktrees_dir.is_dir():
        candidates += sorted(paths.worktrees_dir.iterdir())
    repaired = []
    for worktree in candidates:
        dot_git = worktree / ".git"
        if not _link_broken(dot_git):
            continue
        admin = worktree_admin(paths.common_dir, _admin_of(dot_git).name)
        if not (admin / "HEAD").is_file():
            continue   # not one of this repository's worktrees: leave it alone
        link_worktree(admin, worktree)
        if not common_dir_of(admin).is_dir():   # libgit2 writes it as an absolute path
            (admin / "commondir").write_text(f"{paths.common_dir}\n", encoding="utf-8")
        repaired.append(worktree)
    return repaired


def damaged_checkout_index(paths: RepoPaths) -> Path | None:
    """The git index of `.hive/` if it is not an index at all (garbage, cut short at the
    header): libgit2 then fails every read. None if it is fine or absent."""
    try:
        index = _admin_of(paths.state_checkout / ".git") / "index"
        with open(index, "rb") as data:
            header = data.read(12)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return paths.state_checkout
    return None if header[:4] == b"DIRC" and len(header) == 12 else index


def rebuild_checkout_index(paths: RepoPaths, index: Path) -> None:
    """Replace a damaged `.hive/` index by the tree of `hive/state`. The files in `.hive/` are
    left as they are (an edit stays an edit: hive's own records say what was written)."""
    index.unlink(missing_ok=True)
    run(["read-tree", "HEAD"], paths.state_checkout)


def _admin_of(dot_git: Path) -> Path:
    text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    admin = Path(text[len("gitdir:"):].strip())
    return admin if admin.is_absolute() else dot_git.parent / admin


def _link_broken(dot_git: Path) -> bool:
    """True if the `.git` file of a linked worktree and its admin dir do not name each other."""
    try:
        if not dot_git.read_text(encoding="utf-8", errors="replace").startswith("gitdir:"):
            return False
        admin = _admin_of(dot_git)
        back = Path((admin / "gitdir").read_text(encoding="utf-8", errors="replace").strip())
        common = common_dir_of(admin)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return dot_git.is_file()
    except OSError:
        return False
    return os.path.normpath(back) != os.path.normpath(dot_git) or not common.is_dir()


# Opened repositories, per thread: libgit2 must not use one from two threads at once.
_opened = threading.local()
OPENED_PER_THREAD = 4
# libgit2 reads packs through memory-mapped windows (1 GiB each, 8 GiB in all by default):
# every page of a pack read once stays resident, and a queue taken in whole reads all of it.
PACK_WINDOW_BYTES = 4 << 20
PACK_MAPPED_BYTES = 16 << 20
_set_up: list[bool] = []


def libgit2() -> ModuleType:
    """pygit2, with libgit2's process-wide settings made once: its pack windows, and partial
    clones opened. libgit2 refuses a clone an older git marked `extensions.partialClone`; it
    reads what such a clone has, and the objects it left on its remote are brought before hive
    reads them (`fetch_missing_objects`)."""
    import pygit2

    if not _set_up:
        pygit2.settings.mwindow_size = PACK_WINDOW_BYTES
        pygit2.settings.mwindow_mapped_limit = PACK_MAPPED_BYTES
        allow = getattr(pygit2.settings, "set_extensions", None)   # an older pygit2 has none: refused as before
        if allow is not None and "partialclone" not in pygit2.settings.extensions:
            allow(["partialclone"])
        _set_up.append(True)
    return pygit2


def open_repository(path: Path | str, *, search: bool = True) -> "pygit2.Repository":
    """A new pygit2 Repository at `path` (a repository, or a folder of one as git looks for
    it upwards unless `search` is False), for a caller that keeps its own handle."""
    pygit2 = libgit2()
    flags = pygit2.enums.RepositoryOpenFlag.DEFAULT if search else pygit2.enums.RepositoryOpenFlag.NO_SEARCH
    return pygit2.Repository(str(path), flags)


_OBJECT_ID = re.compile(r"[0-9a-f]{40}")


def is_object_id(text: str) -> bool:
    """Whether `text` is a full SHA-1 object id as git writes it (40 lowercase hex digits)."""
    return _OBJECT_ID.fullmatch(text) is not None


def open_worktree(path: Path | str) -> "pygit2.Repository":
    """The repository of the worktree at `path` itself, never one found in a folder above it.

    Hive's worktrees lie inside the main repository's `.git`: one whose `.git` file is gone (an
    agent outside the jail, a removal half done by another thread) would otherwise open the main
    repository, and a HEAD detached or a reset meant for the worktree would land on a person's
    checkout. Missing, it is a `pygit2.GitError`, as any repository not found."""
    return open_repository(path, search=False)


def environment_here(worktree: Path | str) -> dict[str, str]:
    """The environment for the git CLI run in `worktree` on that worktree's own repository:
    without the repository, worktree or index the person's environment names (a hook's GIT_DIR
    and GIT_INDEX_FILE, `git --git-dir=... hive`), and taking no repository above it for its own
    (as `open_worktree` does for pygit2)."""
    env = {name: value for name, value in os.environ.items() if name not in LOCATION_VARIABLES}
    env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(os.path.realpath(worktree))
    return env


def repository(path: Path | str) -> "pygit2.Repository":
    """The pygit2 Repository at `path`, opened once per thread and kept (the last few).

    Opening one reads its config and sets up its ref and object stores (~0.2 ms), and a daemon
    needs the same repository several times per issue. Refs and objects are read from disk on
    each lookup; an index is not: re-read it (`index.read(False)`) before relying on it. `path`
    is the repository itself (a git dir, or a worktree with its `.git`): never searched above.
    """
    cache: OrderedDict[str, pygit2.Repository] | None = getattr(_opened, "repositories", None)
    if cache is None:
        cache = _opened.repositories = OrderedDict()
    key = str(path)
    repo = cache.get(key)
    if repo is None:
        repo = cache[key] = open_repository(key, search=False)
        while len(cache) > OPENED_PER_THREAD:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return repo


def forget_repositories() -> None:
    """Drop this thread's opened repositories (a forked child opens its own)."""
    _opened.__dict__.pop("repositories", None)


def read_ref(common_dir: Path, name: str) -> str | None:
    """The object id a ref points to, read from loose refs or packed-refs; None if absent."""
    try:
        with open(os.path.join(common_dir, name), encoding="ascii") as loose:
            value = loose.read().strip()
        if value.startswith("ref: "):
            return read_ref(common_dir, value[5:])
        if value:
            return value
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        pass
    try:
        with open(os.path.join(common_dir, "packed-refs"), encoding="ascii", errors="replace") as packed:
            for line in packed:
                if line.endswith(" " + name + "\n"):
                    return line.split(" ", 1)[0]
    except FileNotFoundError:
        pass
    return None


def run(args: list[str], cwd: Path | str, *, check: bool = True, input: str | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None,
        here: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the git CLI. Used only where a person's own git setup must apply (network, config).
    `here`: in a worktree hive picked (one of its own, the target's checkout), on that worktree's
    repository whatever repository the environment names (`environment_here`)."""
    import subprocess   # loaded when used: `git hive list` starts without it
    base = environment_here(cwd) if here else os.environ
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=input, capture_output=True, text=True,
        env={**base, **(env or {})} if env or here else None, timeout=timeout,
    )
    if check and proc.returncode != 0:
        reason = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise HiveError(f"git {args[0]} failed: {reason[-1] if reason else 'exit code ' + str(proc.returncode)}")
    return proc


# where git looks for a repository, an index, objects: set by a person's shell or a git hook
# for their own repository, never for `.hive/`
LOCATION_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_IMPLICIT_WORK_TREE",
                      "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE", "GIT_INDEX_VERSION")


def update_worktree_index(worktree: Path, blobs: dict[str, str | None], left_out: list[str]) -> None:
    """Set the git index entries of `worktree` (relative paths) to regular-file blobs in one
    `git update-index` (None: out of the index); `left_out` (among them) get the skip-worktree
    bit in the same write. No stat is staged: `git status` compares such a file's content."""
    # in this order: each flag applies to the paths after it; "./": no path is taken for an option
    args = []
    removed = [f"./{path}" for path, oid in blobs.items() if oid is None]
    if removed:
        args += ["--force-remove", *removed]
    args.append("--add")
    for path, oid in blobs.items():
        if oid is not None:
            args += ["--cacheinfo", f"100644,{oid},{path}"]
    if left_out:
        args += ["--skip-worktree", *(f"./{path}" for path in left_out)]
    _update_index(worktree, args)


def unsplit_worktree_index(worktree: Path) -> None:
    """The git index of `worktree` in one file again, after a person's git split it
    (`core.splitIndex`): libgit2 reads no split index."""
    _update_index(worktree, ["--no-split-index"])


# for a git that writes an index of hive's worktrees: nothing libgit2 cannot read back (a split
# index, no checksum), no fsmonitor hook started
INDEX_READABLE = ("-c", "core.splitIndex=false", "-c", "index.skipHash=false", "-c", "core.fsmonitor=false")


def in_worktree(worktree: Path, args: list[str], stdin: bytes = b"") -> "subprocess.CompletedProcess[bytes]":
    """git ARGS in one of hive's worktrees, on that worktree's own repository and index whatever
    the environment names, writing an index libgit2 reads back (`INDEX_READABLE`). OSError where
    git cannot start."""
    import subprocess

    return subprocess.run(["git", "-C", str(worktree), *INDEX_READABLE, *args], input=stdin,
                          capture_output=True, env=environment_here(worktree))


def _update_index(worktree: Path, args: list[str]) -> None:
    """`git update-index ARGS` on `worktree`'s own index (`in_worktree`)."""
    try:
        proc = in_worktree(worktree, ["update-index", *args])
    except OSError as exc:   # no git on PATH, too long a command line
        raise HiveError(f"git update-index could not start in {worktree}: {exc.strerror or exc}") from exc
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()
        raise HiveError(f"git update-index failed in {worktree}: {reason[-1] if reason else proc.returncode}")


# For hive's own git commands in the agents' worktrees: a relative `core.hooksPath` (husky's) is
# resolved in the worktree, whose hooks are the agent's files; they run only in its jail.
NO_HOOKS = ("-c", "core.hooksPath=/dev/null")


def config_get(cwd: Path | str, key: str) -> str | None:
    proc = run(["config", "--get", key], cwd, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def hooks_dir(paths: RepoPaths) -> Path:
    """The folder git runs the repository's hooks from: `core.hooksPath` (relative to the main
    worktree, as git reads it there), else `<common>/hooks`."""
    configured = config_get(paths.worktree, "core.hooksPath")
    if configured:
        hooks = Path(os.path.expanduser(configured))
        return hooks if hooks.is_absolute() else paths.main_worktree / hooks
    return paths.common_dir / "hooks"


def worktree_hooks_folder(paths: RepoPaths, configured: str | None) -> str:
    """Where `core.hooksPath = configured` has git run the hooks, relative to the main worktree,
    when that is a folder of it outside `.git` (husky's `.husky/_`, a tracked `.githooks`):
    files of the checked-out branch, so of the work hive merges into it; '' otherwise."""
    if not configured:
        return ""
    hooks = (paths.main_worktree / os.path.expanduser(configured)).resolve()
    try:
        relative = hooks.relative_to(paths.main_worktree.resolve())
    except ValueError:
        return ""
    return "" if hooks.is_relative_to(paths.common_dir.resolve()) else relative.as_posix()


def hooks_in_worktree(paths: RepoPaths) -> bool:
    """Whether git runs the repository's hooks from a folder of its main worktree
    (`worktree_hooks_folder`). Hive's own git commands there run with no hook then
    (`own_command`): only a person's commands run what the branch holds."""
    return bool(worktree_hooks_folder(paths, config_get(paths.worktree, "core.hooksPath")))


def own_command(paths: RepoPaths, args: list[str]) -> list[str]:
    """`args` of a git command hive runs for itself in the person's worktree: with no hook when
    the hooks are files of the branch there (`hooks_in_worktree`)."""
    return [*NO_HOOKS, *args] if hooks_in_worktree(paths) else args


_promisors: dict[str, tuple[int, list[str]]] = {}   # common dir -> (its config's mtime, the remotes)


def promisor_remotes(paths: RepoPaths) -> list[str]:
    """The remotes a partial clone fetches the objects it left out from, in the order git tries
    them (`extensions.partialClone` first, then each `remote.<name>.promisor`); [] in a full
    clone. Asked of git once for each version of the repository's config file."""
    try:
        changed = os.stat(paths.common_dir / "config").st_mtime_ns
    except OSError:
        changed = -1
    known = _promisors.get(str(paths.common_dir))
    if known is not None and known[0] == changed:
        return known[1]
    listed = run(["config", "-z", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.promisor)$"],
                 paths.worktree, check=False)
    remotes = []
    for item in listed.stdout.split("\0"):
        key, _, value = item.partition("\n")
        if key == "extensions.partialclone" and value:
            remotes.insert(0, value)
        elif key.startswith("remote.") and key.endswith(".promisor") and value.lower() in ("true", "yes", "on", "1"):
            remotes.append(key[len("remote."):-len(".promisor")])
    found = list(dict.fromkeys(remotes))
    _promisors[str(paths.common_dir)] = (changed, found)
    return found


def missing_objects(paths: RepoPaths, commits: list[str]) -> list[str]:
    """The objects of `commits` and their trees that this repository has not got."""
    listed = run(["rev-list", "--objects", "--no-walk", "--missing=print", *commits, "--"], paths.worktree,
                 check=False)
    return [line[1:] for line in listed.stdout.splitlines() if line.startswith("?")]


def fetch_missing_objects(paths: RepoPaths, commits: list[str], timeout: float = 120) -> int:
    """In a partial clone, bring the objects of `commits`' trees it left on its promisor remotes
    (a blobless clone fetches no file until git reads it; libgit2, which hive reads state with,
    never fetches one), asked for as git's own lazy fetch asks; how many were brought. A full
    clone costs a stat (`promisor_remotes`). What cannot be brought (offline) stays missing: the
    reader says so."""
    remotes = promisor_remotes(paths)
    if not remotes or not commits:
        return 0
    missing = missing_objects(paths, commits)
    first = len(missing)
    for remote in remotes:
        while missing:   # a treeless clone: the trees come first, then the blobs they name
            if not _fetch_objects(paths, remote, missing, timeout):
                break
            still = missing_objects(paths, commits)
            if set(still) >= set(missing):
                break    # this remote had none of them: the next one may
            missing = still
    return first - len(missing)


def fetch_objects(paths: RepoPaths, ids: list[str], timeout: float = 120) -> bool:
    """Bring these objects (a file libgit2 found missing) from a partial clone's promisor
    remotes; whether some remote was asked (False in a full clone, where nothing is left out)."""
    remotes = promisor_remotes(paths)
    for remote in remotes:
        if _fetch_objects(paths, remote, ids, timeout):
            return True
    return False


def _fetch_objects(paths: RepoPaths, remote: str, ids: list[str], timeout: float) -> bool:
    """One fetch of `ids` from `remote`, as git's lazy fetch makes it; whether git succeeded."""
    import subprocess

    try:
        fetch = ["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                 "--recurse-submodules=no", "--filter=blob:none", "--stdin", remote]
        done = run(own_command(paths, fetch), paths.worktree, check=False, input="\n".join(ids) + "\n",
                   timeout=timeout, env={"GIT_TERMINAL_PROMPT": "0"})
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


# A git lock file (`<ref>.lock`, `index.lock`) lives for the milliseconds of one update. One that
# is older than this, with no live owner (`lock_owner_alive`), was left by a process killed
# mid-update (SIGKILL, OOM, power loss): nothing will ever remove it, and every later update of
# that ref or index — a fetch into remote-tracking refs included — would fail on it.
STALE_LOCK_SECONDS = 5.0


def is_stale_lock(lock: Path, stale_after: float = STALE_LOCK_SECONDS) -> bool:
    """The one rule for a git lock file: stale when older than `stale_after` seconds and no live
    process may own it. Git lock files hold no pid, so ownership is judged from `/proc`."""
    try:
        modified = lock.stat().st_mtime
    except (FileNotFoundError, NotADirectoryError):
        return False
    return time.time() - modified >= stale_after and not lock_owner_alive(lock, modified)


def lock_owner_alive(lock: Path, modified: float) -> bool:
    """Whether a live process may still own `lock`: one that has it open (libgit2 and git keep
    an index or packed-refs lock open until they rename it), or a `git` process working in the
    same repository that started before the lock was last written (git closes a ref lock after
    writing it, before renaming it). Processes of other users cannot be read: their locks are
    judged by age alone, as the repository is not theirs to write."""
    repository = _repository_of(lock)
    roots = [str(repository), str(repository.parent)] if repository is not None else []
    target = str(lock)
    boot, ticks = _boot_time(), os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = entry.name
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)
            if not fields[0].endswith("(git") or not roots:
                continue
            started = boot + int(fields[1].split()[19]) / ticks
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except (OSError, IndexError, ValueError):
            continue
        if started <= modified + 1 and any(cwd == root or cwd.startswith(root + os.sep) for root in roots):
            return True
    return False


def _boot_time() -> float:
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def _repository_of(lock: Path) -> Path | None:
    """The git dir holding `lock` (its nearest ancestor that looks like one)."""
    for folder in lock.parents:
        if _looks_like_git_dir(folder):
            return folder
    return None


def release_stale_lock(lock: Path, stale_after: float = STALE_LOCK_SECONDS) -> bool:
    """Wait while `lock` is held; remove it once it is stale (`is_stale_lock`).

    Returns at once when there is no lock, within milliseconds when a live writer releases it, and
    after about `stale_after` seconds otherwise (a lock whose owner is still alive is left). True
    if a stale lock was removed.
    """
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return False
        if age >= stale_after:
            return remove_if_stale(lock, stale_after)
        time.sleep(min(0.02, stale_after - age + 0.001))


def remove_if_stale(lock: Path, stale_after: float = STALE_LOCK_SECONDS) -> bool:
    """Remove `lock` now if it is stale (`is_stale_lock`), without waiting; whether it was."""
    if not is_stale_lock(lock, stale_after):
        return False
    try:
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


def folder_entries(folder: str | Path) -> list[os.DirEntry[str]]:
    """A folder's entries; none once it is gone. A worktree's admin folder goes whenever its issue
    is retired, in another thread: pathlib's glob raises when a folder vanishes under it."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


def clear_stale_locks(common_dir: Path, log: Callable[[str], None] = lambda _: None,
                      stale_after: float = STALE_LOCK_SECONDS) -> list[Path]:
    """Remove every stale git lock of a repository — its refs (remote-tracking ones included),
    packed-refs, HEAD, config, the index of every worktree — without waiting for any, each told
    to `log`. Called at daemon start and before each fetch or push; returns the locks removed."""
    candidates = [Path(e.path) for e in folder_entries(common_dir) if e.name.endswith(".lock")]
    for admin in folder_entries(common_dir / "worktrees"):
        candidates.extend(Path(e.path) for e in folder_entries(admin.path) if e.name.endswith(".lock"))
    for folder, _, names in os.walk(common_dir / "refs"):
        candidates.extend(Path(folder, name) for name in names if name.endswith(".lock"))
    removed = [lock for lock in candidates if remove_if_stale(lock, stale_after)]
    for lock in removed:
        log(f"removed a stale git lock left by a killed process: {lock}")
    return removed


def ref_lock(common_dir: Path, ref: str) -> Path:
    """The lock file git and libgit2 take to update `ref` (a loose ref)."""
    return common_dir / (ref + ".lock")


def release_stale_ref_lock(git_dir: str, ref: str) -> bool:
    """`release_stale_lock` of `ref`'s lock, for a repository opened at `git_dir` (a worktree's
    admin folder or the common one: `pygit2.Repository.path`)."""
    return release_stale_lock(ref_lock(common_dir_of(Path(git_dir)), ref))


def private_objects(common_dir: Path, worktree_name: str) -> Path:
    """Where a jailed agent's git writes new objects: inside its worktree's admin folder, so that
    the shared object store stays read-only to it (hive copies them over, re-hashed, afterwards:
    `hive.workspace.worktrees.adopt_head`)."""
    return worktree_admin(common_dir, worktree_name) / "hive-objects"


def private_lfs(common_dir: Path, worktree_name: str) -> Path:
    """Where a jailed agent's git-lfs stores the files it cleans (`lfs.storage`), beside its
    private objects; it reads the shared store's through the alternate, as git does. hive copies
    them over, re-hashed (`hive.workspace.worktrees.absorb_objects`)."""
    return worktree_admin(common_dir, worktree_name) / "hive-lfs"


def private_stores_env(common_dir: Path) -> dict[str, str]:
    """The agents' private stores as alternates, for a git that walks every ref, worktrees' HEADs
    included (fetch's connectivity check, push): a jailed agent's HEAD names objects that are only
    there until hive absorbs them, and without them such a git fails on a "bad object"."""
    admins = sorted((admin.path for admin in folder_entries(common_dir / "worktrees") if not admin.is_symlink()))
    stores = [path for path in (os.path.join(admin, "hive-objects") for admin in admins)
              if os.path.isdir(path) and not os.path.islink(path)]
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(stores)} if stores else {}


def agent_git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the git an agent runs: no automatic gc or maintenance, no signing.

    hive kills agents' process groups (a stall, a cancel, recovery after a crash); a `gc --auto`
    that a `git commit` started in the shared repository, killed mid-way, leaves `packed-refs.lock`
    behind, and every later gc, `pack-refs` and ref deletion there fails on it (while loose objects
    pile up and every `git merge` spends a second finding it cannot gc). Set through
    GIT_CONFIG_COUNT (git >= 2.31), appended to any the environment already has.
    """
    return config_env({"gc.auto": "0", "maintenance.auto": "false", **AGENT_UNSIGNED},
                      os.environ if base is None else base)


def config_env(settings: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """`settings` as environment for a git run with `base`: appended to the ones `base` gives
    through GIT_CONFIG_COUNT (git >= 2.31), which stay."""
    try:
        n = int(base.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        n = 0
    env = {"GIT_CONFIG_COUNT": str(n + len(settings))}
    for i, (key, value) in enumerate(settings.items(), start=n):
        env.update({f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": value})
    return env


_DRIVER_NAME = re.compile(r"[A-Za-z0-9._-]+")   # one a pathspec's `attr:` magic can name


@dataclass(frozen=True)
class FilterConfig:
    """What of the person's git config decides which files a checkout writes through a filter."""

    settings: Mapping[str, str]   # every `filter.<driver>.*` of a driver with a smudge or process command
    attributes_file: str          # `core.attributesFile`, "" when none

    @property
    def drivers(self) -> list[str]:
        return sorted({name[len("filter."):name.rindex(".")] for name in self.settings})


_filter_configs: dict[str, tuple[tuple[int, ...], FilterConfig]] = {}


def filter_config(paths: RepoPaths) -> FilterConfig:
    """The repository's `FilterConfig`, every level of its config read (a person's `git lfs
    install` writes the global one): through libgit2 once for each version of the files it reads
    (`include`d files aside), since every worktree hive makes asks."""
    key = tuple(_mtime_ns(path) for path in _config_files(paths))
    known = _filter_configs.get(str(paths.common_dir))
    if known is not None and known[0] == key:
        return known[1]
    by_driver: dict[str, dict[str, str]] = {}
    attributes_file = ""
    for entry in repository(paths.common_dir).config:
        name, value = entry.name, entry.value or ""
        if name == "core.attributesfile":
            attributes_file = value
        elif name.startswith("filter.") and name.count(".") >= 2:
            driver = name[len("filter."):name.rindex(".")]
            if _DRIVER_NAME.fullmatch(driver):
                by_driver.setdefault(driver, {})[name] = value
    found = FilterConfig({name: value for driver, settings in by_driver.items()
                          if settings.get(f"filter.{driver}.smudge") or settings.get(f"filter.{driver}.process")
                          for name, value in settings.items()}, attributes_file)
    _filter_configs[str(paths.common_dir)] = (key, found)
    return found


def _config_files(paths: RepoPaths) -> list[str]:
    """The config files git and libgit2 may read for this repository."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return [str(paths.common_dir / "config"), os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config"),
            os.environ.get("GIT_CONFIG_GLOBAL", ""), os.environ.get("GIT_CONFIG_SYSTEM", "/etc/gitconfig")]


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns if path else -1
    except OSError:
        return -1


# An agent's jail hides the person's signing keys and agent (`~/.gnupg`, `SSH_AUTH_SOCK`): with
# `commit.gpgsign` on, every commit it tried would fail. Its commits are unsigned, and so are the
# ones hive makes from them (`unsigned_warning`).
AGENT_UNSIGNED = {"commit.gpgsign": "false"}


def unsigned_warning(cwd: Path | str) -> str:
    """The warning to give where the person signs their commits and hive's will not be ("" if not)."""
    if (config_get(cwd, "commit.gpgsign") or "").lower() not in ("true", "yes", "on", "1"):
        return ""
    return ("warning: commit.gpgsign is on, but the commits hive makes — the agents' work it merges into "
            "the target branch and the records on hive/state — are not signed")
