"""What `git hive ui` shows in Datasette: the databases, a snapshot of the records, the queries,
and the guard in front of it all.

Datasette browses SQLite files. The index (`index.db`: issues, dependencies, notes) is served
read-only while hive keeps writing it. The runtime is not served: `runtime_view` copies what a
browser may see of it (agents, budgets, the merge queue; never a person's tells, never a
session's transcript) into `runtime.db` in the ui folder, served immutable. What lives only in the commits of `hive/state` — the usage records and
the audit trail — is written by `snapshot` into a third file, `history.db`, made anew at each start
and served immutable: `usage` (one row per spend, as `hive.cost` reads them), `events` (one row per
state commit) and `needs_person` (escalated and failed issues with their reasons).

`metadata` holds the canned queries: the ready queue (the index's own `READY_SQL`), blocked
issues, cost by model and role, escalations, merge history, and the merge queue.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlencode

from hive import cost
from hive.backends.base import Usage
from hive.project import Project
from hive.sqlite import connect, transaction
from hive.state import history
from hive.state.index import READY_SQL, SATISFIED

HISTORY_DB = "history.db"
RUNTIME_VIEW = "runtime.db"
VIEW_TABLES = ("agents", "budgets", "merge_queue")   # not `tells` (a person's words), not `kv`
TOKEN_PARAMETER = "token"
TOKEN_COOKIE = "hive_ui_token"
HOST = "127.0.0.1"    # never another interface: the queue, prompts' notes and costs are private

_SATISFIED = ", ".join(f"'{status}'" for status in SATISFIED)
BLOCKED_SQL = f"""
SELECT i.id, i.title, i.priority, group_concat(d.blocker_id || ' (' || coalesce(b.status, 'unknown') || ')', ', ')
       AS blocked_by
FROM issues i JOIN deps d ON d.issue_id = i.id LEFT JOIN issues b ON b.id = d.blocker_id
WHERE i.status = 'open' AND (b.id IS NULL OR b.status NOT IN ({_SATISFIED}))
GROUP BY i.id ORDER BY i.priority, i.created_at
"""
COST_BY_MODEL_AND_ROLE_SQL = """
SELECT model, role, sum(input_tokens) AS input_tokens, sum(cache_write_tokens) AS cache_write_tokens,
       sum(cache_read_tokens) AS cache_read_tokens, sum(output_tokens) AS output_tokens,
       round(sum(cost_usd), 4) AS cost_usd
FROM usage GROUP BY model, role ORDER BY sum(cost_usd) DESC, model, role
"""
ESCALATIONS_SQL = "SELECT issue, status, title, reason FROM needs_person ORDER BY issue"
MERGE_HISTORY_SQL = """
SELECT at, issue, merged, target, summary FROM events WHERE event = 'finalized' AND merged != ''
ORDER BY at DESC
"""
MERGE_QUEUE_SQL = "SELECT seq, issue_id, state, detail, queued_at FROM merge_queue ORDER BY seq"

_TABLES = {
    "usage": "issue TEXT, role TEXT, model TEXT, day TEXT, input_tokens INTEGER, cache_write_tokens INTEGER, "
             "cache_read_tokens INTEGER, output_tokens INTEGER, cost_usd REAL, running INTEGER",
    "events": "seq INTEGER PRIMARY KEY, commit_id TEXT, at TEXT, author TEXT, event TEXT, issue TEXT, "
              "agent TEXT, reason TEXT, merged TEXT, target TEXT, summary TEXT",
    "needs_person": "issue TEXT PRIMARY KEY, status TEXT, title TEXT, reason TEXT",
    "skipped_records": "problem TEXT",
}


def databases(project: Project) -> Path:
    """The live database served read-only: the index, brought up to date first."""
    project.sync(warn=False)
    return project.paths.index_db


def runtime_view(project: Project, folder: Path) -> Path:
    """`runtime.db` in `folder`: a copy of the runtime's `VIEW_TABLES` only; its path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / RUNTIME_VIEW
    path.unlink(missing_ok=True)
    live = sqlite3.connect(f"file:{project.paths.hive_dir / 'runtime.db'}?mode=ro", uri=True)
    db = connect(path, named_rows=False)
    try:
        with transaction(db):
            for table in VIEW_TABLES:
                create = live.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                      (table,)).fetchone()
                db.execute(create[0])
                rows = live.execute(f"SELECT * FROM [{table}]").fetchall()
                if rows:
                    db.executemany(f"INSERT INTO [{table}] VALUES ({', '.join('?' * len(rows[0]))})", rows)
        db.execute("PRAGMA journal_mode=DELETE")   # one file: it is served immutable
    finally:
        db.close()
        live.close()
    return path


def snapshot(project: Project, folder: Path) -> Path:
    """Write `history.db` in `folder` from `hive/state` and the running sessions; its path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / HISTORY_DB
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    events = list(history.events(project.paths))
    skipped: list[str] = []
    open_budgets: dict[str, Usage] = {}
    spends = list(cost.recorded(events, skipped, open_budgets))
    spends += cost.running(project.paths, open_budgets, {role: project.config.model_for(role)
                                                       for role in ("worker", "refinery")})
    stuck = project.index.list(["escalated", "failed"])
    reasons = history.reasons(project.paths, [issue.id for issue in stuck])
    db = connect(path)
    try:
        with transaction(db):
            for table, columns in _TABLES.items():
                db.execute(f"CREATE TABLE {table} ({columns})")
            db.executemany("INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(s.issue, s.role, s.model, s.day, s.usage.input_tokens, s.usage.cache_write_tokens,
                             s.usage.cache_read_tokens, s.usage.output_tokens, s.usage.cost_usd, int(s.running))
                            for s in spends])
            db.executemany("INSERT INTO events VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(e.commit, e.at, e.author, e.event, e.issue, e.agent, e.trailers.get("Hive-Reason", ""),
                             e.trailers.get("Hive-Merged", ""), e.trailers.get("Hive-Target", ""), e.summary)
                            for e in events])
            db.executemany("INSERT INTO needs_person VALUES (?, ?, ?, ?)",
                           [(i.id, i.status, i.title, reasons.get(i.id, "")) for i in stuck])
            db.executemany("INSERT INTO skipped_records VALUES (?)", [(line,) for line in skipped])
        db.execute("PRAGMA journal_mode=DELETE")   # one file: it is served immutable
    finally:
        db.close()
    return path


def metadata() -> dict[str, object]:
    """Datasette's metadata: titles and the canned queries of each database."""
    def query(title: str, sql: str) -> dict[str, str]:
        return {"title": title, "sql": sql.strip()}

    return {
        "title": "git hive",
        "databases": {
            "index": {"queries": {
                "ready_queue": query("Ready queue", READY_SQL.replace("SELECT i.*", "SELECT i.id, i.title, "
                                                                      "i.priority, i.type, i.created_at")),
                "blocked_issues": query("Blocked issues", BLOCKED_SQL)}},
            "runtime": {"queries": {"merge_queue": query("Merge queue", MERGE_QUEUE_SQL)}},
            "history": {"queries": {
                "cost_by_model_and_role": query("Cost by model and role", COST_BY_MODEL_AND_ROLE_SQL),
                "escalations": query("Escalations", ESCALATIONS_SQL),
                "merge_history": query("Merge history", MERGE_HISTORY_SQL)}},
        },
    }


def new_token() -> str:
    return secrets.token_urlsafe(24)


def allowed_hosts(port: int) -> frozenset[str]:
    """The `Host` headers the server answers: its own address, by number or as localhost (any
    other name is a page that rebound its DNS to 127.0.0.1)."""
    return frozenset(f"{name}:{port}" for name in (HOST, "localhost")) | {HOST, "localhost"}


Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def guarded(app: Asgi, token: str, hosts: frozenset[str]) -> Asgi:
    """`app` answering only requests with an allowed `Host` and the token: in the URL `git hive
    ui` printed (`?token=`, then kept in a cookie of that browser) or that cookie. Anything else
    is a 403, so a page on another site or another local user's browser reads nothing."""
    async def serve(scope: dict[str, Any], receive: Callable[[], Awaitable[dict]],
                    send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if headers.get("host", "") not in hosts:
            return await _refuse(send, "unknown Host: git hive ui answers 127.0.0.1 and localhost only")
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = next((v for k, v in query if k == TOKEN_PARAMETER), None)
        if given is None:
            cookies = dict(part.strip().split("=", 1) for part in headers.get("cookie", "").split(";") if "=" in part)
            given = cookies.get(TOKEN_COOKIE)
        if given is None or not secrets.compare_digest(given, token):
            return await _refuse(send, "this needs the URL `git hive ui` printed (with its token)")
        inner = {**scope, "query_string": urlencode([(k, v) for k, v in query if k != TOKEN_PARAMETER]).encode()}

        async def with_cookie(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (
                    b"set-cookie", f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode())]}
            await send(message)

        await app(inner, receive, with_cookie)

    return serve


async def _refuse(send: Callable[[dict], Awaitable[None]], why: str) -> None:
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
    await send({"type": "http.response.body", "body": (why + "\n").encode()})

