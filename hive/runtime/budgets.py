"""The `budgets` table: what each issue has used of its retries, agent switches and tokens."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass


@dataclass
class Budget:
    issue_id: str
    retries: int = 0          # same-agent retries used by the current agent
    switches: int = 0         # fresh agents used after the first
    failures: list[float] | None = None   # times of failed attempts (anomaly window)
    tokens: int = 0
    cost_usd: float = 0.0
    last_error: str = ""
    last_session: str = ""
    not_before: float = 0.0   # back-off: do not start before this time

    def __post_init__(self) -> None:
        self.failures = list(self.failures or [])


class Budgets:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def get(self, issue_id: str) -> Budget:
        row = self.db.execute("SELECT * FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone()
        if row is None:
            return Budget(issue_id)
        data = dict(row)
        data["failures"] = json.loads(data["failures"] or "[]")
        return Budget(**data)

    def save(self, budget: Budget) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO budgets (issue_id, retries, switches, failures, tokens, cost_usd, "
            "last_error, last_session, not_before) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (budget.issue_id, budget.retries, budget.switches, json.dumps(budget.failures),
             budget.tokens, budget.cost_usd, budget.last_error, budget.last_session, budget.not_before))

    def reset(self, issue_id: str) -> None:
        """A fresh budget: the issue starts again as if it had never been tried."""
        self.db.execute("DELETE FROM budgets WHERE issue_id = ?", (issue_id,))
