"""Replaying a branch's own commits onto another commit, in memory (pygit2 `merge_trees`).

The branch's own commits — those after the commit it started from — are replayed one by one, so a
dependent that started from its blocker's unmerged work replays only its own changes once the
blocker has been merged. No ref or file is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from hive.workspace.landings import carries, landing_message


@dataclass
class Replay:
    ok: bool
    head: str = ""                  # the replayed head (ok)
    conflicts: list[str] = field(default_factory=list)
    detail: str = ""


def own_commits(repo: pygit2.Repository, head: str, base: str) -> list[pygit2.Commit]:
    """Commits reachable from `head` but not from `base`, oldest first (first-parent chain)."""
    walker = repo.walk(head, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    if base:
        walker.hide(base)
    return [c for c in walker]


def replay(repo: pygit2.Repository, head: str, base: str, onto: str, issue_id: str = "") -> Replay:
    """Replay the commits base..head onto `onto` in memory; no ref or file is touched. With
    `issue_id`, the replayed commits are a landing: the last one carries the issue's trailer
    (`landings.landing_message`)."""
    current = repo[onto].peel(pygit2.Commit)
    commits = own_commits(repo, head, base)
    for n, commit in enumerate(commits):
        parent_tree = commit.parents[0].tree if commit.parents else repo[repo.TreeBuilder().write()].peel(pygit2.Tree)
        index = repo.merge_trees(parent_tree, current.tree, commit.tree)
        if index.conflicts is not None:
            paths = sorted({(entry.path) for triple in index.conflicts for entry in triple if entry is not None})
            return Replay(False, conflicts=paths,
                          detail=f"replaying {str(commit.id)[:10]} ({commit.message.splitlines()[0] if commit.message else ''}) "
                                 f"onto {onto[:10]} conflicts in: {', '.join(paths)}")
        tree = index.write_tree(repo)
        if tree == current.tree.id:
            continue  # already contained (e.g. a blocker's change that reached the target)
        message = landing_message(commit.message, issue_id, n == len(commits) - 1) if issue_id else commit.message
        new = repo.create_commit(None, commit.author, commit.committer, message, tree, [current.id])
        current = repo[new].peel(pygit2.Commit)
    if issue_id and str(current.id) != str(repo[onto].peel(pygit2.Commit).id) and not carries(current, issue_id):
        # its last commit was already contained: the trailer goes on the last one that landed
        new = repo.create_commit(None, current.author, current.committer,
                                 landing_message(current.message, issue_id, True), current.tree.id,
                                 [p.id for p in current.parents])
        current = repo[new].peel(pygit2.Commit)
    return Replay(True, head=str(current.id))
