"""The files an issue's work has changed so far, as hive can see them (pygit2, read only).

While its agent works: hive's worktree against where the work forked from the target — what is
committed, staged, changed on disk or new (ignored files not). Read through the worktree's index
and its stat cache (`git status`'s way: ~15 ms for 10k files, where hashing every file to compare
it with a tree took ~180 ms), never reading an object the agent wrote. Once the
work is done and its worktree gone: the work branch against its fork point. Used by the touches
rule (`hive/touches.py`).
"""

from __future__ import annotations

from pathlib import Path

import pygit2
from pygit2.enums import DiffOption

from hive import git
from hive.workspace import worktrees

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
            worktrees.clear_agent_git_dir(paths, issue_id)   # its HEAD and index: the agent's to write
            found = _in_worktree(path, base)
        else:
            found = _paths_of(repo[base].peel(pygit2.Commit).tree.diff_to_tree(repo[head].peel(pygit2.Commit).tree))
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return []
    return [name for name in dict.fromkeys(found) if name not in PROTOCOL_FILES][:MAX_FILES]


def _in_worktree(path: Path, base: pygit2.Oid) -> list[str]:
    """Committed or staged (the fork point's tree against the index), then changed on disk or
    new (the index against the files). Neither reads an object the agent wrote: its private
    store, where its commits are until hive absorbs them, is not opened while it works (a FIFO
    there, named as an object hive reads, would block hive for good)."""
    work = git.open_worktree(path)
    committed = _paths_of(work[base].peel(pygit2.Commit).tree.diff_to_index(work.index))
    unstaged = work.diff(flags=DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS)
    return committed + _paths_of(unstaged)


def _paths_of(diff: pygit2.Diff) -> list[str]:
    names: list[str] = []
    for delta in diff.deltas:
        names.extend(name for name in (delta.old_file.path, delta.new_file.path) if name)
        if len(names) >= 2 * MAX_FILES:
            break
    return names
