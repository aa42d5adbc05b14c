"""Every move of an issue between statuses (DESIGN §3), and the escalation policy.

Each transition is one function: one precondition checked against the tip the commit is built on,
one compare-and-swap commit on `hive/state` (through `issues.update`), and its runtime side
effect (the retry budget). The daemon, the worker, shared mode, the merge pipeline and the CLI all
move issues through here, so a rule is written once.

A transition whose precondition does not hold raises `TransitionRefused` (never told apart from an
error by its message). `claim` alone answers with a bool: losing a claim to another claimer is
the ordinary end of a race, not a refusal anyone reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from hive import git, issues
from hive.errors import HiveError
from hive.project import Project
from hive.state import issue_file
from hive.state.issue_file import Issue
from hive.workspace import landings

if TYPE_CHECKING:   # an issue edit (`update`, `cancel`) loads none of the budget and merge side
    from hive.backends.base import Usage
    from hive.config import Config
    from hive.runtime import Budget, Runtime
    from hive.state.store import Snapshot

IN_PROGRESS = "in_progress"
# what `retry` puts back in the queue
RETRYABLE_STATUSES = ("escalated", "failed", "canceled")
# statuses in which an issue has no agent (issues.update clears the assignee on them)
UNASSIGNED_STATUSES = issues.UNASSIGNED_STATUSES


class TransitionRefused(HiveError):
    """The issue is not where the transition starts from: nothing was committed (exit code 1)."""

    def __init__(self, issue_id: str, transition: str, current: Issue, needs: str):
        self.issue_id = issue_id
        self.transition = transition
        self.status = current.status
        self.assignee = current.assignee
        held = f" by {current.assignee}" if current.assignee else ""
        super().__init__(f"{issue_id} is {current.status}{held}: {transition} needs {needs}")


# -- preconditions ------------------------------------------------------------------------------

Check = Callable[[Issue], None]


def _held_by(agent_id: str, transition: str) -> Check:
    def check(current: Issue) -> None:
        if current.status != IN_PROGRESS or current.assignee != agent_id:
            raise TransitionRefused(current.id, transition, current, f"in_progress held by {agent_id}")
    return check


def _status_in(statuses: tuple[str, ...], transition: str) -> Check:
    def check(current: Issue) -> None:
        if current.status not in statuses:
            raise TransitionRefused(current.id, transition, current, " or ".join(statuses))
    return check


def _anything(current: Issue) -> None:
    """Any status: a person may cancel whatever they like."""


def _move(project: Project, issue_id: str, check: Check, changes: dict[str, Any], *, event: str,
          summary: str, agent: str = "", trailers: dict[str, str] | None = None,
          notes: list[dict[str, Any]] | None = None) -> Issue:
    return issues.update(project, issue_id, changes, event=event, agent=agent, summary=summary,
                         check=check, trailers=trailers, notes=notes)


def reason_line(text: str, limit: int = 500) -> str:
    """`text` as one line of at most `limit` characters: when it is longer, its first line (what
    failed) and its end (a test command's verdict comes last, its banner first)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    first, _, rest = text.strip().partition("\n")
    head = " ".join(first.split())[:limit // 3]
    tail = " ".join(rest.split())
    room = limit - len(head) - len(" … ")
    return f"{head} … {tail[-room:]}" if tail else flat[:limit]


# -- claims and leases --------------------------------------------------------------------------

def lease_until(seconds: int) -> str:
    return issue_file.format_time(issue_file.now() + timedelta(seconds=seconds))


LEASE_HORIZON = 4   # a lease further ahead than this many `lease_seconds` is not one hive wrote


def lease_expired(issue: Issue, lease_seconds: int) -> bool:
    """Whether the claim on `issue` has lapsed: its `lease_expires` past, missing, not a time,
    or further ahead than `LEASE_HORIZON` × `lease_seconds` (a forged claim that would never
    end). Compared as times, never as text."""
    value = issue.extra.get("lease_expires")
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return True
    if not isinstance(value, datetime):
        return True
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    now = issue_file.now()
    return value < now or value > now + timedelta(seconds=LEASE_HORIZON * max(lease_seconds, 1))


def claim(project: Project, issue_id: str, agent_id: str, lease_seconds: int = 0, machine: str = "") -> bool:
    """open → in_progress for `agent_id`; False when the issue is not claimable on the tip
    (taken, blocked, an epic, canceled...).

    Shared mode claims inside `StateStore.draft`: the claim commit is pushed before it is published.
    With `lease_seconds` (a queue shared between machines) the claim carries `lease_expires`, so
    that another machine can reclaim the issue if this one dies, and `machine` (who holds it).
    """

    def claimable(snap: Snapshot, current: Issue) -> None:
        if current.status != "open" or current.assignee or current.type == "epic":
            raise TransitionRefused(issue_id, "claim", current, "an open task nobody holds")
        for blocker in current.depends_on:
            found = snap.read_issue(blocker)
            status = issue_file.parse(found[1], blocker, found[0]).status if found else "unknown"
            if status not in issue_file.SATISFIED_BLOCKER_STATUSES:
                raise TransitionRefused(issue_id, "claim", current, f"its blocker {blocker} done ({status})")

    fields: dict[str, object] = {"status": IN_PROGRESS, "assignee": agent_id}
    if lease_seconds:
        fields["lease_expires"] = lease_until(lease_seconds)
    if machine:
        fields["machine"] = machine
    try:
        issues.update(project, issue_id, fields, event="claimed", agent=agent_id,
                      summary=f"claim {issue_id} for {agent_id}", check_snapshot=claimable)
    except TransitionRefused:
        return False
    return True


def extend_lease(project: Project, issue_id: str, agent_id: str, seconds: int) -> Issue:
    return _move(project, issue_id, _held_by(agent_id, "extend-lease"), {"lease_expires": lease_until(seconds)},
                 event="lease-extended", agent=agent_id, summary=f"extend the lease of {agent_id} on {issue_id}")


def expire_lease(project: Project, issue_id: str, holder: str, lease: str, lease_seconds: int) -> Issue:
    """in_progress (another machine's, its lease `lease` lapsed: `lease_expired`) → open."""
    def expired(current: Issue) -> None:
        _held_by(holder, "lease-expired")(current)
        if not lease_expired(current, lease_seconds):
            raise TransitionRefused(issue_id, "lease-expired", current, "an expired lease")

    lease = lease or "none"
    return _move(project, issue_id, expired, {"status": "open", "lease_expires": None, "machine": None},
                 event="lease-expired",
                 summary=f"reopen {issue_id}: the lease of {holder} expired at {lease}",
                 trailers={"Hive-Previous-Agent": holder, "Hive-Reason": f"lease expired {lease}"})


# -- a worker's moves (the issue held by its agent) ---------------------------------------------

def record_retry(project: Project, issue_id: str, agent_id: str, error: str, attempt: int) -> Issue:
    """in_progress stays in_progress: the record of another attempt by the same agent."""
    return _move(project, issue_id, _held_by(agent_id, "retry"), {}, event="retry", agent=agent_id,
                 summary=f"retry {issue_id}: {error[:120]}",
                 trailers={"Hive-Reason": reason_line(error), "Hive-Attempt": str(attempt)})


def switch_agent(project: Project, issue_id: str, old: str, new: str, error: str) -> Issue:
    """in_progress held by `old` → held by the fresh agent `new`."""
    return _move(project, issue_id, _held_by(old, "switch"), {"assignee": new}, event="switched", agent=new,
                 summary=f"switch {issue_id} from {old} to {new}",
                 trailers={"Hive-Reason": reason_line(error), "Hive-Previous-Agent": old})


def finish(project: Project, issue_id: str, agent_id: str, summary: str, trailers: dict[str, str]) -> Issue:
    """in_progress → done: the work is on its branch, for the merge step."""
    return _move(project, issue_id, _held_by(agent_id, "done"), {"status": "done"}, event="done", agent=agent_id,
                 summary=f"done {issue_id}: {reason_line(summary)[:100] or 'work committed'}", trailers=trailers)


def hand_off(project: Project, runtime: Runtime, issue_id: str, agent_id: str, summary: str,
             trailers: dict[str, str], test_command: str = "") -> Issue:
    """An agent's finished work → done, and this machine's merge pipeline may land it (gated by
    `test_command` too). The hand-off is recorded first: a crash between the two is rescanned."""
    runtime.record_handoff(issue_id, test_command)
    try:
        return finish(project, issue_id, agent_id, summary, trailers)
    except TransitionRefused:
        runtime.forget_handoff(issue_id)
        raise


def escalate(project: Project, issue_id: str, agent_id: str, reason: str, last_error: str,
             usage: dict[str, str] | None = None) -> Issue:
    """in_progress → escalated: the escalation chain ran out; a person decides. `usage`: the
    issue's `cost.worker_trailers`."""
    return _move(project, issue_id, _held_by(agent_id, "escalate"), {"status": "escalated"}, event="escalated",
                 agent=agent_id, summary=f"escalate {issue_id}: {reason}",
                 trailers={"Hive-Reason": reason_line(f"{reason}; last error: {last_error}"), **(usage or {})})


def release(project: Project, issue_id: str, agent_id: str, why: str) -> Issue:
    """in_progress → open: the agent stopped (the daemon is stopping); the next run continues."""
    return _move(project, issue_id, _held_by(agent_id, "release"), {"status": "open"}, event="released",
                 agent=agent_id, summary=f"release {issue_id}: {why}")


def recover(project: Project, issue_id: str, holder: str, error: str, decision: "Decision") -> Issue:
    """in_progress held by an agent lost with its daemon → open, or escalated by `decision`."""
    return _move(project, issue_id, _held_by(holder, "recover"), {"status": status_after(decision)},
                 event="recovered", summary=f"recover {issue_id}: {error} → {decision.reason}",
                 trailers={"Hive-Reason": error})


# -- the merge step's moves (the issue done) ----------------------------------------------------

_DONE = ("done",)


def finalize(project: Project, runtime: Runtime, issue_id: str, merged: str, target: str,
             usage: dict[str, str] | None = None) -> Issue:
    """done → finalized once its work is in `target` at `merged`; its budget ends; an epic whose
    issues are now all finished is finalized too. `usage` (here and in the merge step's other
    endings): the refinery's spend on this merge, its `cost.usage_trailers`."""
    # the landed commit stays in the file: whether a dependent may start from, or land on, a
    # target tip is then one ancestry check (`hive.workspace.landings.on_target`)
    issue = _move(project, issue_id, _status_in(_DONE, "finalize"), {"status": "finalized", landings.MERGED_FIELD: merged,
                                                                     landings.LANDING_FIELD: None},
                  event="finalized",
                  summary=f"finalize {issue_id}: merged into {target} at {merged[:10]}",
                  trailers={"Hive-Merged": merged, "Hive-Target": target, **(usage or {})})
    runtime.reset_budget(issue_id)   # kept from `done` until now: rejections count against it
    runtime.attempt_log.settle(issue_id, "finalized")
    landings.forget_landing(git.repository(project.paths.common_dir), issue_id)   # `merged` says it from now on
    finalize_epics(project, issue.parent)
    return issue


def finalize_epics(project: Project, parent: str) -> None:
    """An epic whose children are all finalized or canceled is finalized (walking up)."""
    while parent:
        epic = project.index.get(parent)
        if epic is None or epic.type != "epic" or epic.status in issue_file.TERMINAL_STATUSES:
            return
        children = project.index.list(parent=parent)
        if not children or any(c.status not in issue_file.TERMINAL_STATUSES for c in children):
            return
        issues.update(project, parent, {"status": "finalized"}, event="finalized",
                      summary=f"finalize epic {parent}: all its issues are finished")
        parent = epic.parent


def reject(project: Project, runtime: Runtime, config: Config, issue_id: str, reason: str,
           usage: dict[str, str] | None = None) -> "Decision":
    """done → open (or escalated when the budget is spent): the refinery rejected the work. The
    rejection counts against the retry budget and is left to the next agent as a note."""
    budget = runtime.budget(issue_id)
    decision = _charge(budget, config, f"rejected by the refinery: {reason}")
    note = issues.note_line(f"The refinery rejected the previous attempt: {reason}", "gotcha",
                            issue=issue_id, agent="refinery")
    _move(project, issue_id, _status_in(_DONE, "reject"), {"status": status_after(decision)}, event="rejected",
          summary=f"reject {issue_id}: {reason[:100]}", trailers={"Hive-Reason": reason_line(reason, 400), **(usage or {})},
          notes=[note])
    runtime.save_budget(budget)     # only once the move was made: a refused one costs nothing
    runtime.attempt_log.settle(issue_id, "rejected")
    return decision


def escalate_merge(project: Project, issue_id: str, reason: str, usage: dict[str, str] | None = None) -> Issue:
    """done → escalated: the merge step cannot land the work; a person decides."""
    return _move(project, issue_id, _status_in(_DONE, "escalate"), {"status": "escalated"}, event="escalated",
                 summary=f"escalate {issue_id}: {reason[:100]}",
                 trailers={"Hive-Reason": reason_line(reason, 400), **(usage or {})})


def fail_merge(project: Project, issue_id: str, reason: str, usage: dict[str, str] | None = None) -> Issue:
    """done → failed: there is nothing left to merge (the branch is gone)."""
    return _move(project, issue_id, _status_in(_DONE, "fail"), {"status": "failed"}, event="failed",
                 summary=f"merge of {issue_id} failed: {reason}", trailers={"Hive-Reason": reason, **(usage or {})})


# -- a person's moves ---------------------------------------------------------------------------

def cancel(project: Project, issue_id: str) -> Issue:
    """any → canceled; a running agent on it is stopped by its daemon."""
    return _move(project, issue_id, _anything, {"status": "canceled"}, event="canceled",
                 summary=f"canceled {issue_id}")


def retry(project: Project, runtime: Runtime, issue_id: str) -> Issue:
    """escalated, failed or canceled → open, with a fresh budget: retries, agent switches and the
    failures the anomaly window counts start again from zero."""
    issue = _move(project, issue_id, _status_in(RETRYABLE_STATUSES, "retry"), {"status": "open"}, event="open",
                  summary=f"open {issue_id}")
    runtime.reset_budget(issue_id)
    return issue


def edit(project: Project, issue_id: str, changes: Callable[[Issue], dict[str, Any]], *, force: bool = False,
         event: str, summary: str, body: str | None = None) -> Issue:
    """A person's change of fields (`git hive update`): `changes(issue on the tip)` → fields.

    A status or assignee change that would leave the issue where no daemon ever moves it again —
    in_progress without an assignee, an assignee on an issue no agent holds, an epic in progress —
    is refused unless `force`.
    """

    before: list[str] = []

    def checked(current: Issue) -> dict[str, Any]:
        fields = changes(current)
        if not force:
            check_by_hand(current, fields)
        before[:] = [current.status]
        return fields

    updated = issues.update(project, issue_id, checked, event=event, summary=summary, body=body)
    if updated.status == "done" and before != ["done"]:
        from hive.workspace import worktrees   # (a hand-off only: an issue edit loads no worktree code)

        # what the person committed in the issue's kept worktree is what lands (`git hive show`)
        worktrees.follow_worktree(project.paths, issue_id)
    return updated


def edit_record(issue_id: str, changes: dict[str, Any]) -> tuple[str, str]:
    """(event, summary) of a person's edit of `changes` (none: only the description)."""
    event = str(changes["status"]) if changes.get("status") else "updated"
    summary = (f"update {issue_id}: " + ", ".join(f"{k}={v}" for k, v in changes.items()) if changes
               else f"describe {issue_id}")
    return event, summary


def check_by_hand(current: Issue, fields: dict[str, Any]) -> None:
    if "status" not in fields and "assignee" not in fields:
        return
    status = fields.get("status", current.status)
    clears = "status" in fields and status in UNASSIGNED_STATUSES and "assignee" not in fields
    assignee = "" if clears else fields.get("assignee", current.assignee)
    if status == IN_PROGRESS and not assignee:
        raise TransitionRefused(current.id, f"status {status}", current,
                                "an assignee (--assignee NAME), or --force")
    if status == IN_PROGRESS and current.type == "epic":
        raise TransitionRefused(current.id, f"status {status}", current, "a task, not an epic (or --force)")
    if status in UNASSIGNED_STATUSES and assignee:
        raise TransitionRefused(current.id, f"assignee {assignee}", current,
                                "status in_progress (an issue nobody works on has no assignee), or --force")


# -- the escalation policy: retry the same agent, then switch agents, then a person -------------

RETRY = "retry"          # same agent, same session (resumed), same worktree
SWITCH = "switch"        # a fresh agent in a clean worktree
ESCALATE = "escalate"    # stop: a person decides


@dataclass
class Decision:
    action: str
    reason: str


def status_after(decision: Decision) -> str:
    """Where an issue that failed goes when no agent holds it any more."""
    return "escalated" if decision.action == ESCALATE else "open"


def count_failure(runtime: Runtime, config: Config, issue_id: str, error: str, *, hopeless: str = "",
                  provider: bool = False) -> Decision:
    """Count a failed attempt against the issue's budget, decide what follows and spend the
    budget that decision takes (a retry, or an agent switch) — the one place this is done.

    A `provider` failure (the provider failed, not the work) is retried and costs nothing.
    """
    if provider:
        return Decision(RETRY, "provider failure (not counted)")
    budget = runtime.budget(issue_id)
    decision = _charge(budget, config, error, hopeless)
    runtime.save_budget(budget)
    return decision


def _charge(budget: Budget, config: Config, error: str, hopeless: str = "") -> Decision:
    """Record a failure on `budget`, decide what follows and take what that decision spends."""
    now = time.time()
    record_failure(budget, error, now)
    decision = decide(budget, config, now, hopeless=hopeless)
    if decision.action == RETRY:
        budget.retries += 1
    elif decision.action == SWITCH:
        budget.retries, budget.switches = 0, budget.switches + 1
    return decision


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


# -- budgets: usage as the providers bill it ----------------------------------------------------

def spend(runtime: Runtime, config: Config, issue_id: str, delta: Usage) -> str:
    """Add `delta` to the issue's usage; why the issue is now over its budget, or ""."""
    budget = runtime.budget(issue_id)
    budget.spend(delta)
    runtime.save_budget(budget)
    return over_budget(budget, config)


def over_budget(budget: Budget, config: Config) -> str:
    """The one budget rule: `max_tokens_per_issue` counts uncached input + cache writes + output
    (cache reads are shown, not counted: they cost a tenth and a long session rereads its prefix
    on every call); `max_cost_usd_per_issue` counts USD, cache reads included. 0 = no cap."""
    usage = budget.usage
    if config.max_tokens_per_issue and budget.tokens > config.max_tokens_per_issue:
        return (f"token budget exceeded: {budget.tokens:,} > max_tokens_per_issue "
                f"{config.max_tokens_per_issue:,} ({usage_figures(usage)})")
    if config.max_cost_usd_per_issue and usage.cost_usd > config.max_cost_usd_per_issue:
        return (f"cost budget exceeded: ${usage.cost_usd:.4f} > max_cost_usd_per_issue "
                f"${config.max_cost_usd_per_issue:.2f} ({usage_figures(usage)})")
    return ""


def usage_figures(usage: Usage) -> str:
    return (f"input {usage.input_tokens:,} + cache writes {usage.cache_write_tokens:,} + output "
            f"{usage.output_tokens:,} = {usage.counted_tokens:,} counted; cache reads "
            f"{usage.cache_read_tokens:,}; ${usage.cost_usd:.4f}")


def done_trailers(base: str, head: str, test_command: str, usage: dict[str, str]) -> dict[str, str]:
    """What a done commit records: the work's base and head, its test command, its `usage`
    (`cost.worker_trailers`)."""
    trailers = {"Hive-Base": base, "Hive-Head": head}
    if test_command:
        trailers["Hive-Test-Command"] = reason_line(test_command)
    return {**trailers, **usage}


def backoff_seconds(failures_before_start: int) -> float:
    """Delay before another try after a failure that happened before the agent even started."""
    return min(60.0, 0.5 * (2 ** max(0, failures_before_start - 1)))
