"""Replaying a branch's own commits onto another commit, in memory (pygit2 `merge_trees`).

The branch's own commits — those after the commit it started from — are replayed one by one, so a
dependent that started from its blocker's unmerged work replays only its own changes once the
blocker has been merged. No ref or file is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2


@dataclass
class Replay:
    ok: bool
    head: str = ""                  # the replayed head (ok)
    conflicts: list[str] = field(default_factory=list)
    detail: str = ""


def own_commits(repo: pygit2.Repository, head: str, base: str) -> list[pygit2.Commit]:
    """Commits reachable from `head` but not from `base`, oldest first (first-parent chain)."""
    walker = repo.walk(head, pygit2.GIT_SORT_TOPOLOGICAL | pygit2.GIT_SORT_REVERSE)
    if base:
        walker.hide(base)
    return [c for c in walker]


def replay(repo: pygit2.Repository, head: str, base: str, onto: str) -> Replay:
    """Replay the commits base..head onto `onto` in memory; no ref or file is touched."""
    current = repo[onto].peel(pygit2.Commit)
    commits = own_commits(repo, head, base)
    for commit in commits:
        parent_tree = commit.parents[0].tree if commit.parents else repo[repo.TreeBuilder().write()]
        index = repo.merge_trees(parent_tree, current.tree, commit.tree)
        if index.conflicts is not None:
            paths = sorted({(entry.path) for triple in index.conflicts for entry in triple if entry is not None})
            return Replay(False, conflicts=paths,
                          detail=f"replaying {str(commit.id)[:10]} ({commit.message.splitlines()[0] if commit.message else ''}) "
                                 f"onto {onto[:10]} conflicts in: {', '.join(paths)}")
        tree = index.write_tree(repo)
        if tree == current.tree.id:
            continue  # already contained (e.g. a blocker's change that reached the target)
        new = repo.create_commit(None, commit.author, commit.committer, commit.message, tree, [current.id])
        current = repo[new]
    return Replay(True, head=str(current.id))
