"""Crash anywhere: a DAG of issues worked while the daemon is SIGKILLed again and again.

A killer loop starts `git hive run` and SIGKILLs it after a seeded random 50–600 ms, counted from
one of four starts (chosen at random, seeded): the spawn (kills land in start-up and recovery), the
daemon's "running" line (claims, worktrees, agent turns), its first "queued for merge" or its
first "→ refinery" line (replays, tests, fast-forwards, finalize commits, refinery turns; when none
comes within 6 s the kill happens anyway). It does that `FAULTS_CRASH_KILLS` times, then lets a
last run go to idle. The DAG has chains and fan-ins, and a few issues that all append to the same
file, so that their merges conflict and the (scripted) refinery rebases and resolves them: kills
land in claims, state commits, worktree creation, agent turns, replays, tests, fast-forwards,
finalize commits and refinery turns. The log line a daemon wrote last before each kill says where
it was; the spread is printed.

At the end: every issue is `finalized`, by exactly one finalize commit; the target branch adds each
issue's file exactly once and moved only through the merge pipeline; `git fsck` is clean; no
worktree, work branch or agent process is left; no issue was ever held by two agents at once; and
after every restart, the agents of the killed daemon were gone by the time the new one worked.

Sizes: FAULTS_CRASH_ISSUES (200), FAULTS_CRASH_KILLS (50), FAULTS_CRASH_AGENTS (4),
FAULTS_SEED (random seed, 8).
"""

from __future__ import annotations

import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from .helpers import (additions_on, daemon_env, double_claims, env_int, finalized_counts, fsck_problems,
                      git_locks, leftovers, processes_under, tail, target_history_problems, wait_until, work_steps,
                      write_json)

ISSUES = env_int("FAULTS_CRASH_ISSUES", 200)
KILLS = env_int("FAULTS_CRASH_KILLS", 50)
AGENTS = env_int("FAULTS_CRASH_AGENTS", 4)
SEED = env_int("FAULTS_SEED", 8)
CONFLICTING = max(3, ISSUES // 20)

# What each kill's 50–600 ms are counted from: the daemon's spawn (kills in start-up and recovery),
# its "running" line (claims, worktrees, agent turns), or the first merge or refinery hand-off it
# logs (replays, tests, fast-forwards, finalize commits, refinery turns) — (log words, weight).
ANCHORS = {"spawn": ("", 20), "running": ("running:", 40), "merge": ("queued for merge", 25),
           "refinery": ("→ refinery", 15)}

# The refinery's conflict resolver: keep both sides of every conflict block of SHARED.md.
RESOLVER = r'''
import re, pathlib
p = pathlib.Path("SHARED.md")
text = p.read_text()
def both(m):
    return "\n".join(dict.fromkeys(m.group(1).splitlines() + m.group(2).splitlines()))
p.write_text(re.sub(r"<<<<<<<[^\n]*\n(.*?)\n?=======\n(.*?)\n?>>>>>>>[^\n]*", both, text, flags=re.S))
'''


def classify(log: Path) -> str:
    """Where the daemon was when it was killed, from the last line it logged."""
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
             if line[:2].isdigit()]
    if not lines:
        return "start-up / recovery"
    last = lines[-1].split(" ", 1)[-1]
    for words, phase in (("recovered", "recovery"), ("running:", "just started (spawning)"),
                         ("claimed by", "claim, worktree, agent turn"),
                         ("queued for merge", "merge (replay, test, fast-forward)"),
                         ("→ refinery", "refinery turn"),
                         ("refinery:", "after the refinery (verify, fast-forward)"),
                         ("and finalized", "after a finalize (cleanup, next merge)"),
                         ("done (", "done commit, hand-off"), ("failed:", "retry"), ("harvested", "notes")):
        if words in last:
            return phase
    return "other: " + last[:60]


def dag(rng: random.Random, count: int, conflicting: int) -> list[dict]:
    """Chains of up to 5, every 7th also waiting for two earlier issues (a fan-in); the
    conflicting issues stand alone (their merges conflict with each other)."""
    specs: list[dict] = []
    plain = count - conflicting
    for i in range(plain):
        deps = []
        if i % 5:
            deps.append(i - 1)
        if i % 7 == 6 and i > 10:
            deps += rng.sample(range(i - 1), 2)
        specs.append({"title": f"task {i}", "deps": sorted(set(deps)), "priority": rng.randint(0, 4)})
    for j in range(conflicting):
        # first in the queue: their merges (and the refinery) happen while the killer is at work
        specs.append({"title": f"conflicting {j}", "labels": ["conflict"], "priority": 0})
    return specs


@pytest.mark.slow
@pytest.mark.timeout(int(240 + KILLS * 5 + ISSUES * 2))     # 690 s at the default sizes
def test_sigkill_at_random_moments_then_everything_finishes_once(repo: Path, project, tmp_path: Path, git,
                                                                 state_log, daemons):
    from .helpers import bulk_issues

    rng = random.Random(SEED)
    (repo / "SHARED.md").write_text("# shared\n")
    git("add", "SHARED.md", cwd=repo)
    git("commit", "-q", "-m", "a file the conflicting issues all append to", cwd=repo)
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    ids = bulk_issues(project, dag(rng, ISSUES, CONFLICTING))
    resolver = tmp_path / "resolve.py"
    resolver.write_text(RESOLVER)
    script = write_json(tmp_path / "agents.json", {
        "default": work_steps([{"sleep": 0.05}]),
        "labels": {"conflict": work_steps(after=[{"append": "SHARED.md", "content": "line of {issue}\n"}])},
        "roles": {"refinery": [
            {"cd": "{worktree}"},
            {"sleep": 0.3},
            {"run": "git -c core.editor=true rebase {target}"},
            {"run": f'"{sys.executable}" "{resolver}" && git add SHARED.md && '
                    "git -c core.editor=true rebase --continue", "must_succeed": True},
            {"tokens": {"input": 1000, "output": 100}},
            {"result": {"status": "merged", "summary": "kept every line of SHARED.md"}}]},
    })
    # a crash costs an attempt (recovery counts it): the budget must outlast the kills
    # unjailed: the refinery's resolver lives in tmp_path, outside the worktree its jail would show
    env = daemon_env(script, test_command="true", max_retries=1000, max_agent_switches=0,
                     anomaly_failure_threshold=100000, sandbox="off")

    phases: Counter = Counter()
    orphans_survived: list[str] = []
    effective = 0
    previous_agents: list[int] = []
    started = time.monotonic()
    for n in range(KILLS):
        log = tmp_path / f"daemon-{n:03}.log"
        proc = daemons.start(repo, env, "--max-agents", str(AGENTS), log=log)
        anchor = rng.choices(list(ANCHORS), weights=[w for _, w in ANCHORS.values()])[0]
        if anchor != "spawn":
            said = lambda words: words in log.read_text(errors="replace") or proc.poll() is not None  # noqa: E731
            wait_until(lambda: said("running:"), 30)
            # recovery is over: the agents of the daemon killed before must be gone by now
            survivors = [pid for pid in previous_agents if pid in processes_under(tmp_path)]
            if survivors:
                orphans_survived.append(f"restart {n}: agents {survivors} of the killed daemon still alive")
            if anchor != "running":
                wait_until(lambda: said(ANCHORS[anchor][0]), 6)
        time.sleep(rng.uniform(0.05, 0.6))
        if proc.poll() is None:
            phases[classify(log)] += 1
            proc.send_signal(signal.SIGKILL)
            effective += 1
        proc.wait(10)
        previous_agents = processes_under(tmp_path)
    kill_phase = time.monotonic() - started
    project.sync(warn=False)
    finished_early = len(project.index.list(["finalized"]))

    code = daemons.run_until_idle(repo, env, max_agents=AGENTS, timeout=max(420, ISSUES * 2),
                                  log=tmp_path / "final.log")
    took = time.monotonic() - started
    spread = ", ".join(f"{phase}: {count}" for phase, count in phases.most_common())
    print(f"\n{effective} kills in {kill_phase:.0f}s ({finished_early} of {len(ids)} issues finalized by then), "
          f"all done after {took:.0f}s; kills landed in: {spread}")
    assert code == 0, tail(tmp_path / "final.log")
    assert effective >= KILLS

    # every issue finalized, by exactly one finalize commit
    project.sync(warn=False)
    statuses = {i: project.index.get(i).status for i in ids}
    assert {i: s for i, s in statuses.items() if s != "finalized"} == {}
    counts = finalized_counts(state_log, repo)
    assert {i: counts[i] for i in ids if counts[i] != 1} == {}
    # the target adds each issue's file exactly once, and moved only through the merge pipeline
    added = additions_on(git, repo)
    assert {i: added[f"hive-work/{i}.txt"] for i in ids if added[f"hive-work/{i}.txt"] != 1} == {}
    shared = (repo / "SHARED.md").read_text().splitlines()
    conflicting = [i for i in ids if project.index.get(i).labels == ["conflict"]]
    assert sorted(line for line in shared if line.startswith("line of ")) == sorted(
        f"line of {i}" for i in conflicting)
    assert target_history_problems(git, repo, state_log, before) == []
    # the repository is sound and nothing is left over — no git lock file either (a stale one
    # makes every later update of its ref, index or packed-refs fail)
    assert fsck_problems(git, repo) == []
    assert git_locks(repo) == []
    assert leftovers(git, repo) == {}
    assert wait_until(lambda: not processes_under(tmp_path), 10), processes_under(tmp_path)
    assert orphans_survived == []
    # the audit trail: no issue ever held by two agents at once
    assert double_claims(repo) == []
