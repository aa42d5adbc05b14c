"""The ready queue's order: priority, then the most work waiting behind an issue, then age.

Real repositories, the real index, the real CLI; the daemon's order from a real scripted run.
Issues made in one test share their creation second, so age ties are broken by id: the tests
assert the order only where priority or the work behind decides it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from hive.state.ranks import Rank, compute
from tests.state_helpers import set_status


def chain(new_issue: Callable[..., str], length: int, title: str, **fields: Any) -> list[str]:
    ids: list[str] = []
    for k in range(length):
        ids.append(new_issue(f"{title} {k + 1}", depends_on=ids[-1:], **fields))
    return ids


def ready_ids(project: Any) -> list[str]:
    project.sync(warn=False)
    return [i.id for i in project.index.ready()]


def test_longest_chain_first_then_most_dependents_then_priority_over_both(project: Any, new_issue: Callable[..., str],
                                                                         hive: Callable[..., Any]) -> None:
    loose = [new_issue(f"independent {k}") for k in range(3)]      # created first: the oldest
    fan = new_issue("fan head")
    for k in range(3):
        new_issue(f"fan leaf {k}", depends_on=[fan])                  # chain 1, 3 dependents
    pair = chain(new_issue, 2, "pair")                                # chain 1, 1 dependent
    long = chain(new_issue, 4, "long")                                # chain 3, 3 dependents
    urgent = new_issue("urgent, nothing behind it", priority=1)

    order = ready_ids(project)
    assert order[:4] == [urgent, long[0], fan, pair[0]]
    assert set(order[4:]) == set(loose)
    ranks = {i: (r["chain"], r["dependents"]) for i, r in _ranks(project).items()}
    assert ranks[long[0]] == (3, 3) and ranks[fan] == (1, 3) and ranks[pair[0]] == (1, 1) and ranks[loose[0]] == (0, 0)
    # what `git hive list --ready` shows is that order, the table and the JSON alike
    listed = [i["id"] for i in json.loads(hive("list", "--ready", "--json").stdout)]
    assert listed == order
    table = [line.split()[0] for line in hive("list", "--ready").stdout.splitlines()[1:] if line.strip()]
    assert table == order


def _ranks(project: Any) -> dict[str, dict[str, int]]:
    rows = project.index.db.execute("SELECT id, chain, dependents FROM issues")
    return {row[0]: {"chain": row[1], "dependents": row[2]} for row in rows}


def test_order_follows_the_graph_as_it_changes(project: Any, new_issue: Callable[..., str],
                                               hive: Callable[..., Any]) -> None:
    early = new_issue("early, nothing behind it")
    long = chain(new_issue, 3, "long")
    assert ready_ids(project)[0] == long[0]
    # the head is done: the next of the chain has the chain behind it now
    set_status(project, long[0], "done")
    assert ready_ids(project)[0] == long[1]
    # work added behind the early issue (a dependency edited by a person) moves it up...
    late = chain(new_issue, 3, "behind early")
    hive("dep", "add", late[0], early)
    project.sync(warn=False)
    assert ready_ids(project)[0] == early
    # ...and removed again, back below the chain
    hive("dep", "rm", late[0], early)
    order = ready_ids(project)
    assert order.index(late[0]) < order.index(early) and order.index(long[1]) < order.index(early)
    # finished work is no work waiting: a canceled chain leaves nothing behind its head
    for issue_id in late[1:]:
        hive("cancel", issue_id)
    project.sync(warn=False)
    assert _ranks(project)[late[0]] == {"chain": 0, "dependents": 0}


def test_a_rebuilt_index_gives_the_same_order(project: Any, new_issue: Callable[..., str]) -> None:
    [new_issue(f"loose {k}") for k in range(2)]
    chain(new_issue, 3, "a")
    fan = new_issue("fan")
    new_issue("leaf", depends_on=[fan])
    before = ready_ids(project)
    project.index.rebuild()
    assert ready_ids(project) == before


def test_the_ready_query_stops_after_its_limit(project: Any, new_issue: Callable[..., str]) -> None:
    new_issue("one")
    plan = " ".join(row[3] for row in project.index.db.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM (" + _ready_sql() + ") LIMIT 5"))
    assert "issues_ready" in plan and "TEMP B-TREE" not in plan   # read in order: no sort of them all


def _ready_sql() -> str:
    from hive.state.index import READY_SQL

    return READY_SQL


def test_ranks_of_a_graph() -> None:
    weights = {"a": 1, "b": 1, "c": 1, "d": 1, "epic": 0, "e": 1}
    edges = [("b", "a"), ("c", "b"), ("d", "a"), ("epic", "e"), ("x", "a"), ("a", "y")]  # x, y: not waiting
    found = compute(weights, edges)
    assert found["a"] == Rank(2, 3)          # a <- b <- c and a <- d
    assert found["b"] == Rank(1, 1) and found["c"] == Rank(0, 0)
    assert found["e"] == Rank(0, 0)          # an epic behind it is no agent's work
    # a diamond counts the shared dependent once
    assert compute({"t": 1, "l": 1, "r": 1, "z": 1},
                   [("l", "t"), ("r", "t"), ("z", "l"), ("z", "r")])["t"] == Rank(2, 3)
    # a cycle (reported by the index, never written by hive) still ends
    assert set(compute({"p": 1, "q": 1}, [("p", "q"), ("q", "p")])) == {"p", "q"}


def test_the_daemon_claims_in_the_order_list_ready_shows(repo: Path, project: Any, new_issue: Callable[..., str],
                                                          hive: Callable[..., Any], state_log: Callable[..., Any]) -> None:
    loose = [new_issue(f"independent {k}") for k in range(3)]     # the oldest: first in creation order
    long = chain(new_issue, 3, "chain")
    shown = [i["id"] for i in json.loads(hive("list", "--ready", "--json").stdout)]
    assert shown[0] == long[0]
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle",
                           "--max-agents", "1"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "HIVE_MERGE_MODE": "manual"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    claims = [c.issue for c in state_log(cwd=repo) if c.event == "claimed"]
    # one agent: the head of the chain first (its list --ready place), then the next of the chain
    # (one issue behind it beats none), then the rest, the chain's last among them
    assert claims[:2] == long[:2] and set(claims[2:]) == {*loose, long[2]} and len(claims) == 6


def test_ranks_kept_in_front_of_each_change_equal_the_whole_graph_computed(project: Any,
                                                                          new_issue: Callable[..., str]) -> None:
    """Each change recomputes only the ranks in front of it (`Index.refresh_ranks`): after every
    one of a random run of creates, dependency edits, finishes, reopens and cancels, the stored
    ranks are those of the whole waiting graph computed at once."""
    import random

    from hive import issues
    from hive.state.index import WAITING

    rng = random.Random(33)
    ids: list[str] = []
    for step in range(40):
        roll = rng.random()
        if roll < 0.4 or len(ids) < 3:
            ids.append(new_issue(f"issue {step}", depends_on=rng.sample(ids, min(len(ids), rng.randint(0, 2))),
                                 type="epic" if rng.random() < 0.1 else "task"))
        elif roll < 0.6:
            later, earlier = sorted(rng.sample(range(len(ids)), 2), reverse=True)   # never a cycle
            issues.add_dependency(project, ids[later], ids[earlier])
        elif roll < 0.75:
            blocked = [i for i in ids if project.index.get(i).depends_on]
            if blocked:
                issue_id = rng.choice(blocked)
                issues.remove_dependency(project, issue_id, rng.choice(project.index.get(issue_id).depends_on))
        else:
            set_status(project, rng.choice(ids), rng.choice(["done", "open", "canceled", "open"]))
        project.sync(warn=False)
        db = project.index.db
        weights = {row[0]: 0 if row[1] == "epic" else 1
                   for row in db.execute(f"SELECT id, type FROM issues WHERE {WAITING}")}
        whole = compute(weights, db.execute("SELECT issue_id, blocker_id FROM deps").fetchall())
        stored = {row[0]: Rank(row[1], row[2]) for row in db.execute(
            f"SELECT id, chain, dependents FROM issues WHERE {WAITING}")}
        assert stored == whole, f"step {step}"


def test_ranks_kept_in_front_of_a_hostile_cycle_end_and_stay_those_of_the_whole_graph(
        repo: Path, project: Any, git: Callable[..., Any], issue_text: Callable[..., str],
        new_issue: Callable[..., str]) -> None:
    """A dependency cycle arrives on `hive/state` by a plain commit (fetched from someone else:
    hive's own writes never make one). The recomputation in front of each later change walks
    into it and out again (the region's recursive query ends on a cycle), the cycle is reported
    and never ready, and the issues outside it keep the ranks of the whole graph computed at once."""
    from hive import issues
    from hive.state.index import WAITING

    head = new_issue("in front of the cycle")
    issues_dir = repo / ".hive" / "issues"
    (issues_dir / "hv-cyca01.md").write_text(issue_text("cycle a", depends_on=["hv-cycb01", head]))
    (issues_dir / "hv-cycb01.md").write_text(issue_text("cycle b", depends_on=["hv-cyca01"]))
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "a cycle, fetched", cwd=repo / ".hive")
    problems = project.sync(warn=False)
    assert any("dependency cycle" in str(p) for p in problems)

    behind = new_issue("behind the cycle", depends_on=["hv-cycb01"])
    issues.add_dependency(project, new_issue("second head"), head)
    set_status(project, behind, "canceled")
    project.sync(warn=False)
    ready = ready_ids(project)
    assert head in ready and not {"hv-cyca01", "hv-cycb01"} & set(ready)
    db = project.index.db
    weights = {row[0]: 1 for row in db.execute(f"SELECT id FROM issues WHERE {WAITING}")}
    whole = compute(weights, db.execute("SELECT issue_id, blocker_id FROM deps").fetchall())
    stored = {row[0]: Rank(row[1], row[2]) for row in db.execute(f"SELECT id, chain, dependents FROM issues WHERE {WAITING}")}
    outside = set(weights) - {"hv-cyca01", "hv-cycb01"}
    assert {i: stored[i] for i in outside} == {i: whole[i] for i in outside}
