"""`git hive run` end to end: real daemons (`python -m hive run --backend scripted`) on temp repos.

Every test here starts the real daemon as a subprocess, with real scripted agent processes
(hive/backends/scripted_agent.py) working in real worktrees, and proves what happened from the
outside: the commits and trailers of `hive/state`, `git hive list --json`, the branches, the
worktree directories under `<git-common-dir>/hive/worktrees/`, the prompts the agents received
(`<git-common-dir>/hive/scripted/<issue>.prompts.jsonl`) and the processes left alive.

Issue 3's "Done means": a 20-issue DAG, every escalation path, cancel mid-run, SIGKILL then
restart, notes from worker 1 in the prompt of worker 3, one daemon per repo, detach/stop, status,
cancel during set-up, and `git hive demo`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.agents.protocol import NOTES_FILE
from tests.daemon_helpers import RUN, all_agent_pids, alive, hive_dir, jsonl, start_daemon, stop_daemon, write_script
from tests.state_helpers import set_status

RUN_TIMEOUT = 90


# -- small helpers --------------------------------------------------------------------------------

def work_steps(extra: list[dict] | None = None) -> list[dict]:
    """The built-in worker's job, spelled out: write hive-work/<issue>.txt, commit, succeed."""
    return [*(extra or []),
            {"write": "hive-work/{issue}.txt", "content": "work of {issue}\n"},
            {"commit": "{issue}: work"},
            {"tokens": {"input": 100, "output": 10}},
            {"result": "success", "summary": "wrote hive-work/{issue}.txt"}]


def daemon_env(script: Path, **config: Any) -> dict[str, str]:
    """HIVE_* settings for a daemon: the script and config keys (anomaly detector out of the way)."""
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_ANOMALY_FAILURE_THRESHOLD": "100"}
    env.update({f"HIVE_{key.upper()}": str(value) for key, value in config.items()})
    return env


def worktree_dir(repo: Path, issue_id: str) -> Path:
    return hive_dir(repo) / "worktrees" / issue_id


def leftover_worktrees(repo: Path) -> list[str]:
    root = hive_dir(repo) / "worktrees"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def work_branches(git: Callable[..., Any], repo: Path) -> list[str]:
    out = git("for-each-ref", "--format=%(refname:short)", "refs/heads/hive/work/", cwd=repo).stdout
    return out.split()


def prompts(repo: Path, issue_id: str, fyi: bool | None = False) -> list[dict]:
    """The turns an issue's agents received, oldest first (work turns only unless fyi=None/True)."""
    rows = jsonl(hive_dir(repo) / "scripted" / f"{issue_id}.prompts.jsonl")
    return [r for r in rows if fyi is None or r["fyi"] == fyi]


def agent_pids(repo: Path, issue_id: str) -> list[int]:
    """The pids the scripted agents record themselves: the host's only with sandbox = "off" (a
    jailed agent sees its jail's PID namespace)."""
    return [row["pid"] for row in jsonl(hive_dir(repo) / "scripted" / f"{issue_id}.sessions.jsonl")]


def host_agent_pids(repo: Path, issue_id: str) -> list[int]:
    """The pids hive recorded for the agents of `issue_id` (their process groups, jailed or not)."""
    db = sqlite3.connect(f"file:{hive_dir(repo) / 'runtime.db'}?mode=ro", uri=True, timeout=5)
    try:
        return [row[0] for row in db.execute("SELECT pid FROM agents WHERE issue_id = ? AND pid > 0", (issue_id,))]
    finally:
        db.close()


def statuses(list_json: Callable[..., list[dict]], repo: Path) -> dict[str, str]:
    return {issue["id"]: issue["status"] for issue in list_json(cwd=repo)}


def events_of(log: list[Any], issue_id: str) -> list[str]:
    return [c.event for c in log if c.issue == issue_id and c.event != "created"]


def run_until_idle(repo: Path, env: dict[str, str], *, max_agents: int = 2, expect: int = 0,
                   timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`git hive run --backend scripted --until-idle` in a subprocess; its exit code checked."""
    proc = subprocess.run([*RUN, "--until-idle", "--max-agents", str(max_agents)], cwd=repo,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout)
    assert proc.returncode == expect, f"run exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


class Processes:
    """Daemons a test started (Popen or detached), and agent pids to make sure of at the end."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen] = []
        self.pids: set[int] = set()
        self.repos: list[Path] = []

    def start(self, repo: Path, env: dict[str, str], *args: str, log: Path) -> subprocess.Popen:
        proc = start_daemon(repo, env, *args, log=log)
        self.popens.append(proc)
        self.repos.append(repo)
        return proc

    def cleanup(self) -> None:
        from hive import git as hive_git
        from hive.runtime import DaemonLock

        for proc in self.popens:
            stop_daemon(proc)
        for repo in self.repos:  # a detached daemon this test started
            try:
                holder = DaemonLock(hive_git.discover(repo)).holder()
            except Exception:  # noqa: BLE001
                holder = None
            if holder and holder > 0:
                os.kill(holder, signal.SIGTERM)
                deadline = time.monotonic() + 15
                while alive(holder) and time.monotonic() < deadline:
                    time.sleep(0.05)
            self.pids.update(all_agent_pids(repo))
        roots = [str(repo.resolve()) for repo in self.repos]
        for pid in self.pids:  # agents (process group leaders) started for this test
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if alive(pid) and any(cwd.startswith(root) for root in roots):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def procs() -> Any:
    tracker = Processes()
    yield tracker
    tracker.cleanup()


# -- 1. the DAG -----------------------------------------------------------------------------------

def test_dag_of_20_issues_with_4_agents(repo: Path, tmp_path: Path, new_issue, git, state_log, list_json):
    # 4 chains of 5; the middle of each chain also waits for the middle of the chain before it
    ids: list[str] = []
    blockers: dict[str, list[str]] = {}
    for i in range(20):
        deps = []
        if i % 5:
            deps.append(ids[i - 1])
        if i >= 5 and i % 5 == 2:
            deps.append(ids[i - 5])
        issue_id = new_issue(f"task {i}", depends_on=deps)
        ids.append(issue_id)
        blockers[issue_id] = deps
    # each agent first proves that its blockers' work is in its worktree; any failure escalates
    script = {"issues": {issue_id: work_steps([
        *({"run": f"test -f hive-work/{b}.txt", "must_succeed": True} for b in deps),
        {"sleep": 0.2}]) for issue_id, deps in blockers.items()}}
    env = daemon_env(write_script(tmp_path, script), max_retries=0, max_agent_switches=0)

    run_until_idle(repo, env, max_agents=4)

    # `.hive/` follows the branch: refreshed in batches while the daemon writes, and as it ends
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    assert git("rev-parse", "HEAD", cwd=repo / ".hive").stdout == git("rev-parse", "hive/state", cwd=repo).stdout
    assert set(statuses(list_json, repo).values()) == {"finalized"}
    log = state_log(repo)
    for issue_id in ids:
        assert events_of(log, issue_id) == ["claimed", "done", "finalized"], issue_id
    position = {(c.event, c.issue): n for n, c in enumerate(log)}
    for issue_id, deps in blockers.items():
        for blocker in deps:
            assert position[("done", blocker)] < position[("claimed", issue_id)], (issue_id, blocker)
    # never more than 4 agents at once, and really in parallel
    running = peak = 0
    for commit in log:
        if commit.event == "claimed":
            running += 1
            peak = max(peak, running)
        elif commit.event == "done":
            running -= 1
    assert 2 <= peak <= 4
    # the target holds every issue's work exactly once
    for issue_id in ids:
        assert (repo / "hive-work" / f"{issue_id}.txt").read_text() == f"work of {issue_id}\n"
        touched = git("log", "--format=%H", "main", "--", f"hive-work/{issue_id}.txt", cwd=repo).stdout.split()
        assert len(touched) == 1, issue_id
    assert leftover_worktrees(repo) == []
    assert work_branches(git, repo) == []


def test_the_checkout_follows_the_branch_when_the_daemon_ends(repo: Path, project, new_issue, git, monkeypatch):
    """The daemon refreshes `.hive/` at most every CHECKOUT_REFRESH_SECONDS while it writes, and
    once more as it ends: what it leaves is the branch as it left it."""
    from hive.orchestrator.assemble import build_daemon
    from hive.orchestrator import checkout

    monkeypatch.setattr(checkout, "CHECKOUT_REFRESH_SECONDS", 3600.0)   # once at start, once at the end
    ids = [new_issue(f"task {n}") for n in range(2)]
    daemon = build_daemon(project, backend="scripted", max_agents=2, until_idle=True, log=lambda _: None)
    asyncio.run(asyncio.wait_for(daemon.run(), RUN_TIMEOUT))

    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    for issue_id in ids:
        # finalized: in the archive, which .hive/ does not check out (its index entry does, skip-worktree)
        archived = layout_path(issue_id, "finalized")
        assert 'status = "finalized"' in git("show", f"hive/state:{archived}", cwd=repo).stdout
        assert not (repo / ".hive" / archived).exists()
        assert git("ls-files", "-v", archived, cwd=repo / ".hive").stdout == f"S {archived}\n"
        assert not (repo / ".hive" / "issues" / f"{issue_id}.md").exists()


def test_what_stops_the_daemon_unexpectedly_is_kept_in_its_log_with_where(repo: Path, project, monkeypatch):
    """The person sees one line (`git hive: ...`); daemon.log keeps the traceback for whoever
    looks into it."""
    from hive.orchestrator.assemble import build_daemon
    from hive.orchestrator.checkout import CheckoutFollower

    def vanished(self: Any) -> None:
        raise FileNotFoundError(2, "No such file or directory", str(repo / ".git" / "worktrees" / "hv-gone01"))

    monkeypatch.setattr(CheckoutFollower, "refresh", vanished)
    daemon = build_daemon(project, backend="scripted", max_agents=1, until_idle=True, log=lambda _: None)
    with pytest.raises(FileNotFoundError):
        asyncio.run(asyncio.wait_for(daemon.run(), RUN_TIMEOUT))
    logged = project.paths.daemon_log.read_text()
    assert "daemon stopped by FileNotFoundError: [Errno 2] No such file or directory" in logged
    assert "Traceback (most recent call last)" in logged and "in vanished" in logged


def test_the_checkout_shows_a_claim_while_the_agent_works(repo: Path, project, new_issue, tmp_path: Path,
                                                          monkeypatch):
    """The daemon's own commits wake nothing (they are no news to it), yet `.hive/` shows each of
    them within CHECKOUT_REFRESH_SECONDS — not at the next wake-up, which may be far off."""
    from hive.orchestrator.assemble import build_daemon
    from hive.orchestrator import checkout, daemon as daemon_module

    monkeypatch.setattr(daemon_module, "SAFETY_TICK_SECONDS", 3600.0)   # no tick to rescue it
    monkeypatch.setenv("HIVE_SCRIPTED_SCRIPT", str(write_script(tmp_path, {"labels": {"slow": [{"hang": True}]}})))
    issue = new_issue("slow work", labels=["slow"])
    live = repo / ".hive" / "issues" / f"{issue}.md"
    daemon = build_daemon(project, backend="scripted", max_agents=1, until_idle=False, log=lambda _: None)

    async def scenario() -> None:
        running = asyncio.create_task(daemon.run())
        try:
            deadline = time.monotonic() + 20
            while not agent_pids(repo, issue):          # started: its claim is committed
                assert time.monotonic() < deadline and not running.done(), "the agent did not start"
                await asyncio.sleep(0.02)
            deadline = time.monotonic() + 2 * checkout.CHECKOUT_REFRESH_SECONDS + 1
            while 'status = "in_progress"' not in live.read_text():
                assert time.monotonic() < deadline, "the claim did not reach .hive/"
                await asyncio.sleep(0.02)
        finally:
            daemon.request_stop()
            await running

    asyncio.run(asyncio.wait_for(scenario(), RUN_TIMEOUT))


def layout_path(issue_id: str, status: str) -> str:
    from hive.state import layout

    return layout.path_for(issue_id, status)


def test_dependent_starts_from_unmerged_blocker_work(repo: Path, tmp_path: Path, new_issue, git, list_json):
    """merge_mode manual: blockers stay `done`, unmerged; the dependent's worktree has their work."""
    a = new_issue("blocker A")
    b = new_issue("blocker B")
    c = new_issue("dependent C", depends_on=[a, b])
    script = {"issues": {c: work_steps([{"run": f"test -f hive-work/{a}.txt && test -f hive-work/{b}.txt",
                                         "must_succeed": True}])}}
    env = daemon_env(write_script(tmp_path, script), merge_mode="manual", max_retries=0, max_agent_switches=0)

    run_until_idle(repo, env, max_agents=2)

    assert statuses(list_json, repo) == {a: "done", b: "done", c: "done"}
    assert not (repo / "hive-work").exists()  # nothing merged into main
    files = git("ls-tree", "-r", "--name-only", f"hive/work/{c}", cwd=repo).stdout.split()
    assert {f"hive-work/{a}.txt", f"hive-work/{b}.txt", f"hive-work/{c}.txt"} <= set(files)
    [turn] = prompts(repo, c)
    assert "## Work you build on" in turn["text"]
    assert a in turn["text"].split("## Work you build on")[1] and b in turn["text"].split("## Work you build on")[1]


# -- 2. escalation paths --------------------------------------------------------------------------

def test_a_provider_failure_costs_no_budget(repo: Path, tmp_path: Path, new_issue, state_log, list_json):
    """No retries, no switches: a 529 still does not escalate — degraded mode, probe, same agent."""
    script = {"issues": {}}
    issue = new_issue("the provider is overloaded once")
    script["issues"][issue] = work_steps([{"provider_error": 529, "message": "Overloaded", "on_attempts": [1]}])
    env = daemon_env(write_script(tmp_path, script), max_retries=0, max_agent_switches=0)

    run_until_idle(repo, env, max_agents=1)

    assert statuses(list_json, repo)[issue] == "finalized"
    log = state_log(repo)
    assert events_of(log, issue) == ["claimed", "retry", "done", "finalized"]
    [retry] = [c for c in log if c.issue == issue and c.event == "retry"]
    assert retry.trailers["Hive-Attempt"] == "1"


def test_usage_is_recorded_as_billed_and_budgets_count_what_they_say(repo: Path, tmp_path: Path, new_issue,
                                                                     state_log, list_json):
    """A Claude-like worker of 40 calls rereads a 25k-token cached prefix on every call: 1M cache
    reads, far over max_tokens_per_issue in all, yet it finishes (cache reads are not counted);
    its done commit carries the split. A worker that loops is stopped by the cost cap, and the
    escalation names the figures."""
    call = {"tokens": {"input": 20, "cache_write": 600, "cache_read": 25_000, "output": 300, "cost_usd": 0.02}}
    loop = {"tokens": {"input": 0, "cache_write": 0, "cache_read": 25_000, "output": 10, "cost_usd": 0.4}}
    script = {"labels": {"long": work_steps([call] * 40), "loop": work_steps([loop] * 40)}}
    ids = {label: new_issue(f"path {label}", labels=[label]) for label in script["labels"]}
    env = daemon_env(write_script(tmp_path, script), max_cost_usd_per_issue=5)

    run_until_idle(repo, env, max_agents=2, expect=3)

    final = statuses(list_json, repo)
    log = state_log(repo)
    assert final[ids["long"]] == "finalized"
    [done] = [c for c in log if c.issue == ids["long"] and c.event == "done"]
    # 40 calls + the closing `tokens` step of work_steps (100 uncached input, 10 output)
    assert done.trailers["Hive-Input-Tokens"] == str(40 * 20 + 100)
    assert done.trailers["Hive-Cache-Write-Tokens"] == str(40 * 600)
    assert done.trailers["Hive-Cache-Read-Tokens"] == str(40 * 25_000)
    assert done.trailers["Hive-Output-Tokens"] == str(40 * 300 + 10)
    assert done.trailers["Hive-Tokens"] == str(40 * 920 + 110)
    assert done.trailers["Hive-Cost-USD"] == "0.8000"
    assert final[ids["loop"]] == "escalated"
    [escalated] = [c for c in log if c.issue == ids["loop"] and c.event == "escalated"]
    reason = escalated.trailers["Hive-Reason"]
    assert "cost budget exceeded" in reason and "> max_cost_usd_per_issue $5.00" in reason
    assert re.search(r"counted; cache reads [0-9,]+; \$[0-9.]+\)", reason)   # every figure shown
    assert int(escalated.trailers["Hive-Cache-Read-Tokens"]) >= 13 * 25_000      # the spend that went over


def test_retry_exhaustion_budget_and_failure_kinds(repo: Path, tmp_path: Path, new_issue, git, state_log,
                                                   list_json):
    """max_retries 1, max_agent_switches 1: each kind of failure is retried; budgets escalate."""
    once = [1]
    script = {"labels": {
        "retry": work_steps([{"fail_times": 1, "summary": "first attempt failed on purpose"}]),
        "always": [{"fail_times": 1000, "summary": "this never works"}],
        "budget": work_steps([{"exceed_budget": True}]),
        "stall": work_steps([{"hang": True, "on_attempts": once}]),
        "crash": work_steps([{"crash": 3, "on_attempts": once}]),
        "garbage": work_steps([{"result_raw": "this is not JSON {", "on_attempts": once},
                               {"end_turn": True, "on_attempts": once}]),
        "nocommit": work_steps([{"result": "success", "summary": "claims success", "on_attempts": once},
                                {"end_turn": True, "on_attempts": once}]),
        "noresult": work_steps([{"end_turn": True, "on_attempts": once}]),
    }}
    ids = {label: new_issue(f"path {label}", labels=[label]) for label in script["labels"]}
    env = daemon_env(write_script(tmp_path, script), max_retries=1, max_agent_switches=1, stall_seconds=3,
                   sandbox="off")   # the agents' pids as the host sees them

    run_until_idle(repo, env, max_agents=len(ids), expect=3)

    final = statuses(list_json, repo)
    log = state_log(repo)

    def reasons(issue_id: str, event: str) -> list[str]:
        return [c.trailers.get("Hive-Reason", "") for c in log if c.issue == issue_id and c.event == event]

    # retry: one retry commit by the same agent, resumed in the same session, told what failed
    retry = ids["retry"]
    assert final[retry] == "finalized"
    assert events_of(log, retry) == ["claimed", "retry", "done", "finalized"]
    agents = {c.trailers.get("Hive-Agent") for c in log if c.issue == retry and c.event in ("claimed", "retry", "done")}
    assert len(agents) == 1
    first, second = prompts(repo, retry)
    assert first["session"] == second["session"]
    assert "previous attempt failed" not in first["text"]
    assert "## Your previous attempt failed" in second["text"]
    assert "first attempt failed on purpose" in second["text"]
    assert "first attempt failed on purpose" in reasons(retry, "retry")[0]

    # always failing: retry, a fresh agent, its retry, then a person
    always = ids["always"]
    assert final[always] == "escalated"
    assert events_of(log, always) == ["claimed", "retry", "switched", "retry", "escalated"]
    [reason] = reasons(always, "escalated")
    assert "exhausted" in reason and "this never works" in reason
    assert len(prompts(repo, always)) == 4

    # token budget: escalated at once, no retry
    budget = ids["budget"]
    assert final[budget] == "escalated"
    assert events_of(log, budget) == ["claimed", "escalated"]
    assert "token budget" in reasons(budget, "escalated")[0]

    # stall, crash, garbage result, no commit, no result: each a failed attempt, then done
    expected = {"stall": "stalled", "crash": "exited with code 3", "garbage": "not JSON",
                "nocommit": "committed nothing", "noresult": "wrote no result"}
    for label, words in expected.items():
        issue_id = ids[label]
        assert final[issue_id] == "finalized", label
        assert events_of(log, issue_id) == ["claimed", "retry", "done", "finalized"], label
        [reason] = reasons(issue_id, "retry")
        assert words in reason, (label, reason)
        assert len(prompts(repo, issue_id)) == 2, label
        assert (repo / "hive-work" / f"{issue_id}.txt").exists(), label
    # the hung agent of the stall is gone
    assert not [pid for pid in agent_pids(repo, ids["stall"]) if alive(pid)]
    # escalated issues keep their branch and worktree for a person; the others are cleaned up
    assert work_branches(git, repo) == sorted(f"hive/work/{ids[k]}" for k in ("always", "budget"))
    assert leftover_worktrees(repo) == sorted(ids[k] for k in ("always", "budget"))


def test_an_agent_exiting_after_its_turn_is_resumed(repo: Path, tmp_path: Path, new_issue, state_log, list_json):
    """`exit`: the agent ends its turn without a result, then its process exits.

    The retry must reach a live agent again (a resumed session), whether the process is already
    gone when hive sends the retry or goes while it does; the issue never stays stranded.
    """
    ids = [new_issue(f"exits {n}", labels=["exit"]) for n in range(2)]
    script = {"labels": {"exit": work_steps([{"exit": 0, "on_attempts": [1]}])}}
    env = daemon_env(write_script(tmp_path, script), max_retries=3, max_agent_switches=0)

    run_until_idle(repo, env)

    assert statuses(list_json, repo) == {i: "finalized" for i in ids}
    log = state_log(repo)
    for issue_id in ids:
        events = events_of(log, issue_id)
        assert events[0] == "claimed" and events[-2:] == ["done", "finalized"], events
        assert set(events[1:-2]) == {"retry"}, events
        first_retry = next(c for c in log if c.issue == issue_id and c.event == "retry")
        assert "wrote no result" in first_retry.trailers["Hive-Reason"]


def test_switch_to_a_fresh_agent_in_a_clean_worktree(repo: Path, tmp_path: Path, new_issue, state_log,
                                                     list_json, git):
    issue_id = new_issue("switch me", labels=["switch"])
    script = {"labels": {"switch": work_steps([
        {"write": "scratch.txt", "content": "left over by attempt 1\n", "on_attempts": [1]},
        {"fail_times": 1, "summary": "the first agent gives up"},
        {"run": "test ! -e scratch.txt", "must_succeed": True}])}}
    env = daemon_env(write_script(tmp_path, script), max_retries=0, max_agent_switches=1)

    run_until_idle(repo, env)

    assert statuses(list_json, repo)[issue_id] == "finalized"
    log = [c for c in state_log(repo) if c.issue == issue_id and c.event != "created"]
    assert [c.event for c in log] == ["claimed", "switched", "done", "finalized"]
    claimed, switched, done = log[0], log[1], log[2]
    first_agent, second_agent = claimed.trailers["Hive-Agent"], switched.trailers["Hive-Agent"]
    assert first_agent != second_agent
    assert switched.trailers["Hive-Previous-Agent"] == first_agent
    assert "the first agent gives up" in switched.trailers["Hive-Reason"]
    assert done.trailers["Hive-Agent"] == second_agent
    first, second = prompts(repo, issue_id)
    assert first["session"] != second["session"]
    # what the first agent left uncommitted is kept, and the fresh agent is told where
    kept = re.search(r"kept as `(refs/hive/attempts/[^`]+)`", second["text"])
    assert kept, second["text"]
    assert git("show", f"{kept.group(1)}:scratch.txt", cwd=repo).stdout == "left over by attempt 1\n"


def test_anomaly_detector_escalates_early(repo: Path, tmp_path: Path, new_issue, state_log, list_json):
    issue_id = new_issue("keeps failing", labels=["bad"])
    script = {"labels": {"bad": [{"fail_times": 1000, "summary": "broken"}]}}
    env = daemon_env(write_script(tmp_path, script), anomaly_failure_threshold=2, max_retries=10,
                     max_agent_switches=10)

    run_until_idle(repo, env, expect=3)

    assert statuses(list_json, repo)[issue_id] == "escalated"
    log = state_log(repo)
    assert events_of(log, issue_id) == ["claimed", "retry", "escalated"]
    [escalated] = [c for c in log if c.issue == issue_id and c.event == "escalated"]
    assert "anomaly" in escalated.trailers["Hive-Reason"]
    assert len(prompts(repo, issue_id)) == 2


# -- 3. cancel mid-run ----------------------------------------------------------------------------

def test_cancel_mid_run_kills_the_agent_and_the_daemon_goes_on(repo: Path, tmp_path: Path, new_issue, hive, git,
                                                               state_log, list_json, wait_for, procs):
    child_pid_file = tmp_path / "child.pid"
    hung = new_issue("hangs", labels=["hang"])
    after = new_issue("after the hung one", depends_on=[hung])  # a canceled blocker unblocks
    other = new_issue("independent")
    script = {"labels": {"hang": [{"spawn": "sleep 300", "pid_file": str(child_pid_file)},
                                  {"write": "draft.txt", "content": "half done\n"},
                                  {"note": "about to hang", "category": "context"},
                                  {"hang": True}]}}
    env = daemon_env(write_script(tmp_path, script), sandbox="off")  # host pids, a pid file outside
    daemon = procs.start(repo, env, "--until-idle", "--max-agents", "2", log=tmp_path / "daemon.log")

    wait_for(lambda: child_pid_file.exists() and child_pid_file.read_text().strip(), "the hung agent's child")
    [agent] = agent_pids(repo, hung)
    child = int(child_pid_file.read_text())
    assert alive(agent) and alive(child)
    assert worktree_dir(repo, hung).is_dir()

    # notes are harvested while the agent works, not only at its end
    wait_for(lambda: "noted" in events_of(state_log(repo), hung), "the note of the hung agent")

    hive("cancel", hung, cwd=repo)
    canceled_at = time.monotonic()
    wait_for(lambda: not alive(agent) and not alive(child), "the canceled agent to end", timeout=10)
    assert time.monotonic() - canceled_at < 2.5
    wait_for(lambda: not worktree_dir(repo, hung).exists(), "the canceled worktree to go", timeout=10)

    assert daemon.wait(RUN_TIMEOUT) == 0, (tmp_path / "daemon.log").read_text()
    final = statuses(list_json, repo)
    assert final == {hung: "canceled", after: "finalized", other: "finalized"}
    log = state_log(repo)
    assert events_of(log, hung) == ["claimed", "noted", "canceled"]
    assert events_of(log, after) == ["claimed", "done", "finalized"]
    assert work_branches(git, repo) == []
    assert leftover_worktrees(repo) == []
    # what the canceled agent had not committed is kept
    kept = git("for-each-ref", "--format=%(refname)", f"refs/hive/attempts/{hung}/", cwd=repo).stdout.split()
    assert any(git("show", f"{ref}:draft.txt", cwd=repo, check=False).stdout == "half done\n" for ref in kept), kept


def test_a_note_no_watcher_saw_is_taken_in_at_the_safety_tick(repo: Path, tmp_path: Path, new_issue, git,
                                                               state_log, wait_for, procs):
    # the agent appends its note through a second name of the notes file, in a folder of its
    # worktree that the worktree's (non-recursive) watcher does not see: as if the watcher had
    # missed the write, or could not be set up (the user's inotify instances all taken)
    aside = new_issue("writes its notes aside", labels=["aside"])
    note = json.dumps({"category": "context", "content": "written through another name"})
    script = {"labels": {"aside": [
        {"run": f"mkdir aside && : > aside/notes && ln aside/notes {NOTES_FILE}", "must_succeed": True},
        {"sleep": 1.0},   # the link's creation, which the watcher does see, is harvested first
        {"run": f"printf '%s\\n' '{note}' >> aside/notes", "must_succeed": True},
        {"hang": True}]}}
    procs.start(repo, daemon_env(write_script(tmp_path, script)), "--max-agents", "1",
                log=tmp_path / "daemon.log")

    wait_for(lambda: "noted" in events_of(state_log(repo), aside), "the note written aside")
    harvested = git("show", f"hive/state:notes/{aside}.jsonl", cwd=repo).stdout
    assert "written through another name" in harvested


WATCH_WITHOUT_FREE_DESCRIPTORS = """
import asyncio, json, os, resource, sys
from pathlib import Path
from hive.orchestrator.watchers import watch_worker_files

said = []
async def main():
    folder = Path(sys.argv[1])
    await watch_worker_files(folder / "gone", print, print, lambda why: said.append(("gone", why)))
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    await watch_worker_files(folder, print, print, said.append)
asyncio.run(main())
print(json.dumps(said))
"""


def test_a_worktree_that_cannot_be_watched_is_said_and_one_that_went_away_is_not(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WATCH_WITHOUT_FREE_DESCRIPTORS, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [why] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Too many open files" in why


# -- 4. SIGKILL, then restart ---------------------------------------------------------------------

def test_sigkill_mid_run_then_restart_finishes_everything_once(repo: Path, tmp_path: Path, new_issue, git,
                                                               state_log, list_json, wait_for, procs):
    # the first is quick, and goes first (priority 0; issues made in the same second are otherwise
    # in id order). The others take 30 s in the killed run, long enough that none of its agents
    # finishes before the restart's recovery ends it (one that did would rightly be taken as done,
    # not recovered); the restart's agents read a script without the sleep.
    ids = [new_issue("quick", priority=0)] + [new_issue(f"slow {i}", labels=["slow"]) for i in range(3)]
    script = {"labels": {"slow": work_steps([{"sleep": 30.0}])}}
    # no retry, no switch, the anomaly detector at its tightest: a crash charged to an issue escalates it
    env = daemon_env(write_script(tmp_path, script), stall_seconds=60, max_retries=0, max_agent_switches=0,
                     anomaly_failure_threshold=1, sandbox="off")   # host pids
    daemon = procs.start(repo, env, "--until-idle", "--max-agents", "2", log=tmp_path / "daemon.log")

    def mid_run() -> bool:
        states = statuses(list_json, repo)
        busy = [i for i in ids if states[i] == "in_progress" and prompts(repo, i)]
        return "finalized" in states.values() and bool(busy)

    wait_for(mid_run, "one issue finalized and another agent at work", timeout=30)
    before = {i: agent_pids(repo, i) for i in ids}
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(10)
    procs.pids.update(pid for pids in before.values() for pid in pids)
    interrupted = [i for i, s in statuses(list_json, repo).items() if s == "in_progress"]
    assert interrupted
    write_script(tmp_path, {"labels": {"slow": work_steps([])}})

    run_until_idle(repo, env, max_agents=2)

    assert set(statuses(list_json, repo).values()) == {"finalized"}
    log = state_log(repo)
    for issue_id in ids:
        counts = Counter(events_of(log, issue_id))
        assert counts["finalized"] == 1 and counts["done"] == 1, (issue_id, counts)
        touched = git("log", "--format=%H", "main", "--", f"hive-work/{issue_id}.txt", cwd=repo).stdout.split()
        assert len(touched) == 1, issue_id
    for issue_id in interrupted:
        assert "recovered" in events_of(log, issue_id)
    # the killed run's agents are gone; nothing is left on disk
    assert not [pid for pids in before.values() for pid in pids if alive(pid)]
    assert leftover_worktrees(repo) == []
    assert work_branches(git, repo) == []
    worktrees = git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert "hive/worktrees" not in worktrees


def _finish_then_kill_the_daemon(repo: Path, tmp_path: Path, new_issue, list_json, wait_for, procs,
                                 ) -> tuple[str, dict[str, str], list[int]]:
    """Kill the daemon after the agent committed and wrote its success result, before its turn ended."""
    issue_id = new_issue("finishes, then the daemon dies")
    script = {"labels": {}, "issues": {issue_id: [*work_steps(), {"sleep": 30, "on_attempts": [1]}]}}
    env = daemon_env(write_script(tmp_path, script), max_retries=0, max_agent_switches=0)
    daemon = procs.start(repo, env, "--until-idle", log=tmp_path / "daemon.log")
    wait_for(lambda: (worktree_dir(repo, issue_id) / ".hive-result.jsonl").exists(), "the success result",
             timeout=30)
    pids = wait_for(lambda: host_agent_pids(repo, issue_id), "the agent's pid in runtime.db", timeout=10)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(10)
    procs.pids.update(pids)
    assert statuses(list_json, repo)[issue_id] == "in_progress"
    return issue_id, env, pids


def test_an_agent_that_finished_before_the_daemon_died_is_done_on_restart(repo: Path, tmp_path: Path, new_issue,
                                                                          state_log, list_json, wait_for, procs):
    """The restart takes the work as done (no second attempt, no budget spent), and merges it."""
    issue_id, env, pids = _finish_then_kill_the_daemon(repo, tmp_path, new_issue, list_json, wait_for, procs)

    run_until_idle(repo, env)

    assert statuses(list_json, repo)[issue_id] == "finalized"
    log = state_log(repo)
    assert events_of(log, issue_id) == ["claimed", "done", "finalized"]     # jailed: committed on a detached HEAD
    [done] = [c for c in log if c.issue == issue_id and c.event == "done"]
    assert done.trailers["Hive-Base"] and done.trailers["Hive-Head"]
    assert len(prompts(repo, issue_id)) == 1                       # not redone
    assert not [pid for pid in pids if alive(pid)]


def test_an_agent_that_finished_over_its_budget_is_escalated_on_restart(repo: Path, tmp_path: Path, new_issue,
                                                                        state_log, list_json, wait_for, procs):
    """The restart judges finished work as the worker does: over the budget is no hand-off."""
    issue_id, env, _ = _finish_then_kill_the_daemon(repo, tmp_path, new_issue, list_json, wait_for, procs)

    run_until_idle(repo, {**env, "HIVE_MAX_TOKENS_PER_ISSUE": "50"}, expect=3)

    assert statuses(list_json, repo)[issue_id] == "escalated"
    log = state_log(repo)
    assert events_of(log, issue_id) == ["claimed", "escalated"]
    [escalated] = [c for c in log if c.issue == issue_id and c.event == "escalated"]
    assert "token budget exceeded" in escalated.trailers["Hive-Reason"]
    assert len(prompts(repo, issue_id)) == 1


# -- 5. notes -------------------------------------------------------------------------------------

def test_notes_of_worker_1_reach_the_prompt_of_worker_3(repo: Path, tmp_path: Path, new_issue, hive, git,
                                                        list_json):
    epic = new_issue("the epic", type="epic")
    a = new_issue("A writes a note", parent=epic, labels=["noter"])
    b = new_issue("B runs alongside", parent=epic, labels=["slow"])
    c = new_issue("C comes after A", parent=epic, depends_on=[a])
    unrelated = new_issue("not in the epic", depends_on=[a])
    note = "the frobnicator needs --strict on CI"
    # (the note comes after the commit: see the report about `git add` and ignored protocol files)
    script = {"labels": {"noter": [{"sleep": 1.0}, *work_steps()[:-1], {"note": note, "category": "gotcha"},
                                   work_steps()[-1]],
                         "slow": work_steps([{"sleep": 3.0}])}}
    env = daemon_env(write_script(tmp_path, script))

    out = run_until_idle(repo, env, max_agents=3)

    assert set(statuses(list_json, repo).values()) == {"finalized"}, out.stdout
    # on hive/state, stamped with the issue and agent
    lines = [json.loads(line) for line in
             git("show", f"hive/state:notes/{a}.jsonl", cwd=repo).stdout.splitlines() if line.strip()]
    [stored] = [n for n in lines if n["content"] == note]
    assert stored["category"] == "gotcha" and stored["issue"] == a and stored["agent"].startswith("w-")
    listed = json.loads(hive("notes", "--json", cwd=repo).stdout)
    assert any(n["content"] == note and n["issue"] == a for n in listed)
    # worker 3 (same epic, started after A) got it in its prompt
    [turn] = prompts(repo, c)
    assert "## Notes from other agents" in turn["text"] and note in turn["text"]
    assert "## Part of epic" in turn["text"]
    # the running sibling got it relayed as an FYI
    assert any(note in t["text"] for t in prompts(repo, b, fyi=True))
    # outside the epic, recent project notes are part of the prompt too
    [turn] = prompts(repo, unrelated)
    assert note in turn["text"] and "## Part of epic" not in turn["text"]


def test_a_flood_of_notes_reaches_a_running_sibling_as_a_few_fyis_only(repo: Path, tmp_path: Path, new_issue, git,
                                                                      list_json):
    """Each relayed note is a message the sibling's session pays for: the first
    `MAX_RELAYED_NOTES` of a worker are relayed, all are kept on hive/state."""
    from hive.orchestrator.worker import MAX_RELAYED_NOTES

    epic = new_issue("the epic", type="epic")
    a = new_issue("A notes a great deal", parent=epic, labels=["noter"])
    b = new_issue("B runs alongside", parent=epic, labels=["slow"])
    flood = [{"note": f"gotcha number {n}", "category": "gotcha"} for n in range(3 * MAX_RELAYED_NOTES)]
    script = {"labels": {"noter": work_steps([{"sleep": 1.0}, *flood]),
                         "slow": work_steps([{"sleep": 4.0}])}}
    out = run_until_idle(repo, daemon_env(write_script(tmp_path, script)), max_agents=2)

    assert set(statuses(list_json, repo).values()) == {"finalized"}, out.stdout
    stored = git("show", f"hive/state:notes/{a}.jsonl", cwd=repo).stdout.splitlines()
    assert len(stored) == 3 * MAX_RELAYED_NOTES
    relayed = [t["text"] for t in prompts(repo, b, fyi=True) if "gotcha number" in t["text"]]
    assert len(relayed) == MAX_RELAYED_NOTES, relayed
    assert "gotcha number 0" in relayed[0]


# -- 6. one daemon per repo; detach / stop; status ------------------------------------------------

def test_one_daemon_detach_status_stop(repo: Path, tmp_path: Path, new_issue, hive, state_log, list_json,
                                       wait_for, procs):
    hung = new_issue("hangs on its first attempt", labels=["hang"])
    script = {"labels": {"hang": work_steps([{"hang": True, "on_attempts": [1]}])}}
    env = daemon_env(write_script(tmp_path, script), sandbox="off")  # host pids
    procs.repos.append(repo)

    started = hive("run", "--backend", "scripted", "--detach", "--max-agents", "2", cwd=repo, env=env)
    assert "running in the background" in started.stdout
    wait_for(lambda: prompts(repo, hung), "the agent to get its prompt")
    [agent] = agent_pids(repo, hung)

    status = json.loads(hive("status", "--json", cwd=repo).stdout)
    assert status["daemon"]["running"] is True and status["daemon"]["pid"]
    daemon_pid = status["daemon"]["pid"]
    assert alive(daemon_pid)
    [listed] = [a for a in status["agents"] if a["issue"] == hung]
    assert listed["agent"] == next(i["assignee"] for i in list_json(cwd=repo) if i["id"] == hung)
    assert status["counts"]["in_progress"] == 1

    second = subprocess.run([*RUN, "--until-idle"], cwd=repo, capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=RUN_TIMEOUT)
    assert second.returncode == 1
    message = second.stderr.strip()
    assert len(message.splitlines()) == 1 and "already running" in message, second.stderr
    again = hive("run", "--backend", "scripted", "--detach", cwd=repo, env=env, check=False)
    assert again.returncode == 1 and "already running" in again.stderr
    assert alive(daemon_pid) and alive(agent)

    stopped = hive("stop", cwd=repo)
    assert "stopped" in stopped.stdout
    assert not alive(agent)
    wait_for(lambda: not alive(daemon_pid), "the daemon process to end", timeout=10)
    [issue] = [i for i in list_json(cwd=repo) if i["id"] == hung]
    assert issue["status"] == "open" and issue["assignee"] == ""
    assert events_of(state_log(repo), hung) == ["claimed", "released"]
    assert [i["id"] for i in list_json("--ready", cwd=repo)] == [hung]
    assert not worktree_dir(repo, hung).exists()
    assert json.loads(hive("status", "--json", cwd=repo).stdout)["daemon"]["running"] is False

    # the next run continues from there
    run_until_idle(repo, env)
    assert statuses(list_json, repo)[hung] == "finalized"


# -- 7. canceled issues are never started ---------------------------------------------------------

def test_a_canceled_issue_is_never_claimed(repo: Path, tmp_path: Path, new_issue, hive, state_log, list_json):
    canceled = new_issue("canceled before the run")
    kept = new_issue("runs")
    hive("cancel", canceled, cwd=repo)
    env = daemon_env(write_script(tmp_path, {"default": work_steps()}))

    run_until_idle(repo, env)

    assert statuses(list_json, repo) == {canceled: "canceled", kept: "finalized"}
    assert events_of(state_log(repo), canceled) == ["canceled"]
    assert prompts(repo, canceled) == [] and agent_pids(repo, canceled) == []
    assert not worktree_dir(repo, canceled).exists()


def test_claim_rechecks_status_at_commit_time(repo: Path, project, new_issue, hive, state_log):
    from hive.lifecycle import claim

    issue_id = new_issue("raced")
    project.update_index()
    assert issue_id in [i.id for i in project.index.ready()]      # the daemon saw it ready...
    hive("cancel", issue_id, cwd=repo)                      # ...someone cancels it meanwhile
    assert claim(project, issue_id, "w-aaaaaa") is False    # the claim re-reads the tip
    project.sync(warn=False)
    assert project.index.get(issue_id).status == "canceled"
    assert "claimed" not in events_of(state_log(repo), issue_id)

    blocker = new_issue("blocker", status="done")
    dependent = new_issue("dependent", depends_on=[blocker])
    project.update_index()
    assert dependent in [i.id for i in project.index.ready()]
    hive("update", blocker, "--status", "open", cwd=repo)   # its blocker reopened meanwhile
    assert claim(project, dependent, "w-bbbbbb") is False
    hive("update", blocker, "--status", "done", cwd=repo)
    assert claim(project, dependent, "w-cccccc") is True
    assert claim(project, dependent, "w-dddddd") is False   # taken: a second claim loses


def test_issue_canceled_during_worker_setup_is_never_started(repo: Path, tmp_path: Path, project, new_issue,
                                                             state_log, monkeypatch):
    """The cancel lands while the agent session is being created: no prompt is ever sent."""
    from hive.orchestrator.assemble import build_daemon

    issue_id = new_issue("set up slowly")
    monkeypatch.setenv("HIVE_SCRIPTED_SCRIPT", str(write_script(tmp_path, {"default": work_steps()})))
    monkeypatch.setenv("HIVE_ANOMALY_FAILURE_THRESHOLD", "100")
    monkeypatch.setenv("HIVE_SANDBOX", "off")          # the agent's pid as the host sees it
    from hive.project import Project

    daemon_project = Project.open(repo)
    lines: list[str] = []
    daemon = build_daemon(daemon_project, backend="scripted", max_agents=2, until_idle=True, log=lines.append)
    entered, release = asyncio.Event(), asyncio.Event()
    original = daemon.backend.create_session

    async def slow_create_session(spec):
        entered.set()
        await release.wait()
        return await original(spec)

    daemon.backend.create_session = slow_create_session

    async def scenario() -> None:
        run = asyncio.create_task(daemon.run())
        await asyncio.wait_for(entered.wait(), 30)
        await asyncio.to_thread(set_status, project, issue_id, "canceled")
        deadline = time.monotonic() + 15
        while not any(f"{issue_id} canceled: stopping its agent" in line for line in lines):
            assert time.monotonic() < deadline, lines
            await asyncio.sleep(0.02)
        release.set()
        await asyncio.wait_for(run, 30)

    try:
        asyncio.run(scenario())
    finally:
        daemon_project.close()
    assert prompts(repo, issue_id) == []
    assert events_of(state_log(repo), issue_id) == ["claimed", "canceled"]
    assert not worktree_dir(repo, issue_id).exists()
    assert not [pid for pid in agent_pids(repo, issue_id) if alive(pid)]



OTHER_AGENT = "w-zzzzzz"   # another machine's
TAKEN_OVER = {   # what another machine made of the issue, as this worker's hand-off comes
    "claimed by another": [({"assignee": OTHER_AGENT}, "claimed")],
    "done by another": [({"status": "open", "lease_expires": None, "machine": None}, "lease-expired"),
                        ({"status": "done", "assignee": OTHER_AGENT}, "done")],
    "landed by another": [({"status": "open", "lease_expires": None, "machine": None}, "lease-expired"),
                          ({"status": "finalized", "assignee": OTHER_AGENT}, "finalized")],
}


def _run_until_idle(repo: Path, tmp_path: Path, monkeypatch, stamped: dict[str, float] | None = None) -> list[str]:
    """An in-process `git hive run --until-idle` of one scripted agent, unjailed; its log lines
    (`stamped`: when each "<id> claimed" and "<id> done" was said, by the monotonic clock)."""
    import time as clock

    from hive.orchestrator.assemble import build_daemon
    from hive.project import Project

    monkeypatch.setenv("HIVE_SCRIPTED_SCRIPT", str(write_script(tmp_path, {"default": work_steps()})))
    monkeypatch.setenv("HIVE_SANDBOX", "off")
    daemon_project = Project.open(repo)
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        words = line.split()
        if stamped is not None and len(words) > 2 and words[2] in ("claimed", "done"):
            stamped.setdefault(f"{words[1]} {words[2]}", clock.monotonic())

    daemon = build_daemon(daemon_project, backend="scripted", max_agents=1, until_idle=True, log=log)
    try:
        asyncio.run(asyncio.wait_for(daemon.run(), 60))
    finally:
        daemon_project.close()
    return lines


def _retired_with_its_head_kept(repo: Path, git, issue_id: str) -> None:
    from hive.workspace import attempts

    assert not worktree_dir(repo, issue_id).exists()
    assert git("for-each-ref", "refs/heads/hive/work/", cwd=repo).stdout == ""
    assert "/hive/worktrees/" not in git("worktree", "list", "--porcelain", cwd=repo).stdout
    kept = attempts.kept(repo / ".git", issue_id)
    assert kept and git("log", "-1", "--format=%s", kept[-1].commit, cwd=repo).stdout.strip() == f"{issue_id}: work"


@pytest.mark.parametrize("taken", list(TAKEN_OVER))
def test_a_worker_whose_issue_was_taken_over_before_its_hand_off_leaves_no_worktree(
        repo: Path, tmp_path: Path, project, new_issue, git, monkeypatch, taken: str):
    """Another machine takes the issue over (its lease expired) just before the agent's work is
    handed off — and holds it, or has finished it, or has landed it: the hand-off is refused, the
    worker stops, and its worktree and branch go (their head kept under refs/hive/attempts/), as
    when a running worker is stopped for a takeover. (Done or landed elsewhere, they were kept:
    with nothing to clean them before the run's end, a machine kept them for good.)"""
    from hive import issues, lifecycle

    issue_id = new_issue("taken over at the last moment")
    original = lifecycle.hand_off

    def taken_over_first(project_, *args, **kwargs):
        for changes, event in TAKEN_OVER[taken]:
            issues.update(project_, issue_id, changes, event=event)
        return original(project_, *args, **kwargs)

    monkeypatch.setattr(lifecycle, "hand_off", taken_over_first)
    lines = _run_until_idle(repo, tmp_path, monkeypatch)
    assert any(f"{issue_id} stopped: " in line for line in lines), lines
    _retired_with_its_head_kept(repo, git, issue_id)


def test_work_whose_issue_was_reopened_and_then_landed_elsewhere_is_gone_when_the_run_ends(
        repo: Path, tmp_path: Path, project, new_issue, git, monkeypatch):
    """The lease lapsed (the machine was cut off from the remote for longer than it): the issue
    is open again as the agent's work is handed off — refused, and kept, as a reopened issue's
    work may be wanted. Then another machine's agent lands it: the run that ends idle leaves no
    worktree or branch of it behind (three machines on one queue left one, CI saw it once)."""
    from hive import issues, lifecycle
    from hive.orchestrator.worker import Worker

    issue_id = new_issue("reopened, then landed elsewhere")
    original, retire_if_taken = lifecycle.hand_off, Worker._retire_if_taken
    reopened, landed = TAKEN_OVER["landed by another"]

    def lease_lapsed_first(project_, *args, **kwargs):
        issues.update(project_, issue_id, reopened[0], event=reopened[1])
        return original(project_, *args, **kwargs)

    async def then_landed_elsewhere(worker):
        await retire_if_taken(worker)
        assert worktree_dir(repo, issue_id).exists()      # a reopened issue's work: kept meanwhile
        issues.update(worker.project, issue_id, landed[0], event=landed[1])

    monkeypatch.setattr(lifecycle, "hand_off", lease_lapsed_first)
    monkeypatch.setattr(Worker, "_retire_if_taken", then_landed_elsewhere)
    lines = _run_until_idle(repo, tmp_path, monkeypatch)
    assert any(f"{issue_id} stopped: " in line for line in lines), lines
    _retired_with_its_head_kept(repo, git, issue_id)


def test_a_cleanup_that_fails_as_the_run_ends_is_a_warning(repo: Path, tmp_path: Path, project, new_issue,
                                                              monkeypatch):
    """The last clean-up of an idle run failing (a locked ref, a file system error) ends the run
    as it was going to end, with one line saying so: what is left goes at the next start."""
    from hive.merge.pipeline import MergeProcessor

    new_issue("one")
    retire_finished = MergeProcessor.retire_finished

    def fails_at_the_end(pipeline, queued=None):
        if queued is None:
            raise OSError("a disk error")
        return retire_finished(pipeline, queued)

    monkeypatch.setattr(MergeProcessor, "retire_finished", fails_at_the_end)
    lines = _run_until_idle(repo, tmp_path, monkeypatch)
    assert any("warning: the work of finished issues was not cleaned up: a disk error" in line for line in lines), lines
    assert "idle: nothing ready, nothing running" in lines[-1], lines


def test_a_slot_is_free_once_the_agent_is_done_not_once_it_has_exited(
        repo: Path, tmp_path: Path, project, new_issue, monkeypatch):
    """An agent CLI may take a while to exit after its work is done: with `--max-agents 1`, the
    next ready issue is claimed as soon as the first agent's work is handed off, while that
    session is still being closed — never while it works."""
    import time as clock

    from hive.orchestrator.worker import Worker

    first, second = new_issue("one", priority=0), new_issue("two", priority=1)
    close_session, moments = Worker._close_session, {}

    async def slow_to_exit(worker):
        if worker.issue_id == first:
            await asyncio.sleep(1.0)
        await close_session(worker)
        moments.setdefault(f"{worker.issue_id} closed", clock.monotonic())

    monkeypatch.setattr(Worker, "_close_session", slow_to_exit)
    lines = _run_until_idle(repo, tmp_path, monkeypatch, stamped=moments)
    done, claimed = moments[f"{first} done"], moments[f"{second} claimed"]
    assert done < claimed < moments[f"{first} closed"], (moments, lines)


def test_stopping_one_worker_does_not_stop_another_that_switched_agents_meanwhile(
        repo: Path, tmp_path: Path, project, new_issue, state_log, monkeypatch):
    """Two workers; one's issue is canceled. While that one is being stopped (its agent may take a
    while), the other's attempt fails and it goes on with a fresh agent: that worker is not
    "taken over" — the issue is its new agent's (CI saw an escalated issue's worktree go so)."""
    from hive.orchestrator.assemble import build_daemon
    from hive.orchestrator.worker import Worker
    from hive.project import Project

    flag = tmp_path / "canceled-one-is-stopping"
    # claimed in this order: the canceled one is looked at first
    canceled = new_issue("hangs", labels=["hangs"], priority=0)
    switching = new_issue("switches", labels=["switches"], priority=1)
    fails_first = {"run": f'while [ ! -e "{flag}" ]; do sleep 0.01; done; exit 1', "must_succeed": True,
                   "on_attempts": [1]}
    monkeypatch.setenv("HIVE_SCRIPTED_SCRIPT", str(write_script(tmp_path, {"labels": {
        "hangs": [{"hang": True}], "switches": work_steps([fails_first])}})))
    monkeypatch.setenv("HIVE_SANDBOX", "off")
    monkeypatch.setenv("HIVE_MAX_RETRIES", "0")
    monkeypatch.setenv("HIVE_MAX_AGENT_SWITCHES", "1")
    lines: list[str] = []
    abort = Worker.abort

    async def slow_to_stop(worker, reason):
        if worker.issue_id == canceled:
            flag.touch()   # the other's attempt fails now, and it switches agents
            deadline = time.monotonic() + 30
            while not any(f"{switching} switched to a fresh agent" in line for line in lines):
                assert time.monotonic() < deadline, lines
                await asyncio.sleep(0.01)
        await abort(worker, reason)

    monkeypatch.setattr(Worker, "abort", slow_to_stop)
    daemon_project = Project.open(repo)
    daemon = build_daemon(daemon_project, backend="scripted", max_agents=2, until_idle=True, log=lines.append)

    async def scenario() -> None:
        run = asyncio.create_task(daemon.run())
        deadline = time.monotonic() + 30
        # both agents at work: the canceled one is stopped by the daemon, not before it starts
        while not (prompts(repo, canceled) and prompts(repo, switching)):
            assert time.monotonic() < deadline, lines
            await asyncio.sleep(0.01)
        await asyncio.to_thread(set_status, project, canceled, "canceled")
        await asyncio.wait_for(run, 60)

    try:
        asyncio.run(scenario())
    finally:
        daemon_project.close()
    assert not any(f"{switching} taken over" in line for line in lines), lines
    assert events_of(state_log(repo), switching) == ["claimed", "switched", "done", "finalized"], lines


# -- 8. the demo ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bytecode", ["written", "not written"])
def test_demo(hive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bytecode: str):
    """The README's first command, as people run it: with Python writing bytecode (the agents'
    test runs leave `__pycache__/` in their worktrees, which no merge must meet) or not."""
    if bytecode == "written":
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    else:
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    done = hive("demo", cwd=tmp_path)
    assert done.returncode == 0
    assert "issues finalized" in done.stdout
    summary = [line for line in done.stdout.splitlines() if "issues finalized" in line][-1]
    finalized, total = summary.split()[0].split("/")
    assert finalized == total and int(total) >= 8


def test_the_demo_leaves_the_repository_the_environment_names_as_it_was(hive, make_repo, git, tmp_path: Path):
    """`git hive demo` where the environment names a person's repository (a hook's GIT_DIR and
    GIT_INDEX_FILE, an exported GIT_WORK_TREE): the demo runs whole in its own repository. Before,
    its first commit went onto the person's branch and its queue into their `hive/state`."""
    repo = make_repo("person")
    refs_before = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=repo).stdout
    files_before = {p.name: p.read_bytes() for p in (repo / ".git").iterdir() if p.is_file()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo),
           "GIT_INDEX_FILE": str(repo / ".git" / "index")}
    done = hive("demo", cwd=elsewhere, env=env)
    assert done.returncode == 0 and "8/8 issues finalized" in done.stdout, done.stdout + done.stderr
    assert git("for-each-ref", "--format=%(refname) %(objectname)", cwd=repo).stdout == refs_before
    assert {p.name: p.read_bytes() for p in (repo / ".git").iterdir() if p.is_file()} == files_before
    assert not (repo / ".hive").exists() and not (repo / ".git" / "hive").exists()
