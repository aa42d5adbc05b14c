"""Merging two histories of `hive/state` in-process, with the `hive` merge rules.

Used where hive merges state branches itself — approving a plan, syncing with a remote — so that
the result is the same as a person's `git merge` through the registered driver, without a checkout
and with issue files matched by id (an issue archived on one side and edited on the other is one
issue, not a modify/delete conflict). libgit2 runs no custom merge drivers, hence this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from hive.state import layout
from hive.state.issue_file import is_valid_id, parse, update_text
from hive.state.merge_driver import merge_file, merge_issue
from hive.state.trees import walk_changes, write_tree


@dataclass
class StateMerge:
    tree: pygit2.Oid
    changed: list[str] = field(default_factory=list)     # paths that differ from ours
    warnings: list[str] = field(default_factory=list)    # body conflicts kept with markers, etc.


def _read(repo: pygit2.Repository, tree: pygit2.Tree | None, path: str) -> bytes | None:
    if tree is None:
        return None
    try:
        return repo[tree[path].id].data
    except KeyError:
        return None


def _issue_version(repo: pygit2.Repository, tree: pygit2.Tree | None, issue_id: str) -> tuple[str, bytes] | None:
    for path in layout.candidate_paths(issue_id):
        data = _read(repo, tree, path)
        if data is not None:
            return path, data
    return None


def merge_states(repo: pygit2.Repository, ours: str, theirs: str, *, drop: tuple[str, ...] = (),
                 prefer_theirs_claims: bool = False) -> StateMerge:
    """The tree of `theirs` merged into `ours` (commit ids), minus the paths in `drop`.

    With `prefer_theirs_claims` (syncing with a remote), an issue that both sides claimed for
    different agents keeps theirs' claim: theirs was pushed first, so theirs is the valid one.
    """
    ours_commit = repo[ours].peel(pygit2.Commit)
    theirs_commit = repo[theirs].peel(pygit2.Commit)
    base_id = repo.merge_base(ours_commit.id, theirs_commit.id)
    base_tree = repo[base_id].peel(pygit2.Commit).tree if base_id else None
    ours_tree, theirs_tree = ours_commit.tree, theirs_commit.tree
    ours_changes = {p: (o, n) for p, o, n in walk_changes(repo, base_tree, ours_tree)}
    theirs_changes = list(walk_changes(repo, base_tree, theirs_tree))
    files: dict[str, bytes | None] = {}
    result = StateMerge(ours_tree.id)
    issues_touched: set[str] = set()
    for path, _, new in theirs_changes:
        if path in drop:
            continue
        issue_id = layout.issue_id_of(path)
        if issue_id is not None and is_valid_id(issue_id):
            issues_touched.add(issue_id)
            continue
        if path not in ours_changes:
            files[path] = repo[new].data if new else None
            continue
        if ours_changes[path][1] == new:
            continue
        ours_data = _read(repo, ours_tree, path)
        theirs_data = repo[new].data if new else None
        if theirs_data is None or ours_data is None:
            if ours_data is None and theirs_data is not None:
                files[path] = theirs_data   # deleted on our side, changed on theirs: keep the change
            continue
        merged, clean = merge_file(_read(repo, base_tree, path), ours_data, theirs_data, path)
        if not clean:
            result.warnings.append(f"{path}: both sides changed the same lines; kept both with markers")
        files[path] = merged
    for issue_id in sorted(issues_touched):
        theirs_version = _issue_version(repo, theirs_tree, issue_id)
        ours_version = _issue_version(repo, ours_tree, issue_id)
        base_version = _issue_version(repo, base_tree, issue_id)
        if theirs_version is None:
            if ours_version is not None and base_version is not None and ours_version[1] == base_version[1]:
                files[ours_version[0]] = None   # deleted on theirs, untouched on ours
            continue
        if ours_version is None:
            if base_version is None:
                files[theirs_version[0]] = theirs_version[1]   # new on theirs
            else:
                files[theirs_version[0]] = theirs_version[1]   # deleted on ours, changed on theirs: keep
            continue
        if ours_version[1] == theirs_version[1]:
            merged_data, clean = ours_version[1], True
        elif base_version is not None and ours_version[1] == base_version[1]:
            merged_data, clean = theirs_version[1], True
        elif base_version is not None and theirs_version[1] == base_version[1]:
            merged_data, clean = ours_version[1], True
        else:
            problems: list[str] = []
            merged_data, clean = merge_issue(base_version[1] if base_version else None, ours_version[1],
                                             theirs_version[1], ours_version[0], problems=problems)
            if not clean:
                try:
                    parse(merged_data, issue_id, ours_version[0])
                    result.warnings.append(f"{issue_id}: both sides changed the same lines of the "
                                           "description; kept both with markers")
                except Exception:  # noqa: BLE001 - an unparseable merge: keep ours, theirs is in history
                    result.warnings.append(f"{issue_id}: could not merge ({'; '.join(problems) or 'invalid'}); "
                                           "kept this side's version")
                    merged_data = ours_version[1]
        if prefer_theirs_claims:
            merged_data = _keep_their_claim(merged_data, ours_version, theirs_version, issue_id)
        try:
            status = parse(merged_data, issue_id, ours_version[0]).status
            target_path = layout.path_for(issue_id, status)
        except Exception:  # noqa: BLE001
            target_path = ours_version[0]
        if target_path != ours_version[0] and ours_version[0] not in layout.candidate_paths(issue_id):
            target_path = ours_version[0]
        for path in layout.candidate_paths(issue_id):
            if path != target_path and _read(repo, ours_tree, path) is not None:
                files[path] = None
        if merged_data != _read(repo, ours_tree, target_path):
            files[target_path] = merged_data
    for path in drop:
        if _read(repo, ours_tree, path) is not None:
            files[path] = None
    if files:
        result.tree = write_tree(repo, ours_tree, files)
        result.changed = sorted(files)
    return result


def _keep_their_claim(merged: bytes, ours: tuple[str, bytes], theirs: tuple[str, bytes], issue_id: str) -> bytes:
    try:
        mine = parse(ours[1], issue_id, ours[0])
        other = parse(theirs[1], issue_id, theirs[0])
    except Exception:  # noqa: BLE001 - nothing to arbitrate in a broken file
        return merged
    if not (mine.status == other.status == "in_progress" and mine.assignee != other.assignee):
        return merged
    fields = {"status": other.status, "assignee": other.assignee,
              "lease_expires": other.extra.get("lease_expires")}
    return update_text(merged.decode("utf-8"), fields, ours[0]).encode()
