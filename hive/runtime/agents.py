"""The `agents` table: the agent processes a daemon runs (workers, the refinery), with their pids,
so that a restarted daemon can find those it left behind.

`last_message` is what the agent said last, on one line (whitespace runs made one space, at most
`LAST_MESSAGE_CHARS`), with `last_message_at` (Unix time): set by the daemon on every message of
the agent's session (`set_last_message`), read by `status` from `Runtime.agents()`. It is the
agent's own words, hostile: escape it before showing it on a terminal."""

from __future__ import annotations

import sqlite3
import time
from typing import Any


LAST_MESSAGE_CHARS = 200


def one_line(text: str) -> str:
    """A message as `last_message` keeps it."""
    return " ".join(str(text).split())[:LAST_MESSAGE_CHARS]


class Agents:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def add(self, **row: Any) -> None:
        now = time.time()
        row.setdefault("started_at", now)
        row.setdefault("last_activity", now)
        row.setdefault("state", "starting")
        row.setdefault("tokens", 0)
        columns = ", ".join(row)
        self.db.execute(f"INSERT OR REPLACE INTO agents ({columns}) VALUES ({', '.join('?' * len(row))})",
                        tuple(row.values()))

    def update(self, agent_id: str, **fields: Any) -> None:
        if fields:
            sets = ", ".join(f"{k} = ?" for k in fields)
            self.db.execute(f"UPDATE agents SET {sets} WHERE id = ?", (*fields.values(), agent_id))

    def set_last_message(self, session_id: str, text: str) -> None:
        """The agent whose session this is said `text` (nothing when it is blank)."""
        line = one_line(text)
        if session_id and line:
            self.db.execute("UPDATE agents SET last_message = ?, last_message_at = ? WHERE session_id = ?",
                            (line, time.time(), session_id))

    def remove(self, agent_id: str) -> None:
        self.db.execute("DELETE FROM agents WHERE id = ?", (agent_id,))

    def all(self, role: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM agents" + (" WHERE role = ?" if role else "") + " ORDER BY started_at"
        return [dict(r) for r in self.db.execute(sql, (role,) if role else ())]
