"""The `kv` table: small named values a daemon publishes (its pid, degraded mode, the refinery's
session...) for `git hive status` and for its own restart."""

from __future__ import annotations

import sqlite3


class KeyValues:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def get(self, key: str, default: str = "") -> str:
        row = self.db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    def delete(self, key: str) -> None:
        self.db.execute("DELETE FROM kv WHERE key = ?", (key,))
