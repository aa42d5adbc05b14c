"""What the agents cost: the usage records on `hive/state`, added up, plus what is still running.

Every clone sees the whole team's spend because the figures travel with the state branch: a
worker's `done` or `escalated` commit carries its issue's usage as trailers (`usage_trailers`,
the one place their names are written), and the merge step's commit carries what the refinery
spent on that merge. This module writes those trailers and reads them back.

Two kinds of record, told apart by `Hive-Role`:
- **worker** (or no role: the records written before roles were): the issue's budget so far —
  cumulative from the moment its budget began. A budget begins again after the issue is
  `finalized`, a person retries it (event `open`) or its lease expired (shared mode); a record
  whose figures are below the last one of the same issue also begins a new budget (a lost
  runtime.db, another machine's budget).
  So each worker record adds what grew since the previous record of the same budget.
- **refinery**: the spend of the refinery's turns on that one merge, added as it is.

Records are hostile input (anyone can push `hive/state`): each figure must be a plain decimal
number, role and model short plain names, the issue a valid id; a record that is not is skipped
and reported (`Report.skipped`), never guessed at.

Sessions still running (a daemon holds the lock) add what their issues' budgets spent beyond the
last record, and the refinery's spend on the merge in progress.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Iterator

from hive import git
from hive.backends.base import Usage
from hive.runtime import Budget, DaemonLock, Runtime
from hive.state import history
from hive.state.issue_file import is_valid_id

GROUPS = ("issue", "role", "model", "day")
ROLES = ("worker", "refinery", "queen")
UNKNOWN_MODEL = "unknown"

# trailer -> Usage field; Hive-Tokens (what max_tokens_per_issue counts) is written, not read
FIGURES = {"Hive-Input-Tokens": "input_tokens", "Hive-Cache-Write-Tokens": "cache_write_tokens",
           "Hive-Cache-Read-Tokens": "cache_read_tokens", "Hive-Output-Tokens": "output_tokens"}
COST_TRAILER = "Hive-Cost-USD"
ROLE_TRAILER, MODEL_TRAILER, BACKEND_TRAILER = "Hive-Role", "Hive-Model", "Hive-Backend"
# after these events an issue's worker budget starts from zero: lifecycle.finalize and
# lifecycle.retry reset it; after an expired lease (shared mode) the next spend is another
# machine's budget, or the old machine's, whose spend since its last record was never recorded
BUDGET_RESETS = frozenset({"finalized", "open", "lease-expired"})
# the refinery's spend on the merge in progress (runtime kv, JSON of a Usage)
REFINERY_IN_FLIGHT_KEY = "refinery_unrecorded"

_COUNT = re.compile(r"[0-9]{1,15}\Z")
_AMOUNT = re.compile(r"[0-9]{1,9}(\.[0-9]{1,8})?\Z")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,99}\Z")


def usage_trailers(usage: Usage, counted_tokens: int, *, role: str, model: str = "",
                   backend: str = "") -> dict[str, str]:
    """The trailers of one usage record. `counted_tokens`: what max_tokens_per_issue counts."""
    trailers = {"Hive-Tokens": str(counted_tokens), "Hive-Input-Tokens": str(usage.input_tokens),
                "Hive-Cache-Write-Tokens": str(usage.cache_write_tokens),
                "Hive-Cache-Read-Tokens": str(usage.cache_read_tokens),
                "Hive-Output-Tokens": str(usage.output_tokens), COST_TRAILER: f"{usage.cost_usd:.4f}",
                ROLE_TRAILER: role}
    if model and _NAME.match(model):
        trailers[MODEL_TRAILER] = model
    if backend and _NAME.match(backend):
        trailers[BACKEND_TRAILER] = backend
    return trailers


def worker_trailers(budget: Budget, model: str = "", backend: str = "") -> dict[str, str]:
    """An issue's usage so far on its done or escalated commit, a worker record: any clone can
    add the records up."""
    return usage_trailers(budget.usage, budget.tokens, role="worker", model=model, backend=backend)


@dataclass(frozen=True)
class Record:
    """One spend: whose issue, which role and model, which day (UTC), how much."""

    issue: str
    role: str
    model: str
    day: str
    usage: Usage
    running: bool = False


@dataclass
class Row:
    group: str            # the issue id, role, model or day
    usage: Usage = field(default_factory=Usage)
    running: bool = False  # some of it is a session still running

    def to_json(self, by: str) -> dict[str, object]:
        return {by: self.group, **figures(self.usage), "running": self.running}


@dataclass
class Report:
    by: str
    total: Usage
    rows: list[Row]
    skipped: list[str]     # one line per record that was not a valid record

    def to_json(self) -> dict[str, object]:
        return {"total": figures(self.total), "rows": [row.to_json(self.by) for row in self.rows]}


class BadRecord(ValueError):
    pass


def figures(usage: Usage) -> dict[str, object]:
    """The five figures under their JSON names (DESIGN §5, `cost --json`)."""
    return {"input_tokens": usage.input_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "cache_read_tokens": usage.cache_read_tokens, "output_tokens": usage.output_tokens,
            "cost_usd": round(usage.cost_usd, 4)}


def report(paths: git.RepoPaths, by: str = "issue", models: dict[str, str] | None = None) -> Report:
    """Spend grouped `by` issue, role, model or day: the records on `hive/state` plus the
    sessions still running (`models`: role -> the model its running sessions use)."""
    if by not in GROUPS:
        raise ValueError(f"cost by {by!r}: expected one of {', '.join(GROUPS)}")
    skipped: list[str] = []
    open_budgets: dict[str, Usage] = {}
    spends = list(recorded(history.events(paths), skipped, open_budgets))
    spends += running(paths, open_budgets, models or {})
    return Report(by=by, total=_sum(s.usage for s in spends), rows=group(spends, by), skipped=skipped)


def recorded(events: Iterable[history.StateEvent], skipped: list[str],
             open_budgets: dict[str, Usage]) -> Iterator[Record]:
    """The spends the events record, oldest first; bad records go to `skipped`. `open_budgets`
    is left holding, per issue, the last worker record of its current budget."""
    for event in events:
        if event.event in BUDGET_RESETS and event.issue:
            open_budgets.pop(event.issue, None)
        if not any(name in event.trailers for name in (*FIGURES, COST_TRAILER)):
            continue
        try:
            record = parse_record(event)
        except BadRecord as exc:
            skipped.append(f"commit {event.commit[:10]}: {exc}")
            continue
        if record.role == "refinery":
            yield record
            continue
        grown = _growth(open_budgets.get(record.issue), record.usage)
        open_budgets[record.issue] = record.usage
        yield Record(record.issue, record.role, record.model, record.day, grown)


def parse_record(event: history.StateEvent) -> Record:
    """The record a commit's trailers make, checked strictly; BadRecord says what is wrong."""
    trailers = event.trailers
    if not is_valid_id(event.issue):
        raise BadRecord(f"Hive-Issue {event.issue[:40]!r} is not an issue id")
    counts = {}
    for name, attribute in FIGURES.items():
        value = trailers.get(name, "")
        if not _COUNT.match(value):
            raise BadRecord(f"{name} {value[:40]!r} is not a token count")
        counts[attribute] = int(value)
    cost = trailers.get(COST_TRAILER, "")
    if not _AMOUNT.match(cost):
        raise BadRecord(f"{COST_TRAILER} {cost[:40]!r} is not an amount of USD")
    role = trailers.get(ROLE_TRAILER, "worker")
    if role not in ROLES:
        raise BadRecord(f"{ROLE_TRAILER} {role[:40]!r} is not one of {', '.join(ROLES)}")
    model = trailers.get(MODEL_TRAILER, UNKNOWN_MODEL)
    if not _NAME.match(model):
        raise BadRecord(f"{MODEL_TRAILER} {model[:40]!r} is not a model name")
    return Record(event.issue, role, model, event.at[:10], Usage(cost_usd=float(cost), **counts))


def running(paths: git.RepoPaths, open_budgets: dict[str, Usage], models: dict[str, str]) -> list[Record]:
    """What sessions of a running daemon spent beyond the records: the budgets of the issues its
    workers hold, and the refinery's merge in progress."""
    if not DaemonLock(paths).holder() or not paths.runtime_db.exists():
        return []
    runtime = Runtime(paths)
    try:
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        spends = []
        for issue_id in sorted({a["issue_id"] for a in runtime.agents("worker") if a["issue_id"]}):
            grown = _growth(open_budgets.get(issue_id), runtime.budget(issue_id).usage)
            spends.append(Record(issue_id, "worker", models.get("worker", UNKNOWN_MODEL), today, grown, running=True))
        in_flight = stored_usage(runtime.get(REFINERY_IN_FLIGHT_KEY))
        issue_id = runtime.get("refinery_issue")
        if in_flight.total_tokens or in_flight.cost_usd:
            spends.append(Record(issue_id, "refinery", models.get("refinery", UNKNOWN_MODEL), today, in_flight,
                                 running=True))
        return spends
    finally:
        runtime.close()


def group(spends: Iterable[Record], by: str) -> list[Row]:
    """Rows per group: days in order, the others by cost then tokens, highest first."""
    rows: dict[str, Row] = {}
    for spend in spends:
        key = getattr(spend, by) or "-"
        row = rows.setdefault(key, Row(key))
        row.usage = row.usage.plus(spend.usage)
        row.running = row.running or spend.running
    if by == "day":
        return [rows[key] for key in sorted(rows)]
    return sorted(rows.values(), key=lambda r: (-r.usage.cost_usd, -r.usage.total_tokens, r.group))


def describe(usage: Usage) -> str:
    """The five figures in one line, for people."""
    return (f"input {usage.input_tokens:,} · cache writes {usage.cache_write_tokens:,} · cache reads "
            f"{usage.cache_read_tokens:,} · output {usage.output_tokens:,} · ${usage.cost_usd:.4f}")


def stored_usage(text: str) -> Usage:
    """A Usage kept as JSON in runtime.db (`dump_usage`); empty when absent or not one."""
    try:
        data = json.loads(text) if text else {}
        return Usage(**{k: data[k] for k in asdict(Usage()) if k in data})
    except (ValueError, TypeError):
        return Usage()


def dump_usage(usage: Usage) -> str:
    return json.dumps(asdict(usage))


def _growth(before: Usage | None, now: Usage) -> Usage:
    """What a cumulative figure added since `before`; all of it when it is a new budget."""
    if before is None or any(getattr(now, k) < getattr(before, k) for k in asdict(now)):
        return now
    return now.growth_since(before)


def _sum(usages: Iterable[Usage]) -> Usage:
    total = Usage()
    for usage in usages:
        total = total.plus(usage)
    return total
