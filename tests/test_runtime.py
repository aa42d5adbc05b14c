"""runtime.db: numbered migrations, and the merge queue's table."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hive import git as hive_git
from hive.runtime import Budget, Runtime
from hive.runtime.schema import MIGRATIONS, TABLES


@pytest.fixture
def paths(repo: Path) -> Any:
    return hive_git.discover(repo)


def test_a_runtime_database_from_before_the_newer_columns_is_migrated(paths):
    """A daemon opening an older `runtime.db` (merge_queue without test_command/merged_commit) adds
    the columns; a current one is opened without sqlite-utils (no import: it pulls in numpy)."""
    paths.hive_dir.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(paths.hive_dir / "runtime.db")
    old.execute("CREATE TABLE merge_queue (seq INTEGER PRIMARY KEY, issue_id TEXT, branch TEXT, base_commit TEXT, "
                "state TEXT, queued_at FLOAT, detail TEXT, refinery_attempts INTEGER)")
    old.close()
    runtime = Runtime(paths)
    tables = {r[0] for r in runtime.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(TABLES) <= tables
    columns = {r[1] for r in runtime.db.execute("PRAGMA table_info(merge_queue)")}
    assert {"test_command", "merged_commit", "refinery_attempts"} <= columns
    runtime.close()

    probe = subprocess.run([sys.executable, "-c", "import sys\nfrom hive import git\nfrom hive.runtime import Runtime\n"
                            f"r = Runtime(git.discover({str(paths.worktree)!r}))\nr.get('x')\n"
                            "from hive.merge.pipeline import MergeProcessor\n"
                            "print('sqlite_utils' in sys.modules)"], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "False"


def test_migrations_are_numbered_and_run_once(paths):
    runtime = Runtime(paths)
    assert runtime.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    runtime.put("kept", "yes")
    runtime.close()
    again = Runtime(paths)   # a current database: nothing re-run, nothing lost
    assert again.get("kept") == "yes"
    again.close()


def test_a_database_made_by_sqlite_utils_with_every_column_already_is_adopted(paths):
    """user_version 0 but the pipeline's old column migration done: the steps find it done."""
    paths.hive_dir.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(paths.hive_dir / "runtime.db")
    old.execute("CREATE TABLE merge_queue (seq INTEGER PRIMARY KEY, issue_id TEXT, branch TEXT, base_commit TEXT, "
                "state TEXT, queued_at FLOAT, detail TEXT, refinery_attempts INTEGER, test_command TEXT, "
                "merged_commit TEXT)")
    old.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
    old.execute("INSERT INTO kv VALUES ('daemon_pid', '42')")
    old.commit()
    old.close()
    runtime = Runtime(paths)
    assert runtime.get("daemon_pid") == "42"
    assert runtime.merge_queue.entries() == []
    runtime.close()


def test_the_merge_queue_keeps_order_and_one_entry_per_issue(paths):
    runtime = Runtime(paths)
    queue = runtime.merge_queue
    assert queue.add("hv-aaaaaa", "hive/work/hv-aaaaaa", "base1", "make test")
    assert queue.add("hv-bbbbbb", "hive/work/hv-bbbbbb", "base2")
    assert not queue.add("hv-aaaaaa", "hive/work/hv-aaaaaa", "other")
    first, second = queue.entries()
    assert (first.issue_id, first.state, first.base_commit, first.test_command) == \
        ("hv-aaaaaa", "queued", "base1", "make test")
    queue.update(first, state="waiting", detail="a person's dirty checkout")
    assert first.state == "waiting"
    assert runtime.merge_queue.get("hv-aaaaaa").detail == "a person's dirty checkout"
    queue.remove(first)
    assert [e.issue_id for e in runtime.merge_queue.entries()] == [second.issue_id]
    runtime.close()


def test_agents_budgets_and_values_through_the_runtime_handle(paths):
    runtime = Runtime(paths)
    runtime.add_agent(id="a1", issue_id="hv-aaaaaa", role="worker", backend="scripted")
    runtime.update_agent("a1", state="busy", tokens=12)
    assert [(a["id"], a["state"], a["tokens"]) for a in runtime.agents("worker")] == [("a1", "busy", 12)]
    runtime.remove_agent("a1")
    assert runtime.agents() == []
    runtime.save_budget(Budget("hv-aaaaaa", retries=2, failures=[1.0]))
    assert runtime.budget("hv-aaaaaa").retries == 2
    runtime.reset_budget("hv-aaaaaa")
    assert runtime.budget("hv-aaaaaa") == Budget("hv-aaaaaa")
    runtime.put("k", "v")
    runtime.delete("k")
    assert runtime.get("k", "gone") == "gone"
    runtime.close()
