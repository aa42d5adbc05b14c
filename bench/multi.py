"""Several machines on one queue (issue 18): how fast a claim spreads, and what two more machines add.

- **claim → visible**: three clones of a project on a local bare remote. Clone 1 claims an issue
  the way a shared daemon does (`SharedQueue.claim`: the claim commit pushed with a lease before it
  counts); clones 2 and 3 each run the shared daemon's sync round (`SharedQueue._exchange`: fetch,
  merge, reclaim, push) every `SYNC_SECONDS`, at their own phase, as their daemons do. The figure is
  the time from the start of the claim to the moment a clone's own `hive/state` holds it, for
  each of the two clones: the push, then at most one sync interval (the p95 is about the interval).
- **issues finalized per minute**: `git hive run --backend scripted --remote origin --until-idle
  --max-agents 2` on stand-alone issues with one clone, then the same issues with three clones at
  once; issues over the wall time from the daemons' start to the last one's exit (start-up
  included).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from bench import Benchmark, Context, Result
from bench.fixtures import environment

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], cwd: Path) -> str:
    env = {**environment(), "PYTHONPATH": str(ROOT)}   # this checkout's hive, not an installed one
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def _hive(cwd: Path, *args: str) -> str:
    return _run([sys.executable, "-m", "hive", *args], cwd)


def clones(ctx: Context, name: str, count: int) -> tuple[Path, list[Path]]:
    """A bare remote holding a one-commit `main` and `hive/state`, and `count` initialised clones."""
    root = ctx.workspace.scratch(name)
    remote = root / "remote.git"
    _run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], root)
    seed = root / "seed"
    _run(["git", "clone", "-q", str(remote), str(seed)], root)
    (seed / "README.md").write_text("# a project shared by several machines\n")
    _run(["git", "-C", str(seed), "add", "README.md"], root)
    _run(["git", "-C", str(seed), "-c", "user.name=bench", "-c", "user.email=bench@example.com",
          "commit", "-q", "-m", "initial"], root)
    _run(["git", "-C", str(seed), "push", "-q", "origin", "main"], root)
    made = []
    for n in range(count):
        clone = root / f"machine{n + 1}"
        _run(["git", "clone", "-q", str(remote), str(clone)], root)
        _run(["git", "-C", str(clone), "config", "user.name", f"machine {n + 1}"], root)
        _run(["git", "-C", str(clone), "config", "user.email", "bench@example.com"], root)
        _hive(clone, "init")
        if n == 0:
            _hive(clone, "sync", "origin")
        made.append(clone)
    return remote, made


class _Host:
    """What a SharedQueue needs of a daemon, for one clone: its project and runtime, no agents."""

    def __init__(self, clone: Path):
        from hive.project import Project
        from hive.runtime import Runtime

        self.project = Project.open(clone)
        self.runtime = Runtime(self.project.paths)

    def log(self, message: str) -> None:
        pass

    def wake_up(self) -> None:
        pass

    def running_agents(self) -> frozenset[str]:
        return frozenset()

    def close(self) -> None:
        self.runtime.close()
        self.project.close()


def _syncing(queue: object, period: float, phase: float, stop: threading.Event,
             seen: Callable[[], None]) -> threading.Thread:
    def loop() -> None:
        stop.wait(phase)
        while not stop.is_set():
            queue._exchange(frozenset())          # the daemon's sync round, as its loop runs it
            seen()
            stop.wait(period)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def claim_visible(ctx: Context) -> list[Result]:
    import asyncio

    from hive import issues
    from hive.agents.ids import new_agent_id
    from hive.orchestrator.shared import SYNC_SECONDS, SharedQueue

    reps = 8 if ctx.quick else 20
    _, machines = clones(ctx, "multi-claim", 3)
    hosts = [_Host(clone) for clone in machines]
    try:
        ids = [issues.create(hosts[0].project, f"issue {n}").id for n in range(reps)]
        hosts[0].project.after_write()
        _hive(machines[0], "sync", "origin")
        for clone in machines[1:]:
            _hive(clone, "sync", "origin")
        queues = [SharedQueue(host, "origin", "main") for host in hosts]
        claimed_at: dict[str, float] = {}
        visible: dict[tuple[int, str], float] = {}
        lock = threading.Lock()

        def seen(n: int) -> Callable[[], None]:
            def look() -> None:
                project = hosts[n].project
                project.update_index()
                now = time.perf_counter()
                with lock:
                    for issue_id, started in claimed_at.items():
                        found = project.index.get(issue_id)
                        if (n, issue_id) not in visible and found is not None and found.status == "in_progress":
                            visible[(n, issue_id)] = now - started
            return look

        stop = threading.Event()
        rng = random.Random(18)
        threads = [_syncing(queues[n], SYNC_SECONDS, rng.uniform(0, SYNC_SECONDS), stop, seen(n)) for n in (1, 2)]
        claim_seconds = []
        try:
            for issue_id in ids:
                started = time.perf_counter()
                with lock:
                    claimed_at[issue_id] = started
                assert asyncio.run(queues[0].claim(issue_id, new_agent_id(), 900)), f"claim of {issue_id} lost"
                claim_seconds.append(time.perf_counter() - started)
                deadline = time.monotonic() + 4 * SYNC_SECONDS
                while time.monotonic() < deadline and not all((n, issue_id) in visible for n in (1, 2)):
                    time.sleep(0.01)
                time.sleep(rng.uniform(0, SYNC_SECONDS))   # the next claim at another phase of the loops
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        samples = list(visible.values())
        missing = 2 * len(ids) - len(samples)
        note = (f"the claim's own push: median {sorted(claim_seconds)[len(claim_seconds) // 2] * 1000:.0f} ms; "
                f"others fetch every SYNC_SECONDS = {SYNC_SECONDS:g} s")
        return [Result(f"claim on one machine → visible on the two others ({len(ids)} claims, local bare remote)",
                       samples, stat="p95", note=note + (f"; {missing} never seen" if missing else ""))]
    finally:
        for host in hosts:
            host.close()


def _issues(clone: Path, count: int) -> None:
    from hive import issues
    from hive.project import Project

    project = Project.open(clone)
    try:
        for n in range(count):
            issues.create(project, f"stand-alone issue {n}")
        project.after_write()
    finally:
        project.close()


def _run_machines(machines: list[Path]) -> float:
    env = {**environment(), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--remote", "origin",
                               "--until-idle", "--max-agents", "2"], cwd=clone, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for clone in machines]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"a daemon exited {proc.returncode}: {err[-500:]}")
    return time.perf_counter() - started


def throughput(ctx: Context) -> list[Result]:
    count = 12 if ctx.quick else 30
    results = []
    per_minute = {}
    for machines in (1, 3):
        _, made = clones(ctx, f"multi-throughput-{machines}", machines)
        _issues(made[0], count)
        for clone in made:
            _hive(clone, "sync", "origin")
        wall = _run_machines(made)
        finalized = _hive(made[0], "list", "--status", "finalized", "--json").count('"id"')
        if finalized != count:
            raise RuntimeError(f"{finalized} of {count} issues finalized with {machines} machine(s)")
        per_minute[machines] = count / wall * 60
        results.append(Result(f"issues finalized per minute, {machines} machine(s) × 2 agents ({count} issues)",
                              [per_minute[machines]], unit="/min",
                              note=f"{wall:.1f} s from the daemons' start to the last exit"))
    results[-1].note += f"; ×{per_minute[3] / per_minute[1]:.2f} the one-machine rate"
    return results


BENCHMARKS = [
    Benchmark("multi", lambda ctx: claim_visible(ctx) + throughput(ctx),
              "several machines on one remote: claim visibility, finalized issues per minute"),
]

