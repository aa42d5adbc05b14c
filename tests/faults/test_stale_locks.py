"""Git locks left by a killed process (issue 18): judged by one rule (`hive.git.is_stale_lock`),
cleared at daemon start and before each fetch or push; a fetch that fails on this side is never
called "unreachable".

The rule: a lock is stale when it is older than the margin and no live process may own it — none
has it open, and no `git` process working in the same repository started before it was written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hive import git as hive_git
from hive.project import Project
from hive.remote import Remote
from tests.daemon_helpers import start_daemon, stop_daemon

from .helpers import daemon_env, wait_until


def _plant(path: Path, age: float, holding: str = "0" * 40) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(holding + "\n", encoding="ascii")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def _holder(command: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_the_lock_rule_age_open_files_and_git_processes_of_the_repository(repo: Path):
    common = repo / ".git"
    lock = _plant(common / "refs" / "remotes" / "origin" / "hive" / "work" / "hv-abc123.lock", age=60)
    fresh = _plant(common / "packed-refs.lock", age=0)
    assert hive_git.is_stale_lock(lock)
    assert not hive_git.is_stale_lock(fresh)          # younger than the margin: a live update
    assert not hive_git.is_stale_lock(common / "refs" / "nothing.lock")

    # a process that has the lock open owns it, however old it is
    opener = _holder([sys.executable, "-c", f"f = open({str(lock)!r}); print('open', flush=True); input()"], repo)
    try:
        assert opener.stdout.readline().strip() == "open"
        assert not hive_git.is_stale_lock(lock)
    finally:
        opener.communicate("\n", timeout=10)
    assert hive_git.is_stale_lock(lock)

    # a git process working in this repository, started before the lock was written, may own it
    # (git closes a ref lock before renaming it); one started after it cannot
    index_lock = common / "index.lock"
    worker = _holder(["git", "hash-object", "--stdin"], repo)
    try:
        wait_until(lambda: Path(f"/proc/{worker.pid}/cwd").exists(), 5)
        _plant(index_lock, age=0)
        os.utime(index_lock, (time.time() + 2, time.time() + 2))  # written after git started
        assert not hive_git.is_stale_lock(index_lock, stale_after=-10)
        os.utime(index_lock, (time.time() - 60, time.time() - 60))  # older than that git
        assert hive_git.is_stale_lock(index_lock)
    finally:
        worker.communicate("x", timeout=10)

    removed = hive_git.clear_stale_locks(common)
    assert sorted(removed) == sorted([lock, index_lock])
    assert fresh.exists() and not lock.exists() and not index_lock.exists()


@pytest.mark.timeout(120)
def test_a_stale_tracking_ref_lock_is_cleared_and_a_live_one_is_not_called_unreachable(
        clones, cli, git, tmp_path: Path):
    remote, (a,) = clones("A")
    ids = [cli("create", f"issue {n}", cwd=a).stdout.strip() for n in range(3)]
    cli("sync", cwd=a)
    lock = a / ".git" / "refs" / "remotes" / "origin" / "hive" / "state.lock"
    # held open by a live process: not stale, so every fetch fails — on this side
    holder = _holder([sys.executable, "-c",
                      f"f = open({str(lock)!r}, 'w'); print('held', flush=True); input()"], a)
    assert holder.stdout.readline().strip() == "held"
    old = time.time() - 60
    os.utime(lock, (old, old))
    log = tmp_path / "daemon.log"
    proc = start_daemon(a, daemon_env(), "--remote", "origin", "--until-idle", "--max-agents", "2", log=log)
    try:
        text = wait_until(lambda: "a problem on this machine" in log.read_text() and log.read_text(), 30)
        assert "cannot lock ref" in text and "unreachable" not in text, text
        assert lock.exists()                       # its owner lives: left alone
        holder.communicate("\n", timeout=10)       # the owner dies; its (old) lock stays behind
        assert proc.wait(90) == 0, log.read_text()
    finally:
        if holder.poll() is None:
            holder.kill()
        stop_daemon(proc)
    text = log.read_text()
    assert f"removed a stale git lock left by a killed process: {lock}" in text
    assert "unreachable" not in text
    assert not lock.exists()
    states = {i["id"]: i["status"] for i in json.loads(cli("list", "--json", cwd=a).stdout)}
    assert states == {i: "finalized" for i in ids}
    assert git("rev-parse", "hive/state", cwd=a).stdout == git("rev-parse", "hive/state", cwd=remote).stdout


@pytest.mark.timeout(60)
def test_the_daemon_clears_stale_locks_at_start(repo: Path, hive, tmp_path: Path):
    hive("init", cwd=repo)
    lock = _plant(repo / ".git" / "refs" / "heads" / "hive" / "state.lock", age=60)
    packed = _plant(repo / ".git" / "packed-refs.lock", age=60)
    log = tmp_path / "daemon.log"
    proc = start_daemon(repo, daemon_env(), "--until-idle", log=log)
    try:
        assert proc.wait(60) == 0, log.read_text()
    finally:
        stop_daemon(proc)
    text = log.read_text()
    assert f"removed a stale git lock left by a killed process: {lock}" in text
    assert f"removed a stale git lock left by a killed process: {packed}" in text
    assert not lock.exists() and not packed.exists()


def test_fetch_and_push_see_a_jailed_agents_unabsorbed_objects(clones, git, tmp_path: Path):
    """A jailed agent's commit lives in its private store until hive absorbs it, and its worktree's
    HEAD names it; fetch's connectivity check and push walk every worktree's HEAD. Without the
    private stores as alternates both fail on a "bad object" (and the remote was called
    unreachable): hive's fetch and push read them."""
    _, [clone] = clones("one")
    admin_name = "hv-jail01"
    worktree = tmp_path / admin_name
    git("worktree", "add", "-q", "--detach", str(worktree), cwd=clone)
    private = clone / ".git" / "worktrees" / admin_name / "hive-objects"
    private.mkdir()
    jailed = {**os.environ, "GIT_OBJECT_DIRECTORY": str(private),
              "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(clone / ".git" / "objects")}
    (worktree / "work.txt").write_text("the agent's work\n")
    for args in (["add", "work.txt"], ["commit", "-q", "-m", "agent work"]):
        subprocess.run(["git", *args], cwd=worktree, env=jailed, check=True, capture_output=True)
    plain = subprocess.run(["git", "fetch", "origin"], cwd=clone, capture_output=True, text=True)
    assert plain.returncode != 0 and "bad object" in plain.stderr        # the failure this guards

    remote = Remote(Project.open(clone), "origin")
    assert remote.fetch().ok, "hive's fetch failed on the agent's unabsorbed objects"
    git("commit", "-q", "--allow-empty", "-m", "moved", cwd=clone)
    assert remote.push("refs/heads/main", "main", None, lease=False).ok


def test_the_scans_before_a_fetch_survive_a_worktree_retired_meanwhile(repo: Path, monkeypatch: pytest.MonkeyPatch):
    """Before each fetch or push, hive looks through every worktree's admin folder (stale locks,
    agents' private object stores); meanwhile another thread may retire an issue, its admin folder
    with it. The folder vanishing between the listing and the look is no error — it was one
    ("No such file or directory: .git/worktrees/<id>", the merge of an unrelated issue stopped)."""
    paths = hive_git.discover(repo)
    admins = paths.common_dir / "worktrees"
    for name in ("hv-aaa001", "hv-bbb002"):
        (admins / name / "hive-objects").mkdir(parents=True)
    stale = _plant(admins / "hv-bbb002" / "index.lock", age=3600)
    gone = admins / "hv-aaa001"
    real_scandir = os.scandir

    def scandir_then_retire(path: Any = ".") -> Any:
        if isinstance(path, int):   # rmtree's own, by file descriptor
            return real_scandir(path)
        listed = list(real_scandir(path))
        if Path(path) == admins and gone.exists():   # listed, then removed before it is looked in
            shutil.rmtree(gone)
        return _Listing(listed)

    monkeypatch.setattr(os, "scandir", scandir_then_retire)
    assert hive_git.clear_stale_locks(paths.common_dir) == [stale]
    gone.mkdir()
    (gone / "hive-objects").mkdir()
    stores = hive_git.private_stores_env(paths.common_dir)["GIT_ALTERNATE_OBJECT_DIRECTORIES"]
    assert stores == str(admins / "hv-bbb002" / "hive-objects")


class _Listing:
    """What os.scandir returns, from a list made beforehand: an iterator and a context manager."""

    def __init__(self, entries: list[Any]):
        self._entries = iter(entries)

    def __iter__(self) -> "_Listing":
        return self

    def __next__(self) -> Any:
        return next(self._entries)

    def __enter__(self) -> "_Listing":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def close(self) -> None:
        return None


def _commits(git, repo: Path, count: int) -> list[str]:
    tree = git("rev-parse", "HEAD^{tree}", cwd=repo).stdout.strip()
    return [git("commit-tree", tree, "-m", f"work {n}", cwd=repo).stdout.strip() for n in range(count)]


def test_a_lock_left_on_a_kept_attempts_number_is_passed_over(repo: Path, git):
    """A daemon killed while it kept an attempt leaves `<n>.lock`; the next one, restarted at
    once, keeps heads during its recovery: under the next number, never a failed start (the crash
    test saw seven daemons in a row end at once on such a lock)."""
    from hive.workspace import attempts

    common = repo / ".git"
    first, second = _commits(git, repo, 2)
    fresh = _plant(common / "refs" / "hive" / "attempts" / "hv-abc123" / "1.lock", age=0)
    repository = hive_git.repository(common)
    assert attempts.keep(repository, "hv-abc123", [first]) == [attempts.Attempt("hv-abc123", 2, first)]
    assert fresh.exists()                                    # maybe another process's: left alone
    # a killed keep's lock holds the head it was keeping: that head is kept again, and the lock goes
    stale = _plant(common / "refs" / "hive" / "attempts" / "hv-abc123" / "3.lock", age=60, holding=second)
    assert attempts.keep(repository, "hv-abc123", [second]) == [attempts.Attempt("hv-abc123", 4, second)]
    assert not stale.exists()
    assert [(a.number, a.commit) for a in attempts.kept(common, "hv-abc123")] == [(2, first), (4, second)]


def test_a_landing_ref_lock_a_killed_process_left_is_cleared_before_the_ref_is_written(repo: Path, git):
    from hive.workspace import landings

    common = repo / ".git"
    (commit,) = _commits(git, repo, 1)
    repository = hive_git.repository(common)
    lock = _plant(common / "refs" / "hive" / "landings" / "hv-abc123.lock", age=60, holding=commit)
    landings.record_landing(repository, "hv-abc123", commit)
    assert str(repository.references.get(landings.LANDING_REF + "hv-abc123").target) == commit
    _plant(lock, age=60)
    landings.forget_landing(repository, "hv-abc123")
    assert repository.references.get(landings.LANDING_REF + "hv-abc123") is None
    assert not lock.exists()
