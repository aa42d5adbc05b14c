"""Changing issues: every function here is one compare-and-swap commit on `hive/state`.

Preconditions are checked against the tip the commit is built on (not against the index, which
may lag): if another writer got there first, the change is rebuilt on the new tip and checked
again, or refused.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from hive import lines
from hive.errors import BadInput, HiveError
from hive.project import Project
from hive.state import edits, issue_file, layout, note_record, trust
from hive.state.issue_file import Issue
from hive.state.store import Change, Refused, Snapshot

# Statuses in which an issue has no agent.
UNASSIGNED_STATUSES = issue_file.UNASSIGNED_STATUSES


def resolve_id(project: Project, given: str) -> str:
    """An exact id, or a unique prefix of one; BadInput naming the id otherwise."""
    if project.index.exists(given):
        return given
    rows = project.index.db.execute(
        "SELECT id FROM issues WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
        (given.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",)).fetchall()
    if len(rows) == 1:
        return rows[0][0]
    if len(rows) > 1:
        raise BadInput(f"ambiguous issue id {given!r}: matches more than one issue")
    raise BadInput(f"unknown issue {given}")


def read_at(snap: Snapshot, issue_id: str) -> tuple[str, bytes, Issue]:
    found = snap.read_issue(issue_id)
    if found is None:
        raise Refused(f"unknown issue {issue_id}")
    path, data = found
    return path, data, issue_file.parse(data, issue_id, path)


def _commit(project: Project, build: Callable[[Snapshot], Change | None]) -> str | None:
    try:
        oid = project.store.commit(build)
    except Refused as exc:
        raise HiveError(str(exc)) from None
    if oid is not None:
        project.after_write()
    return oid


def create(project: Project, title: str, *, description: str = "", priority: int = issue_file.DEFAULT_PRIORITY,
           type: str = "task", parent: str = "", depends_on: Iterable[str] = (),
           labels: Iterable[str] = (), agent: str = "", issue_id: str | None = None,
           touches: Iterable[str] = ()) -> Issue:
    prefix = project.config.id_prefix if issue_id is None else ""
    stamp = issue_file.format_time(issue_file.now())
    issue = Issue(id=issue_id or issue_file.new_id(prefix), title=title.strip(), priority=priority,
                  type=type, parent=parent, depends_on=list(dict.fromkeys(depends_on)),
                  labels=list(dict.fromkeys(labels)), touches=list(dict.fromkeys(touches)),
                  created=stamp, updated=stamp,
                  body=description)
    text = issue_file.render(issue)
    # the same checks as any file; the body as stored (render ends it with a newline)
    issue.body = issue_file.parse(text, issue.id, layout.live_path(issue.id)).body

    def build(snap: Snapshot) -> Change:
        if snap.issue_path(issue.id) is not None:
            if issue_id is not None:
                raise Refused(f"issue {issue.id} already exists")
            issue.id = issue_file.new_id(prefix)  # a random id collided: draw again
        project.update_index()
        edits.check_graph(project.index, issue.id, issue.depends_on, issue.parent, snap)
        return Change({layout.live_path(issue.id): issue_file.render(issue).encode()},
                      summary=f"create {issue.id}: {issue.title}", event="created",
                      issue=issue.id, agent=agent)

    _commit(project, build)
    return issue


def update(project: Project, issue_id: str,
           changes: dict[str, Any] | Callable[[Issue], dict[str, Any]], *, event: str = "updated",
           agent: str = "", summary: str = "", body: str | None = None,
           check: Callable[[Issue], None] | None = None,
           check_snapshot: Callable[[Snapshot, Issue], None] | None = None,
           trailers: dict[str, str] | None = None, notes: list[dict[str, Any]] | None = None) -> Issue:
    """Change fields of one issue. `check(current)` (and `check_snapshot(snap, current)`) raise
    to give up, on the tip the commit is built on: `hive.lifecycle` raises TransitionRefused.
    `notes` go into the issue's notes file in the same commit.

    `changes` may be a function of the issue as it is on the tip the commit is built on, for
    changes that depend on the current value (adding to a list): a retry then keeps what another
    writer did meanwhile.

    Returns the issue as committed. An unknown id is a HiveError.
    """
    result: list[Issue] = []

    def build(snap: Snapshot) -> Change | None:
        path, data, current = read_at(snap, issue_id)
        if check is not None:
            check(current)
        if check_snapshot is not None:
            check_snapshot(snap, current)
        fields = dict(changes(current) if callable(changes) else changes)
        status = fields.get("status", current.status)
        if "status" in fields and "assignee" not in fields and status in UNASSIGNED_STATUSES:
            fields["assignee"] = issue_file.holder_after(status, current.assignee)   # a forced edit names its own
        fields["updated"] = issue_file.format_time(issue_file.now())
        if "depends_on" in fields or "parent" in fields:
            project.update_index()
            edits.check_graph(project.index, issue_id, fields.get("depends_on", current.depends_on),
                              fields.get("parent", current.parent), snap)
        text = issue_file.update_text(data.decode("utf-8"), fields, path, body=body)
        new_path = layout.path_for(issue_id, status) if path in layout.candidate_paths(issue_id) else path
        new = issue_file.parse(text, issue_id, new_path)
        files: dict[str, bytes | None] = {new_path: text.encode()}
        if new_path != path:
            files[path] = None
        if notes:   # hive's own (a rejection's): one that does not fit is left out
            files.update(notes_appended(snap, issue_id, notes)[0])
        result[:] = [new]
        return Change(files, summary=summary or f"{event} {issue_id}", event=event, issue=issue_id,
                      agent=agent, trailers=trailers or {}, audit=bool(trailers))

    try:
        project.store.commit(build)
    except Refused as exc:   # read_at: no such issue on the tip
        raise HiveError(str(exc)) from None
    project.after_write()
    return result[0]


def add_dependency(project: Project, issue_id: str, blocker: str) -> Issue:
    return update(project, issue_id, lambda current: {"depends_on": [*current.depends_on, blocker]}
                  if blocker not in current.depends_on else {"depends_on": current.depends_on},
                  event="dep-added", summary=f"{issue_id} depends on {blocker}")


def remove_dependency(project: Project, issue_id: str, blocker: str) -> Issue:
    def without(current: Issue) -> dict[str, Any]:
        if blocker not in current.depends_on:
            raise BadInput(f"{issue_id} does not depend on {blocker}")
        return {"depends_on": [d for d in current.depends_on if d != blocker]}

    return update(project, issue_id, without, event="dep-removed",
                  summary=f"{issue_id} no longer depends on {blocker}")


PROJECT_NOTES = layout.PROJECT_NOTES


def note_line(content: str, category: str, issue: str = "", agent: str = "", at: str = "",
              attempt: int = 0) -> dict[str, Any]:
    """A note as it is written (the fields: `hive/state/note_record.py`)."""
    return {"category": category, "content": content, "issue": issue, "agent": agent,
            "at": at or issue_file.format_time(issue_file.now()), "attempt": attempt,
            "tokens": note_record.estimate_tokens(content)}


def add_notes(project: Project, notes: list[dict[str, Any]], *, file_id: str, agent: str = "",
              event: str = "noted") -> int:
    """Append notes to `notes/<file_id>.jsonl` (de-duplicated), as one commit; how many did not
    fit (`notes_appended`)."""
    dropped = [0]

    def build(snap: Snapshot) -> Change | None:
        files, fresh, dropped[0] = notes_appended(snap, file_id, notes)
        if not fresh:
            return None
        label = file_id if file_id != PROJECT_NOTES else "the project"
        return Change(files, summary=f"{fresh} note(s) for {label}",
                      event=event, issue=file_id if file_id != PROJECT_NOTES else "", agent=agent)

    _commit(project, build)
    return dropped[0]


def notes_appended(snap: Snapshot, file_id: str,
                   notes: list[dict[str, Any]]) -> tuple[dict[str, bytes | None], int, int]:
    """The notes file of `file_id` on `snap` with those of `notes` it lacks appended; how many were
    appended, and how many were left out because the file would pass `trust.MAX_NOTES_BYTES`, or
    all the notes files together `trust.MAX_INCOMING_NOTES_BYTES`: another machine (a fresh clone
    takes everything in at once) refuses a `hive/state` past either, so a flood of notes (an
    agent's) must never make it."""
    path = layout.notes_path(file_id)
    existing = snap.read(path) or b""
    seen = {_canonical(line) for line in existing.split(b"\n") if line.strip()}
    fresh = [n for n in notes if _canonical(json.dumps(n).encode()) not in seen]
    if not fresh:
        return {}, 0, 0
    room = trust.MAX_INCOMING_NOTES_BYTES - snap.bytes_under(layout.NOTES_DIR)
    if existing and not existing.endswith(b"\n"):
        existing += b"\n"
        room -= 1
    room = min(room, trust.MAX_NOTES_BYTES - len(existing))
    lines_added: list[bytes] = []
    for note in fresh:
        line = (json.dumps(note, ensure_ascii=False) + "\n").encode()
        if len(line) > room:
            break                       # the oldest kept, in order: the rest left out
        lines_added.append(line)
        room -= len(line)
    if not lines_added:
        return {}, 0, len(fresh)
    return {path: existing + b"".join(lines_added)}, len(lines_added), len(fresh) - len(lines_added)


def _canonical(line: bytes) -> str:
    try:
        return json.dumps(lines.json_line(line), sort_keys=True)
    except ValueError:
        return line.decode("utf-8", "replace")



ARCHIVE_FIELDS = ("archived_at", "archived_why")


def archive_notes(project: Project, keys: dict[str, str], why: str) -> int:
    """Move the notes named by `keys` (note key -> the issue of its file, "" for the project's)
    to `notes/archive/`, each line kept with when and why, as one commit; how many moved."""
    stamp = issue_file.format_time(issue_file.now())
    return _move_notes(project, keys, archive=True,
                       mark=lambda note: {**note, "archived_at": stamp, "archived_why": why})


def restore_notes(project: Project, keys: dict[str, str]) -> int:
    """Bring archived notes back to their live file, as they were before; how many moved."""
    return _move_notes(project, keys, archive=False,
                       mark=lambda note: {k: v for k, v in note.items() if k not in ARCHIVE_FIELDS})


def _move_notes(project: Project, keys: dict[str, str], *, archive: bool,
                mark: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    moved = 0

    def build(snap: Snapshot) -> Change | None:
        nonlocal moved
        moved, files = 0, {}
        for issue in sorted(set(keys.values())):
            file_id = issue or PROJECT_NOTES
            live, kept = layout.notes_path(file_id), layout.archived_notes_path(file_id)
            source, target = (live, kept) if archive else (kept, live)
            staying, going = _split_notes(snap.read(source) or b"", issue, set(keys))
            if not going:
                continue
            existing = snap.read(target) or b""
            if existing and not existing.endswith(b"\n"):
                existing += b"\n"
            files[source] = staying
            files[target] = existing + b"".join(json.dumps(mark(n), ensure_ascii=False).encode() + b"\n"
                                                for n in going)
            if len(files[target]) > trust.MAX_NOTES_BYTES:
                raise BadInput(f"{target} would hold more than {trust.MAX_NOTES_BYTES} bytes, the most another "
                               f"machine takes in: move fewer notes")
            moved += len(going)
        if not files:
            return None
        verb = "archived" if archive else "restored"
        return Change(files, summary=f"{moved} note(s) {verb}", event=f"notes-{verb}")

    _commit(project, build)
    return moved


def _split_notes(data: bytes, issue: str, keys: set[str]) -> tuple[bytes, list[dict[str, Any]]]:
    """(the file without the lines of `keys`, those lines' notes); a line hive cannot read stays."""
    staying, going = [], []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            note = lines.json_line(raw)
        except ValueError:
            note = None
        if isinstance(note, dict) and isinstance(note.get("content"), str) and \
                note_record.key_of(issue, note["content"]) in keys:
            going.append(note)
        else:
            staying.append(raw + b"\n")
    return b"".join(staying), going
