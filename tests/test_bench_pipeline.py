"""bench/pipeline.py: what the daemon child reports beside its times."""

from __future__ import annotations

from pathlib import Path

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


def test_a_memory_scratch_folder_is_on_a_tmpfs_and_goes_with_the_workspace() -> None:
    from bench import fixtures

    with Workspace() as workspace:
        folder = workspace.memory_scratch("in-memory")
        if not fixtures._is_tmpfs(fixtures.MEMORY_FOLDER):
            assert folder is None                 # a machine without one: the figure is left out
            return
        assert folder is not None and folder.is_dir()
        assert folder.parent.parent == Path(fixtures.MEMORY_FOLDER)
        assert workspace.memory_scratch("in-memory") == folder
        (folder / "file").write_text("x")
    assert not folder.parent.exists()


def test_no_memory_scratch_folder_where_that_folder_is_no_tmpfs(tmp_path, monkeypatch) -> None:
    from bench import fixtures

    monkeypatch.setattr(fixtures, "MEMORY_FOLDER", str(tmp_path))
    with Workspace() as workspace:
        assert workspace.memory_scratch("in-memory") is None
    assert list(tmp_path.iterdir()) == []
