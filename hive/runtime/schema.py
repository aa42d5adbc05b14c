"""The runtime database's tables, as numbered migrations.

`PRAGMA user_version` is the number of migrations a database has had. Opening runs the missing
ones in one transaction, so two processes opening an old database at once migrate it once.
Databases made before the numbering (user_version 0, created by sqlite-utils) hold the first
tables already, and maybe the second migration's columns (added then by the merge pipeline):
every step is written to be a no-op on what it finds done.
"""

from __future__ import annotations

import sqlite3
from typing import Callable

from hive.sqlite import transaction

TABLES = ("agents", "budgets", "merge_queue", "kv", "tells", "attempt_log", "attempt_notes")

_FIRST_TABLES = {
    "agents": "id TEXT PRIMARY KEY, issue_id TEXT, session_id TEXT, backend TEXT, role TEXT, worktree TEXT, "
              "branch TEXT, base_commit TEXT, pid INTEGER, pid_start TEXT, started_at FLOAT, "
              "last_activity FLOAT, state TEXT, tokens INTEGER",
    "budgets": "issue_id TEXT PRIMARY KEY, retries INTEGER, switches INTEGER, failures TEXT, tokens INTEGER, "
               "cost_usd FLOAT, last_error TEXT, last_session TEXT, not_before FLOAT",   # not_before: unused
    "merge_queue": "seq INTEGER PRIMARY KEY, issue_id TEXT, branch TEXT, base_commit TEXT, state TEXT, "
                   "queued_at FLOAT, detail TEXT, refinery_attempts INTEGER",
    "kv": "key TEXT PRIMARY KEY, value TEXT",
}


def _create_tables(db: sqlite3.Connection) -> None:
    for table, columns in _FIRST_TABLES.items():
        db.execute(f"CREATE TABLE IF NOT EXISTS [{table}] ({columns})")


def _merge_queue_test_and_result(db: sqlite3.Connection) -> None:
    """The test command a worker named, and the replayed commit recorded before the target moves."""
    present = {row[1] for row in db.execute("PRAGMA table_info(merge_queue)")}
    for column in ("test_command", "merged_commit"):
        if column not in present:
            db.execute(f"ALTER TABLE merge_queue ADD COLUMN [{column}] TEXT")


def _budgets_usage_split(db: sqlite3.Connection) -> None:
    """Usage as providers bill it: uncached input, cache writes, cache reads, output."""
    present = {row[1] for row in db.execute("PRAGMA table_info(budgets)")}
    for column in ("input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens"):
        if column not in present:
            db.execute(f"ALTER TABLE budgets ADD COLUMN [{column}] INTEGER DEFAULT 0")


def _agents_last_message_and_tells(db: sqlite3.Connection) -> None:
    """What each agent said last (for `status`), and the messages a person sent (`tell`)."""
    present = {row[1] for row in db.execute("PRAGMA table_info(agents)")}
    if "last_message" not in present:
        db.execute("ALTER TABLE agents ADD COLUMN last_message TEXT DEFAULT ''")
    if "last_message_at" not in present:
        db.execute("ALTER TABLE agents ADD COLUMN last_message_at FLOAT")
    db.execute("CREATE TABLE IF NOT EXISTS tells (seq INTEGER PRIMARY KEY, issue_id TEXT, text TEXT, "
               "sent_at FLOAT, delivered_at FLOAT, delivered_to TEXT)")


def _attempt_log(db: sqlite3.Connection) -> None:
    """Each worker attempt, the notes its prompt carried and how it ended (hive/runtime/attempt_log.py)."""
    db.execute("CREATE TABLE IF NOT EXISTS attempt_log (id INTEGER PRIMARY KEY, issue_id TEXT, attempt INTEGER, "
               "agent_id TEXT, epic TEXT, labels TEXT, started_at FLOAT, ended_at FLOAT, outcome TEXT, "
               "tokens INTEGER, notes_tokens INTEGER, landed TEXT DEFAULT '')")
    db.execute("CREATE TABLE IF NOT EXISTS attempt_notes (attempt_id INTEGER, note_key TEXT, category TEXT, "
               "tokens INTEGER, PRIMARY KEY (attempt_id, note_key))")
    db.execute("CREATE INDEX IF NOT EXISTS idx_attempt_notes_key ON attempt_notes(note_key)")


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_tables,
    _merge_queue_test_and_result,
    _budgets_usage_split,
    _agents_last_message_and_tells,
    _attempt_log,
)


def migrate(db: sqlite3.Connection) -> None:
    """Bring the database to the current schema (a no-op, one pragma read, when it is)."""
    if _version(db) >= len(MIGRATIONS):
        return
    with transaction(db):
        done = _version(db)   # re-read under the write lock: another process may have migrated
        for step in MIGRATIONS[done:]:
            step(db)
        if done < len(MIGRATIONS):
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])
