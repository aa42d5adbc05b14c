"""A deleted `hive/state` ref: recovered from where it was remembered, or hive stops and says
where the data may be; never an empty state branch over existing issues (issue 17)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


def _forget_tip(repo: Path, db: str, key: str) -> None:
    with sqlite3.connect(repo / ".git" / "hive" / db) as conn:
        conn.execute("DELETE FROM meta WHERE key = ?", (key,))


@pytest.fixture
def two_issues(repo, hive, git) -> tuple[list[str], str]:
    ids = [hive("create", title, cwd=repo).stdout.strip() for title in ("first", "second")]
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    git("update-ref", "-d", "refs/heads/hive/state", cwd=repo)
    return ids, tip


def test_a_command_recovers_the_branch_and_says_so(repo, hive, git, two_issues, list_json):
    ids, tip = two_issues
    listed = hive("list", cwd=repo)
    assert "recovered it at" in listed.stderr and tip[:10] in listed.stderr
    assert git("rev-parse", "hive/state", cwd=repo).stdout.strip() == tip
    assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_doctor_names_the_recovery_and_fix_does_it(repo, hive, git, two_issues, list_json):
    ids, tip = two_issues
    checked = hive("doctor", cwd=repo, check=False)
    assert checked.returncode == 1 and "doctor --fix` recovers it at " + tip[:10] in checked.stdout
    assert git("rev-parse", "--verify", "-q", "hive/state", cwd=repo, check=False).returncode != 0
    hive("doctor", "--fix", cwd=repo, check=False)
    assert git("rev-parse", "hive/state", cwd=repo).stdout.strip() == tip
    assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_recovered_from_a_remote_when_nothing_local_remembers(repo, hive, git, tmp_path, two_issues, list_json):
    ids, tip = two_issues
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", f"{tip}:refs/heads/hive/state", cwd=repo)
    git("fetch", "-q", "origin", "+refs/heads/hive/state:refs/remotes/origin/hive/state", cwd=repo)
    _forget_tip(repo, "checkout.db", "commit")
    _forget_tip(repo, "index.db", "state_commit")
    listed = hive("list", cwd=repo)
    assert "from origin/hive/state" in listed.stderr
    assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_nothing_to_recover_from_stops_without_an_empty_branch(repo, hive, git, two_issues):
    ids, _ = two_issues
    _forget_tip(repo, "checkout.db", "commit")
    _forget_tip(repo, "index.db", "state_commit")
    for args in (("doctor", "--fix"), ("init",), ("list",)):
        done = hive(*args, cwd=repo, check=False)
        assert done.returncode == 1, args
        last = done.stderr.strip().splitlines()[-1]
        assert "hive/state is missing" in last and str(repo / ".hive") in last and "Traceback" not in done.stderr
        assert git("rev-parse", "--verify", "-q", "hive/state", cwd=repo, check=False).returncode != 0
    assert sorted(p.stem for p in (repo / ".hive" / "issues").glob("*.md")) == sorted(ids)
