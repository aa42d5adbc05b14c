"""Runtime state that is never shared: agents, attempts, token usage, merge queue, daemon lock.

Lives in `<git-common-dir>/hive/runtime.db` (SQLite, WAL). The daemon writes it as things happen;
`git hive status` reads it. Unlike the index it is not a cache of `hive/state`: it is what lets a
restarted daemon know which agent processes it left behind and how much retry budget an issue
has used. Losing it loses no issue: in-progress issues are then recovered as failed attempts.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from hive import git

SCHEMA = {
    "agents": {"id": str, "issue_id": str, "session_id": str, "backend": str, "role": str,
               "worktree": str, "branch": str, "base_commit": str, "pid": int, "pid_start": str,
               "started_at": float, "last_activity": float, "state": str, "tokens": int},
    "budgets": {"issue_id": str, "retries": int, "switches": int, "failures": str, "tokens": int,
                "cost_usd": float, "last_error": str, "last_session": str, "not_before": float},
    "merge_queue": {"seq": int, "issue_id": str, "branch": str, "base_commit": str, "state": str,
                    "queued_at": float, "detail": str, "refinery_attempts": int},
    "kv": {"key": str, "value": str},
}


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


class Runtime:
    def __init__(self, paths: git.RepoPaths):
        self.paths = paths
        self.path = paths.hive_dir / "runtime.db"
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        missing = set(SCHEMA) - {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if missing:
            # sqlite-utils only to create tables: importing it costs ~30 ms, and ~130 ms where
            # numpy is installed (it imports numpy, which starts a BLAS thread)
            import sqlite_utils

            sdb = sqlite_utils.Database(db)
            pks = {"agents": "id", "budgets": "issue_id", "merge_queue": "seq", "kv": "key"}
            for table in sorted(missing):
                sdb[table].create(SCHEMA[table], pk=pks[table], if_not_exists=True)
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- agents -------------------------------------------------------------------------------

    def add_agent(self, **row: Any) -> None:
        row.setdefault("started_at", time.time())
        row.setdefault("last_activity", time.time())
        row.setdefault("state", "starting")
        row.setdefault("tokens", 0)
        columns = ", ".join(row)
        self.db.execute(f"INSERT OR REPLACE INTO agents ({columns}) VALUES ({', '.join('?' * len(row))})",
                        tuple(row.values()))

    def update_agent(self, agent_id: str, **fields: Any) -> None:
        if fields:
            sets = ", ".join(f"{k} = ?" for k in fields)
            self.db.execute(f"UPDATE agents SET {sets} WHERE id = ?", (*fields.values(), agent_id))

    def remove_agent(self, agent_id: str) -> None:
        self.db.execute("DELETE FROM agents WHERE id = ?", (agent_id,))

    def agents(self, role: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM agents" + (" WHERE role = ?" if role else "") + " ORDER BY started_at"
        return [dict(r) for r in self.db.execute(sql, (role,) if role else ())]

    # -- budgets ------------------------------------------------------------------------------

    def budget(self, issue_id: str) -> Budget:
        row = self.db.execute("SELECT * FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone()
        if row is None:
            return Budget(issue_id)
        data = dict(row)
        data["failures"] = json.loads(data["failures"] or "[]")
        return Budget(**data)

    def save_budget(self, budget: Budget) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO budgets (issue_id, retries, switches, failures, tokens, cost_usd, "
            "last_error, last_session, not_before) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (budget.issue_id, budget.retries, budget.switches, json.dumps(budget.failures),
             budget.tokens, budget.cost_usd, budget.last_error, budget.last_session, budget.not_before))

    def reset_budget(self, issue_id: str) -> None:
        self.db.execute("DELETE FROM budgets WHERE issue_id = ?", (issue_id,))

    # -- key/value ----------------------------------------------------------------------------

    def get(self, key: str, default: str = "") -> str:
        row = self.db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def put(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))

    def delete(self, key: str) -> None:
        self.db.execute("DELETE FROM kv WHERE key = ?", (key,))


def process_start_time(pid: int) -> str:
    """The kernel's start time of a process (guards against pid reuse); '' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def is_alive(pid: int, start: str = "") -> bool:
    if pid <= 0:
        return False
    current = process_start_time(pid)
    return bool(current) and (not start or current == start)


class DaemonLock:
    """One daemon per repository: an flock on `daemon.lock`, which also records the pid."""

    def __init__(self, paths: git.RepoPaths):
        self.path = paths.hive_dir / "daemon.lock"
        self._file: Any = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def holder(self) -> int | None:
        """The pid of the running daemon, or None when no daemon holds the lock."""
        if not self.path.exists():
            return None
        with open(self.path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                text = handle.read().strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None


def iter_lines(path: Path, offset: int = 0, max_line: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(end offset, line) for each complete line after `offset`; overlong lines are skipped."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    with handle:
        handle.seek(offset)
        while True:
            line = handle.readline(max_line + 1)
            if not line:
                return
            if not line.endswith(b"\n"):
                if len(line) > max_line:
                    # an overlong line: skip to its end without holding it in memory
                    while line and not line.endswith(b"\n"):
                        line = handle.readline(max_line + 1)
                    yield handle.tell(), b""
                    continue
                return  # incomplete last line: wait for the writer to finish it
            yield handle.tell(), line
