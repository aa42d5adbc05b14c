"""Files git writes through a filter driver of the person's config (git-lfs's `lfs`).

libgit2, which writes hive's worktrees, runs no external filter: a file `.gitattributes` sends
through one (`filter=lfs`) was written as its blob holds it, for git-lfs a pointer of three lines
where the person's own checkout has the content. Agents read pointers, and every test that read
such a file failed on every candidate. After each checkout hive makes in a worktree of its own,
`smudge` has git write those files again through their filters, as git's own checkout does.

The driver is the person's (`filter.<name>.smudge` or `.process` in their git config: `git lfs
install` sets it); which files go through it is the branch's `.gitattributes`, as for git.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy

from hive import git
from hive.state import raw_trees


def smudge(paths: git.RepoPaths, worktree: Path, commit: str) -> list[str]:
    """Write again, through their filters, the files of `worktree` (one of hive's, its index just
    written by a checkout of `commit`) that hold their blob's bytes where git would have written
    them through a driver of the person's (`git.filter_config`); the paths written. Where the
    filter fails (git-lfs offline, the object fetched nowhere) the blob's bytes are put back: the
    worktree is never left without a file."""
    config = git.filter_config(paths)
    names = config.drivers
    if not names or not _filters_assigned(paths, commit, config.attributes_file):
        return []
    repo = git.repository(paths.common_dir)
    listed = _git(worktree, ["ls-files", "-z", "--stage", "--", *(f":(attr:filter={name})" for name in names)])
    if listed.returncode != 0:
        return []
    unfiltered = [path for path in _regular_entries(listed.stdout) if _holds_blob(repo.odb, worktree, *path)]
    if not unfiltered:
        return []
    files = [path for path, _ in unfiltered]
    for path in files:
        os.unlink(os.path.join(worktree, path))   # git writes no file it takes for up to date
    written = _git(worktree, ["--literal-pathspecs", "checkout", "--pathspec-from-file=-", "--pathspec-file-nul"],
                   b"\0".join(os.fsencode(path) for path in files))
    missing = [path for path in files if not os.path.lexists(os.path.join(worktree, path))]
    if missing:
        git.open_worktree(worktree).checkout_index(paths=missing, strategy=CheckoutStrategy.FORCE)
    return [] if written.returncode != 0 else files


def _filters_assigned(paths: git.RepoPaths, commit: str, attributes_file: str) -> bool:
    """Whether an attributes file git reads names a filter: a `.gitattributes` of the commit, in
    any folder (`git lfs track` run in `assets/` writes `assets/.gitattributes`), the
    repository's `info/attributes`, the person's `core.attributesFile`. Where none does, no `git
    ls-files` is run (a person who ran `git lfs install` once has a driver in every repository)."""
    repo = git.repository(paths.common_dir)
    try:
        if _tree_names_filter(repo.odb, str(repo[commit].peel(pygit2.Tree).id)):
            return True
    except (KeyError, ValueError, pygit2.GitError):
        return True                  # not read here: let git decide
    candidates = [paths.common_dir / "info" / "attributes"]
    if attributes_file:
        candidates.append(Path(os.path.expanduser(attributes_file)))
    for candidate in candidates:   # the person's own files: followed where a link (dotfiles), as by git
        try:
            with open(candidate, "rb") as attributes:
                if b"filter=" in attributes.read(1 << 20):
                    return True
        except OSError:
            continue
    return False


_NAMES_FILTER: dict[str, bool] = {}   # tree id -> whether a `.gitattributes` in it says `filter=`
_KEPT_TREES = 200_000
_FOLDER, _FILES = b"40000", (b"100644", b"100755")


def _tree_names_filter(odb: pygit2.Odb, root: str) -> bool:
    """Whether a `.gitattributes` anywhere in tree `root` names a filter; each tree's answer kept
    by its id, so a commit after another reads only the folders it changed (and no recursion: a
    tree of the branch may nest deeper than Python's stack)."""
    if len(_NAMES_FILTER) > _KEPT_TREES:
        _NAMES_FILTER.clear()
    children: dict[str, tuple[bool, list[str]]] = {}
    stack = [root]
    while stack:
        tree = stack[-1]
        if tree in _NAMES_FILTER:
            stack.pop()
            continue
        if tree not in children:
            own, subtrees = False, []
            for record in raw_trees.parse(odb.read(tree)[1]):
                space = record.index(b" ")
                mode, name, oid = record[:space], record[space + 1:-21], record[-20:].hex()
                if mode == _FOLDER:
                    subtrees.append(oid)
                elif name == b".gitattributes" and mode in _FILES:
                    own = own or b"filter=" in odb.read(oid)[1]
            children[tree] = (own, subtrees)
            stack.extend(sub for sub in subtrees if sub not in _NAMES_FILTER)
            continue
        own, subtrees = children.pop(tree)
        _NAMES_FILTER[tree] = own or any(_NAMES_FILTER.get(sub, False) for sub in subtrees)
        stack.pop()
    return _NAMES_FILTER.get(root, True)   # True: cleared meanwhile by another thread, let git decide


def _regular_entries(listed: bytes) -> list[tuple[str, str]]:
    """(path, blob id) of each regular file, stage 0, in `git ls-files -z --stage` output."""
    found = []
    for record in listed.split(b"\0"):
        meta, _, path = record.partition(b"\t")
        fields = meta.split(b" ")
        if len(fields) == 3 and fields[0] in (b"100644", b"100755") and fields[2] == b"0" and path:
            found.append((os.fsdecode(path), fields[1].decode("ascii")))
    return found


def _holds_blob(odb: pygit2.Odb, worktree: Path, path: str, oid: str) -> bool:
    """Whether the file at `path` is a regular file holding exactly blob `oid` (its size first:
    a file written through its filter is seldom the size of its pointer, and is not read)."""
    full = os.path.join(worktree, path)
    try:
        st = os.lstat(full)
        if not stat.S_ISREG(st.st_mode) or st.st_size != odb.read_header(oid)[1]:
            return False
    except (OSError, KeyError, ValueError):
        return False
    return str(pygit2.hashfile(full)) == oid


def _git(worktree: Path, args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """`git.in_worktree` with no hook: a checkout runs `post-checkout`, git-lfs's among them."""
    return git.in_worktree(worktree, [*git.NO_HOOKS, *args], stdin)
