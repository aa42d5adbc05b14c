"""The `attempt_log` and `attempt_notes` tables: each worker attempt, the notes its prompt carried,
and how it ended — what `git hive notes --effect` and `notes prune` judge notes by.

Local runtime data (runtime.db under the git common dir): never on `hive/state`, never pushed;
another machine's attempts are its own evidence. An attempt is started when its prompt is built
and ended once: `done` (its result was a success), `retried` (it failed and the issue is worked
again, by the same agent or a fresh one), `escalated` (it failed and the issue went to a person),
`stopped` (canceled, the daemon stopped: no verdict, left out of the effect). `tokens` is what the
issue's budget grew by during the attempt. The merge step settles a `done` attempt later
(`landed`): `finalized` when its work landed, `rejected` when the refinery sent it back.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass

OUTCOMES = ("done", "retried", "escalated", "stopped")
LANDINGS = ("finalized", "rejected", "stuck")   # stuck: the merge step escalated or failed it


@dataclass
class Seen:
    key: str
    category: str
    tokens: int


@dataclass
class Attempt:
    id: int
    issue_id: str
    attempt: int
    epic: str
    labels: list[str]
    started_at: float
    outcome: str
    tokens: int
    notes: list[Seen]
    landed: str = ""        # of a done attempt: finalized, rejected, or "" (not settled yet)


class AttemptLog:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def start(self, issue_id: str, agent_id: str, *, epic: str, labels: list[str], notes: list[Seen],
              tokens_before: int) -> tuple[int, int]:
        """A new attempt of `issue_id` with the notes its prompt carries: (its id, its number
        among the issue's attempts on this machine, from 1). `tokens`
        holds the budget at the start until `end` turns it into what the attempt spent."""
        number = 1 + int(self.db.execute("SELECT count(*) FROM attempt_log WHERE issue_id = ?",
                                         (issue_id,)).fetchone()[0])
        cursor = self.db.execute(
            "INSERT INTO attempt_log (issue_id, attempt, agent_id, epic, labels, started_at, outcome, tokens, "
            "notes_tokens) VALUES (?, ?, ?, ?, ?, ?, '', ?, ?)",
            (issue_id, number, agent_id, epic, json.dumps(sorted(labels)), time.time(), tokens_before,
             sum(n.tokens for n in notes)))
        attempt_id = int(cursor.lastrowid or 0)
        self.db.executemany("INSERT OR IGNORE INTO attempt_notes (attempt_id, note_key, category, tokens) "
                            "VALUES (?, ?, ?, ?)", [(attempt_id, n.key, n.category, n.tokens) for n in notes])
        return attempt_id, number

    def end(self, attempt_id: int, outcome: str, tokens_now: int) -> None:
        """The attempt's ending, once (a second call changes nothing)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown attempt outcome {outcome!r}")
        self.db.execute("UPDATE attempt_log SET outcome = ?, ended_at = ?, tokens = max(0, ? - tokens) "
                        "WHERE id = ? AND outcome = ''", (outcome, time.time(), tokens_now, attempt_id))

    def settle(self, issue_id: str, landed: str) -> None:
        """The merge step's word on the issue's last `done` attempt, once."""
        if landed not in LANDINGS:
            raise ValueError(f"unknown landing {landed!r}")
        self.db.execute("UPDATE attempt_log SET landed = ? WHERE id = (SELECT max(id) FROM attempt_log "
                        "WHERE issue_id = ? AND outcome = 'done') AND landed = ''", (landed, issue_id))

    def ended(self) -> list[Attempt]:
        """Every attempt with a verdict (done, retried, escalated), oldest first, with its notes."""
        seen: dict[int, list[Seen]] = {}
        for attempt_id, key, category, tokens in self.db.execute(
                "SELECT attempt_id, note_key, category, tokens FROM attempt_notes ORDER BY attempt_id, note_key"):
            seen.setdefault(attempt_id, []).append(Seen(key, category, tokens))
        rows = self.db.execute("SELECT id, issue_id, attempt, epic, labels, started_at, outcome, tokens, landed "
                               "FROM attempt_log WHERE outcome IN ('done', 'retried', 'escalated') ORDER BY id")
        return [Attempt(row[0], row[1], row[2], row[3] or "", _labels(row[4]), row[5], row[6], row[7] or 0,
                        seen.get(row[0], []), row[8] or "") for row in rows]

    def last_seen(self) -> dict[str, float]:
        """Note key -> when an attempt last received it."""
        rows = self.db.execute("SELECT n.note_key, max(a.started_at) FROM attempt_notes n "
                               "JOIN attempt_log a ON a.id = n.attempt_id GROUP BY n.note_key")
        return {key: float(at) for key, at in rows}


def _labels(text: str | None) -> list[str]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
