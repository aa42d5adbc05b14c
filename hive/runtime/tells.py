"""The `tells` table: messages a person sent to the agent of an issue (`git hive tell`).

A message waits here until the daemon hands it over: to the issue's running session (as a turn
queued behind the one in progress) or, when no session is working the issue, in the prompt of its
next attempt. `delivered_to` says which ("session <id>" or "prompt"); a delivered message is kept
as the record of what was said.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass


@dataclass
class Tell:
    seq: int
    issue_id: str
    text: str
    sent_at: float


class Tells:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def add(self, issue_id: str, text: str) -> int:
        cursor = self.db.execute("INSERT INTO tells (issue_id, text, sent_at) VALUES (?, ?, ?)",
                                 (issue_id, text, time.time()))
        return int(cursor.lastrowid or 0)

    def pending(self, issue_id: str | None = None) -> list[Tell]:
        """Messages not delivered yet, oldest first (of one issue, or of all)."""
        sql = "SELECT seq, issue_id, text, sent_at FROM tells WHERE delivered_at IS NULL"
        args: tuple[str, ...] = ()
        if issue_id is not None:
            sql, args = sql + " AND issue_id = ?", (issue_id,)
        return [Tell(*row) for row in self.db.execute(sql + " ORDER BY seq", args)]

    def delivered(self, seqs: list[int], to: str) -> None:
        now = time.time()
        self.db.executemany("UPDATE tells SET delivered_at = ?, delivered_to = ? WHERE seq = ?",
                            [(now, to, seq) for seq in seqs])
