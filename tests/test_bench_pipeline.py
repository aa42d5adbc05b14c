"""bench/pipeline.py: what the daemon child reports beside its times."""

from __future__ import annotations

from bench import Context, Sizes
from bench.fixtures import Workspace
from bench.pipeline import create_chains, new_repo, run_daemon


def test_a_run_tells_how_many_worktrees_came_from_the_spare_pool() -> None:
    with Workspace() as workspace:
        root = new_repo(Context(workspace, Sizes(), quick=True), "spares")
        create_chains(root, 3, 1)
        run = run_daemon(root, max_agents=1, timeout=120)
    assert run.statuses.get("finalized") == 3
    assert len(run.spares) == 3                 # one worktree made per issue, each counted
    assert run.spares[0] is False               # a run starts with an empty pool: the first is made whole
    assert run.spare_note() == f"{sum(run.spares)} of 3 worktrees made from a spare"
