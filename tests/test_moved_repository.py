"""A repository folder moved or renamed: hive repairs the links of its linked worktrees
(`.hive/` and the worker worktrees) itself (issue 17)."""

from __future__ import annotations

import shutil


def test_every_command_works_after_the_folder_moved(repo, git, hive, tmp_path, list_json):
    first = hive("create", "before the move", cwd=repo).stdout.strip()
    worker = repo / ".git" / "hive" / "worktrees" / "hv-abc123"
    git("worktree", "add", "-q", "-b", "hive/work/hv-abc123", str(worker), cwd=repo)
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(str(repo), str(moved))

    listed = hive("list", cwd=moved, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "before the move" in listed.stdout
    second = hive("create", "after the move", cwd=moved, check=False)
    assert second.returncode == 0 and second.stderr == ""
    ids = sorted(i["id"] for i in list_json(cwd=moved))
    assert ids == sorted([first, second.stdout.strip()])
    assert (moved / ".hive" / "issues" / f"{second.stdout.strip()}.md").is_file()
    assert git("status", "--short", cwd=moved / ".hive").returncode == 0
    moved_worker = moved / ".git" / "hive" / "worktrees" / "hv-abc123"
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=moved_worker).stdout.strip() == "hive/work/hv-abc123"


def test_a_command_started_inside_the_moved_checkout_works(repo, hive, tmp_path):
    hive("create", "an issue", cwd=repo)
    moved = tmp_path / "moved"
    shutil.move(str(repo), str(moved))
    done = hive("list", cwd=moved / ".hive" / "issues", check=False)
    assert done.returncode == 0, done.stderr
    assert "an issue" in done.stdout


def test_doctor_fix_repairs_the_links(repo, git, hive, tmp_path):
    moved = tmp_path / "moved"
    shutil.move(str(repo), str(moved))
    done = hive("doctor", "--fix", cwd=moved, check=False)
    assert "Traceback" not in done.stderr
    assert "!!  .hive/ checkout" not in done.stdout
    assert git("worktree", "list", cwd=moved).returncode == 0
