"""What the notes did: attempts that received a note against comparable attempts that did not.

Evidence comes from this machine's `attempt_log` (`hive/runtime/attempt_log.py`). Two attempts
are comparable when their issues share an epic and a label set (the issue's `parent`, its sorted
`labels`): the work is alike, so a difference in outcome may be the note's. For a note, its
*seen* group is every ended attempt whose prompt carried it; its *unseen* group every ended
attempt that did not, among the strata (epic, labels) of the seen ones. A category is judged the
same way: attempts that received any note of it against comparable ones that received none.

The figures are counts, not a verdict: `ok` is the share of attempts whose result was a success
(`done`) the refinery did not send back, `first_try` the attempts that were an issue's first and
whose work was finalized, `tokens` the mean an attempt spent. With a handful of attempts a difference is noise; `MIN_COUNT` attempts on each
side is what `--harmful` requires before it calls a note harmful (its seen group did worse).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from hive.runtime.attempt_log import Attempt

MIN_COUNT = 5


@dataclass
class Group:
    attempts: int = 0
    done: int = 0
    retried: int = 0
    escalated: int = 0
    first_try: int = 0
    rejected: int = 0       # done, then sent back, escalated or failed by the merge step: not ok
    tokens: int = 0

    def add(self, attempt: Attempt) -> None:
        self.attempts += 1
        self.tokens += attempt.tokens
        if attempt.outcome == "done" and attempt.landed in ("rejected", "stuck"):
            self.rejected += 1
        elif attempt.outcome == "done":
            self.done += 1
            self.first_try += attempt.attempt == 1 and attempt.landed == "finalized"
        elif attempt.outcome == "retried":
            self.retried += 1
        else:
            self.escalated += 1

    @property
    def ok(self) -> float | None:
        return self.done / self.attempts if self.attempts else None

    @property
    def mean_tokens(self) -> float | None:
        return self.tokens / self.attempts if self.attempts else None

    def as_json(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "done": self.done, "rejected": self.rejected, "retried": self.retried,
                "escalated": self.escalated, "first_try": self.first_try, "ok": self.ok, "mean_tokens": self.mean_tokens}


@dataclass
class Effect:
    name: str               # a note key, or a category
    seen: Group = field(default_factory=Group)
    unseen: Group = field(default_factory=Group)

    @property
    def delta(self) -> float | None:
        """Seen ok minus unseen ok (share of attempts), when both groups have attempts."""
        if self.seen.ok is None or self.unseen.ok is None:
            return None
        return self.seen.ok - self.unseen.ok

    def harmful(self, min_count: int) -> bool:
        return (self.seen.attempts >= min_count and self.unseen.attempts >= min_count
                and self.delta is not None and self.delta < 0)

    def as_json(self) -> dict[str, Any]:
        return {"seen": self.seen.as_json(), "unseen": self.unseen.as_json(), "delta_ok": self.delta}


def _stratum(attempt: Attempt) -> tuple[str, tuple[str, ...]]:
    return attempt.epic, tuple(attempt.labels)


def _judge(name: str, attempts: list[Attempt], saw: Callable[[Attempt], bool]) -> Effect:
    effect = Effect(name)
    seen = [a for a in attempts if saw(a)]
    strata = {_stratum(a) for a in seen}
    for attempt in seen:
        effect.seen.add(attempt)
    for attempt in attempts:
        if not saw(attempt) and _stratum(attempt) in strata:
            effect.unseen.add(attempt)
    return effect


def by_note(attempts: list[Attempt]) -> dict[str, Effect]:
    """The effect of every note some ended attempt received, by note key."""
    return _each(attempts, {a.id: {n.key for n in a.notes} for a in attempts})


def by_category(attempts: list[Attempt]) -> dict[str, Effect]:
    return _each(attempts, {a.id: {n.category for n in a.notes} for a in attempts})


def _each(attempts: list[Attempt], carried: dict[int, set[str]]) -> dict[str, Effect]:
    """An effect for every name some attempt carried (`carried`: attempt id -> names)."""
    names = sorted(set().union(*carried.values())) if carried else []

    def judge(name: str) -> Effect:
        return _judge(name, attempts, lambda a: name in carried[a.id])

    return {name: judge(name) for name in names}


def harmful(effects: dict[str, Effect], min_count: int = MIN_COUNT) -> list[str]:
    return [key for key, effect in effects.items() if effect.harmful(min_count)]


def unused(notes: Iterable[dict[str, Any]], last_seen: dict[str, float], days: float,
           now: float) -> list[dict[str, Any]]:
    """The notes no attempt received in the last `days` days and written before then (a note
    without a readable `at` counts as old)."""
    cutoff = now - days * 86400
    return [n for n in notes if last_seen.get(n["key"], 0.0) < cutoff and _written_at(n) < cutoff]


def _written_at(note: dict[str, Any]) -> float:
    try:
        stamp = datetime.datetime.fromisoformat(str(note.get("at") or "").replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.timestamp()
