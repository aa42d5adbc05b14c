"""`hive.lifecycle`: each transition refuses, typed, when its precondition does not hold, and the
escalation policy spends the budget in one place."""

from __future__ import annotations

import dataclasses
import time

import pytest

from hive import lifecycle
from hive.backends.base import Usage
from hive.config import Config
from hive.lifecycle import TransitionRefused
from hive.runtime import Budget, Runtime


@pytest.fixture
def runtime(project):
    opened = Runtime(project.paths)
    yield opened
    opened.close()


def status(project, issue_id: str) -> tuple[str, str]:
    project.update_index()
    issue = project.index.get(issue_id)
    return issue.status, issue.assignee


def test_a_refused_transition_is_typed_and_commits_nothing(project, new_issue, runtime, state_log, repo):
    issue = new_issue("open, nobody's")
    before = len(state_log(repo))
    with pytest.raises(TransitionRefused) as refused:
        lifecycle.finish(project, issue, "w-aaaaaa", "did it", {})
    assert (refused.value.issue_id, refused.value.transition, refused.value.status) == (issue, "done", "open")
    with pytest.raises(TransitionRefused):
        lifecycle.retry(project, runtime, issue)
    with pytest.raises(TransitionRefused):
        lifecycle.finalize(project, runtime, issue, "0" * 40, "main")
    assert len(state_log(repo)) == before



def test_a_rejection_is_one_commit_and_a_refused_one_spends_nothing(project, new_issue, runtime, state_log, repo,
                                                                   git):
    issue = new_issue("the refinery rejects it")
    before = len(state_log(repo))
    with pytest.raises(TransitionRefused):       # open, not done: nothing to reject
        lifecycle.reject(project, runtime, project.config, issue, "tests fail")
    assert len(state_log(repo)) == before
    assert runtime.budget(issue).retries == 0 and not runtime.budget(issue).failures

    lifecycle.claim(project, issue, "w-aaaaaa")
    lifecycle.finish(project, issue, "w-aaaaaa", "did it", {})
    before = len(state_log(repo))
    decision = lifecycle.reject(project, runtime, project.config, issue, "tests fail")

    [rejected] = state_log(repo)[before:]
    assert rejected.event == "rejected" and status(project, issue)[0] == "open" and decision.action == "retry"
    changed = git("show", "--name-only", "--format=", rejected.oid, "--", cwd=repo).stdout.split()
    assert sorted(changed) == sorted([f"issues/{issue}.md", f"notes/{issue}.jsonl"])
    assert "The refinery rejected the previous attempt: tests fail" in git(
        "show", f"hive/state:notes/{issue}.jsonl", cwd=repo).stdout
    assert runtime.budget(issue).retries == 1

def test_a_worker_holds_its_issue_from_claim_to_done(project, new_issue, runtime):
    issue = new_issue("the work")
    assert lifecycle.claim(project, issue, "w-aaaaaa")
    assert not lifecycle.claim(project, issue, "w-bbbbbb")
    with pytest.raises(TransitionRefused):
        lifecycle.switch_agent(project, issue, "w-bbbbbb", "w-cccccc", "not mine to switch")
    lifecycle.switch_agent(project, issue, "w-aaaaaa", "w-cccccc", "a fresh agent")
    assert status(project, issue) == ("in_progress", "w-cccccc")
    lifecycle.finish(project, issue, "w-cccccc", "did it", {"Hive-Base": ""})
    assert status(project, issue)[0] == "done"
    lifecycle.finalize(project, runtime, issue, "0" * 40, "main")
    assert status(project, issue) == ("finalized", "")


def test_the_escalation_chain_is_spent_by_count_failure(project, new_issue, runtime):
    issue = new_issue("fails every time")
    config = dataclasses.replace(project.config, max_retries=1, max_agent_switches=1, anomaly_failure_threshold=99)
    actions = [lifecycle.count_failure(runtime, config, issue, f"boom {n}").action for n in range(4)]
    # a fresh agent gets its own retries
    assert actions == [lifecycle.RETRY, lifecycle.SWITCH, lifecycle.RETRY, lifecycle.ESCALATE]
    budget = runtime.budget(issue)
    assert (budget.retries, budget.switches, len(budget.failures), budget.last_error) == (1, 1, 4, "boom 3")
    assert lifecycle.count_failure(runtime, config, issue, "x", hopeless="tokens").action == lifecycle.ESCALATE
    spent = runtime.budget(issue)
    assert lifecycle.count_failure(runtime, config, issue, "529", provider=True).action == lifecycle.RETRY
    assert runtime.budget(issue) == spent    # the provider's failure costs the issue nothing


def test_retry_reopens_with_a_fresh_budget(project, new_issue, runtime):
    issue = new_issue("stuck", status="failed")
    now = time.time()
    runtime.save_budget(Budget(issue, retries=2, switches=2, failures=[now - 2, now - 1, now], tokens=10,
                               cost_usd=3.5, cache_read_tokens=900, output_tokens=10))
    config = Config(anomaly_failure_threshold=3)
    assert lifecycle.decide(runtime.budget(issue), config, now).action == lifecycle.ESCALATE
    lifecycle.retry(project, runtime, issue)
    assert status(project, issue) == ("open", "")
    assert runtime.budget(issue) == Budget(issue)
    # retries, switches and the anomaly window all start again
    assert lifecycle.count_failure(runtime, config, issue, "boom").action == lifecycle.RETRY


def test_the_budget_counts_input_cache_writes_and_output_and_prices_cache_reads(runtime):
    config = Config(max_tokens_per_issue=1000, max_cost_usd_per_issue=1.0)
    budget = Budget("hv-aaaaaa")
    budget.spend(Usage(input_tokens=100, cache_write_tokens=300, cache_read_tokens=50_000, output_tokens=500,
                       cost_usd=0.5))
    assert budget.tokens == 900 and lifecycle.over_budget(budget, config) == ""   # cache reads not counted
    runtime.save_budget(budget)
    assert runtime.budget("hv-aaaaaa") == budget                                  # every field kept
    over = lifecycle.spend(runtime, config, "hv-aaaaaa", Usage(output_tokens=101))
    assert over == ("token budget exceeded: 1,001 > max_tokens_per_issue 1,000 (input 100 + cache writes 300 + "
                    "output 601 = 1,001 counted; cache reads 50,000; $0.5000)")
    costly = Budget("hv-bbbbbb")
    costly.spend(Usage(cache_read_tokens=4_000_000, cost_usd=1.2))
    assert lifecycle.over_budget(costly, config).startswith("cost budget exceeded: $1.2000 > max_cost_usd_per_issue $1.00")
    assert lifecycle.over_budget(costly, Config(max_cost_usd_per_issue=0)) == ""   # 0: no cap


@pytest.mark.parametrize("fields", [{"status": "in_progress"}, {"assignee": "bob"},
                                    {"status": "open", "assignee": "bob"}])
def test_a_persons_edit_that_would_leave_limbo_is_refused_unless_forced(project, new_issue, fields):
    issue = new_issue("no limbo")
    with pytest.raises(TransitionRefused):
        lifecycle.edit(project, issue, lambda current: fields, event="updated", summary="limbo")
    lifecycle.edit(project, issue, lambda current: fields, force=True, event="updated", summary="limbo")


def test_a_persons_usual_moves_are_allowed(project, new_issue):
    issue = new_issue("by hand")
    for fields in ({"status": "in_progress", "assignee": "me"}, {"status": "open"}, {"status": "escalated"},
                   {"status": "done"}, {"priority": 0}):
        lifecycle.edit(project, issue, lambda current, fields=fields: fields, event="updated", summary="by hand")
    assert status(project, issue) == ("done", "")
