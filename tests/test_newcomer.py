"""The setups that trip a newcomer (issue 30): each one as they meet it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def _state_file(repo: Path, issue: str) -> bytes:
    return subprocess.run(["git", "show", f"hive/state:issues/{issue}.md"], cwd=repo, capture_output=True,
                          check=True).stdout


def test_an_issue_file_saved_with_crlf_is_read_and_kept_crlf(repo, hive, list_json) -> None:
    issue = hive("create", "Windows editor", cwd=repo).stdout.strip()
    path = repo / ".hive" / "issues" / f"{issue}.md"
    text = path.read_text().replace('title = "Windows editor"', 'title = "Saved with CRLF"')
    path.write_bytes(text.replace("\n", "\r\n").encode())
    listed = hive("list", cwd=repo)
    assert "broken TOML" not in listed.stderr and listed.stderr == "", listed.stderr
    assert [i["title"] for i in list_json(cwd=repo)] == ["Saved with CRLF"]
    hive("update", issue, "--priority", "1", cwd=repo)
    written = _state_file(repo, issue)
    assert b"priority = 1\r\n" in written and written.count(b"\r\n") == written.count(b"\n"), written


def test_a_hand_edit_bumps_updated_unless_the_person_set_it(repo, hive) -> None:
    issue = hive("create", "Edited by hand", cwd=repo).stdout.strip()
    path = repo / ".hive" / "issues" / f"{issue}.md"

    def updated() -> str:
        return re.search(rb'updated = (\S+)', _state_file(repo, issue)).group(1).decode()

    text = re.sub(r"updated = \S+", "updated = 2020-01-01T00:00:00Z", path.read_text())
    path.write_text(text)
    hive("list", cwd=repo)
    assert updated() == "2020-01-01T00:00:00Z"            # the person's own value stays
    path.write_text(path.read_text().replace('title = "Edited by hand"', 'title = "Edited again"'))
    hive("list", cwd=repo)
    assert updated() > "2025-01-01T00:00:00Z"               # a change of theirs: now
    assert "Edited again" in path.read_text() and updated() in path.read_text()   # the checkout shows it


def test_a_removed_hive_checkout_is_made_again_by_the_next_command(repo, hive, list_json) -> None:
    import shutil

    issue = hive("create", "Still here", cwd=repo).stdout.strip()
    shutil.rmtree(repo / ".hive")
    listed = hive("list", cwd=repo)
    assert listed.stderr == "git hive: .hive/ was missing: checked hive/state out there again\n", listed.stderr
    assert (repo / ".hive" / "issues" / f"{issue}.md").is_file()
    assert hive("list", cwd=repo).stderr == ""                       # said once
    hive("update", issue, "--priority", "0", cwd=repo)             # and usable again
    assert "priority = 0" in (repo / ".hive" / "issues" / f"{issue}.md").read_text()


def test_init_picks_a_branch_that_exists_or_says_how_to_choose(make_repo, git, hive) -> None:
    only = make_repo("only-trunk", commit=False)
    git("checkout", "-q", "-b", "trunk", cwd=only)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=only)
    git("checkout", "-q", "--detach", cwd=only)
    assert "target branch: trunk" in hive("init", cwd=only).stdout
    two = make_repo("two-branches", commit=False)
    git("checkout", "-q", "-b", "trunk", cwd=two)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=two)
    git("branch", "side", cwd=two)
    git("checkout", "-q", "--detach", cwd=two)
    refused = hive("init", cwd=two, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "branches here: side, trunk" in refused.stderr and "git hive config set target_branch BRANCH" in refused.stderr
    assert git("branch", "--list", "hive/state", cwd=two).stdout.strip() == ""     # nothing half set up
    hive("config", "set", "target_branch", "side", cwd=two)
    assert "target branch: side" in hive("init", cwd=two).stdout


def test_a_worktree_of_a_bare_repository_is_refused_by_every_command(tmp_path: Path, git, hive) -> None:
    bare = tmp_path / "project.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git("clone", "-q", str(bare), str(seed))
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=seed)
    git("push", "-q", "origin", "HEAD:main", cwd=seed)
    git("worktree", "add", "-q", str(tmp_path / "work"), "main", cwd=bare)
    for args in (("init",), ("create", "x"), ("list",), ("list", "--json"), ("run", "--until-idle")):
        done = hive(*args, cwd=tmp_path / "work", check=False)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "is a worktree of the bare repository" in done.stderr and "git clone" in done.stderr, done.stderr
