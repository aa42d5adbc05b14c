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
    decisions: list[str] = field(default_factory=list)   # fields both sides changed: what a rule kept


def _read(repo: pygit2.Repository, tree: pygit2.Tree | None, path: str) -> bytes | None:
    if tree is None:
        return None
    try:
        return repo[tree[path].id].read_raw()
    except KeyError:
        return None


def _issue_version(repo: pygit2.Repository, tree: pygit2.Tree | None, issue_id: str) -> tuple[str, bytes] | None:
    for path in layout.candidate_paths(issue_id):
        data = _read(repo, tree, path)
        if data is not None:
            return path, data
    return None


@dataclass
class _Sides:
    """The three trees of a merge and what we changed since the base."""
    repo: pygit2.Repository
    base: pygit2.Tree | None
    ours: pygit2.Tree
    theirs: pygit2.Tree
    ours_changes: dict[str, tuple[str | None, str | None]]   # path → (old blob, new blob)


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
    sides = _Sides(repo, base_tree, ours_commit.tree, theirs_commit.tree,
                   {p: (o, n) for p, o, n in walk_changes(repo, base_tree, ours_commit.tree)})
    files: dict[str, bytes | None] = {}
    result = StateMerge(sides.ours.id)
    issues_touched: set[str] = set()
    for path, _, new in walk_changes(repo, base_tree, sides.theirs):
        if path in drop:
            continue
        issue_id = layout.issue_id_of(path)
        if issue_id is not None and is_valid_id(issue_id):
            issues_touched.add(issue_id)
        else:
            files.update(_merge_plain_file(sides, path, new, result.warnings))
    for issue_id in sorted(issues_touched):
        files.update(_merge_issue(sides, issue_id, prefer_theirs_claims, result))
    for path in drop:
        if _read(repo, sides.ours, path) is not None:
            files[path] = None
    if files:
        result.tree = write_tree(repo, sides.ours, files)
        result.changed = sorted(files)
    return result


def _merge_plain_file(sides: _Sides, path: str, new: str | None,
                      warnings: list[str]) -> dict[str, bytes | None]:
    """What to write at `path`, a file other than an issue that theirs changed to blob `new`."""
    repo = sides.repo
    if path not in sides.ours_changes:
        return {path: repo[new].read_raw() if new else None}
    if sides.ours_changes[path][1] == new:
        return {}
    ours_data = _read(repo, sides.ours, path)
    theirs_data = repo[new].read_raw() if new else None
    if theirs_data is None or ours_data is None:
        if ours_data is None and theirs_data is not None:
            return {path: theirs_data}   # deleted on our side, changed on theirs: keep the change
        return {}
    merged, clean = merge_file(_read(repo, sides.base, path), ours_data, theirs_data, path)
    if not clean:
        warnings.append(f"{path}: both sides changed the same lines; kept both with markers")
    return {path: merged}


def _merge_issue(sides: _Sides, issue_id: str, prefer_theirs_claims: bool,
                 result: StateMerge) -> dict[str, bytes | None]:
    """The files to write for an issue theirs touched, matched by id wherever it lives."""
    repo = sides.repo
    theirs_version = _issue_version(repo, sides.theirs, issue_id)
    ours_version = _issue_version(repo, sides.ours, issue_id)
    base_version = _issue_version(repo, sides.base, issue_id)
    if theirs_version is None:
        if ours_version is not None and base_version is not None and ours_version[1] == base_version[1]:
            return {ours_version[0]: None}   # deleted on theirs, untouched on ours
        return {}
    if ours_version is None:
        # new on theirs, or deleted on ours and changed on theirs: keep theirs
        return {theirs_version[0]: theirs_version[1]}
    merged_data = _merge_issue_text(issue_id, base_version, ours_version, theirs_version, result)
    if prefer_theirs_claims:
        merged_data = _keep_their_claim(merged_data, base_version, ours_version, theirs_version, issue_id,
                                        result.decisions)
    target_path = _issue_path(merged_data, issue_id, ours_version[0])
    files: dict[str, bytes | None] = {}
    for path in layout.candidate_paths(issue_id):
        if path != target_path and _read(repo, sides.ours, path) is not None:
            files[path] = None
    if merged_data != _read(repo, sides.ours, target_path):
        files[target_path] = merged_data
    return files


def _merge_issue_text(issue_id: str, base: tuple[str, bytes] | None, ours: tuple[str, bytes],
                      theirs: tuple[str, bytes], result: StateMerge) -> bytes:
    """Both sides' versions of one issue file merged: a side that did not change it yields to the
    other; otherwise the hive field rules, or ours when the result would not parse."""
    if ours[1] == theirs[1]:
        return ours[1]
    if base is not None and ours[1] == base[1]:
        return theirs[1]
    if base is not None and theirs[1] == base[1]:
        return ours[1]
    problems: list[str] = []
    warnings = result.warnings
    merged, clean = merge_issue(base[1] if base else None, ours[1], theirs[1], ours[0], problems=problems,
                                decisions=result.decisions)
    if clean:
        return merged
    try:
        parse(merged, issue_id, ours[0])
    except Exception:  # noqa: BLE001 - an unparseable merge: keep ours, theirs is in history
        warnings.append(f"{issue_id}: could not merge ({'; '.join(problems) or 'invalid'}); "
                        "kept this side's version")
        return ours[1]
    warnings.append(f"{issue_id}: both sides changed the same lines of the description; "
                    "kept both with markers")
    return merged


def _issue_path(merged: bytes, issue_id: str, ours_path: str) -> str:
    """Where the merged issue lives: the path its status calls for, else where ours has it."""
    try:
        target_path = layout.path_for(issue_id, parse(merged, issue_id, ours_path).status)
    except Exception:  # noqa: BLE001
        return ours_path
    if target_path != ours_path and ours_path not in layout.candidate_paths(issue_id):
        return ours_path
    return target_path


def _keep_their_claim(merged: bytes, base: tuple[str, bytes] | None, ours: tuple[str, bytes],
                      theirs: tuple[str, bytes], issue_id: str, decisions: list[str]) -> bytes:
    try:
        mine = parse(ours[1], issue_id, ours[0])
        other = parse(theirs[1], issue_id, theirs[0])
        was = parse(base[1], issue_id, base[0]).assignee if base is not None else ""
    except Exception:  # noqa: BLE001 - nothing to arbitrate in a broken file
        return merged
    claimed_here = mine.status == "in_progress" and mine.assignee != other.assignee
    # reopened here (a lease seen expired, a release) while theirs claimed it anew: field by field
    # the merge would keep this side's `open` — theirs went in_progress → open → in_progress, its
    # status back where the base had it — and lose a claim already pushed. Theirs' holder must be
    # new: a person's reopen here of a claim theirs merely still has stays a reopen.
    reopened_here = mine.status == "open" and other.assignee != was
    if not (other.status == "in_progress" and other.assignee and (claimed_here or reopened_here)):
        return merged
    fields = {"status": other.status, "assignee": other.assignee,
              "lease_expires": other.extra.get("lease_expires"), "machine": other.extra.get("machine")}
    here = f"{mine.assignee} here" if claimed_here else "reopened here"
    decisions.append(f"{issue_id}: claimed on both sides ({here}, {other.assignee} there): "
                     f"kept {other.assignee}, the claim pushed first")
    return update_text(merged.decode("utf-8"), fields, ours[0]).encode()
