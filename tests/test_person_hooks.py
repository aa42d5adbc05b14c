"""The person's own git hooks run for the agents' commits, inside the jail, as for their own.

The pre-commit framework (https://pre-commit.com) is how many projects run their linters on every
commit: `pre-commit install` writes `.git/hooks/pre-commit`, and the hook environments live in
pre-commit's store in the home (`~/.cache/pre-commit`), which the jail hides. Every agent commit
failed there ("Read-only file system: ~/.cache"), and with a real agent, told never to skip a
hook, every issue failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hive.jail.roles import pre_commit_store
from tests.hostile import require_jail


def _hook_repository(git, where: Path) -> str:
    """A repository of hooks as pre-commit fetches them (`.pre-commit-hooks.yaml`): `no-shout`
    refuses a Markdown file that says SHOUT. Returns its commit."""
    git("init", "-q", "-b", "main", str(where))
    (where / "check.sh").write_text('#!/bin/sh\nfor f in "$@"; do if grep -q SHOUT "$f"; then '
                                    'echo "$f shouts"; exit 1; fi; done\n', encoding="utf-8")
    (where / "check.sh").chmod(0o755)
    (where / ".pre-commit-hooks.yaml").write_text(
        "- id: no-shout\n  name: no shouting\n  entry: check.sh\n  language: script\n  files: \\.md$\n",
        encoding="utf-8")
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", "hooks", cwd=where)
    return git("rev-parse", "HEAD", cwd=where).stdout.strip()


@pytest.mark.timeout(120)
def test_the_pre_commit_framework_runs_for_a_jailed_agents_commit_from_the_persons_store(
        make_repo, git, hive, git_env: Path, tmp_path: Path):
    """A hook from pre-commit's store (fetched there by the person's own commit) refuses an
    agent's commit as it would refuse the person's, and lets the other agent's through; the store
    is read, never written."""
    require_jail()
    rev = _hook_repository(git, tmp_path / "hooks")
    repo = make_repo("project")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {tmp_path / 'hooks'}\n  rev: {rev}\n  hooks:\n  - id: no-shout\n", encoding="utf-8")
    git("add", ".pre-commit-config.yaml", cwd=repo)
    git("commit", "-q", "-m", "pre-commit", cwd=repo)
    hive_path = os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"]))
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "PATH": hive_path})
    (repo / "person.md").write_text("calm words\n", encoding="utf-8")      # the person's commit
    git("add", "person.md", cwd=repo)                                     # fills the store
    git("commit", "-q", "-m", "the person's", cwd=repo, env={"PATH": hive_path})
    store = pre_commit_store(os.environ, str(git_env))
    assert store is not None
    before = {p: p.stat().st_mtime_ns for p in Path(store).rglob("*")}

    hive("init", cwd=repo)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"labels": {
        "loud": [{"write": "loud-{issue}.md", "content": "SHOUT\n"}, {"commit": "{issue}: loud"},
                 {"result": "success", "summary": "done"}],
        "calm": [{"write": "calm-{issue}.md", "content": "quiet\n"}, {"commit": "{issue}: calm"},
                 {"result": "success", "summary": "done"}]}}), encoding="utf-8")
    loud = hive("create", "say it loud", "-l", "loud", cwd=repo).stdout.strip()
    calm = hive("create", "say it calmly", "-l", "calm", cwd=repo).stdout.strip()
    run_ = hive("run", "--backend", "scripted", "--until-idle", cwd=repo, check=False,
                env={"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0",
                     "PATH": hive_path})
    shown = {i: json.loads(hive("show", i, "--json", cwd=repo).stdout) for i in (loud, calm)}
    assert shown[calm]["status"] == "finalized", run_.stdout + run_.stderr
    assert shown[loud]["status"] != "finalized"
    assert f"loud-{loud}.md shouts" in run_.stdout + run_.stderr
    assert "Read-only file system" not in run_.stdout + run_.stderr
    assert git("show", f"main:calm-{calm}.md", cwd=repo).stdout == "quiet\n"
    assert {p: p.stat().st_mtime_ns for p in Path(store).rglob("*")} == before


def test_the_store_is_found_where_pre_commit_makes_it_and_only_once_made(tmp_path: Path):
    home = tmp_path / "home"
    store = home / ".cache" / "pre-commit"
    assert pre_commit_store({}, str(home)) is None                        # none made
    store.mkdir(parents=True)
    (store / "db.db").write_bytes(b"")
    assert pre_commit_store({}, str(home)) == str(store)
    moved = home / "pc"
    moved.mkdir()
    (moved / "db.db").write_bytes(b"")
    assert pre_commit_store({"PRE_COMMIT_HOME": str(moved)}, str(home)) == str(moved)
    assert pre_commit_store({"XDG_CACHE_HOME": str(home / "xdg")}, str(home)) is None
    elsewhere = tmp_path / "xdg-cache" / "pre-commit"                     # the jail is told where
    elsewhere.mkdir(parents=True)
    (elsewhere / "db.db").write_bytes(b"")
    assert pre_commit_store({"XDG_CACHE_HOME": str(elsewhere.parent)}, str(home)) == str(elsewhere)
