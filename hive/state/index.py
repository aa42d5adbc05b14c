"""The SQLite index of `hive/state`: a cache for queries, rebuilt from the branch at any time.

`<git-common-dir>/hive/index.db` records which commit of `hive/state` it reflects. Every command
first calls `Index.ensure_current()`: if the ref still points at that commit (a file read, no
pygit2), nothing else happens; otherwise the indexed commit's tree is compared with the tip's,
skipping equal subtrees, and only the changed files are parsed. That picks up every kind of
external change — a plain `git commit` in `.hive/`, a `git pull`, a `git reset`, a merged plan.
A missing, corrupt, foreign or outdated index is rebuilt silently.
"""

from __future__ import annotations

import builtins   # `Index.list` shadows `list` in the class's annotations
import fcntl
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from hive import git, lines
from hive.errors import BadInput
from hive.sqlite import connect
from hive.state import halves, issue_file, kept_listing, layout, note_record
from hive.state.issue_file import Issue

if TYPE_CHECKING:
    import pygit2

    from hive.state.trees import Changes

    OwnChanges = Callable[[str, str], "Changes | None"]

SCHEMA_VERSION = "8"   # 8: the listing generation (older hives change rows without drawing one)
CONFLICT_MESSAGE = ("conflict markers in the description (both sides changed the same lines): "
                    "keep what is right, remove the <<<<<<< ======= >>>>>>> lines")
REFUSED = "hive/state"   # the problem row of a refused tip (doctor lists it with the others)
LISTING_GENERATION = "listing_generation"   # meta key: drawn anew with every change of the rows
LISTING_FILE = "listing.json"               # in `hive_dir`: the whole listing (`kept_listing`)
SATISFIED = tuple(sorted(issue_file.SATISFIED_BLOCKER_STATUSES))
MAX_NOTE_LINES = 20_000      # lines of one notes file indexed (the file itself: trust.MAX_NOTES_BYTES)
MAX_NOTE_LINE = 64 << 10     # bytes of one note line
NOTES_BATCH_BYTES = 16 << 20   # notes held before they are stored: memory stays flat however many files

ISSUE_COLUMNS = ("id", "path", "blob", "title", "status", "priority", "type", "parent", "assignee",
                 "depends_on", "labels", "created_at", "updated_at", "body", "extra", "touches")

# Issue.to_json() in SQL: the same keys in the same order (id, then issue_file.KNOWN_FIELDS);
# `extra` (kept JSON-ready) is merged after them with json_patch.
JSON_OBJECT = ("json_object('id', id, 'title', title, 'status', status, 'priority', priority, 'type', type, "
               "'parent', coalesce(parent, ''), 'depends_on', json(depends_on), 'labels', json(labels), "
               "'touches', json(coalesce(touches, '[]')), 'assignee', coalesce(assignee, ''), 'created', created_at, 'updated', updated_at)")
# an issue's JSON for a listing; the sort and the JSON read only these columns (not the bodies)
WITHOUT_BODY = ", ".join(c if c != "body" else "'' AS body" for c in ISSUE_COLUMNS)   # a row_to_issue row, body ""
LISTED_COLUMNS = ("id, title, status, priority, type, parent, assignee, depends_on, labels, created_at, updated_at, "
                  "extra, touches")
ISSUE_JSON = f"CASE WHEN extra = '{{}}' THEN {JSON_OBJECT} ELSE json_patch({JSON_OBJECT}, extra) END"

READY_SQL = f"""
SELECT i.* FROM issues i INDEXED BY issues_ready
WHERE i.status = 'open' AND i.assignee IS NULL AND i.type != 'epic'
  AND NOT EXISTS (
    SELECT 1 FROM deps d LEFT JOIN issues b INDEXED BY issues_status_of ON b.id = d.blocker_id
    WHERE d.issue_id = i.id
      AND (b.id IS NULL OR b.status NOT IN ({", ".join(f"'{s}'" for s in SATISFIED)}))
  )
ORDER BY i.priority ASC, i.chain DESC, i.dependents DESC, i.created_at ASC, i.id ASC
"""
# The queue's order (DESIGN §3, issue 20): a person's priority first; among equal priorities the
# issue with the most work waiting behind it — the longest chain of dependents, then the most
# dependents (`hive/state/ranks.py`) — so that long chains start early; then age. The daemon
# claims in this order and `git hive list --ready` shows it. `issues_ready` holds the candidates
# in the same order (the query stops after LIMIT rows), `issues_status_of` each blocker's status:
# neither reads an issue's row until it is known ready.
READY_INDEX = ("CREATE INDEX IF NOT EXISTS issues_ready ON issues(priority, chain DESC, dependents DESC, "
               "created_at, id) WHERE status = 'open' AND assignee IS NULL AND type != 'epic'")
# The indexes beside the tables' keys (the names sqlite_utils gave the first ones). A rebuild
# into emptied tables drops them and makes them again after the rows are in: one sort each
# instead of 100k ordered inserts into each.
SECONDARY_INDEXES = {
    "idx_deps_blocker_id": "CREATE INDEX IF NOT EXISTS idx_deps_blocker_id ON deps(blocker_id)",
    "idx_issues_status": "CREATE INDEX IF NOT EXISTS idx_issues_status ON issues(status)",
    "idx_issues_parent": "CREATE INDEX IF NOT EXISTS idx_issues_parent ON issues(parent)",
    "idx_notes_issue": "CREATE INDEX IF NOT EXISTS idx_notes_issue ON notes(issue)",
    "idx_notes_key": "CREATE INDEX IF NOT EXISTS idx_notes_key ON notes(archived, key)",
    # the ready query scans only open, unassigned issues in queue order
    "issues_ready": READY_INDEX,
    "issues_status_of": "CREATE INDEX IF NOT EXISTS issues_status_of ON issues(id, status)",
}
BULK_CACHE_KIB = 8 * 1024    # SQLite's page cache while rows are taken in bulk (RSS: 64 MiB was ~45 MB more)
BULK_ROWS = 1000    # more new rows than this into an empty issues table: the indexes are made afterwards
WHOLE_GRAPH_WALK = 50    # cycle walks from this many issues read the whole graph first
INSERT_ISSUE = f"INSERT INTO issues ({', '.join(ISSUE_COLUMNS)}) VALUES ({', '.join('?' * len(ISSUE_COLUMNS))})"
# An issue file both live and archived (a person's plain `git merge` of two states can make one):
# the live copy is the issue while it exists, in whatever order the two are read — an archived
# row never replaces a live one (an upsert keeps the rank unless the graph changed: refresh_ranks).
_ARCHIVED_SQL = f"substr({{}}.path, 1, {len(layout.ARCHIVE_DIR) + 1}) = '{layout.ARCHIVE_DIR}/'"
UPSERT_ISSUE = (f"{INSERT_ISSUE} ON CONFLICT(id) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in ISSUE_COLUMNS if c != "id")
                + f" WHERE {_ARCHIVED_SQL.format('issues')} OR NOT {_ARCHIVED_SQL.format('excluded')}")
LISTED_BATCH = 2000   # issues of a JSON listing held at once (`list_json_parts`)
ASIDE_FILES = 2000   # issue files to index from which taking a tip in gets a process of its own
# a rank refresh larger than this computes the whole graph at once (`Index.refresh_ranks`)
RANK_REGION_MOST = 2000
WAITING = f"status NOT IN ({', '.join(repr(s) for s in SATISFIED)})"


@dataclass
class Problem:
    path: str
    location: str      # "path:line"
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"


@dataclass
class Checked:
    """A tip of `hive/state` that passed the trust check against `base`, the commit indexed then,
    and the issue files the check read (by blob id): its catch-up need not check it again."""
    base: str
    tip: str
    blobs: dict[str, bytes]


class Adopting:
    """A checked tip being indexed, by a forked child when it brings many issue files (see
    `Index.adopt`): what `.hive/` may follow meanwhile (`blobs`: the issue files the trust check
    read, by blob id, which the checkout need not read again), and the problems once it is indexed."""

    def __init__(self, tip: str, work: "halves.Beside[list[Problem]]", blobs: dict[str, bytes] | None = None):
        self.tip = tip
        self.blobs = blobs or {}
        self._work = work
        self._problems: list[Problem] | None = None

    def problems(self) -> list[Problem]:
        """Wait until the index holds the tip; its problems (the same list on every call)."""
        if self._problems is None:
            self._problems = self._work.result()
        return self._problems

    def close(self) -> None:
        """Stop the child if the index was not waited for (interrupted): its transaction is
        rolled back, the next command indexes the tip again."""
        self._work.close()


def row_to_issue(row: sqlite3.Row) -> Issue:
    return Issue(
        id=row["id"], title=row["title"], status=row["status"], priority=row["priority"],
        type=row["type"], parent=row["parent"] or "", depends_on=_json(row["depends_on"]),
        labels=_json(row["labels"]), touches=_json(row["touches"] or "[]"), assignee=row["assignee"] or "",
        created=row["created_at"], updated=row["updated_at"], body=row["body"],
        extra=_json(row["extra"]),
    )


def _json(text: str) -> Any:
    # most lists and extras are empty: `git hive list` decodes three per issue (30k at 10k issues)
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


def _issue_row(issue: Issue, path: str, blob: str) -> tuple[Any, ...]:
    """An issue's row, in ISSUE_COLUMNS order."""
    return (issue.id, path, blob, issue.title, issue.status, issue.priority, issue.type,
            issue.parent or None, issue.assignee or None, _ids_json(issue.depends_on),
            _json_text(issue.labels), issue.created, issue.updated, issue.body,
            _json_text(issue_file._jsonable(issue.extra)) if issue.extra else "{}", _json_text(issue.touches))


def _json_text(values: list[str]) -> str:
    return json.dumps(values) if values else "[]"   # most lists are empty: no encoder call


def _ids_json(ids: list[str]) -> str:
    """json.dumps of a list of valid issue ids (letters, digits, `-`: nothing to escape)."""
    return '["' + '", "'.join(ids) + '"]' if ids else "[]"


def _untrusted(repo: "pygit2.Repository", indexed: str, tip: str, blobs: dict[str, bytes]) -> str | None:
    """Why `tip` is refused (`trust.check_commit` against the indexed commit), or None; `blobs`
    gets the issue files the check read."""
    from hive.state import trust   # a command whose index is current never checks a tree

    try:
        trust.check_commit(repo, tip, indexed or None, source=git.STATE_BRANCH, read=blobs)
    except trust.Untrusted as exc:
        return str(exc)
    return None


def _with_archived_copies(repo: "pygit2.Repository", tip: str,
                          changes: list[tuple[str, str | None, str | None]]) -> list[tuple[str, str | None, str | None]]:
    """`changes`, and the archived copy of each issue whose live file they delete and nothing else
    of them names: unchanged, that copy is not among them, and an archived row never replaced the
    live one — now it is the issue (a person's plain merge of two states can leave both copies)."""
    gone = {issue_id for path, _, new in changes
            if new is None and not layout.is_archived(path) and (issue_id := layout.issue_id_of(path))}
    if gone:   # (rare: the look at the others only then — a queue taken in has 100k of them)
        gone -= {layout.issue_id_of(path) for path, _, new in changes if new is not None}
    if not gone or not tip:
        return changes
    import pygit2

    tree = repo[tip].peel(pygit2.Commit).tree
    regular = (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE)
    kept = []
    for issue_id in sorted(gone):
        try:
            entry = tree[layout.archive_path(issue_id)]
        except KeyError:
            continue
        if entry.filemode in regular:
            kept.append((layout.archive_path(issue_id), None, str(entry.id)))
    return [*changes, *kept]


def parse_blob(data: bytes, path: str) -> Issue:
    issue_id = layout.issue_id_of(path) or path
    return issue_file.parse(data, issue_id, path)


# An issue file made into (its row, its blockers, the line of the first conflict marker in its
# description or 0): a plain tuple, which a forked parser sends back ~2.5x faster than an object.
Parsed = tuple[tuple[Any, ...], list[str], int]


def _parse_one(item: tuple[str, str, bytes]) -> Parsed | Problem:
    path, blob, data = item
    try:
        issue = parse_blob(data, path)
    except BadInput as exc:
        return Problem(path, exc.where or path, str(exc).split(": ", 1)[-1])
    return _issue_row(issue, path, blob), issue.depends_on, issue_file.conflict_line(data)


def _parsed_batches(repo: "pygit2.Repository", changes: list[tuple[str, str | None, str | None]],
                    blobs: dict[str, bytes]) -> Iterator[tuple[list[tuple[str, str | None, str | None]],
                                                          dict[str, Parsed | Problem]]]:
    """`changes` in consecutive batches (`halves.batches`: at most BATCH_BYTES of issue files
    held at once), each with its issue files that are there at the tip, parsed (in two
    processes when many); `blobs`: the ones read already, by blob id (taken out as used)."""
    def size(change: tuple[str, str | None, str | None]) -> int:
        new = change[2]
        if new is None or layout.issue_id_of(change[0]) is None:
            return 0
        held = blobs.get(new)
        return len(held) if held is not None else repo.odb.read_header(new)[1]

    for batch in halves.batches(changes, size):
        items = [(path, new, blobs.pop(new, b"") or repo.odb.read(new)[1])
                 for path, _, new in batch if new is not None and layout.issue_id_of(path) is not None]
        parsed = {item[0]: result for item, result in zip(items, halves.map_halves(_parse_one, items))}
        del items
        yield batch, parsed


def _id_from_notes_path(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
    return stem if issue_file.is_valid_id(stem) else ""


def parse_notes(data: bytes, path: str) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The notes of a notes file; each bad line a problem (`lines.json_line`: too long, too deep,
    not JSON), and the lines past `MAX_NOTE_LINES` one more, not indexed."""
    notes, problems = [], []
    for number, raw in enumerate(data.split(b"\n", MAX_NOTE_LINES), start=1):
        if number > MAX_NOTE_LINES:   # `raw` is the rest of the file
            if raw.strip():
                problems.append(Problem(path, f"{path}:{number}",
                                        f"more than {MAX_NOTE_LINES} lines: the rest is not indexed"))
            break
        if not raw.strip():
            continue
        try:
            note = lines.json_line(raw, MAX_NOTE_LINE)
            if not isinstance(note, dict) or not isinstance(note.get("content"), str):
                raise ValueError("a note must be an object with a string 'content'")
        except (ValueError, UnicodeDecodeError) as exc:
            reason = str(exc).splitlines()[0][:200]
            problems.append(Problem(path, f"{path}:{number}", f"bad note line: {reason}"))
            continue
        issue = _id_from_notes_path(path)   # the file's: a line cannot speak for another issue
        notes.append({
            "file": path, "line": number, "issue": issue,
            "category": str(note.get("category") or "context"), "content": note["content"],
            "agent": str(note.get("agent") or ""), "at": str(note.get("at") or ""),
            "attempt": note_record.attempt_of(note.get("attempt")),
            "tokens": note_record.estimate_tokens(note["content"]), "key": note_record.key_of(issue, note["content"]),
            "archived": int(path.startswith(layout.NOTES_ARCHIVE_DIR + "/")),
        })
    return notes, problems


@dataclass
class Graph:
    """The dependency graph of what an empty index was just given: each issue's path and blockers."""

    paths: dict[str, str]
    blockers: dict[str, list[str]]

    def add(self, rows: list[tuple[Any, ...]], deps: list[tuple[str, str]]) -> None:
        """One batch of rows and their edges, as the bulk insert keeps them: an id twice (live
        and archived) has the live path and the edges of both, once."""
        ids = [row[0] for row in rows]
        if self.paths.keys().isdisjoint(ids) and len(set(ids)) == len(ids):
            self.paths.update((row[0], row[1]) for row in rows)
        else:   # an id twice (rare): an archived path never replaces a live one
            for issue_id, path in ((row[0], row[1]) for row in rows):
                had = self.paths.get(issue_id)
                if had is None or layout.is_archived(had) or not layout.is_archived(path):
                    self.paths[issue_id] = path
        batch: dict[str, list[str]] = {}
        for issue_id, blocker in dict.fromkeys(deps):
            batch.setdefault(issue_id, []).append(sys.intern(blocker))   # one string per id
        for issue_id, blockers in batch.items():
            known = self.blockers.get(issue_id)
            self.blockers[issue_id] = list(dict.fromkeys(known + blockers)) if known else blockers


class Index:
    """The query index of one repository's `hive/state`."""

    def __init__(self, paths: git.RepoPaths):
        self.paths = paths
        self.path = paths.index_db
        self._db: sqlite3.Connection | None = None
        self._cache_pages = 0   # SQLite's page cache before a bulk load (`_begin_bulk`)

    # -- connection -------------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.paths.make_hive_dir()
        db = self._usable()
        if db is not None:
            return db
        # Missing, corrupt, foreign or outdated: start afresh. One process at a time, re-checked
        # under the lock: another process may be doing the same, or already be using the fresh
        # file, which must not be deleted under it.
        with open(self.paths.hive_dir / "index.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            db = self._usable()
            if db is not None:
                return db
            self._discard()
            db = connect(self.path)
            self._create_schema(db)
            return db

    def _usable(self) -> sqlite3.Connection | None:
        """A connection to the index file if it holds this repository's index in this schema."""
        try:
            db = connect(self.path)
        except sqlite3.DatabaseError as exc:
            _raise_if_busy(exc)
            return None
        try:
            version = self._meta(db, "schema_version")
            owner = self._meta(db, "repo")
        except sqlite3.DatabaseError as exc:
            db.close()
            _raise_if_busy(exc)
            return None
        if version == SCHEMA_VERSION and owner == str(self.paths.common_dir):
            return db
        db.close()
        return None

    def _discard(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    @staticmethod
    def _meta(db: sqlite3.Connection, key: str) -> str | None:
        try:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return row[0] if row else None

    def _create_schema(self, db: sqlite3.Connection) -> None:
        import sqlite_utils

        sdb = sqlite_utils.Database(db)
        db.execute("BEGIN IMMEDIATE")
        if self._meta(db, "schema_version") == SCHEMA_VERSION:
            db.execute("COMMIT")
            return
        sdb.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
        sdb.table("issues").create({
            "id": str, "path": str, "blob": str, "title": str, "status": str, "priority": int,
            "type": str, "parent": str, "assignee": str, "depends_on": str, "labels": str,
            "created_at": str, "updated_at": str, "body": str, "extra": str,
            "chain": int, "dependents": int, "touches": str,
        }, pk="id", not_null={"path", "status", "title", "chain", "dependents"},
            defaults={"chain": 0, "dependents": 0}, if_not_exists=True)
        sdb.table("deps").create({"issue_id": str, "blocker_id": str}, pk=("issue_id", "blocker_id"),
                           if_not_exists=True)
        sdb.table("notes").create({"file": str, "line": int, "issue": str, "category": str,
                             "content": str, "agent": str, "at": str, "attempt": int, "tokens": int,
                             "key": str, "archived": int},
                            pk=("file", "line"), if_not_exists=True)
        sdb.table("problems").create({"path": str, "location": str, "message": str}, pk="path",
                               if_not_exists=True)
        for create in SECONDARY_INDEXES.values():
            db.execute(create)
        sdb.table("meta").upsert_all([
            {"key": "schema_version", "value": SCHEMA_VERSION},
            {"key": "repo", "value": str(self.paths.common_dir)},
            {"key": "state_commit", "value": ""},
        ], pk="key")
        db.execute("COMMIT")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- keeping up with the branch ---------------------------------------------------------

    @property
    def indexed_commit(self) -> str:
        return self._meta(self.db, "state_commit") or ""

    def ensure_current(self, own_changes: "OwnChanges | None" = None) -> list[Problem]:
        """Bring the index up to the tip of `hive/state`; return problems found in changed files.

        `own_changes(old, new)`: what this process's own commits changed from `old` to `new`
        (`StateStore.changes_between`), applied as they are without comparing the two trees;
        None when other writers came in between.
        """
        tip = git.read_ref(self.paths.common_dir, git.STATE_REF) or ""
        if tip == self.indexed_commit:
            return []
        return self.catch_up(tip, own_changes=own_changes)

    def rebuild(self) -> list[Problem]:
        """Index the tip from scratch (in place: other processes may have the file open)."""
        return self.catch_up(git.read_ref(self.paths.common_dir, git.STATE_REF) or "", full=True)

    def adopt(self) -> Adopting | None:
        """What other writers moved `hive/state` to, trust-checked here and indexed beside the
        caller's own work: a big queue taken in (a pull, a fresh clone's init) is indexed by a
        forked child while the caller writes `.hive/` (`Adopting.tip` is what it may follow).
        None when the tip is the indexed commit, when it is refused (`ensure_current` takes it
        back and says why), or where no child may be forked (`ensure_current` does it all)."""
        tip = git.read_ref(self.paths.common_dir, git.STATE_REF) or ""
        indexed = self.indexed_commit
        if not tip or tip == indexed or not halves.may_fork():
            return None
        blobs: dict[str, bytes] = {}
        if _untrusted(git.repository(self.paths.common_dir), indexed, tip, blobs) is not None:
            return None
        checked = Checked(indexed, tip, blobs)
        if len(blobs) < ASIDE_FILES:   # not worth a process: indexed here, when waited for
            return Adopting(tip, halves.Beside(lambda: self.catch_up(tip, checked=checked), fork=False), blobs)
        self.close()   # no SQLite connection is carried across the fork: the child opens its own
        return Adopting(tip, halves.Beside(lambda: self._catch_up_in_child(tip, checked)), blobs)

    def _catch_up_in_child(self, tip: str, checked: Checked) -> list[Problem]:
        git.forget_repositories()   # libgit2's handles are the parent's: the child opens its own
        return self.catch_up(tip, checked=checked)

    def catch_up(self, tip: str, *, full: bool = False, own_changes: "OwnChanges | None" = None,
                 checked: Checked | None = None) -> list[Problem]:
        repo = git.repository(self.paths.common_dir)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            indexed = "" if full else self._meta(db, "state_commit") or ""
            if indexed == tip and not full:
                db.execute("COMMIT")
                return []
            changes = own_changes(indexed, tip) if own_changes is not None else None
            blobs: dict[str, bytes] = {}
            if changes is None and checked is not None and (checked.base, checked.tip) == (indexed, tip):
                blobs = checked.blobs
            elif changes is None:
                refused = self._refuse_untrusted(repo, indexed, tip, blobs)
                if refused is not None:
                    db.execute("INSERT OR REPLACE INTO problems (path, location, message) VALUES (?, ?, ?)",
                               (refused.path, refused.location, refused.message))
                    db.execute("COMMIT")
                    return [refused]
            if changes is None:
                db.execute("DELETE FROM problems WHERE path = ?", (REFUSED,))
                changes = self._changes_since(repo, db, indexed, tip)
            problems = self._apply(repo, _with_archived_copies(repo, tip, changes), blobs)
            db.execute("UPDATE meta SET value = ? WHERE key = 'state_commit'", (tip,))
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                       (LISTING_GENERATION, os.urandom(8).hex()))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return problems

    def record_refusal(self, message: str) -> None:
        """Keep a refused remote state's one line among the problems (doctor lists them)."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO problems (path, location, message) VALUES (?, ?, ?)",
                            (REFUSED, REFUSED, message))

    def _refuse_untrusted(self, repo: "pygit2.Repository", indexed: str, tip: str,
                          blobs: dict[str, bytes]) -> Problem | None:
        """Check a tip that other writers made (a fetch, a pull, another process) before indexing
        it. A refused one is taken back: the branch returns to the indexed commit, the last one
        adopted (when it still points at the refused one), and nothing of it is read further.
        `blobs` gets the issue files the check read (by blob id): the index parses those bytes,
        not a second read of each."""
        refusal = _untrusted(repo, indexed, tip, blobs) if tip else None
        if refusal is None:
            return None
        if indexed:
            git.run(git.own_command(self.paths, ["update-ref", "-m", f"hive: refused {tip[:12]}", git.STATE_REF,
                                                 indexed, tip]), self.paths.worktree, check=False)
        return Problem(REFUSED, REFUSED, refusal)

    def _changes_since(self, repo: "pygit2.Repository", db: sqlite3.Connection, indexed: str,
                       tip: str) -> list[tuple[str, str | None, str | None]]:
        """The files that differ between the indexed commit and `tip` (all of them: no index yet)."""
        import pygit2

        old_tree = None
        if indexed:
            try:
                old_tree = repo[indexed].peel(pygit2.Commit).tree
            except (KeyError, ValueError):
                indexed = ""  # the indexed commit is gone (gc after a reset): start over
        if not indexed:
            for table in ("issues", "deps", "notes", "problems"):
                db.execute(f"DELETE FROM {table}")
        new_tree = repo[tip].peel(pygit2.Commit).tree if tip else None
        from hive.state import trees   # pygit2: not imported by commands that only read the index

        return list(trees.walk_changes(repo, old_tree, new_tree))

    def _apply(self, repo: "pygit2.Repository", changes: list[tuple[str, str | None, str | None]],
               blobs: dict[str, bytes] | None = None) -> list[Problem]:
        """Index `changes`; `blobs`: issue files already read (by blob id)."""
        db = self.db
        blobs = blobs or {}
        # a rebuild, or a queue taken in whole into a state without issues (a fresh clone's init)
        empty = len(changes) > BULK_ROWS and db.execute("SELECT NOT EXISTS (SELECT 1 FROM issues)").fetchone()[0]
        problems: list[Problem] = []
        changed_ids: set[str] = set()
        # Only an issue whose blockers changed can close a new cycle: only those (and any issue
        # reported before, whose problem row is replaced here) are walked for cycles. A walk visits
        # every transitive blocker — most of a 100k-issue queue — so doing it for every edit
        # made each catch-up (every claim) cost ~1 s.
        touched = sorted({i for i in (layout.issue_id_of(c[0]) for c in changes) if i})
        old_blockers: dict[str, set[str]] = {}
        reported: set[str] = set()
        shape_before: dict[str, tuple[int, list[str]]] = {}
        if not empty:   # an empty index has none of these
            for row in db.execute("SELECT issue_id, blocker_id FROM deps WHERE issue_id IN "
                                  "(SELECT value FROM json_each(?))", (json.dumps(touched),)):
                old_blockers.setdefault(row[0], set()).add(row[1])
            reported = {row[0] for row in db.execute("SELECT path FROM problems")}
            shape_before = self._shape(touched)
        walk_ids: set[str] = set()
        notes_files: list[str] = []
        notes: list[dict[str, Any]] = []
        held = 0
        # Into an empty index, the rows go in bulk (the secondary indexes made at the end); every
        # path stores each batch's rows as it comes, so that memory stays flat however big the
        # queue taken in: only the graph (each issue's path and blockers) is kept to the end.
        bulk = bool(empty) and sum(1 for c in changes if c[2] is not None and layout.issue_id_of(c[0])) > BULK_ROWS
        graph = Graph({}, {})   # (bulk) what was just parsed: no need to read it back
        stored: set[str] = set()
        if bulk:
            self._begin_bulk()
        try:
            # Deletions first, so an issue moved into the archive is not deleted after being re-added.
            ordered = sorted(changes, key=lambda c: c[2] is not None)
            for batch, parsed in _parsed_batches(repo, ordered, blobs):
                rows: list[tuple[Any, ...]] = []
                batch_deps: list[tuple[str, str]] = []
                for path, old, new in batch:
                    issue_id = layout.issue_id_of(path)
                    if issue_id is not None:
                        if path in reported:   # a taken-in queue has none: no statement per file
                            db.execute("DELETE FROM problems WHERE path = ?", (path,))
                        if new is None:
                            if db.execute("DELETE FROM issues WHERE id = ? AND path = ?", (issue_id, path)).rowcount:
                                db.execute("DELETE FROM deps WHERE issue_id = ?", (issue_id,))
                            continue
                        result = parsed[path]
                        if isinstance(result, Problem):
                            problems.append(result)
                            continue  # the last good version, if any, stays indexed
                        row, blockers, conflict = result
                        if conflict:   # indexed all the same (the front matter is sound), flagged until resolved
                            problems.append(Problem(path, f"{path}:{conflict}", CONFLICT_MESSAGE))
                        rows.append(row)
                        issue_id = sys.intern(row[0])
                        batch_deps.extend((issue_id, blocker) for blocker in blockers)
                        changed_ids.add(issue_id)
                        if set(blockers) != old_blockers.get(issue_id, set()) or path in reported:
                            walk_ids.add(issue_id)
                    elif path.startswith(layout.NOTES_DIR + "/") and path.endswith(".jsonl"):
                        held = self._take_notes(repo, path, new, notes_files, notes, problems, held)
                self._store_batch(rows, batch_deps, graph if bulk else None, stored)
        finally:
            if bulk:
                self._end_bulk()
        if notes_files:
            self._store_notes(notes_files, notes)
        if bulk:
            self.refresh_ranks()
        else:
            self._refresh_moved_ranks(touched, shape_before)
        problems.extend(self._graph_problems(changed_ids, walk_ids, repo, graph if bulk else None))
        for problem in problems:
            db.execute("INSERT OR REPLACE INTO problems (path, location, message) VALUES (?, ?, ?)",
                       (problem.path, problem.location, problem.message))
        return problems

    def _take_notes(self, repo: "pygit2.Repository", path: str, new: str | None, files: list[str],
                    notes: list[dict[str, Any]], problems: list[Problem], held: int) -> int:
        """One changed notes file into `files` and `notes`, stored once they hold more than
        NOTES_BATCH_BYTES (many notes files, one blob shared by all: stored as they come); the
        bytes held now."""
        files.append(path)
        if new is not None:
            data = repo[new].read_raw()
            found, note_problems = parse_notes(data, path)
            problems.extend(note_problems[:1])
            notes.extend(found)
            held += len(data)
        if held > NOTES_BATCH_BYTES:
            self._store_notes(files, notes)
            files.clear()
            notes.clear()
            held = 0
        return held

    def _store_batch(self, rows: list[tuple[Any, ...]], deps: list[tuple[str, str]], graph: Graph | None,
                     stored: set[str]) -> None:
        """One batch's rows: in bulk (`graph` given: it gets them), or upserted (an id twice, live
        and archived, in two batches: the edges of both, as in one batch)."""
        if rows and graph is not None:
            self._store_bulk(rows, deps)
            graph.add(rows, deps)
        elif rows:
            batch_ids = {sys.intern(row[0]) for row in rows}
            self._store_rows(rows, deps, batch_ids - stored)
            stored |= batch_ids

    def _store_rows(self, rows: list[tuple[Any, ...]], deps: list[tuple[str, str]], ids: set[str]) -> None:
        db = self.db
        if len(ids) > 1000:
            db.execute("DELETE FROM deps WHERE issue_id IN (SELECT value FROM json_each(?))",
                       (json.dumps(sorted(ids)),))
        else:
            db.executemany("DELETE FROM deps WHERE issue_id = ?", [(i,) for i in ids])
        db.executemany(UPSERT_ISSUE, rows)
        db.executemany("INSERT OR IGNORE INTO deps (issue_id, blocker_id) VALUES (?, ?)", deps)

    def _begin_bulk(self) -> None:
        """Many rows into an empty issues table: the other indexes are made afterwards (a full
        rebuild and a taken-in queue spent ~3 s at 100k issues keeping five in order)."""
        for name in SECONDARY_INDEXES:
            self.db.execute(f"DROP INDEX IF EXISTS {name}")
        self._cache_pages = self.db.execute("PRAGMA cache_size").fetchone()[0]
        self.db.execute(f"PRAGMA cache_size=-{BULK_CACHE_KIB}")   # the new pages stay in memory until the commit

    def _end_bulk(self) -> None:
        try:
            for create in SECONDARY_INDEXES.values():
                self.db.execute(create)
        finally:
            self.db.execute(f"PRAGMA cache_size={int(self._cache_pages)}")

    def _store_bulk(self, rows: list[tuple[Any, ...]], deps: list[tuple[str, str]]) -> None:
        """One batch of rows between `_begin_bulk` and `_end_bulk`, in key order."""
        rows.sort(key=lambda row: row[0])
        self.db.executemany(UPSERT_ISSUE, rows)
        self.db.executemany("INSERT OR IGNORE INTO deps (issue_id, blocker_id) VALUES (?, ?)", sorted(deps))

    def _store_notes(self, files: list[str], notes: list[dict[str, Any]]) -> None:
        """The lines of changed notes files in place of what the index had of them: three
        statements for all (one per file cost ~0.4 ms each, most of a rebuild's notes)."""
        db = self.db
        listed = json.dumps(files)
        db.execute("DELETE FROM notes WHERE file IN (SELECT value FROM json_each(?))", (listed,))
        db.execute("DELETE FROM problems WHERE path IN (SELECT value FROM json_each(?))", (listed,))
        db.executemany("INSERT INTO notes (file, line, issue, category, content, agent, at, attempt, tokens, key, "
                       "archived) VALUES (:file, :line, :issue, :category, :content, :agent, :at, :attempt, "
                       ":tokens, :key, :archived)", notes)

    def _shape(self, ids: list[str]) -> dict[str, tuple[int, list[str]]]:
        """What of `ids` the ranks depend on: each waiting issue's weight and blockers."""
        found: dict[str, tuple[int, list[str]]]
        found = {row[0]: (0 if row[1] == "epic" else 1, []) for row in self.db.execute(
            f"SELECT id, type FROM issues WHERE {WAITING} AND id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),))}
        if found:
            for row in self.db.execute("SELECT issue_id, blocker_id FROM deps WHERE issue_id IN "
                                       "(SELECT value FROM json_each(?)) ORDER BY issue_id, blocker_id",
                                       (json.dumps(sorted(found)),)):
                found[row[0]][1].append(row[1])
        return found

    def _refresh_moved_ranks(self, touched: list[str], shape_before: dict[str, tuple[int, list[str]]]) -> None:
        """The ranks in front of the issues of `touched` whose weight or blockers changed."""
        shape_after = self._shape(touched)
        moved = [i for i in touched if shape_after.get(i) != shape_before.get(i)]
        if moved:   # their old blockers too: an edge removed changes what waits behind them
            self.refresh_ranks(moved + [b for i in moved for b in shape_before.get(i, (0, []))[1]])

    def refresh_ranks(self, moved: list[str] | None = None) -> None:
        """Recompute the work waiting behind waiting issues (`ranks.compute`) and store what
        changed: the queue's order among equal priorities. `moved`: the issues whose weight or
        blockers changed (and their old blockers); only what waits in front of them can change
        rank, computed over what waits behind that (closed under dependents, so exact). None,
        or a region of most of the queue: all of them."""
        from hive.state import ranks   # only when the waiting graph changed

        db = self.db
        region = self._rank_region(moved) if moved is not None else None
        within = "" if region is None else " AND i.id IN (SELECT value FROM json_each(:region))"
        params = {} if region is None else {"region": json.dumps(region)}
        stored = {row[0]: (row[1], row[2], 0 if row[3] == "epic" else 1) for row in db.execute(
            f"SELECT i.id, i.chain, i.dependents, i.type FROM issues i WHERE i.{WAITING}{within}", params)}
        edges = db.execute(f"SELECT d.issue_id, d.blocker_id FROM deps d JOIN issues i ON i.id = d.issue_id "
                           f"WHERE i.{WAITING}{within}", params).fetchall()
        found = ranks.compute({issue: weight for issue, (_, _, weight) in stored.items()}, edges)
        db.executemany("UPDATE issues SET chain = ?, dependents = ? WHERE id = ?",
                       [(rank.chain, rank.dependents, issue) for issue, rank in found.items()
                        if (rank.chain, rank.dependents) != stored[issue][:2]])

    def _rank_region(self, moved: list[str]) -> list[str] | None:
        """The waiting issues in front of `moved` (their blockers, transitively) and everything
        waiting behind those: the only ranks `moved` can change, with all they are computed
        from. None when that is most of the queue (the whole graph is computed as cheaply)."""
        front = f"""WITH RECURSIVE front(id) AS (
                SELECT value FROM json_each(:moved)
                UNION SELECT d.blocker_id FROM deps d JOIN front f ON d.issue_id = f.id
                      JOIN issues b ON b.id = d.blocker_id AND b.{WAITING}),
            behind(id) AS (
                SELECT id FROM front
                UNION SELECT d.issue_id FROM deps d JOIN behind w ON d.blocker_id = w.id
                      JOIN issues i ON i.id = d.issue_id AND i.{WAITING})
            SELECT id FROM behind LIMIT :most"""
        most = RANK_REGION_MOST
        region = [row[0] for row in self.db.execute(front, {"moved": json.dumps(sorted(set(moved))), "most": most + 1})]
        return None if len(region) > most else region

    def _depends_on_at(self, repo: "pygit2.Repository | None", path: str) -> str:
        """`path:line` of the `depends_on` line of the indexed version of an issue file."""
        row = self.db.execute("SELECT blob FROM issues WHERE path = ?", (path,)).fetchone() if repo else None
        try:
            line = issue_file.line_of(repo[row[0]].read_raw(), "depends_on") if repo and row and row[0] else 1
        except (KeyError, ValueError):
            line = 1
        return f"{path}:{line}"

    def _graph_problems(self, changed_ids: set[str], walk_ids: set[str] | None = None,
                        repo: "pygit2.Repository | None" = None, graph: "Graph | None" = None) -> list[Problem]:
        """Unknown blockers and cycles reachable from the changed issues (kept, but reported);
        `graph`: the whole indexed graph, when it is known without reading it."""
        from hive.state.validate import find_cycle   # only when catching up: `list` never needs it

        if not changed_ids:
            return []
        problems = []
        if graph is not None:
            unknown = [(issue_id, blocker, graph.paths[issue_id]) for issue_id, blockers in graph.blockers.items()
                       if issue_id in changed_ids for blocker in blockers if blocker not in graph.paths]
        else:
            unknown = self.db.execute(
                "SELECT d.issue_id, d.blocker_id, i.path FROM deps d JOIN issues i ON i.id = d.issue_id "
                "LEFT JOIN issues b ON b.id = d.blocker_id WHERE b.id IS NULL AND d.issue_id IN "
                "(SELECT value FROM json_each(?))", (json.dumps(sorted(changed_ids)),)).fetchall()
        for issue_id, blocker, path in unknown:
            problems.append(Problem(path, self._depends_on_at(repo, path),
                                    f"{issue_id} depends on unknown issue {blocker}"))
        starts = changed_ids if walk_ids is None else walk_ids
        cycle = find_cycle(starts, self._blockers_lookup(len(starts)) if graph is None
                           else lambda issue_id: graph.blockers.get(issue_id, ()))
        if cycle:
            path = self.db.execute("SELECT path FROM issues WHERE id = ?", (cycle[0],)).fetchone()[0]
            problems.append(Problem(path, self._depends_on_at(repo, path), "dependency cycle: " + " -> ".join(cycle)))
        return problems

    # -- queries ----------------------------------------------------------------------------

    def _blockers_lookup(self, starts: int) -> Callable[[str], list[str]]:
        """`blockers_of` for a walk from `starts` issues: one query per node for a few, the whole
        graph read at once for many (a walk may visit most of it: ~90k queries at 100k issues)."""
        if starts < WHOLE_GRAPH_WALK:
            return self.blockers_of
        graph: dict[str, list[str]] = {}
        for issue_id, blocker_id in self.db.execute("SELECT issue_id, blocker_id FROM deps"):
            graph.setdefault(issue_id, []).append(blocker_id)
        return lambda issue_id: graph.get(issue_id, [])

    def blockers_of(self, issue_id: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT blocker_id FROM deps WHERE issue_id = ?", (issue_id,))]

    def dependents_of(self, issue_id: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT issue_id FROM deps WHERE blocker_id = ?", (issue_id,))]

    def get(self, issue_id: str) -> Issue | None:
        row = self.db.execute("SELECT * FROM issues WHERE id = ?", (issue_id,)).fetchone()
        return row_to_issue(row) if row else None

    def assignments(self, issue_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """(status, assignee) of each of `issue_ids` that is indexed, in one query."""
        rows = self.db.execute("SELECT id, status, assignee FROM issues WHERE id IN "
                               "(SELECT value FROM json_each(?))", (json.dumps(list(issue_ids)),))
        return {row[0]: (row[1], row[2]) for row in rows}

    def path_of(self, issue_id: str) -> str | None:
        row = self.db.execute("SELECT path FROM issues WHERE id = ?", (issue_id,)).fetchone()
        return row[0] if row else None

    def exists(self, issue_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM issues WHERE id = ?", (issue_id,)).fetchone() is not None

    def list(self, status: Iterable[str] | None = None, parent: str | None = None,
             with_body: bool = True) -> list[Issue]:
        columns = "*" if with_body else WITHOUT_BODY
        sql, args = self._listing(columns, status, parent)
        return [row_to_issue(r) for r in self.db.execute(sql, args)]

    def list_json(self, status: Iterable[str] | None = None, parent: str | None = None) -> str:
        """`[issue.to_json() for issue in list(...)]` as compact JSON text, built by SQLite: no
        Python object per issue (a 10k-issue `git hive list --json` spent ~150 ms on those)."""
        return "".join(self.list_json_parts(status, parent))

    def list_json_parts(self, status: Iterable[str] | None = None, parent: str | None = None,
                        rows: int = LISTED_BATCH) -> Iterator[str]:
        """`list_json`'s text in consecutive parts of `rows` issues: what is held at once stays
        flat however many issues (the whole listing as one string, twice, was ~170 MB at 120k).
        The whole listing is kept (`kept_listing`) and handed out again while the rows are the
        same: kept only if the generation read before the rows is still the one after them (the
        rows come from one snapshot in between; a catch-up committed meanwhile drew a new one)."""
        whole = not status and not parent
        generation = self._meta(self.db, LISTING_GENERATION) if whole else None
        kept = kept_listing.read(self.paths.hive_dir / LISTING_FILE, generation) if generation else None
        if kept is not None:
            yield from kept
            return
        parts = self._json_parts(status, parent, rows)
        if generation:
            parts = kept_listing.keeping(self.paths.hive_dir / LISTING_FILE, generation, parts,
                                         lambda: self._meta(self.db, LISTING_GENERATION) == generation)
        yield from parts

    def _json_parts(self, status: Iterable[str] | None, parent: str | None, rows: int) -> Iterator[str]:
        sql, args = self._listing(LISTED_COLUMNS, status, parent)
        cursor = self.db.execute(f"SELECT {ISSUE_JSON} FROM ({sql})", args)
        opening = "["
        while batch := cursor.fetchmany(rows):
            yield opening + ",".join(row[0] for row in batch)
            opening = ","
        yield "[]" if opening == "[" else "]"

    @staticmethod
    def _listing(columns: str, status: Iterable[str] | None, parent: str | None) -> tuple[str, builtins.list[Any]]:
        sql, args = f"SELECT {columns} FROM issues", []
        clauses = []
        if status:
            status = list(status)
            clauses.append(f"status IN ({', '.join('?' * len(status))})")
            args.extend(status)
        if parent:
            clauses.append("parent = ?")
            args.append(parent)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return sql + " ORDER BY priority ASC, created_at ASC, id ASC", args

    def ready(self, limit: int | None = None, with_body: bool = True) -> builtins.list[Issue]:
        """The ready queue in order (`READY_SQL`); without descriptions (`body` "") unless `with_body`."""
        sql = READY_SQL if with_body else READY_SQL.replace("SELECT i.*", f"SELECT {WITHOUT_BODY}", 1)
        return [row_to_issue(r) for r in self.db.execute(sql + (f" LIMIT {int(limit)}" if limit else ""))]

    def counts(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.db.execute("SELECT status, COUNT(*) FROM issues GROUP BY status")}

    def problems(self) -> builtins.list[Problem]:
        return [Problem(r["path"], r["location"], r["message"])
                for r in self.db.execute("SELECT * FROM problems ORDER BY path")]

    def notes(self, issue: str | None = None, issues: Iterable[str] | None = None,
              limit: int | None = None, archived: bool = False) -> builtins.list[dict[str, Any]]:
        """Live notes (a line whose key is archived is not: a merge may bring it back), or with
        `archived` the archive's."""
        sql, args = ("SELECT * FROM notes WHERE archived = 1" if archived else
                     "SELECT * FROM notes WHERE archived = 0 AND key NOT IN (SELECT key FROM notes WHERE archived = 1)"), []
        if issue:
            sql += " AND issue = ?"
            args.append(issue)
        elif issues is not None:
            sql += " AND issue IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(sorted(set(issues))))
        sql += " ORDER BY at DESC, file, line DESC" if limit else " ORDER BY at, file, line"
        if limit:
            sql += f" LIMIT {int(limit)}"
        rows = [dict(r) for r in self.db.execute(sql, args)]
        return rows[::-1] if limit else rows


def _raise_if_busy(exc: sqlite3.DatabaseError) -> None:
    """A locked or busy database is in use, not broken: never discard it for that."""
    if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        raise exc

