"""Opening hive's SQLite databases: one setup for the index, the runtime and the checkout records.

Every database hive keeps is shared by several processes (the daemon, CLI commands, hooks): WAL
so that readers never wait for the writer, a long busy timeout so that a writer waits for another
instead of failing, and autocommit (`isolation_level=None`) so that a transaction is only ever
the explicit one of `transaction()`.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

BUSY_TIMEOUT_SECONDS = 60


def connect(path: Path, *, named_rows: bool = True) -> sqlite3.Connection:
    """A connection to `path` (its folder made). `named_rows`: rows as `sqlite3.Row`, else tuples
    (cheaper where a table of 100k rows is read whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False)
    if named_rows:
        db.row_factory = sqlite3.Row
    try:
        db.execute("PRAGMA journal_mode=WAL")
        # no fsync per commit: WAL keeps the database consistent through a power loss, which may
        # only lose the last transactions — all of them rebuilt or redone (see each database)
        db.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        db.close()
        raise
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken at once (BEGIN IMMEDIATE: no upgrade deadlock between two
    readers turning writers); rolled back on any exception."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
