"""Worker worktrees: `<git-common-dir>/hive/worktrees/<id>` on branch `hive/work/<id>` (pygit2).

A dependent starts from its blockers' code: its base is the target branch plus the work of every
blocker that is `done` but not yet merged (fast-forwarding to a blocker's branch when it already
contains the target, otherwise a merge commit of the blockers' branches). The base commit is
recorded so that the merge pipeline later replays only the worker's own commits.

Hive's worktree is on a *detached* HEAD at the branch's commit: an agent in it (jailed, see
`hive.jail.roles`) can commit without being able to write any ref, and hive itself moves
`hive/work/<id>` to what the agent committed (`adopt_head`). Before hive resets a worktree it
detaches its HEAD again (`head_file`): an agent may have written `ref: refs/heads/main` into it;
it rewrites the files only through `rewrite`, which follows no link the agent left there, and
keeps first what the worktree held uncommitted (`_reset`).

Nothing is discarded unkept: every function here that deletes or resets a worktree or a work
branch first keeps the heads it would lose under `refs/hive/attempts/<id>/<n>` (`attempts.keep`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection

import dulwich.file
import pygit2

from hive import git, lines
from hive.errors import HiveError
from hive.state.checkout import blob_id
from hive.state.issue_file import is_valid_id
from hive.state.store import signature_for
from hive.workspace import attempts, files_on_disk, filters, head_file, rewrite, spares
from hive.workspace.fastforward import checkout_of


@dataclass
class Worktree:
    issue_id: str
    path: Path
    branch: str
    base_commit: str
    combined: list[str] = field(default_factory=list)   # blockers whose unmerged work is in the base
    skipped: list[str] = field(default_factory=list)    # blockers whose work could not be combined


def branch_name(issue_id: str) -> str:
    if not is_valid_id(issue_id):
        raise HiveError(f"refusing to make a branch for an invalid issue id {issue_id!r}")
    return f"hive/work/{issue_id}"


def work_ref(issue_id: str) -> str:
    """`refs/heads/hive/work/<id>`: the issue's work branch as a full ref."""
    return git.branch_ref(branch_name(issue_id))


def worktree_path(paths: git.RepoPaths, issue_id: str) -> Path:
    branch_name(issue_id)  # validates the id before it touches a path
    return paths.worktrees_dir / issue_id


def open_repo(paths: git.RepoPaths) -> pygit2.Repository:
    return git.repository(paths.common_dir)


def target_tip(repo: pygit2.Repository, target_branch: str, target_ref: str = "") -> pygit2.Commit:
    ref = repo.references.get(target_ref or git.branch_ref(target_branch))
    if ref is None:
        raise HiveError(f"target branch {target_branch!r} does not exist")
    return ref.peel(pygit2.Commit)


def compute_base(repo: pygit2.Repository, target_branch: str,
                 blocker_branches: list[tuple[str, str]], target_ref: str = "") -> tuple[str, list[str], list[str]]:
    """The commit to start from: target (at `target_ref`: the remote's, in shared mode) + unmerged
    blocker work. Returns (oid, combined, skipped)."""
    base = target_tip(repo, target_branch, target_ref)
    combined, skipped = [], []
    for blocker_id, branch in blocker_branches:
        ref = repo.references.get(git.branch_ref(branch))   # never refs/remotes/*: not run here
        if ref is None:
            continue
        work = ref.peel(pygit2.Commit)
        if work.id == base.id or repo.descendant_of(base.id, work.id):
            continue  # already contained
        if repo.descendant_of(work.id, base.id):
            base = work
            combined.append(blocker_id)
            continue
        index = repo.merge_commits(base, work)
        if index.conflicts is not None:
            skipped.append(blocker_id)
            continue
        tree = index.write_tree(repo)
        signature = signature_for(repo)
        oid = repo.create_commit(None, signature, signature,
                                 f"hive: start from the unmerged work of {blocker_id}\n", tree,
                                 [base.id, work.id])
        base = repo[oid].peel(pygit2.Commit)
        combined.append(blocker_id)
    return str(base.id), combined, skipped


def create(paths: git.RepoPaths, issue_id: str, base_commit: str) -> Worktree:
    """A clean worktree for the issue on a fresh `hive/work/<id>` at `base_commit`."""
    repo = open_repo(paths)
    branch = branch_name(issue_id)
    remove(paths, issue_id, repo=repo)
    path = worktree_path(paths, issue_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    unlock_branch(paths, issue_id)
    base = repo[base_commit].peel(pygit2.Commit)
    repo.branches.local.create(branch.removeprefix("refs/heads/"), base, force=True)
    git.fetch_missing_objects(paths, [base_commit])   # a partial clone's target, fetched ahead of its files
    if not spares.take(paths, issue_id, path, base_commit):
        _add_detached(paths, issue_id, path, base)
    filtered = filters.smudge(paths, path, base_commit)
    settle_index(path, git.worktree_admin(paths.common_dir, issue_id), filtered=filtered)
    init_submodules(paths, path)
    return Worktree(issue_id, path, branch, base_commit)


_SECOND = 1_000_000_000


def settle_index(worktree: Path, admin: Path, filtered: Collection[str] = ()) -> int:
    """Leave none of the worktree's files racily clean for git, which compares timestamps to the
    second: a file changed in the second its index was written is read again by the agent's git,
    and `git add` then writes it anew as an object. In a jail that is a copy of every such file
    into the agent's own store (freshening the shared store's copy fails there: read-only), for
    hive to read back and delete (`absorb_objects`): every file of a fresh checkout. Each such
    file whose content is still what the index says (compared, as git's own refresh would) is
    dated a second back, and its new times are recorded in the index, written now; a later change
    gets a later time, so git still sees it. Returns how many. An index of a version other than
    2 or 3 (what libgit2 and git write unless told otherwise) is left as it is: git compares
    those files' contents, and only their copies cost. `filtered`: files git has just written
    from their entries through a filter (`filters.smudge`), whose content is not the blob's but
    stands for it; dated back as well, or the agent's git would compare them through the
    filter's clean side, which for git-lfs writes into a store the jail keeps read-only: every
    `git add` failed."""
    index_file = admin / "index"
    try:    # no fsync: like libgit2's own, this index is only a cache of the worktree's state
        out = dulwich.file.GitFile(index_file, "wb", fsync=False)
    except (OSError, dulwich.file.FileLocked):   # an `index.lock` left by a git that died
        return 0
    with out:                           # the lock held from the read to the write; aborted on error
        settled = _settled(worktree, index_file, frozenset(filtered))
        if settled is None:
            out.abort()
            return 0
        data, stamps = settled
        try:
            out.write(files_on_disk.restamped(data, stamps))
            out.close()                 # renamed over the index
        except OSError:                 # a full disk: the index as it was (git compares contents)
            out.abort()
            return 0
    return len(stamps)


def _settled(worktree: Path, index_file: Path,
             filtered: frozenset[str]) -> tuple[bytes, dict[int, os.stat_result]] | None:
    """The index's bytes and the new `lstat` of each file dated back (`_date_back`) by where its
    entry starts in them; None when none was (or the index is none of version 2 or 3)."""
    try:
        written = os.stat(index_file).st_mtime_ns // _SECOND
    except OSError:
        return None
    data = files_on_disk.read_index(index_file)
    read = files_on_disk.entries_and_offsets(data) if data is not None else None
    if data is None or read is None:
        return None
    stamps = _date_back(worktree, *read, written, filtered)
    return (data, stamps) if stamps else None


def _date_back(worktree: Path, entries: dict[str, files_on_disk.Entry], offsets: dict[str, int],
               written: int, filtered: frozenset[str] = frozenset()) -> dict[int, os.stat_result]:
    """Date back a second each file of `entries` written in the second `written` or later whose
    content is its entry's (or stands for it: `filtered`); the new `lstat` of each by where its
    entry starts in the index."""
    stamps: dict[int, os.stat_result] = {}
    folders: dict[str, bool] = {"": True}       # whether a folder of the worktree is one, not a link
    for name, (sha, mode, _, _) in entries.items():
        if not sha or mode == _GITLINK:
            continue                    # a conflict (none in a checkout hive made), a submodule
        if not _plain_folder(worktree, name.rpartition("/")[0], folders) or _UNSAFE_PART & set(name.split("/")):
            continue
        path = os.path.join(worktree, name)
        try:
            st = os.lstat(path)
            if st.st_mtime_ns // _SECOND < written or (name not in filtered and _blob_id(path, st) != sha):
                continue
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - _SECOND), follow_symlinks=False)
            stamps[offsets[name]] = os.lstat(path)
        except OSError:
            continue
    return stamps


_GITLINK = 0o160000
_UNSAFE_PART = frozenset({"", ".", "..", ".git"})


def _plain_folder(worktree: Path, folder: str, seen: dict[str, bool]) -> bool:
    """Whether `folder` (relative, `/`-separated) and every folder above it in `worktree` is a
    real folder, not a link out of it; `seen` remembers the answers."""
    if folder not in seen:
        parent = folder.rpartition("/")[0]
        try:
            real = stat.S_ISDIR(os.lstat(os.path.join(worktree, folder)).st_mode)
        except OSError:
            real = False
        seen[folder] = real and _plain_folder(worktree, parent, seen)
    return seen[folder]


def _blob_id(path: str, st: os.stat_result) -> str | None:
    """The hex id of the blob git would make of the file or link at `path` (`st` its lstat);
    None for anything else."""
    if stat.S_ISLNK(st.st_mode):
        return blob_id(os.fsencode(os.readlink(path)))
    if stat.S_ISREG(st.st_mode):
        return str(pygit2.hashfile(path))
    return None


def _add_detached(paths: git.RepoPaths, issue_id: str, path: Path, base: pygit2.Commit) -> None:
    """A linked worktree at `path`, detached at `base` with its files, made as git makes one: its
    admin folder `<common>/worktrees/<id>` (HEAD, commondir, gitdir) and `<path>/.git` naming it.
    Not libgit2's `add_worktree`: given the branch, it opens every worktree of the repository as
    a repository, to refuse one checked out elsewhere (~0.5 ms each, spares included) — hive's
    are all detached, and `remove` has just taken away any other of this name."""
    admin = git.worktree_admin(paths.common_dir, issue_id)
    admin.mkdir(parents=True)
    (admin / "commondir").write_text("../..\n", encoding="utf-8")
    (admin / "HEAD").write_text(f"{base.id}\n", encoding="utf-8")
    path.mkdir()
    git.link_worktree(admin, path)
    work = git.open_worktree(path)
    work.checkout_tree(work[base.tree_id], strategy=pygit2.enums.CheckoutStrategy.FORCE)


_SUBMODULE_NAME = re.compile(r"[A-Za-z0-9._/-]+")


def init_submodules(paths: git.RepoPaths, worktree: Path) -> list[str]:
    """Check the worktree's submodules out from the repository's own copies of them
    (`<common>/modules/<name>`, made by the person's `git submodule update --init`): no network,
    and the shared config untouched. Those with no local copy are left out; their names returned."""
    if not (worktree / ".gitmodules").is_file():
        return []
    listed = git.run(["config", "--file", ".gitmodules", "--name-only", "--get-regexp", r"^submodule\..*\.path$"],
                     worktree, check=False, here=True)
    names = [line[len("submodule."):-len(".path")] for line in listed.stdout.split()]
    overrides, missing = [], []
    for name in names:
        local = paths.common_dir / "modules" / name
        if not _SUBMODULE_NAME.fullmatch(name) or ".." in name.split("/") or not (local / "HEAD").is_file():
            missing.append(name)
            continue
        overrides += ["-c", f"submodule.{name}.url={local}"]
    if overrides:
        git.run([*git.NO_HOOKS, "-c", "protocol.file.allow=always", *overrides, "submodule", "update", "--init", "--quiet",
                 "--", *[n for n in names if n not in missing]], worktree, check=False, here=True)
    return missing


def absorb_objects(paths: git.RepoPaths, issue_id: str) -> int:
    """Copy the objects a jailed agent wrote (`git.private_objects`) into the shared store, each
    read and written again (so hashed again: a forged file name cannot plant a wrong object);
    empty its private store. How many were new. (Its links and special files go first:
    `clear_agent_git_dir`.)"""
    clear_agent_git_dir(paths, issue_id)
    _absorb_lfs(paths, issue_id)
    private = git.private_objects(paths.common_dir, issue_id)
    try:
        entries = list(os.scandir(private))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    if all(_empty_pack(entry) for entry in entries):
        if not entries:
            (private / "pack").mkdir(exist_ok=True)
        return 0                      # emptied by the last call (most calls: an agent commits once)
    common = open_repo(paths).odb
    added = sum(_absorb_loose(Path(entry.path), common) for entry in entries
                if len(entry.name) == 2 and entry.is_dir(follow_symlinks=False))
    added += _absorb_packs(paths, private / "pack", common)
    for entry in entries:
        if _empty_pack(entry):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)
    (private / "pack").mkdir(exist_ok=True)
    return added


_LFS_OID = re.compile(r"[0-9a-f]{64}")


def _absorb_lfs(paths: git.RepoPaths, issue_id: str) -> int:
    """The files a jailed agent's git-lfs stored (`git.private_lfs`) moved into the shared LFS
    store, each hashed again as it is copied (its name is its SHA-256: a file whose bytes are not
    what its name says is not taken); how many were new there."""
    private = git.private_lfs(paths.common_dir, issue_id) / "objects"
    shared = paths.common_dir / "lfs" / "objects"
    added = 0
    for first in _folders(private):
        for second in _folders(Path(first.path)):
            for item in git.folder_entries(second.path):
                name = item.name
                target = shared / name[:2] / name[2:4] / name
                if (_LFS_OID.fullmatch(name) and name[:2] == first.name and name[2:4] == second.name
                        and not target.exists() and _copy_hashed(Path(item.path), target, name)):
                    added += 1
                Path(item.path).unlink(missing_ok=True)
    return added


def _folders(folder: Path) -> list[os.DirEntry[str]]:
    return [entry for entry in git.folder_entries(folder) if entry.is_dir(follow_symlinks=False)]


def _copy_hashed(source: Path, target: Path, sha256: str) -> bool:
    """`source` copied to `target` (through a file beside it, renamed) if, as a regular file, its
    bytes hash to `sha256`; whether it was."""
    try:
        handle = lines.open_regular(source)
    except OSError:                   # lines.NotAFile among them: a FIFO, a link
        return False
    if handle is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}")
    digest = hashlib.sha256()
    try:
        with handle, open(temp, "wb") as out:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            return False
        os.replace(temp, target)
        return True
    except OSError:
        return False
    finally:
        temp.unlink(missing_ok=True)


MAX_LOOSE_OBJECT = 512 << 20
_KINDS = {b"commit": pygit2.enums.ObjectType.COMMIT, b"tree": pygit2.enums.ObjectType.TREE,
          b"blob": pygit2.enums.ObjectType.BLOB, b"tag": pygit2.enums.ObjectType.TAG}


def _absorb_loose(folder: Path, common: pygit2.Odb) -> int:
    """The loose objects of one fan-out folder of a private store written into `common`; how
    many were new. Each is read here as a regular file only (the agent, or what it left running,
    may make one a FIFO at any moment: libgit2 would wait on it for good, with the interpreter),
    inflated up to MAX_LOOSE_OBJECT, and hashed again by its writing."""
    added = 0
    try:
        names = [item.name for item in os.scandir(folder)]
    except OSError:
        return 0
    for name in names:
        try:
            packed = lines.read_regular(folder / name, MAX_LOOSE_OBJECT)
            raw = zlib.decompressobj().decompress(packed or b"", MAX_LOOSE_OBJECT + 64)
            header, _, body = raw.partition(b"\0")
            kind, _, size = header.partition(b" ")
            if kind not in _KINDS or not size.isdigit() or int(size) != len(body):
                continue              # damaged, cut short or forged: not the work
            if hashlib.sha1(raw).hexdigest() in common:
                continue
            common.write(_KINDS[kind], body)
            added += 1
        except (OSError, zlib.error):    # lines.NotAFile among them: a FIFO, a link
            continue
    return added


def _absorb_packs(paths: git.RepoPaths, pack_folder: Path, common: pygit2.Odb) -> int:
    """The objects of the packs of a private store (an agent's `git gc`) written into `common`;
    how many were new. Each pack and its index are copied first, as regular files only, into a
    folder of hive's that no agent writes, and read there."""
    try:
        packs = [item.name for item in os.scandir(pack_folder) if item.name.endswith(".pack")]
    except OSError:
        return 0
    if not packs:
        return 0
    copy = paths.hive_dir / f"absorbing-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(copy, ignore_errors=True)
    (copy / "pack").mkdir(parents=True)
    added = 0
    try:
        for pack in packs:
            for name in (pack, pack[:-len(".pack")] + ".idx"):
                try:
                    source = lines.open_regular(pack_folder / name)
                except OSError:           # lines.NotAFile among them
                    source = None
                if source is None:
                    break
                with source, open(copy / "pack" / name, "wb") as out:
                    shutil.copyfileobj(source, out)
        try:
            own = pygit2.Odb(str(copy))
            oids = list(own)
        except (pygit2.GitError, ValueError, KeyError, OSError):
            return 0                  # damaged packs: what they had is not the work
        for oid in oids:
            try:
                if oid in common:
                    continue
                kind, data = own.read(oid)[:2]
            except (pygit2.GitError, ValueError, KeyError, OSError):
                continue
            common.write(kind, data)
            added += 1
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return added


def clear_agent_git_dir(paths: git.RepoPaths, issue_id: str) -> None:
    """Remove the links and special files in the worktree's admin folder (its HEAD, its index, the
    agent's private object store: a jailed agent writes there) before libgit2 reads any of it: it
    would follow a link, and wait for good on a FIFO."""
    rewrite.remove_links_and_special_files(git.worktree_admin(paths.common_dir, issue_id))


def _empty_pack(entry: os.DirEntry[str]) -> bool:
    """The empty `pack` folder a private store keeps (git needs it to write there)."""
    if entry.name != "pack" or not entry.is_dir(follow_symlinks=False):
        return False
    try:
        with os.scandir(entry.path) as inside:
            return next(inside, None) is None
    except OSError:
        return False


def adopt_head(paths: git.RepoPaths, issue_id: str) -> str | None:
    """Move the work branch to what the agent committed in hive's worktree; the new head.

    The worktree's HEAD is the agent's to move (it is all a jailed agent can move); the branch is
    hive's. A HEAD that names no commit leaves the branch where it is."""
    path = worktree_path(paths, issue_id)
    if not path.exists():
        return head_of(paths, issue_id)
    absorb_objects(paths, issue_id)
    head = head_file.commit(paths, issue_id, detach=True)
    if head is None:
        return head_of(paths, issue_id)
    if checkout_of(paths, branch_name(issue_id)) is None:
        old = head_of(paths, issue_id)
        repo = open_repo(paths)
        attempts.keep(repo, issue_id, [old], reachable_from=[head])
        unlock_branch(paths, issue_id)
        repo.references.create(work_ref(issue_id), head, force=True)
    return head


def follow_worktree(paths: git.RepoPaths, issue_id: str) -> str | None:
    """A person said the work is done: the branch moves to hive's worktree's HEAD, where they
    committed (the old head kept) — unless a rebase or merge is half done there; the branch's head."""
    path = worktree_path(paths, issue_id)
    if (path / ".git").is_file():
        try:
            idle = git.open_worktree(path).state() == pygit2.enums.RepositoryState.NONE
        except pygit2.GitError:
            idle = False
        if idle:
            return adopt_head(paths, issue_id)
    return head_of(paths, issue_id)


# one removal of an issue's worktree at a time in this process: the merge step and the daemon's
# loop (an agent stopped) may both retire a finished issue, and a spare half made by one while the
# other deletes the folder under it would be neither a spare nor removed
_REMOVING = [threading.Lock() for _ in range(32)]


def remove(paths: git.RepoPaths, issue_id: str, *, delete_branch: bool = True,
           repo: pygit2.Repository | None = None, target: str = "", spare: bool = False,
           keep_uncommitted: bool = True) -> str | None:
    """Remove the issue's worktree (files, git admin dir) and, unless told not to, its branch;
    the heads they held are kept first (unless on the `target` branch, or on the branch kept),
    and so is what the worktree held uncommitted (an agent's work it never committed, a person's
    edits), as a commit on its HEAD, unless `keep_uncommitted` is False (the merge reset it to the
    landed commit just before: what is there since is the tests' output). That commit is returned
    (None: nothing was uncommitted). With `spare`, the worktree is moved aside for the next
    issue's (`spares`) if it can be. A second removal of the same issue waits for the first, then
    finds nothing left to do."""
    with _REMOVING[hash(issue_id) % len(_REMOVING)]:
        return _remove(paths, issue_id, delete_branch, repo or open_repo(paths), target, spare, keep_uncommitted)


def _remove(paths: git.RepoPaths, issue_id: str, delete_branch: bool, repo: pygit2.Repository,
            target: str, spare: bool, keep_uncommitted: bool) -> str | None:
    path = worktree_path(paths, issue_id)
    # git's admin folder of the worktree, named after it: most calls (a new issue's worktree)
    # find none. The agent's commits are in its private store there: brought in once, for the
    # heads kept below.
    admin = git.worktree_admin(paths.common_dir, issue_id)
    if admin.is_dir():
        absorb_objects(paths, issue_id)
    uncommitted = _keep_uncommitted(paths, issue_id, repo) if keep_uncommitted else None
    _keep_discarded(paths, issue_id, repo, delete_branch=delete_branch, target=target)
    if spare and spares.put(paths, issue_id, path):
        pass   # its files and admin folder are the spare's now
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)
    if admin.is_dir():   # listing the worktrees reads every one of them: looked for first
        if issue_id in repo.list_worktrees():
            try:
                repo.lookup_worktree(issue_id).prune(True)
            except pygit2.GitError:
                shutil.rmtree(admin, ignore_errors=True)
        clear_broken_admin(paths, issue_id, repo)
    if delete_branch:
        unlock_branch(paths, issue_id)
        ref = work_ref(issue_id)
        if repo.references.get(ref) is not None and not checked_out(paths, ref):   # a person's checkout keeps it
            # not Branch.is_checked_out()/delete(): libgit2 opens every worktree as a repository
            # for each (~2 ms apiece with 8 agents); hive sets no `branch.hive/work/*` config for
            # delete() to clean up
            try:
                repo.references.delete(ref)
            except KeyError:
                pass   # deleted meanwhile: another thread retired the same issue
    return uncommitted


def _keep_uncommitted(paths: git.RepoPaths, issue_id: str, repo: pygit2.Repository) -> str | None:
    """Keep what the issue's worktree holds uncommitted as an attempt (`rewrite`); None when it
    holds nothing uncommitted, or is no worktree to read (gone, broken: nothing git could show).
    The agent's objects were absorbed just before (its HEAD may be a commit it made)."""
    path = worktree_path(paths, issue_id)
    if not path.is_dir():
        return None                        # most calls: a new issue's worktree, none there yet
    try:
        work = git.open_worktree(path)
        if work.head_is_unborn:
            return None
        return rewrite.keep_what_is_uncommitted(work, lambda commit: attempts.keep(repo, issue_id, [commit]))
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return None


def retire(paths: git.RepoPaths, issue_id: str, target: str = "", spare: bool = False,
           keep_uncommitted: bool = True) -> None:
    """The issue is finished with (finalized, canceled): its worktree and branch go, their heads
    kept unless landed on `target`, and what it held uncommitted kept unless told not to (see
    `remove`; with `spare`, a daemon's, the worktree is kept aside for the next issue's). Its
    session transcripts stay (`git hive prune` ends them)."""
    remove(paths, issue_id, target=target, spare=spare, keep_uncommitted=keep_uncommitted)


def _keep_discarded(paths: git.RepoPaths, issue_id: str, repo: pygit2.Repository, *,
                    delete_branch: bool = True, target: str = "") -> list[attempts.Attempt]:
    """Keep the worktree's HEAD and (when it goes) the branch's head, before they are removed
    (the agent's objects absorbed just before)."""
    branch = head_of(paths, issue_id)
    if (worktree_path(paths, issue_id) / ".git").is_file():
        head = head_file.commit(paths, issue_id)
    else:   # the worktree gone: what git's admin folder records, if a commit id (the agent may write it)
        recorded = head_file.read(paths, issue_id)
        head = recorded if git.is_object_id(recorded) else None
    heads = [head] + ([branch] if delete_branch else [])
    anchors = [git.read_ref(paths.common_dir, git.branch_ref(target)) if target else None]
    return attempts.keep(repo, issue_id, heads, reachable_from=anchors + ([] if delete_branch else [branch]))


def worktree_head(paths: git.RepoPaths, issue_id: str) -> str | None:
    """The commit hive's worktree of the issue is at (its objects brought into the shared store
    first: a jailed agent's commits are in its private one); None without a worktree."""
    path = worktree_path(paths, issue_id)
    if not (path / ".git").is_file():
        return None
    absorb_objects(paths, issue_id)
    return head_file.commit(paths, issue_id)


def checked_out(paths: git.RepoPaths, ref: str) -> bool:
    """Whether the main worktree or a linked one has `ref` checked out (its HEAD names it)."""
    heads = [os.path.join(paths.common_dir, "HEAD")]
    try:
        heads.extend(os.path.join(entry.path, "HEAD") for entry in os.scandir(paths.common_dir / "worktrees"))
    except (FileNotFoundError, NotADirectoryError):
        pass
    wanted = f"ref: {ref}"
    for head in heads:
        try:
            with open(head, encoding="utf-8", errors="replace") as handle:
                if handle.read().strip() == wanted:
                    return True
        except OSError:
            continue
    return False


def clear_broken_admin(paths: git.RepoPaths, issue_id: str, repo: pygit2.Repository) -> None:
    """Remove `<common>/worktrees/<id>` when git does not list it as a worktree: a process killed
    while adding the worktree left it half made, and adding it again would fail on it forever."""
    admin = git.worktree_admin(paths.common_dir, issue_id)
    if admin.is_dir() and issue_id not in repo.list_worktrees():
        shutil.rmtree(admin, ignore_errors=True)


def unlock_branch(paths: git.RepoPaths, issue_id: str) -> None:
    """Wait for a lock on the work branch — or on packed-refs, which deleting it may need — to go;
    remove it if a killed process left it."""
    git.release_stale_lock(git.ref_lock(paths.common_dir, work_ref(issue_id)))
    git.release_stale_lock(paths.common_dir / "packed-refs.lock")


def head_of(paths: git.RepoPaths, issue_id: str) -> str | None:
    ref = open_repo(paths).references.get(work_ref(issue_id))
    return str(ref.target) if ref is not None else None


def has_new_commits(paths: git.RepoPaths, issue_id: str, base_commit: str) -> bool:
    """Whether the work branch holds commits of its own beyond the commit it started from."""
    repo = open_repo(paths)
    head = head_of(paths, issue_id)
    if head is None or head == base_commit:
        return False
    try:
        return not repo.descendant_of(base_commit, head)
    except (pygit2.GitError, ValueError):
        return False


def leftover_worktrees(paths: git.RepoPaths) -> list[str]:
    """Issue ids that have a worktree directory or a work branch on disk."""
    repo = open_repo(paths)
    ids: set[str] = set()
    if paths.worktrees_dir.is_dir():
        ids.update(p.name for p in paths.worktrees_dir.iterdir() if is_valid_id(p.name))
    for name in repo.branches.local:
        if name.startswith("hive/work/") and is_valid_id(name.removeprefix("hive/work/")):
            ids.add(name.removeprefix("hive/work/"))
    return sorted(ids)


def sync_worktree(paths: git.RepoPaths, issue_id: str, head: str) -> None:
    """Point the work branch at `head` and make its worktree exactly that (`_reset`: the tests
    run on the commit alone, not on what was left there uncommitted, which is kept)."""
    worktree = worktree_path(paths, issue_id)
    repo = open_repo(paths)
    branch = branch_name(issue_id)
    elsewhere = checkout_of(paths, branch)
    attempts.keep(repo, issue_id, [head_of(paths, issue_id), worktree_head(paths, issue_id)],
                  reachable_from=[head])
    if elsewhere is None or elsewhere.resolve() == worktree.resolve():
        unlock_branch(paths, issue_id)
        repo.references.create(git.branch_ref(branch), head, force=True)
    # else: a person's own checkout of the branch: never move it under them (hive's worktree is
    # detached then, see `recreate`)
    if worktree.exists():
        head_file.commit(paths, issue_id, detach=True)
        _reset(paths, issue_id, git.open_worktree(worktree), head)


def check_out_for_tests(paths: git.RepoPaths, issue_id: str, commit: str, *, also_held: str = "") -> None:
    """Hive's worktree of the issue exactly at `commit` (detached, `_reset`), its branch left
    where it is: a merge train's tests run on its last candidate, which holds other issues' work
    too. What the worktree was at is kept unless the branch, `commit` or `also_held` holds it (a
    commit a test command made there is kept)."""
    attempts.keep(open_repo(paths), issue_id, [worktree_head(paths, issue_id)],
                  reachable_from=[commit, also_held or None, head_of(paths, issue_id)])
    head_file.commit(paths, issue_id, detach=True)
    _reset(paths, issue_id, git.open_worktree(worktree_path(paths, issue_id)), commit)


def recreate(paths: git.RepoPaths, issue_id: str) -> None:
    """Hive's worktree of a work branch back at its place (after it was removed or broken)."""
    head = head_of(paths, issue_id)
    repo = open_repo(paths)
    path = worktree_path(paths, issue_id)
    if issue_id in repo.list_worktrees():
        repo.lookup_worktree(issue_id).prune(True)
    clear_broken_admin(paths, issue_id, repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert head is not None
    if checkout_of(paths, branch_name(issue_id)) is not None:
        # A person has the branch checked out in a worktree of their own (they finished the issue
        # by hand): leave that checkout theirs; hive works on a detached HEAD at the same commit.
        git.run([*git.NO_HOOKS, "worktree", "add", "--quiet", "--detach", str(path), head], paths.main_worktree,
                here=True)
    else:
        repo.add_worktree(issue_id, str(path), repo.references[work_ref(issue_id)])
        head_file.commit(paths, issue_id, detach=True)
    settle_index(path, git.worktree_admin(paths.common_dir, issue_id), filtered=filters.smudge(paths, path, head))
    init_submodules(paths, path)


def prepare_for_merge(paths: git.RepoPaths, issue_id: str, head: str) -> None:
    """Hive's worktree for the merge, at `head` (recreated if it is gone)."""
    path = worktree_path(paths, issue_id)
    if not path.exists():
        recreate(paths, issue_id)
        return
    attempts.keep(open_repo(paths), issue_id, [worktree_head(paths, issue_id)], reachable_from=[head])
    at = head_file.commit(paths, issue_id, detach=True)
    work = git.open_worktree(path)
    if work.state() != pygit2.enums.RepositoryState.NONE:
        # a rebase or merge left half done by a refinery turn the daemon's end cut short: it is
        # hive's own worktree, so start again from the work (`head`)
        work.state_cleanup()
        _reset(paths, issue_id, work, head)
        return
    if at != head:
        _reset(paths, issue_id, work, head)   # the person committed more


def _reset(paths: git.RepoPaths, issue_id: str, work: pygit2.Repository, commit: str) -> None:
    """Hive's worktree of the issue exactly at `commit` (`rewrite.reset`), what it held
    uncommitted (an agent's leftovers, or a person's, who fixes an issue in it by hand) kept
    first as an attempt: a commit of its HEAD with every changed and untracked file. The agent's
    objects are in the shared store already: each caller has just read `worktree_head`."""
    repo = open_repo(paths)
    rewrite.reset(work, commit, keep_uncommitted=lambda uncommitted: attempts.keep(repo, issue_id, [uncommitted]))
    filtered = filters.smudge(paths, Path(work.workdir), commit)
    if filtered:
        settle_index(Path(work.workdir), git.worktree_admin(paths.common_dir, issue_id), filtered=filtered)

