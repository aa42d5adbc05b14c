"""The `budgets` table: what each issue has used of its retries, agent switches, tokens and USD."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from hive.usage import Usage

_COLUMNS = ("issue_id", "retries", "switches", "failures", "tokens", "cost_usd", "last_error", "last_session",
            "input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens")


@dataclass
class Budget:
    issue_id: str
    retries: int = 0          # same-agent retries used by the current agent
    switches: int = 0         # fresh agents used after the first
    failures: list[float] | None = None   # times of failed attempts (anomaly window)
    tokens: int = 0           # what max_tokens_per_issue counts: input + cache writes + output
    cost_usd: float = 0.0
    last_error: str = ""
    last_session: str = ""
    input_tokens: int = 0     # uncached input
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        self.failures = list(self.failures or [])

    @property
    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens, cost_usd=self.cost_usd,
                     cache_write_tokens=self.cache_write_tokens, cache_read_tokens=self.cache_read_tokens)

    def spend(self, delta: Usage) -> None:
        total = self.usage.plus(delta)
        self.input_tokens, self.output_tokens, self.cost_usd = total.input_tokens, total.output_tokens, total.cost_usd
        self.cache_write_tokens, self.cache_read_tokens = total.cache_write_tokens, total.cache_read_tokens
        self.tokens += delta.counted_tokens


class Budgets:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def get(self, issue_id: str) -> Budget:
        row = self.db.execute("SELECT * FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone()
        if row is None:
            return Budget(issue_id)
        data = {k: v for k, v in dict(row).items() if k in _COLUMNS and v is not None}
        data["failures"] = json.loads(data.get("failures") or "[]")
        return Budget(**data)

    def save(self, budget: Budget) -> None:
        values = {column: getattr(budget, column) for column in _COLUMNS}
        values["failures"] = json.dumps(budget.failures)
        self.db.execute(f"INSERT OR REPLACE INTO budgets ({', '.join(_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(_COLUMNS))})", tuple(values.values()))

    def reset(self, issue_id: str) -> None:
        """A fresh budget: the issue starts again as if it had never been tried."""
        self.db.execute("DELETE FROM budgets WHERE issue_id = ?", (issue_id,))
