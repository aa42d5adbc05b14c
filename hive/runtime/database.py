"""`Runtime`: the handle on `runtime.db` that the daemon, the pipeline and `status` hold.

One connection, opened (and migrated) on first use; one owner module per table behind it. The
agent, budget and key/value calls are kept on the handle itself (`runtime.budget(id)`,
`runtime.put(key, value)`...); the merge queue is `runtime.merge_queue`.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hive import git
from hive.runtime.schema import migrate
from hive.runtime.agents import Agents
from hive.runtime.budgets import Budget, Budgets
from hive.runtime.kv import KeyValues
from hive.runtime.merge_queue import MergeQueue
from hive.sqlite import connect


class Runtime:
    def __init__(self, paths: git.RepoPaths):
        self.paths = paths
        self.path = paths.hive_dir / "runtime.db"
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            db = connect(self.path)
            migrate(db)
            self._db = db
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def merge_queue(self) -> MergeQueue:
        return MergeQueue(self.db)

    # -- agents -------------------------------------------------------------------------------

    def add_agent(self, **row: Any) -> None:
        Agents(self.db).add(**row)

    def update_agent(self, agent_id: str, **fields: Any) -> None:
        Agents(self.db).update(agent_id, **fields)

    def remove_agent(self, agent_id: str) -> None:
        Agents(self.db).remove(agent_id)

    def agents(self, role: str | None = None) -> list[dict[str, Any]]:
        return Agents(self.db).all(role)

    # -- budgets ------------------------------------------------------------------------------

    def budget(self, issue_id: str) -> Budget:
        return Budgets(self.db).get(issue_id)

    def save_budget(self, budget: Budget) -> None:
        Budgets(self.db).save(budget)

    def reset_budget(self, issue_id: str) -> None:
        Budgets(self.db).reset(issue_id)

    # -- key/value ----------------------------------------------------------------------------

    def get(self, key: str, default: str = "") -> str:
        return KeyValues(self.db).get(key, default)

    def put(self, key: str, value: str) -> None:
        KeyValues(self.db).put(key, value)

    def delete(self, key: str) -> None:
        KeyValues(self.db).delete(key)
