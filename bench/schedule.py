"""The ready queue's order as a schedule: makespan against the lower bound, on seeded random DAGs.

A discrete-event simulation of the daemon's claim loop — whenever an agent is free it claims the
first issue of the ready queue; an issue's agent finishes after the issue's duration, which makes
it `done` — over the real index: the issues and their dependencies are rows of a real `Index`
database, the order is the real `READY_SQL` (priority, the work waiting behind, age) with the
ranks recomputed by the real `Index.refresh_ranks` after each `done`, against the same query
ordered by creation time alone (the order before issue 20). No git, no agents: what is measured
is the order, not hive's speed. Durations are known to the simulation only; hive counts every
issue as one unit of work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench import Benchmark, Context, Result
from hive import git
from hive.state.index import READY_SQL, Index

CREATION_ORDER_SQL = READY_SQL.split("ORDER BY")[0] + "ORDER BY i.priority ASC, i.created_at ASC, i.id ASC"
SIZES = (20, 50, 100, 200)
AGENTS = (2, 4, 8)
SEEDS = (1, 2, 3)


@dataclass
class Dag:
    durations: dict[str, float]          # in creation order
    blockers: dict[str, list[str]]

    def lower_bound(self, agents: int) -> float:
        finish: dict[str, float] = {}

        def earliest(issue: str) -> float:
            if issue not in finish:
                finish[issue] = self.durations[issue] + max((earliest(b) for b in self.blockers[issue]), default=0.0)
            return finish[issue]

        critical = max(earliest(i) for i in self.durations)
        return max(critical, sum(self.durations.values()) / agents)


def random_dag(size: int, seed: int) -> Dag:
    """Independent issues, chains and fans in one DAG; issues created in an order unrelated to
    the graph (people file work as it comes), durations from 1 to 10 units."""
    rng = random.Random(seed * 1000 + size)
    ids = [f"hv-{n:06d}" for n in range(size)]
    topo = ids[:]
    rng.shuffle(topo)                       # the graph's own order; edges point back in it
    blockers: dict[str, list[str]] = {i: [] for i in ids}
    for k, issue in enumerate(topo):
        shape = rng.random()
        if k == 0 or shape < 0.35:
            continue                         # independent
        window = topo[max(0, k - 6):k] if shape < 0.8 else topo[:k]   # mostly near: chains form
        blockers[issue] = rng.sample(window, min(len(window), rng.choice((1, 1, 1, 2, 3))))
    return Dag({i: float(rng.choice((1, 1, 2, 2, 3, 5, 8, 10))) for i in ids}, blockers)


def issues_case() -> Dag:
    """Issue 20's case: 12 independent issues created first, then 2 chains of 6; 2 s each."""
    ids = [f"hv-{n:06d}" for n in range(24)]
    blockers: dict[str, list[str]] = {i: [] for i in ids}
    for start in (12, 18):
        for k in range(start + 1, start + 6):
            blockers[ids[k]] = [ids[k - 1]]
    return Dag({i: 2.0 for i in ids}, blockers)


def simulate(dag: Dag, agents: int, index: Index, ranked: bool) -> float:
    db = index.db
    with db:
        for table in ("issues", "deps"):
            db.execute(f"DELETE FROM {table}")
        db.executemany("INSERT INTO issues (id, path, blob, title, status, priority, type, depends_on, labels, "
                       "created_at, updated_at, body, extra) VALUES (?, ?, '', ?, 'open', 2, 'task', '[]', '[]', "
                       "?, '', '', '{}')",
                       [(i, f"issues/{i}.md", i, f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z")
                        for n, i in enumerate(dag.durations)])
        db.executemany("INSERT INTO deps (issue_id, blocker_id) VALUES (?, ?)",
                       [(i, b) for i, bs in dag.blockers.items() for b in bs])
        if ranked:
            index.refresh_ranks()
    sql = READY_SQL if ranked else CREATION_ORDER_SQL
    now, running = 0.0, {}                    # issue -> finish time
    while True:
        for row in db.execute(sql).fetchall():
            if len(running) >= agents:
                break
            db.execute("UPDATE issues SET status = 'in_progress', assignee = 'w' WHERE id = ?", (row["id"],))
            running[row["id"]] = now + dag.durations[row["id"]]
        if not running:
            return now
        now = min(running.values())
        with db:
            for issue in [i for i, end in running.items() if end == now]:
                del running[issue]
                db.execute("UPDATE issues SET status = 'done' WHERE id = ?", (issue,))
            if ranked:
                index.refresh_ranks()


def _index(root: Path) -> Index:
    common = root / ".git"
    common.mkdir(parents=True, exist_ok=True)
    return Index(git.RepoPaths(worktree=root, git_dir=common, common_dir=common))


def schedule(ctx: Context) -> list[Result]:
    index = _index(ctx.workspace.scratch("schedule"))
    results = []
    sizes = SIZES[:2] if ctx.quick else SIZES
    for size in sizes:
        for ranked in (False, True):
            over = []
            for agents in AGENTS:
                for seed in SEEDS:
                    dag = random_dag(size, seed)
                    over.append(100 * (simulate(dag, agents, index, ranked) / dag.lower_bound(agents) - 1))
            order = "the ready queue's order (priority, work behind, age)" if ranked else "creation order (before)"
            results.append(Result(
                f"schedule, random DAGs of {size} issues ({'/'.join(map(str, AGENTS))} agents × {len(SEEDS)} seeds): "
                f"makespan over max(critical path, work / agents), {order}", over, unit="%",
                note="" if results else "a simulated claim loop over the real index and `READY_SQL` "
                     "(bench/schedule.py); durations 1-10 units, unknown to hive"))
    case = issues_case()
    best = 16.0                                   # 8 rounds of 2 s: the critical path (6) cannot beat 24/3
    for ranked in (False, True):
        makespan = simulate(case, 3, index, ranked)
        results.append(Result(
            f"schedule: issue 20's case (3 agents, 12 independent issues then 2 chains of 6, 2 s each), "
            f"{'ready queue order' if ranked else 'creation order (before)'}: makespan over the best (16 s = 8 rounds)",
            [100 * (makespan / best - 1)], 10.0 if ranked else None, unit="%",
            note=f"simulated makespan {makespan:.0f} s"))
    index.close()
    return results


BENCHMARKS = [
    Benchmark("schedule", schedule, "the ready queue's order as a schedule, simulated on random DAGs"),
]
