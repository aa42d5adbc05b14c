"""`Runtime`: the handle on `runtime.db` that the daemon, the pipeline and `status` hold.

One connection, opened (and migrated) on first use; one owner module per table behind it. The
agent, budget and key/value calls are kept on the handle itself (`runtime.budget(id)`,
`runtime.put(key, value)`...); the merge queue is `runtime.merge_queue`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from hive import git
from hive.errors import HiveError
from hive.runtime.schema import migrate
from hive.runtime.agents import Agents
from hive.runtime.attempt_log import AttemptLog
from hive.runtime.budgets import Budget, Budgets
from hive.runtime.kv import KeyValues
from hive.runtime.merge_queue import MergeQueue
from hive.runtime.tells import Tell, Tells
from hive.sqlite import connect

HANDOFF = "handoff:"   # kv key of a hand-off (`record_handoff`)


class Runtime:
    def __init__(self, paths: git.RepoPaths):
        self.paths = paths
        self.path = paths.runtime_db
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                db = connect(self.path)
                try:
                    migrate(db)
                except BaseException:
                    db.close()
                    raise
            except sqlite3.DatabaseError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise
                raise HiveError(f"{self.path} is not a usable database ({exc}): "
                                "`git hive doctor --fix` sets it aside and starts a new one") from None
            self._db = db
        return self._db

    def problem(self) -> str | None:
        """Why runtime.db cannot be used (corrupt, not a database), or None if it can."""
        if not self.path.exists():
            return None
        try:
            verdict = self.db.execute("PRAGMA quick_check").fetchone()
        except HiveError as exc:
            return str(exc)
        except sqlite3.DatabaseError as exc:
            return f"{self.path} is damaged ({exc})"
        if verdict is None or verdict[0] != "ok":
            return f"{self.path} is damaged ({verdict[0] if verdict else 'no answer'})"
        return None

    def set_aside(self) -> Path:
        """Rename a damaged runtime.db (and its WAL files) out of the way, keeping it for a person
        to look at; the next use starts a new one. In-progress issues are then recovered as failed
        attempts (see hive.runtime). Returns the new name of the file."""
        self.close()
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm", "-journal"):
            source = Path(str(self.path) + suffix)
            if source.exists():
                source.rename(str(aside) + suffix)
        return aside

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def merge_queue(self) -> MergeQueue:
        return MergeQueue(self.db)

    @property
    def attempt_log(self) -> AttemptLog:
        return AttemptLog(self.db)

    # -- agents -------------------------------------------------------------------------------

    def add_agent(self, **row: Any) -> None:
        Agents(self.db).add(**row)

    def update_agent(self, agent_id: str, **fields: Any) -> None:
        Agents(self.db).update(agent_id, **fields)

    def remove_agent(self, agent_id: str) -> None:
        Agents(self.db).remove(agent_id)

    def agents(self, role: str | None = None) -> list[dict[str, Any]]:
        """The agent rows (`last_message`, `last_message_at` included: see `hive/runtime/agents.py`)."""
        return Agents(self.db).all(role)

    def set_last_message(self, session_id: str, text: str) -> None:
        Agents(self.db).set_last_message(session_id, text)

    # -- messages from a person (`git hive tell`) ------------------------------------------------

    def tell(self, issue_id: str, text: str) -> int:
        return Tells(self.db).add(issue_id, text)

    def pending_tells(self, issue_id: str | None = None) -> list[Tell]:
        return Tells(self.db).pending(issue_id)

    def tells_delivered(self, tells: list[Tell], to: str) -> None:
        Tells(self.db).delivered([t.seq for t in tells], to)

    # -- budgets ------------------------------------------------------------------------------

    def budget(self, issue_id: str) -> Budget:
        return Budgets(self.db).get(issue_id)

    def save_budget(self, budget: Budget) -> None:
        Budgets(self.db).save(budget)

    def reset_budget(self, issue_id: str) -> None:
        Budgets(self.db).reset(issue_id)

    # -- hand-offs: the `done` issues this machine may merge ------------------------------------

    def record_handoff(self, issue_id: str, test_command: str = "") -> None:
        """`issue_id` is done here (this machine's agent, or a person's `update --status done`):
        the merge pipeline may queue it. A `done` that arrived with `hive/state` never may.
        `test_command`: the one the agent's result named, which gates its landing with the
        configured one wherever it lands (the pipeline after a restart, `git hive finalize`)."""
        KeyValues(self.db).put(HANDOFF + issue_id, json.dumps({"test_command": test_command}))

    def forget_handoff(self, issue_id: str) -> None:
        KeyValues(self.db).delete(HANDOFF + issue_id)

    def handoffs(self) -> dict[str, str]:
        """Each issue handed off here, with its agent's test command ("" for none)."""
        rows = self.db.execute("SELECT key, value FROM kv WHERE key >= ? AND key < ?",
                               (HANDOFF, HANDOFF[:-1] + ";"))
        return {key[len(HANDOFF):]: _handoff_test_command(value) for key, value in rows}

    # -- key/value ----------------------------------------------------------------------------

    def get(self, key: str, default: str = "") -> str:
        return KeyValues(self.db).get(key, default)

    def put(self, key: str, value: str) -> None:
        KeyValues(self.db).put(key, value)

    def delete(self, key: str) -> None:
        KeyValues(self.db).delete(key)


def _handoff_test_command(value: str) -> str:
    try:
        record = json.loads(value)
    except ValueError:
        return ""     # a hand-off recorded before it kept the test command
    command = record.get("test_command") if isinstance(record, dict) else ""
    return command if isinstance(command, str) else ""
