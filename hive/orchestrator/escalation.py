"""The escalation policy (DESIGN §3): retry the same agent, then switch agents, then a person.

Pure decisions over an issue's `Budget`; the worker applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hive.config import Config
from hive.runtime import Budget

RETRY = "retry"          # same agent, same session (resumed), same worktree
SWITCH = "switch"        # a fresh agent in a clean worktree
ESCALATE = "escalate"    # stop: a person decides


@dataclass
class Decision:
    action: str
    reason: str


def record_failure(budget: Budget, error: str, now: float) -> None:
    assert budget.failures is not None
    budget.failures.append(now)
    budget.failures[:] = budget.failures[-50:]
    budget.last_error = error


def decide(budget: Budget, config: Config, now: float, *, hopeless: str = "") -> Decision:
    """What to do after a failed attempt that `record_failure` already counted."""
    if hopeless:
        return Decision(ESCALATE, hopeless)
    window = config.anomaly_window_minutes * 60
    recent = [t for t in budget.failures or [] if t >= now - window]
    if len(recent) >= config.anomaly_failure_threshold:
        return Decision(ESCALATE, f"anomaly: {len(recent)} failures within "
                                  f"{config.anomaly_window_minutes} minutes")
    if budget.retries < config.max_retries:
        return Decision(RETRY, f"retry {budget.retries + 1} of {config.max_retries} with the same agent")
    if budget.switches < config.max_agent_switches:
        return Decision(SWITCH, f"switch {budget.switches + 1} of {config.max_agent_switches}: a fresh agent")
    return Decision(ESCALATE, f"retries ({config.max_retries}) and agent switches "
                              f"({config.max_agent_switches}) exhausted")


def backoff_seconds(failures_before_start: int) -> float:
    """Delay before another try after a failure that happened before the agent even started."""
    return min(60.0, 0.5 * (2 ** max(0, failures_before_start - 1)))
