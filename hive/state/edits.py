"""Committing what a person saved in `.hive/`, and the graph check every issue change passes.

`Checkout.absorb` finds a saved edit and hands it to the layer above (`Project`), which commits
it here: merged with what changed on the branch meanwhile (hive merge rules), validated like any
file, published as one CAS commit.
"""

from __future__ import annotations

from typing import Iterable

from hive.errors import BadInput
from hive.state import issue_file, layout, trust, validate
from hive.state.checkout import Committed, Edit
from hive.state.index import Index, parse_notes
from hive.state.merge_driver import merge_issue, merge_jsonl
from hive.state.store import Change, Refused, Snapshot, StateStore


def check_graph(index: Index, issue_id: str, depends_on: Iterable[str], parent: str, snap: Snapshot,
                where: str | None = None, parent_where: str | None = None) -> None:
    """Refuse (BadInput) references to unknown issues and a new dependency cycle.

    The cycle check walks the index: the caller brings it up to the branch first (it lags when
    the ref moved without hive, or while another process's write is being indexed).
    """

    def exists(other: str) -> bool:
        return index.exists(other) or snap.issue_path(other) is not None

    depends_on = list(depends_on)
    validate.check_references(issue_id, depends_on, "", exists, where)
    validate.check_references(issue_id, [], parent, exists, parent_where or where)
    # A new cycle needs a new edge out of this issue and an edge into it. The walk visits every
    # transitive blocker (most of a big queue: ~0.6 s at 100k issues), so skip it when either is
    # missing — e.g. for every edit in `.hive/` that leaves `depends_on` alone.
    added = set(depends_on) - set(index.blockers_of(issue_id))
    if added and index.dependents_of(issue_id):
        validate.check_acyclic(issue_id, depends_on, index.blockers_of, where)


def commit_edit(store: StateStore, index: Index, edit: Edit) -> Committed:
    """Commit one saved edit from `.hive/` (see checkout.py); what was committed, and where: an
    edit of an issue whose file moved meanwhile (archived) is carried to the new path.

    Raises BadInput (file:line) when the edit is invalid; nothing is committed then.
    """
    where = f".hive/{edit.path}"
    committed: list[Committed] = []

    def build(snap: Snapshot) -> Change | None:
        if edit.data is None:
            committed[:] = [Committed(None, edit.path)]
            return _deletion(index, edit, snap.read(edit.path), where)
        path = _path_now(snap, edit)
        tip_data = snap.read(path)
        moved = f"the issue moved to {path} meanwhile and " if path != edit.path else ""
        data = _stamped(_merged(store, edit, edit.data, tip_data, where, moved), tip_data, path, where)
        _check(store, index, path, data, snap, where)
        committed[:] = [Committed(data, path)]
        if data == tip_data:
            return None
        return Change({path: data}, summary=f"edit {path}", event="edited",
                      issue=layout.issue_id_of(path) or "")

    try:
        store.commit(build)
    except Refused as exc:
        raise BadInput(str(exc), where) from None
    return committed[0] if committed else Committed(edit.data, edit.path)


def _path_now(snap: Snapshot, edit: Edit) -> str:
    """Where the edited file is on the branch now: its own path, or — for an issue file the
    person's copy came from (a base) that is gone from there — the issue's new path."""
    issue_id = layout.issue_id_of(edit.path)
    if issue_id is None or edit.base is None or snap.blob_id(edit.path) is not None:
        return edit.path
    return snap.issue_path(issue_id) or edit.path


def _deletion(index: Index, edit: Edit, tip_data: bytes | None, where: str) -> Change | None:
    issue_id = layout.issue_id_of(edit.path)
    if issue_id is not None:
        dependents = index.dependents_of(issue_id)
        if dependents:
            raise BadInput(f"{issue_id} was deleted but {', '.join(sorted(dependents))} "
                           f"depend(s) on it; restore the file or remove the dependency", where)
    if tip_data is None:
        return None
    return Change({edit.path: None}, summary=f"delete {edit.path}", event="deleted", issue=issue_id or "")


def _merged(store: StateStore, edit: Edit, data: bytes, tip_data: bytes | None, where: str,
            moved: str = "") -> bytes:
    """The person's bytes, merged with the branch's when it changed since their copy was written
    (`moved`: the start of the conflict message when the file moved meanwhile)."""
    base_data = store.repo[edit.base].read_raw() if edit.base else None
    if tip_data is None or base_data is None or tip_data == base_data or tip_data == data:
        return data
    if layout.issue_id_of(edit.path) is not None:
        merged, clean = merge_issue(base_data, tip_data, data, edit.path)
        if not clean:
            raise BadInput(f"{moved}your edit conflicts with a change made meanwhile on hive/state; "
                           "the file is left as you wrote it", where)
        return merged
    if edit.path.endswith(".jsonl"):
        return merge_jsonl(base_data, tip_data, data)
    raise BadInput("changed on hive/state since you opened it; merge by hand "
                   "(your version is left untouched)", where)


def _stamped(data: bytes, tip_data: bytes | None, path: str, where: str) -> bytes:
    """A person's edit of an issue with `updated` set to now, unless they set it themselves: the
    later `updated` wins a merge (hive's merge rules), and a hand edit is a change like any other."""
    issue_id = layout.issue_id_of(path)
    if issue_id is None or tip_data is None or data == tip_data:
        return data
    try:
        mine, before = issue_file.parse(data, issue_id, where), issue_file.parse(tip_data, issue_id, where)
    except BadInput:
        return data                       # _check names the problem
    if mine.updated != before.updated or mine == before:
        return data
    text = issue_file.update_text(data.decode("utf-8"), {"updated": issue_file.format_time(issue_file.now())}, where)
    return text.encode("utf-8")


def _check(store: StateStore, index: Index, path: str, data: bytes, snap: Snapshot, where: str) -> None:
    """The checks any file of its kind passes (issue files also against the graph)."""
    issue_id = layout.issue_id_of(path)
    if issue_id is not None:
        if not issue_file.is_valid_id(issue_id):
            raise BadInput(f"file name is not a valid issue id: {issue_id!r} (expected like hv-1a2b3c.md)",
                           f"{where}:1")
        issue = issue_file.parse(data, issue_id, where)
        other = snap.issue_path(issue_id)
        if other is not None and other != path:
            raise BadInput(f"issue {issue_id} also exists at {other}", f"{where}:1")
        index.ensure_current(store.changes_between)
        check_graph(index, issue_id, issue.depends_on, issue.parent, snap,
                    f"{where}:{issue_file.line_of(data, 'depends_on')}",
                    f"{where}:{issue_file.line_of(data, 'parent')}")
    elif path.endswith(".jsonl"):
        if len(data) > trust.MAX_NOTES_BYTES:
            raise BadInput(f"{len(data)} bytes, more than {trust.MAX_NOTES_BYTES}: another machine would refuse "
                           "the whole of hive/state (`git hive notes prune` archives old notes)", f"{where}:1")
        total = snap.bytes_under(layout.NOTES_DIR) - snap.size(path) + len(data)
        if total > trust.MAX_INCOMING_NOTES_BYTES:
            raise BadInput(f"the notes files would hold {total} bytes together, more than "
                           f"{trust.MAX_INCOMING_NOTES_BYTES}: a fresh clone would refuse the whole of hive/state",
                           f"{where}:1")
        _, problems = parse_notes(data, where)
        if problems:
            raise BadInput(problems[0].message, problems[0].location)
