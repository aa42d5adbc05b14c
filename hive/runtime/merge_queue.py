"""The `merge_queue` table: done issues waiting for the merge pipeline, in order (`seq`).

Durable, so that a restarted daemon finishes what it started (see merge/pipeline.py). All SQL on
the table is here: the pipeline changes entries, `git hive status` shows them.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Entry:
    seq: int
    issue_id: str
    branch: str
    base_commit: str
    state: str              # queued | merging | waiting
    detail: str
    refinery_attempts: int
    test_command: str
    merged_commit: str


class MergeQueue:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def add(self, issue_id: str, branch: str, base_commit: str, test_command: str = "") -> bool:
        """Queue `issue_id` at the end; False (nothing done) when it is queued already."""
        if self.get(issue_id) is not None:
            return False
        self.db.execute(
            "INSERT INTO merge_queue (issue_id, branch, base_commit, state, queued_at, detail, "
            "refinery_attempts, test_command, merged_commit) VALUES (?, ?, ?, 'queued', ?, '', 0, ?, '')",
            (issue_id, branch, base_commit, time.time(), test_command))
        return True

    def get(self, issue_id: str) -> Entry | None:
        row = self.db.execute("SELECT * FROM merge_queue WHERE issue_id = ?", (issue_id,)).fetchone()
        return _entry(row) if row else None

    def entries(self) -> list[Entry]:
        return [_entry(r) for r in self.db.execute("SELECT * FROM merge_queue ORDER BY seq")]

    def update(self, entry: Entry, **fields: Any) -> None:
        """Change `fields` of `entry`, in the table and on the object."""
        for key, value in fields.items():
            setattr(entry, key, value)
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE merge_queue SET {sets} WHERE seq = ?", (*fields.values(), entry.seq))

    def remove(self, entry: Entry) -> None:
        self.db.execute("DELETE FROM merge_queue WHERE seq = ?", (entry.seq,))


def _entry(row: sqlite3.Row) -> Entry:
    return Entry(seq=row["seq"], issue_id=row["issue_id"], branch=row["branch"], base_commit=row["base_commit"] or "",
                 state=row["state"], detail=row["detail"] or "", refinery_attempts=row["refinery_attempts"] or 0,
                 test_command=row["test_command"] or "", merged_commit=row["merged_commit"] or "")
