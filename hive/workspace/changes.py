"""The files an issue's work has changed so far, as hive can see them (pygit2, read only).

While its agent works: the files of hive's worktree that differ from where the work started —
committed or not, untracked included, ignored ones not. Read from the files on disk, not the
agent's commits: a jailed agent's new objects are in its private store until hive absorbs them
(`worktrees.absorb_objects`). Once the work is done (the worktree may be gone): the work branch
against where it forked from the target. Used by the touches rule (`hive/touches.py`).
"""

from __future__ import annotations

import pygit2

from hive import git
from hive.workspace import worktrees

# the worker protocol files (`hive.agents.protocol`; excluded by `init` as well): never the work
PROTOCOL_FILES = frozenset({".hive-result.jsonl", ".hive-notes.jsonl"})
MAX_FILES = 5000   # an agent that wrote more (a vendored tree, say) is counted by these
_UNTRACKED = pygit2.enums.DiffOption.INCLUDE_UNTRACKED | pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS


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
            diff = pygit2.Repository(str(path))[base].peel(pygit2.Commit).tree.diff_to_workdir(_UNTRACKED)
        else:
            diff = repo.diff(repo[base].peel(pygit2.Commit).tree, repo[head].peel(pygit2.Commit).tree)
    except (pygit2.GitError, KeyError, ValueError):
        return []
    found: dict[str, None] = {}
    for delta in diff.deltas:
        for name in (delta.old_file.path, delta.new_file.path):
            if name and name not in PROTOCOL_FILES:
                found[name] = None
        if len(found) >= MAX_FILES:
            break
    return list(found)
