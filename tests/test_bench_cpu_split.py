"""bench/cpu_split.py: the daemon's own CPU split by function and by asyncio task."""

from __future__ import annotations

import re

from bench import cpu_split
from hive.workspace import fastforward, worktrees


def test_a_wrapped_function_counts_its_calls_where_it_is_defined_and_where_it_was_imported(monkeypatch, repo):
    from hive import git

    monkeypatch.setattr(fastforward, "checkout_of", fastforward.checkout_of)   # put back after the test
    monkeypatch.setattr(worktrees, "checkout_of", worktrees.checkout_of)
    stats: cpu_split.Stats = {}
    assert cpu_split.wrap("hive.workspace.fastforward:checkout_of", stats)
    paths = git.discover(repo)
    fastforward.checkout_of(paths, "refs/heads/main")
    worktrees.checkout_of(paths, "refs/heads/main")   # worktrees took it by name
    calls, cpu = stats["hive.workspace.fastforward:checkout_of"]
    assert calls == 2 and cpu > 0


def test_a_coroutine_is_left_to_its_task_and_every_method_of_a_module_is_listed():
    assert not cpu_split.wrap("hive.orchestrator.worker:Worker.run", {})
    listed = cpu_split.functions_of("hive.workspace.spares")
    assert "hive.workspace.spares:put" in listed and "hive.workspace.spares:take" in listed


def test_a_run_splits_the_daemons_cpu_by_function_and_by_task(capsys):
    assert cpu_split.main(["--chains", "2", "--length", "2", "--tasks",
                           "--function", "hive.workspace.worktrees:create",
                           "--function", "hive.workspace.worktrees:adopt_head"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 issues (2 chains of 2), 8 scripted agents: wall ")
    assert re.search(r"ms\s+1\.0 calls  hive\.workspace\.worktrees:create$", out, re.M), out
    assert re.search(r"ms\s+[1-9][0-9.]* calls  hive\.workspace\.worktrees:adopt_head$", out, re.M), out
    assert re.search(r"ms\s+[0-9.]+ calls  task Worker\.run$", out, re.M), out
