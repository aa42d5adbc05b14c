"""`.hive/`: the editable checkout of `hive/state`, kept in step with the branch both ways.

Two directions, both careful with a person's work:

* `absorb` — a file a person saved in `.hive/` becomes a commit (author: their git identity) once
  it is valid; an invalid file is left exactly as written, reported with file:line, and the index
  keeps the last good version. If the branch moved since the person's copy was written, their
  edit is merged into the tip with the `hive` merge rules instead of overwriting it.
* `refresh` — after the branch moves (a hive write, a `git pull`, a merged plan), files a person
  has not touched are rewritten to the tip and the checkout's git index follows; a file with an
  unsaved-to-branch edit is never overwritten.

The archive (`layout.is_archived`: finalized and canceled issues, most of a big queue) is not
checked out: a refresh writes none of its files, and their entries in the checkout's git index
carry git's skip-worktree bit, so `git status` in `.hive/` stays clean and a person's
`git commit -a` or `git add -A` there deletes nothing. An archived file that is missing is never
taken for a person's deletion of the issue. One archived file is checked out on demand
(`check_out`, for `git hive edit`; an edit carried to the archive when the issue moved meanwhile,
too): from then on it is a normal recorded file. Copies git itself writes there (a person's
`git pull` in `.hive/` writes the archived files the pull changed) are removed by the next refresh,
and `tidy_archive` (`git hive doctor --fix`) removes the clean ones an older hive checked out.

What each file was last known as (blob id and stat) lives in `<git-common-dir>/hive/checkout.db`,
not in the index database, so that deleting the index never makes a stale file look like an edit.
A lock file serialises absorb/refresh between processes.

The checkout finds and records edits; committing one is the layer above's (`Project.absorb`
hands `absorb` a function that commits an edit: see state/edits.py).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import sqlite3
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Collection, Iterator, Mapping, cast

from hive import git
from hive.errors import BadInput, HiveError
from hive.sqlite import connect, transaction
from hive.state import layout, live_folder, racy
from hive.state.layout import leads_outside
from hive.state.live_folder import RECORD_SUFFIXES, Seen, in_live_scan
from hive.state.issue_file import MAX_ISSUE_BYTES

if TYPE_CHECKING:
    import hashlib

    import pygit2

    from hive.state.store import Snapshot, StateStore


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _hashlib() -> ModuleType:
    """hashlib, loaded when first used: `git hive list` starts without it."""
    import hashlib

    return hashlib


def blob_id(data: bytes) -> str:
    """git's object id of a blob, without loading pygit2."""
    return _hashlib().sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Record:
    blob: str
    mtime_ns: int      # RACY_MTIME: compare the content, not the stat
    size: int
    inode: int         # a save renamed over the file brings another (its mtime may be as old)


RACY_MTIME = -1
RECORDS_BATCH = 5000   # records of changed files looked at together (memory stays flat)
MTIME_TICK = "mtime_tick"   # meta key: "<st_dev> <ns>", the tick `racy.measure_tick` found
STORE_RECORD = "INSERT OR REPLACE INTO files (path, blob, mtime_ns, size, inode) VALUES (?, ?, ?, ?, ?)"
RecordRow = tuple[str, str, int, int, int]   # (path, blob, mtime_ns, size, inode) as stored
CLEAN_SCAN = "clean_scan"   # meta key: the `live_folder.fingerprint` of the last scan that found no edit


@dataclass
class Absorbed:
    committed: list[str]          # paths whose edits are now on hive/state
    problems: list[BadInput]      # invalid edits, left as written


@dataclass
class Edit:
    path: str
    data: bytes | None        # None: the person deleted the file
    base: str | None          # blob id the person's copy started from
    stat: os.stat_result | None = None   # the file's stat taken before `data` was read


@dataclass
class ArchiveState:
    """How much of the archive is in `.hive/` (see `Checkout.tidy_archive`)."""

    on_disk: int        # archived files checked out (by an older hive, `check_out`, git)
    removed: int        # of those, clean ones removed now
    unmarked: int       # missing from `.hive/` but without skip-worktree: `git status` says deleted


@dataclass
class KeptSaves:
    """A person's saves kept beside their file (see `Checkout.kept_saves`)."""

    paths: list[str]    # relative to `.hive/`, each `<name>.superseded-<hex>`, still there
    removed: int        # removed now: the file beside it or the branch holds the same bytes


@dataclass
class Committed:
    data: bytes | None        # what the edit made of the file on hive/state (None: deleted)
    path: str                 # where: the edit's own path, or the issue's new one (archived meanwhile)


# Commits one edit (merged with the branch if need be), raises BadInput for an invalid edit.
CommitEdit = Callable[[Edit], Committed]


CHECKOUT_WORKTREE_NAME = "hive-state"   # what an older hive named `.hive/`'s worktree (git names it now)

class Checkout:
    def __init__(self, paths: git.RepoPaths, store: Callable[[], "StateStore"],
                 adopted: Callable[[], str | None] | None = None,
                 read_already: Callable[[], Mapping[str, bytes]] | None = None):
        """`store`: the state store, opened only when needed (it loads pygit2). `adopted`: the
        commit of `hive/state` the checkout may follow — one that passed the trust check (the
        index's); the branch's tip itself when not given. `read_already`: blobs read on the way
        to it (by id: the trust check's), which a refresh writes without reading them again."""
        self.paths = paths
        self._store = store
        self._adopted = adopted or (lambda: git.read_ref(self.paths.common_dir, git.STATE_REF))
        self._read_already = read_already or dict
        self.root = paths.state_checkout
        self._dot_git = os.path.join(self.root, ".git")
        self._db: sqlite3.Connection | None = None
        self._git_index: pygit2.Index | None = None   # the checkout's git index, read at most once per scan
        self._pending: list[RecordRow] | None = None   # records batched by a refresh or a scan
        self._racy_ns: int | None = None
        # a short-lived process (a CLI command) tells the next command the live scan it will find
        # (`_predicted_scan`); a long-lived one (the daemon's loop) does not
        self.predict_next_scan = False
        self._clean_scan: dict[str, Seen] | None = None   # this process's last live scan, when it found no edit

    @property
    def exists(self) -> bool:
        return os.path.exists(self._dot_git)

    def create(self, repo: "pygit2.Repository") -> bool:
        """Make `.hive/` (False: it is there already): a linked worktree of `hive/state`, added
        without a checkout (libgit2's would write every file, the archive included: ~13 s for a
        queue of 100k), then filled by `refresh`, which leaves the archive out. HiveError when
        something else is in its place."""
        import pygit2   # loaded when used: `git hive list` starts without it

        if self.exists:
            return False
        if self.root.exists() and any(self.root.iterdir()):
            raise HiveError(f"{self.root} exists and is not hive's checkout: move it away, then re-run init")
        for name in repo.list_worktrees():   # registered, its folder gone: git refuses to add it again
            try:
                worktree = repo.lookup_worktree(name)
                if name == CHECKOUT_WORKTREE_NAME or os.path.normpath(worktree.path) == os.path.normpath(self.root):
                    worktree.prune(True)
            except pygit2.GitError:
                continue   # another worktree, broken: not ours to mend
        if self.root.exists():
            self.root.rmdir()
        git.run(["worktree", "add", "--no-checkout", "--quiet", str(self.root), git.STATE_BRANCH], self.paths.worktree)
        self.reset_records()
        self.refresh()
        return True

    # -- bookkeeping ------------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            # after a power loss a lost record only makes the next scan compare that file's
            # content with the branch again
            db = connect(self.paths.checkout_db, named_rows=False)
            db.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, blob TEXT, "
                       "mtime_ns INTEGER, size INTEGER, inode INTEGER NOT NULL DEFAULT -1)")
            if "inode" not in _columns(db, "files"):
                # an older hive's records: each file's content is compared once, then its inode
                # kept; looked at again under the write lock (another command may be adding it)
                with transaction(db):
                    if "inode" not in _columns(db, "files"):
                        db.execute("ALTER TABLE files ADD COLUMN inode INTEGER NOT NULL DEFAULT -1")
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            for change in ("INSERT", "UPDATE", "DELETE"):   # any record changed: scan file by file again
                db.execute(f"CREATE TRIGGER IF NOT EXISTS files_{change.lower()} AFTER {change} ON files "
                           f"BEGIN DELETE FROM meta WHERE key = '{CLEAN_SCAN}'; END")
            self._db = db
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _records(self, only: Collection[str] | None = None) -> dict[str, Record]:
        if only is None:
            rows = self.db.execute("SELECT * FROM files")
        else:
            rows = self.db.execute("SELECT * FROM files WHERE path IN (SELECT value FROM json_each(?))",
                                   (json.dumps(sorted(only)),))
        return {r[0]: Record(r[1], r[2], r[3], r[4]) for r in rows}

    def _recorded_stats(self, only: Collection[str] | None) -> set[tuple[str, int, int, int]]:
        """(path, mtime, size, inode) of every record (of `only`'s when given)."""
        if only is None:
            return set(self.db.execute("SELECT path, mtime_ns, size, inode FROM files"))
        return set(self.db.execute("SELECT path, mtime_ns, size, inode FROM files WHERE path IN "
                                   "(SELECT value FROM json_each(?))", (json.dumps(sorted(only)),)))

    def _record(self, path: str, blob: str | None, st: "os.stat_result | racy.Written | None" = None) -> None:
        """Remember `path` as holding `blob`. `st` is the stat of the very bytes that are `blob`
        (taken before reading them, or of the file hive wrote): a stat taken now could be of a
        newer save, which would then look unchanged forever — a lost edit."""
        if blob is None:
            self.db.execute("DELETE FROM files WHERE path = ?", (path,))
            return
        try:
            exact = isinstance(st, racy.Written) and st.exact
            st = st.stat if isinstance(st, racy.Written) else st or os.stat(self.root / path)
            # Racy: a file this young may be saved again within its mtime's tick (the kernel's
            # timestamps are coarse) at the same size — the same stat, so an edit no stat check
            # would see. Its record asks for a look at the content next time (as git does).
            young = not exact and time.time_ns() - st.st_mtime_ns < self.racy_ns
            row = (path, blob, RACY_MTIME if young else st.st_mtime_ns, st.st_size, st.st_ino)
            if self._pending is not None:
                self._pending.append(row)
            else:
                self.db.execute(STORE_RECORD, row)
        except FileNotFoundError:
            self.db.execute("DELETE FROM files WHERE path = ?", (path,))

    @property
    def racy_ns(self) -> int:
        """The racy window of the checkout's file system (see racy.py), measured once and kept."""
        if self._racy_ns is None:
            device = str(os.stat(self.root).st_dev)
            row = self.db.execute("SELECT value FROM meta WHERE key = ?", (MTIME_TICK,)).fetchone()
            kept = row[0].split() if row else []
            if len(kept) == 2 and kept[0] == device and kept[1].isdigit():
                tick = int(kept[1])
            else:
                tick = racy.measure_tick(self.root if self.paths.hive_dir.stat().st_dev != int(device)
                                         else self.paths.hive_dir)
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (MTIME_TICK, f"{device} {tick}"))
            self._racy_ns = racy.racy_window(tick)
        return self._racy_ns

    def _store_records(self, rows: list[RecordRow]) -> None:
        """Records batched by `_pending`, in one statement (in a transaction of their own unless
        one is open)."""
        if not rows:
            return
        if self.db.in_transaction:
            self.db.executemany(STORE_RECORD, rows)
            return
        with transaction(self.db):
            self.db.executemany(STORE_RECORD, rows)

    @property
    def commit(self) -> str:
        return self._meta("commit")

    def _set_commit(self, oid: str) -> None:
        self._set_meta("commit", oid)

    def _meta(self, key: str) -> str:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else ""

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.paths.make_hive_dir()
        with open(self.paths.hive_dir / "checkout.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- finding a person's edits -----------------------------------------------------------

    def _live_scan(self) -> tuple[dict[str, Seen], str]:
        """The live scan and its fingerprint: the command server's kept one (live_folder.py), or new."""
        kept = live_folder.taken(self.root)
        if kept is not None:
            return kept
        found = live_folder.scan(self.root, full=False)
        return found, live_folder.fingerprint(found)

    def _stat_only(self, paths: Collection[str]) -> dict[str, "Seen"]:
        """Of `paths`, the files hive reads (what `live_folder.scan(full=True)` would find among them)."""
        found: dict[str, Seen] = {}
        for path in paths:
            parts = path.split("/")
            in_scope = path == layout.CONTEXT_FILE or (
                parts[0] in (layout.ISSUES_DIR, layout.NOTES_DIR) and len(parts) > 1
                and path.endswith(RECORD_SUFFIXES) and not any(p.startswith(".") for p in parts))
            if not in_scope or leads_outside(self.root, path):
                continue
            try:
                st = os.lstat(self.root / path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return found

    def _git_dir(self) -> Path | None:
        try:
            with open(self._dot_git, encoding="utf-8") as dot_git:
                text = dot_git.read().strip()
        except OSError:
            return None
        return Path(text[len("gitdir:"):].strip()) if text.startswith("gitdir:") else None

    def git_operation_in_progress(self) -> bool:
        """A person is running git in `.hive/` (merge, rebase, pull...): its files are git's, not edits."""
        git_dir = self._git_dir()
        markers = ("index.lock", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")
        return git_dir is not None and any(os.path.exists(os.path.join(git_dir, m)) for m in markers)

    def find_edits(self, full: bool = False, only: Collection[str] | None = None) -> list[Edit]:
        """Saved edits: in the live folder (all files when `full`), or among `only` (paths a
        watcher reported)."""
        if not self.exists or self.git_operation_in_progress():
            return []
        self._git_index = None
        self._clean_scan = None
        fingerprint = ""
        if only is not None:
            on_disk = self._stat_only(only)
        elif full:
            on_disk = live_folder.scan(self.root, full=True)
        else:
            on_disk, fingerprint = self._live_scan()
        if fingerprint and fingerprint == self._meta(CLEAN_SCAN):
            self._clean_scan = on_disk
            return []
        # Stats compared as tuples in sets: only the files found otherwise than recorded, and
        # the records without a file, are looked at one by one (a queue of 10k after one write).
        recorded = self._recorded_stats(only)
        differ = sorted(path for path, seen in on_disk.items() if (path, *seen) not in recorded)
        missing = sorted(path for path, _, _, _ in recorded if path not in on_disk)
        del recorded
        # the records taken on the way wait for the end: one statement for all (after a queue
        # is taken in, each of its young files is looked at again, ~60 µs a statement); their
        # records are read in batches, so that a queue of files all looked at stays small
        edits: list[Edit] = []
        self._pending = []
        try:
            for batch in _chunks(differ, RECORDS_BATCH):
                edits.extend(self._edits_among(batch, self._records(batch)))
        finally:
            pending, self._pending = self._pending, None
            self._store_records(pending)
        scanned_dirs = (layout.ISSUES_DIR + "/", layout.NOTES_DIR + "/") if full else ()
        gone: list[str] = []
        for batch in _chunks(missing, RECORDS_BATCH):
            records = self._records(batch)
            for path in batch:
                in_scope = only is not None or path == layout.CONTEXT_FILE or (
                    path.startswith(scanned_dirs) if full else path.count("/") == 1 and path.startswith("issues/"))
                if in_scope and not (self.root / path).exists():
                    if layout.is_archived(path):
                        gone.append(path)   # not checked out any more: no deletion of the issue
                    else:
                        edits.append(Edit(path, None, records[path].blob))
        if gone:
            self._leave_out(gone)
        if fingerprint and not edits and not differ:
            self._set_meta(CLEAN_SCAN, fingerprint)
            self._clean_scan = on_disk
        return edits

    def _edits_among(self, differ: list[str], records: dict[str, Record]) -> list[Edit]:
        """The edits among files found with another stat than their record's (or none)."""
        edits: list[Edit] = []
        tip = None
        for path in differ:
            record = records.get(path)
            try:
                st = os.lstat(self.root / path)   # of the bytes about to be read (the scan's is older)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if tip is None:
                tip = self._store().snapshot()
            tip_oid = tip.blob_id(path)
            try:
                oid, data = _read_bounded(self.root, path, st.st_size, tip, tip_oid, record)
            except OSError:
                continue
            if record and oid == record.blob:
                if oid != tip_oid:
                    # Back to the version an edit started from (a person undid an edit that a
                    # refresh had to leave alone): nothing of theirs is left, so it follows the
                    # branch now. Runs with the checkout lock held (see absorb).
                    self._follow_tip(path, tip, tip_oid, oid)
                else:
                    self._record(path, oid, st)
                continue
            if oid == tip_oid:
                if record or not layout.is_archived(path):
                    self._record(path, oid, st)   # (an archived copy git wrote is not recorded: the next refresh removes it)
                continue
            staged = self._git_index_blob(path)
            if staged == oid:
                continue  # staged by git itself (a merge or pull finishing, or a person's commit to come)
            base = record.blob if record else staged or tip_oid
            edits.append(Edit(path, data, base, st))
        return edits

    def _leave_out(self, paths: list[str]) -> None:
        """Archived files a person removed from `.hive/`: no longer checked out (their git index
        entries get the skip-worktree bit back), never deleted from the branch."""
        import pygit2

        git_index = self._checkout_index()
        with transaction(self.db):   # one: `rm -r .hive/issues/archive` of an older hive's 90k files
            for path in paths:
                self._record(path, None)
                try:
                    if path in git_index:
                        _stage_blob(git_index, path, str(git_index[path].id), left_out=True)
                except (pygit2.GitError, ValueError):
                    continue
            try:
                self._write_git_index(git_index)
            except pygit2.GitError:
                pass   # git at work in .hive/ (its index locked): `git hive doctor --fix` marks them later

    def _write_git_index(self, git_index: "pygit2.Index") -> None:
        self._release_stale_index_lock()
        git_index.write()

    def _release_stale_index_lock(self) -> None:
        """The checkout's `index.lock` removed if stale: held for milliseconds by a live git;
        older than that, left by a killed process (hive's own refresh included), and every later
        write would fail on it."""
        git_dir = self._git_dir()
        if git_dir is not None:
            git.release_stale_lock(git_dir / "index.lock")

    def _follow_tip(self, path: str, tip: "Snapshot", tip_oid: str | None, on_disk: str) -> None:
        """The file back at the branch's version, if it still holds `on_disk` (the blob just read):
        a save made since is the person's, and the next look finds it."""
        if leads_outside(self.root, path):
            return
        target = self.root / path
        written = None
        if tip_oid is None:
            if not _unlink_if_unchanged(target, on_disk):
                return
            _prune_empty_dirs(target.parent, self.root)
        else:
            data = tip.read(path)
            assert data is not None
            written = _replace_if_unchanged(target, data, on_disk)
            if written is None:
                return
        self._record(path, tip_oid, written)

    def _checkout_index(self) -> "pygit2.Index":
        """The `.hive/` worktree's git index, as it is on disk now (a person may `git add`)."""
        import pygit2

        try:
            index = git.repository(self.root).index
            index.read(False)   # re-read only if the file changed
        except pygit2.GitError as exc:
            if "'link'" not in str(exc):
                raise
            git.unsplit_worktree_index(self.root)   # a person's `core.splitIndex`
            index = git.repository(self.root).index
            index.read(True)
        return index

    def _git_index_blob(self, path: str) -> str | None:
        """The blob the `.hive/` worktree's git index holds for `path` (read once per scan)."""
        import pygit2

        try:
            if self._git_index is None:
                self._git_index = self._checkout_index()
            return str(self._git_index[path].id)
        except (KeyError, pygit2.GitError):
            return None

    def absorb(self, commit_edit: CommitEdit, full: bool = False,
               only: Collection[str] | None = None) -> Absorbed:
        """Have `commit_edit` commit every saved edit in the checkout (among `only` when given),
        and record what it committed; report the invalid edits' problems."""
        result = Absorbed([], [])
        if not self.exists or (only is not None and not only):
            return result
        with self.locked():
            for edit in self.find_edits(full, only):
                try:
                    committed = commit_edit(edit)
                except BadInput as exc:
                    result.problems.append(exc)
                    continue
                if committed.path != edit.path:
                    self._carried(edit, committed)
                    result.committed.append(committed.path)
                    continue
                merged = committed.data
                blob = blob_id(merged) if merged is not None else None
                st: "os.stat_result | racy.Written | None" = edit.stat
                if merged is not None and edit.data is not None and merged != edit.data:
                    # their edit merged with what changed meanwhile: show them the result — unless
                    # they saved again since, then that save is an edit of the bytes they had
                    st = _replace_if_unchanged(self.root / edit.path, merged, blob_id(edit.data))
                    if st is None:
                        blob, st = str(self._store().repo.create_blob(edit.data)), edit.stat
                self._record(edit.path, blob, st)
                result.committed.append(edit.path)
        return result

    def _carried(self, edit: Edit, committed: Committed) -> None:
        """The edit of a file that moved meanwhile (an issue archived) is committed at its new
        path: the checkout shows it there (checked out, the archive too: the person was editing
        it), and the old file goes — unless saved again since, then that save is an edit of the
        bytes committed from it."""
        assert edit.data is not None and committed.data is not None
        target = self.root / committed.path
        if not leads_outside(self.root, committed.path):
            expected = self._recorded_blob(committed.path) if target.exists() else None
            written = _replace_if_unchanged(target, committed.data, expected)
            if written is not None:
                self._record(committed.path, blob_id(committed.data), written)
        if _unlink_if_unchanged(self.root / edit.path, blob_id(edit.data)):
            self._record(edit.path, None)
        else:
            self._record(edit.path, str(self._store().repo.create_blob(edit.data)), edit.stat)

    # -- following the branch ---------------------------------------------------------------

    def refresh(self) -> None:
        """Bring untouched files of the checkout to the tip of `hive/state`."""
        if not self.exists:
            return
        tip = self._adopted()
        seen = self.commit
        if not tip or tip == seen:
            return
        with self.locked():
            if self.commit != seen:
                # another process brought the checkout to a tip meanwhile, maybe a newer one
                # than this read: what to follow is read again, never followed backwards
                tip = self._adopted()
                if not tip:
                    return
            self._refresh_locked(tip)

    def _refresh_locked(self, adopted: str) -> None:
        store = self._store()
        tip = store.snapshot(adopted)
        if tip.oid == self.commit:
            return
        changes = store.changes(self.commit, tip.oid)
        follow = _Following(store.repo, self.commit, tip.oid or "", bulk=len(changes) > BULK_PATHS,
                            archive_on_disk=os.path.lexists(self.root / layout.ARCHIVE_DIR),
                            read_already=self._read_already())
        # One transaction for the bookkeeping (each autocommit is an fsync), and the records of
        # the changed paths only (loading all of them cost ~300 ms at 100k files).
        with transaction(self.db):
            records = self._records([path for path, _, _ in changes])
            # each path changes once: its record may wait for the end (one statement for all)
            self._pending = []
            try:
                for path, old_oid, new_oid in changes:
                    record = records.get(path)
                    self._follow(follow, path, old_oid, new_oid, record.blob if record else None)
                self._stage_all(follow.staged, follow.bulk)
                self._store_records(self._pending)
            finally:
                self._pending = None
            self._clean_scan = self._predicted_scan([path for path, _, _ in changes])
            if self._clean_scan is not None:   # after the records: changing one forgets the clean scan
                self._set_meta(CLEAN_SCAN, live_folder.fingerprint(self._clean_scan))
            self._set_commit(tip.oid or "")

    def _predicted_scan(self, changed: list[str]) -> dict[str, Seen] | None:
        """The live scan the next command will find, for a command whose own look found no edit
        (`predict_next_scan`): that look, with each file this refresh changed there as it now is —
        provided each has the exact record of what it holds (racy ones do not). Stored as the
        clean scan, it spares that command the file-by-file comparison. Any file changed by
        anyone since, a record changed: the scans differ, and it compares as before. None when
        nothing can be foretold."""
        if not self.predict_next_scan or self._clean_scan is None:
            return None
        predicted = dict(self._clean_scan)
        touched = [path for path in changed if in_live_scan(path)]
        records = self._records(touched) if touched else {}
        for path in touched:
            try:
                st = os.lstat(self.root / path)
            except FileNotFoundError:
                if path in records:
                    return None
                predicted.pop(path, None)
                continue
            record, seen = records.get(path), (st.st_mtime_ns, st.st_size, st.st_ino)
            if record is None or not stat.S_ISREG(st.st_mode) or (record.mtime_ns, record.size, record.inode) != seen:
                return None
            predicted[path] = seen
        return predicted

    def _follow(self, follow: "_Following", path: str, old_oid: str | None, new_oid: str | None,
                recorded: str | None) -> None:
        """Bring one changed path of the checkout to the tip, unless a person's edit is there."""
        if layout.is_archived(path) and self._follow_archived(follow, path, old_oid, new_oid, recorded):
            return
        if leads_outside(self.root, path, follow.folders_inside, name_itself=False):
            return  # never followed: a fetched state may point one anywhere
        where = f"{self.root}/{path}"   # no pathlib on the way of a new file: ~100k of them at once
        if old_oid is None and recorded is None and new_oid is not None and self._created(follow, path, where, new_oid):
            return
        try:
            held = _read_regular(where)
        except OSError:
            return   # a symlink at the name (never followed), a folder, a file of another kind
        current = blob_id(held) if held is not None else None
        clean = current in (old_oid, recorded) or current == new_oid or (current is None and old_oid is None)
        if not clean and current is not None:
            # a version committed on the branch meanwhile (a plain `git commit` in .hive/)
            # is no unsaved edit of a person's
            clean = current in _blobs_between(follow.repo, follow.old, follow.new, path)
        try:
            if clean:
                written = None
                if new_oid is None:
                    target = Path(where)
                    clean = current is None or _unlink_if_unchanged(target, current)   # else a save since: theirs
                    if clean:
                        _prune_empty_dirs(target.parent, self.root)
                else:
                    data = follow.blob(new_oid)
                    # no file there: created in place, refused if one appeared meanwhile (a
                    # person's); one there: swapped in only if it still holds what was read
                    written = _create_new(where, data) if current is None else \
                        _replace_if_unchanged(Path(where), data, current)
                    clean = written is not None   # a person saved it meanwhile: theirs
                if clean:
                    self._record(path, new_oid, written)
        except OSError:
            # a name this file system cannot hold (too long, a folder in the way...): that
            # file is not in the checkout; the index reports it if bad
            return
        # the tip's version, never the file's bytes: a person's save that came in after hive's
        # write must not be staged as if git had (absorb takes a staged version for git's own)
        follow.staged[path] = (new_oid, False)

    def _created(self, follow: "_Following", path: str, where: str, new_oid: str) -> bool:
        """A file new on the branch created at once, with no look first (a queue taken in creates
        10k of them): True when done, or when the name cannot hold a file; False when something
        is there already (a person's file, a folder, a symlink): `_follow` looks at it."""
        try:
            written = _create_new(where, follow.blob(new_oid))
        except OSError:
            return True   # as `_follow`: a name this file system cannot hold is not in the checkout
        if written is None:
            return False
        self._record(path, new_oid, written)
        follow.staged[path] = (new_oid, False)
        return True

    def _follow_archived(self, follow: "_Following", path: str, old_oid: str | None, new_oid: str | None,
                         recorded: str | None) -> bool:
        """Keep an archived path out of the checkout: no file written, its git index entry at
        the tip with the skip-worktree bit. True when so done; False for a checked-out file (by
        `check_out` or an older hive: recorded) or a person's own, which follow the branch like
        any other file."""
        where = f"{self.root}/{path}"
        # (one call: the way there is looked at only if a file is there; a name this file system
        # cannot hold is not there either)
        if not (follow.archive_on_disk and os.path.lexists(where)):
            if recorded is not None:
                self._record(path, None)   # a checked-out copy the person removed
            follow.staged[path] = (new_oid, True)
            return True
        if leads_outside(self.root, path, follow.folders_inside):
            return True
        if recorded is not None:
            return False
        try:
            with open(where, "rb") as handle:
                current = blob_id(handle.read())
        except OSError:
            return True   # a folder in the way: the person's
        if current not in (old_oid, new_oid) and current not in _blobs_between(
                follow.repo, follow.old, follow.new, path):
            return False  # not what git or hive wrote: a person's file, theirs
        # git's copy (a person's `git pull` in .hive/ writes the archived files it changes)
        if not _unlink_if_unchanged(Path(where), current):
            return False  # saved since: theirs
        _prune_empty_dirs(Path(where).parent, self.root)
        follow.staged[path] = (new_oid, True)
        return True

    def _stage_all(self, staged: dict[str, tuple[str | None, bool]], bulk: bool) -> None:
        """A refresh's changes to the checkout's git index, in one write: each path at its blob
        (None: out of the index), with the skip-worktree bit when left out of the checkout. A
        few in a big index by git's own `update-index` (libgit2 reads and writes all of an index
        at several times git's cost, which outgrows starting git from `GIT_INDEX_BYTES` on:
        docs/PERFORMANCE.md); the others, and a bulk (90k skip-worktree entries, a command line
        each), through libgit2."""
        import pygit2

        if not staged:
            return
        if not bulk and self._git_index_bytes() >= GIT_INDEX_BYTES:
            self._release_stale_index_lock()
            try:
                git.update_worktree_index(self.root, {path: oid for path, (oid, _) in staged.items()},
                                          [path for path, (oid, left_out) in staged.items() if oid and left_out])
                return
            except HiveError:
                pass   # a name git refuses fails them all: libgit2 below leaves out that one alone
        git_index = self._checkout_index()
        for path, (oid, left_out) in staged.items():
            try:
                if oid is None:
                    if path in git_index:
                        git_index.remove(path)
                else:
                    _stage_blob(git_index, path, oid, left_out)
            except (pygit2.GitError, ValueError):
                continue   # a name git's index cannot hold
        self._write_git_index(git_index)

    def _git_index_bytes(self) -> int:
        git_dir = self._git_dir()
        try:
            return os.stat(git_dir / "index").st_size if git_dir is not None else 0
        except OSError:
            return 0

    def _recorded_blob(self, path: str) -> str | None:
        row = self.db.execute("SELECT blob FROM files WHERE path = ?", (path,)).fetchone()
        return row[0] if row else None

    def reset_records(self) -> None:
        """Forget what the checkout held (used after init and by `doctor --fix`)."""
        self.db.execute("DELETE FROM files")
        self.db.execute("DELETE FROM meta")

    # -- the archive, not checked out ---------------------------------------------------------

    def check_out(self, path: str) -> Path:
        """Bring one archived file into `.hive/` (a person is about to edit it), at the version
        the checkout follows (trust-checked): from then on a normal recorded file, its git index
        entry without the skip-worktree bit. Where it is; a file already there is left as it is."""
        if leads_outside(self.root, path):
            raise HiveError(f".hive/{path} leads outside the checkout (a symlink on the way?): not written")
        if self.git_operation_in_progress():
            raise HiveError("git is at work in .hive/ (a merge, a rebase...): finish it, then edit again")
        self.refresh()
        target = self.root / path
        with self.locked():
            if not self.commit:
                raise HiveError("the .hive/ checkout follows no commit yet: run `git hive doctor --fix`")
            tip = self._store().snapshot(self.commit)
            tip_oid = tip.blob_id(path)
            if tip_oid is None:
                raise HiveError(f"{path} is not on {git.STATE_BRANCH}")
            if target.is_file():
                if self._recorded_blob(path) is not None or blob_id(target.read_bytes()) != tip_oid:
                    return target   # hive's already, or a person's own: as it is
                written: "os.stat_result | racy.Written | None" = target.stat()   # a copy git wrote: hive's from now on
            else:
                try:
                    written = _create_new(str(target), tip.read(path) or b"")
                except OSError as exc:
                    raise HiveError(f"cannot write .hive/{path}: {exc.strerror or exc}") from None
            if written is not None:
                self._record(path, tip_oid, written)
                git_index = self._checkout_index()
                git_index.add(path)   # from the file: its stat, no skip-worktree bit
                self._write_git_index(git_index)
        return target

    def tidy_archive(self, fix: bool) -> ArchiveState:
        """How much of the archive is in `.hive/` (left by an older hive, `check_out`, git), and
        how many missing archived files lack the skip-worktree bit (a `git read-tree`: `git status`
        shows them deleted). `fix`: remove the copies that are as on the branch (an edit stays)
        and mark every missing one."""
        state = ArchiveState(0, 0, 0)
        if not self.exists or not self.commit or self.git_operation_in_progress():
            return state
        with self.locked(), transaction(self.db):   # one transaction: each autocommit is an fsync
            tip = self._store().snapshot(self.commit)
            removed: set[str] = set()
            for path in self._archived_on_disk():
                state.on_disk += 1
                expected = tip.blob_id(path)
                try:   # only what the branch holds goes (a person's edit of it stays), saved since or not
                    clean = fix and expected is not None and _unlink_if_unchanged(self.root / path, expected)
                except OSError:
                    continue
                if clean:
                    _prune_empty_dirs((self.root / path).parent, self.root)
                    self._record(path, None)
                    removed.add(path)
            state.removed = len(removed)
            git_index = self._checkout_index()
            unmarked = [entry for entry in git_index if layout.is_archived(entry.path)
                        and not os.path.lexists(self.root / entry.path) and not _is_left_out(git_index, entry.path)]
            state.unmarked = len([entry for entry in unmarked if entry.path not in removed])
            if fix and unmarked:
                for entry in unmarked:
                    _stage_blob(git_index, entry.path, str(entry.id), left_out=True)
                self._write_git_index(git_index)
        return state

    def kept_saves(self, fix: bool) -> KeptSaves:
        """A person's saves that a newer save of theirs replaced while hive looked, kept beside
        their file (`_keep_superseded`). `fix`: remove those whose bytes the file beside them or
        the branch holds (nothing of theirs goes); the others stay, for a person to compare."""
        kept = KeptSaves([], 0)
        if not self.exists:
            return kept
        tip = self._store().snapshot(self.commit) if fix and self.commit else None
        for path in self._kept_on_disk():
            beside = path[:path.rindex(SUPERSEDED)]
            if fix and self._removed_if_held(path, beside, tip):
                kept.removed += 1
            else:
                kept.paths.append(path)
        return kept

    def _removed_if_held(self, kept: str, beside: str, tip: "Snapshot | None") -> bool:
        """Whether the kept save `kept` was removed: only when the file `beside` it or the branch's tip
        holds its bytes (nothing of theirs goes)."""
        saved = _blob_id_of(self.root / kept)
        held = {_blob_id_of(self.root / beside), tip.blob_id(beside) if tip is not None else None}
        return saved is not None and saved in held and _unlink_if_unchanged(self.root / kept, saved)

    def _kept_on_disk(self) -> list[str]:
        """The kept saves in `.hive/`: regular files, no symlink entered, `.git` left alone."""
        found = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [name for name in dirs if name != ".git"]
            for name in files:
                path = os.path.join(folder, name)
                if _KEPT_NAME.search(name) and stat.S_ISREG(os.lstat(path).st_mode):
                    found.append(os.path.relpath(path, self.root))
        return sorted(found)

    def _archived_on_disk(self) -> list[str]:
        """The archived issue files in `.hive/`, found as every scan finds files (no symlink entered)."""
        return sorted(path for path in live_folder.scan(self.root, full=True) if layout.is_archived(path) and path.endswith(".md"))


GIT_INDEX_BYTES = 512 << 10   # a `.hive/` git index this big (~6k entries) is changed by git's CLI (`_stage_all`)
# More changed paths than this in one refresh (a pull of a large queue, `init` in a fresh clone):
# the checkout's git index gets each file's blob id without its stat instead of libgit2 reading,
# hashing and stat-ing every file again (~0.4 ms each, most of the refresh). `git status` in
# `.hive/` compares such entries by content once, as after any `git read-tree`.
BULK_PATHS = 256


@dataclass
class _Following:
    """One refresh: the repository, the two commits, what it stages in the checkout's git index."""

    repo: "pygit2.Repository"
    old: str
    new: str
    bulk: bool
    archive_on_disk: bool = True   # False (as it should be): no archived file to look for
    read_already: Mapping[str, bytes] = field(default_factory=dict)   # blob id -> its bytes, read before
    folders_inside: set[str] = field(default_factory=set)   # looked at: no symlink (`leads_outside`)
    # the git index entries it changes: path -> (blob or None: removed, left out of the checkout)
    staged: dict[str, tuple[str | None, bool]] = field(default_factory=dict)

    def blob(self, oid: str) -> bytes:
        """The bytes of blob `oid`: as read before, else from the object store."""
        data = self.read_already.get(oid)
        return data if data is not None else self.repo.odb.read(oid)[1]


def _blobs_between(repo: "pygit2.Repository", old: str, new: str, path: str, limit: int = 1000) -> set[str]:
    """The versions `path` had in the commits reachable from `new` but not from `old`."""
    import pygit2

    found: set[str] = set()
    try:
        walker = repo.walk(new, pygit2.enums.SortMode.TOPOLOGICAL)
        if old:
            walker.hide(old)
    except (KeyError, ValueError, pygit2.GitError):
        return found
    for count, commit in enumerate(walker):
        if count >= limit:
            break
        try:
            found.add(str(commit.tree[path].id))
        except KeyError:
            pass
    return found


# git_index_entry.flags_extended: the file is not in the worktree, and git knows it (GIT_INDEX_ENTRY_SKIP_WORKTREE)
SKIP_WORKTREE = 1 << 14


def _stage_blob(git_index: "pygit2.Index", path: str, oid: str, left_out: bool = False) -> None:
    """Stage `path` at blob `oid`, with git's skip-worktree bit when `left_out`. pygit2's
    IndexEntry carries no flags, so the entry goes to libgit2's `git_index_add` (which copies it)
    the way pygit2's own `Index.add` hands one over, the bit set: written with every other change
    of the same index write — no second write (`git update-index --skip-worktree`: ~0.1 s at 100k
    entries, and a process) and no moment when the index names archived files as deleted, which
    a person's `git commit -a` would commit. Built in place: 90k of them cost ~0.6 s, through
    IndexEntry ~0.9 s."""
    import pygit2
    from pygit2.errors import check_error

    entry = pygit2.ffi.new("git_index_entry *")
    pygit2.ffi.buffer(pygit2.ffi.addressof(entry, "id"))[:] = bytes.fromhex(oid)   # ValueError if no id
    entry.mode = pygit2.GIT_FILEMODE_BLOB
    entry.flags_extended = SKIP_WORKTREE if left_out else 0
    c_path = pygit2.ffi.new("char[]", os.fsencode(path))   # alive until git_index_add has copied it
    entry.path = c_path
    check_error(pygit2.C.git_index_add(git_index._index, entry), io=True)


def _is_left_out(git_index: "pygit2.Index", path: str) -> bool:
    """Whether the index entry of `path` carries the skip-worktree bit."""
    import pygit2

    entry = pygit2.C.git_index_get_bypath(git_index._index, os.fsencode(path), 0)
    return entry != pygit2.ffi.NULL and bool(entry.flags_extended & SKIP_WORKTREE)


def _read_bounded(root: Path, path: str, size: int, tip: "Snapshot", tip_oid: str | None,
                  record: Record | None) -> tuple[str, bytes]:
    """(blob id, bytes) of a saved file; of an issue file at most one byte more than it may hold,
    so that a huge one is refused as too big (parse checks the length) without being read whole.

    The blob id of a huge file is computed (streaming) only when it may equal a version hive
    knows of the same size — a huge blob committed on the branch; otherwise it is a sentinel
    that equals no blob: the file is an edit, and an invalid one.
    """
    if size <= MAX_ISSUE_BYTES or layout.issue_id_of(path) is None:
        data = (root / path).read_bytes()
        return blob_id(data), data
    sizes = {record.size} if record else set()
    if tip_oid is not None:
        sizes.add(cast("pygit2.Blob", tip.repo[tip_oid]).size)
    with open(root / path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(MAX_ISSUE_BYTES + 1)
        if size not in sizes:
            return f"oversize:{size}", data
        return _streamed_blob_id(handle, size, data), data


def _streamed_blob_id(handle: BinaryIO, size: int, head: bytes = b"") -> str:
    """git's blob id of a file of `size` bytes, `head` of them read already, the rest read from
    `handle` a MiB at a time (any size, little memory)."""
    digest = _hashlib().sha1(b"blob %d\0" % size)
    digest.update(head)
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _temp_beside(target: Path) -> Path:
    """A name for a file of hive's own beside `target` (hidden: no scan reads it); short, since
    the target's own may already be as long as a file name can be."""
    return target.with_name(f".hive-tmp-{os.getpid()}-{os.urandom(4).hex()}")


def _write_temp(target: Path, data: bytes) -> tuple[Path, racy.Written]:
    """`data` in a new file beside `target` (folders made), and the stat of what was written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(target)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        _write_all(fd, data)
        return tmp, racy.backdate(fd, data)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# a file of `.hive/` opened to be read: never through a symlink at its name, never waiting on a FIFO
READ_REGULAR = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _read_regular(where: str) -> bytes | None:
    """The bytes of the regular file at `where`, None when there is none; OSError for a symlink
    at the name (ELOOP), a folder or a file of another kind."""
    try:
        fd = os.open(where, READ_REGULAR)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", where)
        return _read_fd(fd)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int = -1) -> bytes:
    """What `fd` holds from its position: all, or at most `limit` bytes."""
    chunks = []
    left = limit if limit >= 0 else 1 << 62
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _create_new(target: str, data: bytes) -> racy.Written | None:
    """Write `data` to a new file `target` (folders made) unless a file (or a symlink) appeared
    there meanwhile: then None, the file is left to the person. One file created, no rename: a
    pull of 10k issues creates 10k files, and each creation is most of the cost."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(target, flags, 0o666)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd = os.open(target, flags, 0o666)
    except FileExistsError:
        return None
    try:
        _write_all(fd, data)
        return racy.backdate(fd, data)
    except OSError:
        os.unlink(target)   # a half-written file (disk full) would look like a person's edit
        raise
    finally:
        os.close(fd)


def _replace_if_unchanged(target: Path, data: bytes, expected: str | None) -> racy.Written | None:
    """Write `data` to `target` only if it still holds the blob `expected` (None: no file).

    A person's editor may save the file at any moment, also between hive's look at it and hive's
    write: the new file is swapped in atomically (renameat2 RENAME_EXCHANGE) and, if what was
    swapped out is no longer `expected`, swapped back — the person's save stays. Returns the stat
    of what was written, or None when the file was left to the person.
    """
    tmp, written = _write_temp(target, data)
    pinned = -1
    try:
        # held open to the end: the file is known by its inode number below, and an editor's
        # save may delete it (replaced at `target`); a deleted file's number may go to the next
        pinned = os.open(tmp, READ_REGULAR)
        if expected is None:
            try:
                os.link(tmp, target)           # fails if a file appeared meanwhile
            except FileExistsError:
                return None
            return written
        if _exchange(tmp, target):
            if blob_id(tmp.read_bytes()) != expected:
                _give_back(tmp, target, written.stat.st_ino)
                if os.lstat(tmp).st_ino != written.stat.st_ino:
                    _keep_superseded(tmp, target)   # a save of theirs a newer one replaced
                return None
            return written
        # no renameat2 here: compare, then rename at once (a window of microseconds)
        try:
            current = blob_id(target.read_bytes())
        except FileNotFoundError:
            current = None
        if current != expected:
            return None
        os.replace(tmp, target)
        return written
    finally:
        if pinned >= 0:
            os.close(pinned)
        tmp.unlink(missing_ok=True)


def _unlink_if_unchanged(target: Path, expected: str) -> bool:
    """Delete `target` only if it still holds the blob `expected`: it is moved aside at once and
    looked at there; a file that is not `expected` (a save made since) goes back, unless another
    save has taken its place meanwhile (that one is newer, and stays). Whether it was deleted."""
    try:
        if not stat.S_ISREG(os.lstat(target).st_mode):
            return False                      # a folder or a link there: not a file hive wrote
        aside = _temp_beside(target)
        os.rename(target, aside)
    except FileNotFoundError:
        return True
    if _holds(aside, expected):
        aside.unlink()
        return True
    try:
        os.link(aside, target, follow_symlinks=False)
    except FileExistsError:                   # a newer save is there: the one aside is older
        _keep_superseded(aside, target)
        return False
    except OSError:                           # not a file any more (swapped meanwhile): back as it was
        if not os.path.lexists(target):
            os.rename(aside, target)
        return False
    aside.unlink()
    return False


def _holds(path: Path, expected: str) -> bool:
    """Whether `path` is a regular file (no symlink followed) holding the blob `expected`."""
    return _blob_id_of(path) == expected


GIVE_BACK_ROUNDS = 100   # each round needs a save landing within microseconds: never reached


def _give_back(tmp: Path, target: Path, placed: int) -> None:
    """Put the person's file, swapped out to `tmp` by `_replace_if_unchanged`, back at `target`,
    where hive's file (inode `placed`) stands. An editor may save over hive's file in that window
    (it found the text it started from there): that save is the newest, so it is the one that
    stays at `target`; `tmp` ends with hive's file, or with an older save of theirs."""
    for _ in range(GIVE_BACK_ROUNDS):
        held = os.lstat(tmp).st_ino
        _exchange(tmp, target)
        if os.lstat(tmp).st_ino == placed:
            return        # what stood at `target` was what was put there: the newest is back
        placed = held     # a newer save came out: it goes back in, over the one just put there


SUPERSEDED = ".superseded-"
_KEPT_NAME = re.compile(re.escape(SUPERSEDED) + "[0-9a-f]{8}$")


def _keep_superseded(path: Path, target: Path) -> Path:
    """Keep a person's save that a newer one of theirs replaced while hive looked, beside
    `target` (`<name>.superseded-<hex>`: no file hive reads, shown by `git status` in `.hive/`
    and by `git hive doctor`). Where it is kept."""
    kept = target.with_name(f"{target.name}{SUPERSEDED}{os.urandom(4).hex()}")
    os.rename(path, kept)
    return kept


def _blob_id_of(path: Path) -> str | None:
    """git's blob id of the regular file at `path` (no symlink followed); None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        return _streamed_blob_id(handle, st.st_size) if stat.S_ISREG(st.st_mode) else None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where that is not available."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        try:
            import ctypes

            _RENAMEAT2 = ctypes.CDLL(None, use_errno=True).renameat2
        except (OSError, AttributeError):
            _RENAMEAT2 = False
    if _RENAMEAT2 is False:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if _RENAMEAT2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    import ctypes

    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        _RENAMEAT2 = False                     # a file system without it: never again
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))


_RENAMEAT2: Any = None   # libc's renameat2 once looked up; False where there is none


def _prune_empty_dirs(directory: Path, stop: Path) -> None:
    # rmdir refuses a folder that is not empty: no listing (pathlib's iterdir reads all of it,
    # which made deleting the files of a 10k-entry folder quadratic)
    while directory != stop and not directory.is_symlink():
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
