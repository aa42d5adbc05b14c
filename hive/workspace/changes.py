"""The files an issue's work has changed so far, as hive can see them (pygit2, read only).

While its agent works: hive's worktree against where the work forked from the target — what is
committed or staged (the fork point's tree against a copy of the worktree's index) and what is
changed on disk or new (each file's `lstat` against the index's record of it, `git status`'s
stat cache, without hashing). The agent (and whatever it left running) writes that worktree and
its index meanwhile, so nothing there is handed to libgit2, which reads a `.gitignore` to list
untracked files and waits for good on one the agent made a FIFO, or a link to a FIFO of the
host's: the index is read here, only if it is a regular file, and no file of the worktree is
opened (`files_on_disk`). New files are listed up to `files_on_disk.MAX_NEW`, then new folders
as `folder/` (ignored files are not told apart: an agent's `node_modules/` is one such entry),
a path ending in `/` covering all under it for the touches rule (`hive/state/globs.matches`).
Once the work is done and its worktree gone: the work branch against its fork point. Used by
the touches rule (`hive/touches.py`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pygit2

from hive import git
from hive.workspace import files_on_disk, worktrees

# the worker protocol files (`hive.agents.protocol`; `init` excludes them as well): never the work
PROTOCOL_FILES = frozenset({".hive-result.jsonl", ".hive-notes.jsonl"})
MAX_FILES = 5000   # an agent that wrote more (a vendored tree, say) is counted by these


def changed_files(paths: git.RepoPaths, issue_id: str, target_ref: str) -> list[str]:
    """The paths (repository-relative) the issue's work changed; [] when there is no work here."""
    repo = worktrees.open_repo(paths)
    head = worktrees.head_of(paths, issue_id)
    target = repo.references.get(target_ref)
    if head is None or target is None:
        return []
    try:
        base = repo.merge_base(pygit2.Oid(hex=head), target.target) or pygit2.Oid(hex=head)
        path = worktrees.worktree_path(paths, issue_id)
        if path.is_dir():
            found = _in_worktree(path, git.worktree_admin(paths.common_dir, issue_id) / "index", repo, base,
                                 paths.hive_dir)
        else:
            found = _paths_of(repo[base].peel(pygit2.Commit).tree.diff_to_tree(repo[head].peel(pygit2.Commit).tree))
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return []
    return [name for name in dict.fromkeys(found) if name not in PROTOCOL_FILES][:MAX_FILES]


def _in_worktree(worktree: Path, index_file: Path, repo: pygit2.Repository, base: pygit2.Oid,
                 scratch: Path) -> list[str]:
    """Committed or staged (the fork point's tree against a copy of the index in `scratch`, a
    folder of hive's: libgit2 reads no file the agent can touch), then changed on disk or new
    (the files against the index); [] when the index cannot be read as one."""
    data = files_on_disk.read_index(index_file)
    entries = None if data is None else files_on_disk.entries_of(data)
    if data is None or entries is None:
        return []
    copy = scratch / f"index-{os.getpid()}-{threading.get_ident()}"
    try:
        copy.write_bytes(data)
        index = pygit2.Index(str(copy))
    finally:
        copy.unlink(missing_ok=True)
    staged = _paths_of(repo[base].peel(pygit2.Commit).tree.diff_to_index(index))
    return staged + files_on_disk.differing(worktree, entries)


def _paths_of(diff: pygit2.Diff) -> list[str]:
    names: list[str] = []
    for delta in diff.deltas:
        names.extend(name for name in (delta.old_file.path, delta.new_file.path) if name)
        if len(names) >= 2 * MAX_FILES:
            break
    return names
