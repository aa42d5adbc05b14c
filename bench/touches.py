"""The touches rule (issue 32): refinery hand-offs and makespan, with and without it.

Real daemons (`bench.pipeline.run_daemon`: `git hive run --backend scripted --until-idle` in a
child process, exactly as `build_daemon` makes it) on generated workloads of real scripted
agents. Every issue's agent sleeps its duration (0.5-3 s, seeded), then appends a line to one of
a few shared files or writes a file of its own, commits, and reports success. With the rule the
issues declare `touches` = the file they will change (what a Queen is asked to do); without it
they declare nothing, which is how hive scheduled before. The refinery is scripted to answer
`rejected` (it cannot resolve the conflict): the issue goes back to the queue and is worked again
from the new target, so a conflict costs what it costs with a real refinery that gives up — a
hand-off and the work again — and every line lands in the end (budgets raised so that none
escalates). Figures: hand-offs ("… → refinery" in the daemon's log) per 100 issues; makespan
(daemon start → the last `finalized` commit) with the rule over without, per seed; and issue 32's
case: 3 agents, 3 issues appending a line to one file and 3 independent ones, 1 s each.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench import Benchmark, Context, Result
from bench.pipeline import new_repo, run_daemon

# (what, share of the issues that append to a shared file, how many shared files)
WORKLOADS = (("half of them append to one of 4 files", 0.5, 4), ("most append to one of 2 files", 0.8, 2))
DURATIONS = (0.5, 1.0, 1.0, 1.5, 2.0, 3.0)
REJECTING_REFINERY = [
    {"cd": "{worktree}"},
    {"tokens": {"input": 800, "output": 100}},
    {"result": {"status": "rejected", "summary": "conflict: work it again on the new target"}},
]
# budgets out of the way: every rejected issue is worked again until it lands
ENV = {"HIVE_MAX_RETRIES": "50", "HIVE_MAX_AGENT_SWITCHES": "0", "HIVE_ANOMALY_FAILURE_THRESHOLD": "1000"}


@dataclass
class Job:
    title: str
    file: str          # the one file its work changes
    shared: bool       # appends a line to a shared file (else writes its own)
    seconds: float


@dataclass
class Outcome:
    handoffs: int
    makespan: float
    issues: int
    finalized: int
    lines_missing: int


def workload(size: int, seed: int, overlap: float, files: int) -> list[Job]:
    """`size` issues; a share `overlap` of them append to one of `files` shared files."""
    rng = random.Random(seed)
    jobs = []
    for k in range(size):
        shared = rng.random() < overlap
        file = f"shared/file-{rng.randrange(files)}.txt" if shared else f"own/issue-{k}.txt"
        jobs.append(Job(f"job {k}", file, shared, rng.choice(DURATIONS)))
    return jobs


def issue_32_case() -> list[Job]:
    return ([Job(f"append line {k}", "lines.txt", True, 1.0) for k in range(3)]
            + [Job(f"independent {k}", f"own/issue-{k}.txt", False, 1.0) for k in range(3)])


def _steps(job: Job) -> list[dict]:
    work = ({"append": job.file, "content": "line of {issue}\n"} if job.shared
            else {"write": job.file, "content": "work of {issue}\n"})
    return [{"sleep": job.seconds}, work, {"commit": "{issue}: " + job.title},
            {"tokens": {"input": 1200, "output": 300}}, {"result": "success", "summary": f"changed {job.file}"}]


def run_workload(ctx: Context, name: str, jobs: list[Job], agents: int, rule: bool) -> Outcome:
    from hive import issues
    from hive.project import Project

    root = new_repo(ctx, name, test_command="")
    project = Project.open(root)
    try:
        ids = [issues.create(project, job.title, touches=[job.file] if rule else []).id for job in jobs]
    finally:
        project.close()
    script = root.parent / f"{name}.script.json"
    script.write_text(json.dumps({"issues": {i: _steps(job) for i, job in zip(ids, jobs)},
                                  "roles": {"refinery": REJECTING_REFINERY}}))
    run = run_daemon(root, agents, timeout=600, env={**ENV, "HIVE_SCRIPTED_SCRIPT": str(script)})
    finalized = run.first("finalized")
    return Outcome(sum("→ refinery" in line for line in run.lines),
                   max(finalized.values(), default=run.wall), len(jobs), len(finalized),
                   _lines_missing(root, [i for i, job in zip(ids, jobs) if job.shared], jobs))


def _lines_missing(root: Path, appenders: list[str], jobs: list[Job]) -> int:
    import subprocess

    landed = set()
    for file in {job.file for job in jobs if job.shared}:
        shown = subprocess.run(["git", "show", f"main:{file}"], cwd=root, capture_output=True, text=True)
        landed.update(shown.stdout.splitlines())
    return sum(f"line of {issue}" not in landed for issue in appenders)


def touches(ctx: Context) -> list[Result]:
    size, agents = (16, 3) if ctx.quick else (30, 4)
    seeds = (1, 2) if ctx.quick else (1, 2, 3)
    results = []
    for number, (what, overlap, files) in enumerate(WORKLOADS):
        results += _compare(ctx, f"w{number}", size, agents, seeds, what, overlap, files)
    case = {rule: run_workload(ctx, f"touches-case-{'on' if rule else 'off'}", issue_32_case(), 3, rule)
            for rule in (False, True)}
    results.append(Result(
        "touches: issue 32's case (3 agents; 3 issues append a line to one file + 3 independent, 1 s each), "
        "refinery hand-offs with the rule", [float(case[True].handoffs)], 0.0, unit="hand-offs",
        error="" if not case[True].lines_missing else f"{case[True].lines_missing} line(s) never landed",
        note=f"with the rule: {_note([case[True]])}, makespan {case[True].makespan:.1f} s; without: "
             f"{_note([case[False]])}, makespan {case[False].makespan:.1f} s"))
    return results


def _compare(ctx: Context, tag: str, size: int, agents: int, seeds: tuple[int, ...], what: str,
             overlap: float, files: int) -> list[Result]:
    runs: dict[bool, list[Outcome]] = {False: [], True: []}
    for seed in seeds:
        jobs = workload(size, seed, overlap, files)
        for rule in (False, True):   # one after the other per seed: the machine's load hits both alike
            runs[rule].append(run_workload(ctx, f"touches-{tag}-{seed}-{'on' if rule else 'off'}", jobs, agents, rule))
    per_100 = {rule: [100 * o.handoffs / o.issues for o in found] for rule, found in runs.items()}
    longer = [100 * (on.makespan / off.makespan - 1) for off, on in zip(runs[False], runs[True])]
    label = f"{size} issues, {what}, 0.5-3 s each, {agents} agents, {len(seeds)} seeds"
    return [
        Result(f"touches ({label}): refinery hand-offs per 100 issues without the rule", per_100[False],
               unit="/100", note=_note(runs[False])),
        Result(f"touches ({label}): refinery hand-offs per 100 issues with the rule (target: ≥ 80 % fewer)",
               per_100[True], 0.2 * statistics.median(per_100[False]), unit="/100", note=_note(runs[True])),
        Result(f"touches ({label}): makespan with the rule over without, same workload (target ≤ 5 % longer)",
               longer, 5.0, unit="%", note="makespans without / with, s: " + ", ".join(
                   f"{off.makespan:.1f} / {on.makespan:.1f}" for off, on in zip(runs[False], runs[True]))),
    ]


def _note(found: list[Outcome]) -> str:
    finalized = sum(o.finalized for o in found)
    missing = sum(o.lines_missing for o in found)
    return (f"{sum(o.handoffs for o in found)} hand-offs in all; {finalized}/{sum(o.issues for o in found)} "
            f"finalized; {'every line landed' if not missing else f'{missing} line(s) missing'}")


METHOD = """### The touches rule (`bench/touches.py`)

- **Workloads**: a fresh repository per run (`bench.pipeline.new_repo`, no test command), issues
  created with `hive.issues.create`; each issue's scripted agent sleeps its duration (0.5-3 s,
  seeded), then appends a line to one of a few shared files (half the issues on 4 files; in a
  second workload 80 % of them on 2 files) or writes a file of its own, commits and reports
  success. With the rule each issue declares `touches` = the file it
  changes; without it, none (how hive scheduled before issue 32). The same workload runs both
  ways, one right after the other, per seed.
- **Daemon**: `bench.pipeline.run_daemon` (`git hive run --backend scripted --until-idle` in a child
  process). The refinery is scripted to answer `rejected`: the issue returns to the queue and is
  worked again from the new target, budgets raised so that none escalates and every line lands.
- **Figures**: refinery hand-offs (the daemon's `… → refinery` log lines) per 100 issues;
  makespan = daemon start → the last `finalized` commit, with the rule over without; issue 32's
  case (3 agents, 3 issues appending to one file and 3 independent, 1 s each) run both ways.
"""


BENCHMARKS = [
    Benchmark("touches", touches, "the touches rule: refinery hand-offs and makespan, with and without it"),
]
