"""The touches rule in the daemon and in `git hive list --ready` (hive/touches.py).

Real repositories, real daemons (`git hive run --backend scripted`), real scripted agents; what
ran when is read back from the commits of `hive/state` (one total order of claims and landings).
"""

from __future__ import annotations

import json

import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from hive import issues, lifecycle
from hive.workspace import worktrees
from tests.daemon_helpers import RUN, hive_dir, start_daemon, stop_daemon, write_script

RUN_TIMEOUT = 120


def steps(*work: dict) -> list[dict]:
    return [*work, {"commit": "{issue}: work"}, {"result": "success", "summary": "done"}]


APPEND_A_LINE = steps({"sleep": 1}, {"append": "lines.txt", "content": "line of {issue}\n"})
OWN_FILE = steps({"sleep": 1}, {"write": "hive-work/{issue}.txt", "content": "work of {issue}\n"})


def run_until_idle(repo: Path, script: Path, *, max_agents: int, expect: int = 0,
                   **config: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_ANOMALY_FAILURE_THRESHOLD": "100",
           **{f"HIVE_{key.upper()}": value for key, value in config.items()}}
    proc = subprocess.run([*RUN, "--until-idle", "--max-agents", str(max_agents)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == expect, f"run exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def spans(state_log: Callable[..., list[Any]], repo: Path) -> dict[str, tuple[int, int]]:
    """Each issue's (claim, landing) as places in the state's history (no landing: the end)."""
    log = state_log(cwd=repo)
    found: dict[str, list[int]] = {}
    for place, commit in enumerate(log):
        if commit.event == "claimed":
            found.setdefault(commit.issue, [place, len(log)])
        elif commit.event == "finalized" and commit.issue in found:
            found[commit.issue][1] = place
    return {issue: (start, end) for issue, (start, end) in found.items()}


def at_once(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_issues_that_append_to_one_file_run_one_after_another_and_every_line_lands(
        repo: Path, new_issue: Callable[..., str], git: Callable[..., Any], state_log: Callable[..., Any],
        tmp_path: Path) -> None:
    """Issue 32's case: 3 agents, 3 ready issues appending a line to one file, 3 independent."""
    lines = [new_issue(f"line {k}", labels=["line"], touches=["lines.txt"]) for k in range(3)]
    free = [new_issue(f"free {k}", labels=["free"], touches=[f"hive-work/free-{k}/"]) for k in range(3)]
    script = write_script(tmp_path, {"labels": {"line": APPEND_A_LINE, "free": OWN_FILE}})
    proc = run_until_idle(repo, script, max_agents=3)
    assert "refinery" not in proc.stdout + proc.stderr
    landed = git("show", "main:lines.txt", cwd=repo).stdout.splitlines()
    assert sorted(landed) == sorted(f"line of {issue}" for issue in lines)
    ran = spans(state_log, repo)
    assert all(ran[issue][1] < len(state_log(cwd=repo)) for issue in lines + free), "not all landed"
    for k, first in enumerate(lines):
        for second in lines[k + 1:]:
            assert not at_once(ran[first], ran[second]), (first, second, ran)
    # the independent issues used the agents meanwhile
    assert any(at_once(ran[line], ran[issue]) for line in lines for issue in free)


def test_wait_mode_waits_for_the_landing_even_with_an_agent_free(
        repo: Path, new_issue: Callable[..., str], state_log: Callable[..., Any], tmp_path: Path) -> None:
    """`merge_mode = manual`: the first issue's work waits for a person, so the second, whose
    globs meet the first's, never starts; the run ends idle, saying why."""
    first = new_issue("auth api", touches=["src/auth/**"], priority=1)
    second = new_issue("auth tokens", touches=["src/auth/tokens.py"])
    script = write_script(tmp_path, {"default": OWN_FILE})
    proc = run_until_idle(repo, script, max_agents=2, merge_mode="manual")
    assert f"{second} waits: touches src/auth/tokens.py like {first}" in proc.stdout
    assert set(spans(state_log, repo)) == {first}


def test_advise_mode_starts_a_declared_overlap_when_nothing_else_is_ready(
        repo: Path, new_issue: Callable[..., str], state_log: Callable[..., Any], tmp_path: Path) -> None:
    first = new_issue("auth api", touches=["src/auth/**"])
    second = new_issue("auth tokens", touches=["src/auth/tokens.py"])
    script = write_script(tmp_path, {"default": OWN_FILE})
    run_until_idle(repo, script, max_agents=2, merge_mode="manual", touches_mode="advise")
    ran = spans(state_log, repo)
    assert set(ran) == {first, second} and at_once(ran[first], ran[second])


def test_a_file_a_running_agent_changed_holds_an_issue_that_declares_it_even_in_advise_mode(
        repo: Path, project: Any, new_issue: Callable[..., str], hive: Callable[..., Any],
        state_log: Callable[..., Any], wait_for: Callable[..., Any], tmp_path: Path) -> None:
    """The running issue declared nothing; what its agent wrote so far is what hive sees."""
    runner = new_issue("refactor", labels=["slow"])
    script = write_script(tmp_path, {"labels": {"slow": steps(
        {"write": "src/shared.py", "content": "X = 1\n"},
        {"run": "while [ ! -e release ]; do sleep 0.05; done; rm release", "timeout": 100})}, "default": OWN_FILE})
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TOUCHES_MODE": "advise"}
    daemon = start_daemon(repo, env, "--until-idle", "--max-agents", "2", log=tmp_path / "daemon.log")
    try:
        worktree = hive_dir(repo) / "worktrees" / runner
        wait_for(lambda: (worktree / "src" / "shared.py").exists(), "the agent's first file", timeout=60)
        later = hive("create", "use shared", "--touches", "src/*.py").stdout.strip()
        wait_for(lambda: f"{later} waits: touches src/shared.py like {runner}" in (tmp_path / "daemon.log").read_text(),
                 "the daemon holding the issue back", timeout=60)
        assert f"waits: touches src/shared.py like {runner}" in ready_rows(hive)[later]
        (worktree / "release").write_text("")
        assert daemon.wait(RUN_TIMEOUT) == 0, (tmp_path / "daemon.log").read_text()
    finally:
        stop_daemon(daemon)
    ran = spans(state_log, repo)
    assert ran[runner][1] < ran[later][0], ran   # started once the runner's work had landed


def test_what_an_agent_leaves_for_hive_to_read_blocks_nothing_and_leads_nowhere(
        repo: Path, new_issue: Callable[..., str], hive: Callable[..., Any], git: Callable[..., Any],
        list_json: Callable[..., list[dict]], wait_for: Callable[..., Any], tmp_path: Path) -> None:
    """The hostile leftovers (`tests/hostile.py`): an agent commits its work, leaves FIFOs named
    `.gitignore`, a `.gitattributes` linked to a FIFO of the host's, a link out, FIFOs in its git
    folder (a FIFO put back during hive's reads: `test_rewrite.py`), a FIFO and a link to a file of
    the user's in its git-lfs store. Meanwhile an issue arrives that
    declares the file the agent changed: the touches rule reads the agent's worktree again and
    again while it waits. Nothing waits on a FIFO, nothing outside is written; both land, what
    the first left uncommitted kept (its links as links)."""
    from tests.hostile import leftovers

    host_fifo, outside = tmp_path / "host-fifo", tmp_path / "outside"
    os.mkfifo(host_fifo)
    outside.mkdir()
    (outside / "keep.txt").write_text("a file of the user's\n")
    first = new_issue("leaves things behind", labels=["hostile"])
    script = write_script(tmp_path, {"labels": {"hostile": [
        {"write": "src/shared.py", "content": "X = 1\n"}, {"commit": "{issue}: work"},
        *({"run": command, "must_succeed": True, "comment": label}
          for label, command in leftovers(host_fifo, outside)),
        {"run": "while [ ! -e release ]; do sleep 0.05; done; rm release", "timeout": 100},
        {"result": "success", "summary": "work"}]}, "default": OWN_FILE})
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MERGE_MODE": "auto", "HIVE_TEST_COMMAND": "true"}
    daemon = start_daemon(repo, env, "--until-idle", "--max-agents", "2", log=tmp_path / "daemon.log")
    try:
        worktree = hive_dir(repo) / "worktrees" / first
        wait_for(lambda: os.path.lexists(worktree / "out"), "the agent's leftovers", timeout=60)
        later = hive("create", "use shared", "--touches", "src/*.py").stdout.strip()
        wait_for(lambda: f"{later} waits: touches src/shared.py like {first}" in (tmp_path / "daemon.log").read_text(),
                 "the daemon reading the agent's changes", timeout=60)
        time.sleep(2)                      # more reads, a second apart, while the leftovers stay
        (worktree / "release").write_text("")
        assert daemon.wait(RUN_TIMEOUT) == 0, (tmp_path / "daemon.log").read_text()
    finally:
        stop_daemon(daemon)
    statuses = {i["id"]: i["status"] for i in list_json()}
    assert statuses == {first: "finalized", later: "finalized"}, statuses
    assert os.listdir(outside) == ["keep.txt"]
    assert stat.S_ISFIFO(os.stat(host_fifo).st_mode)
    user_file = (outside / "keep.txt").read_bytes()                       # not taken through a link
    assert [p for p in (repo / ".git" / "lfs").rglob("*") if p.is_file() and p.read_bytes() == user_file] == []
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{first}/", cwd=repo).stdout.split()
    assert any(git("ls-tree", c, ".gitattributes", cwd=repo).stdout.startswith("120000 ") for c in kept), kept


def test_list_ready_says_why_an_issue_waits(repo: Path, project: Any, new_issue: Callable[..., str],
                                           hive: Callable[..., Any]) -> None:
    busy = new_issue("busy", touches=["src/x.py"])
    assert lifecycle.claim(project, busy, "w-aaaaaa")
    done = new_issue("landing", touches=["docs/"], status="done")
    waits = new_issue("waits", touches=["src/**"])
    also = new_issue("waits too", touches=["docs/guide.md", "other.md"])
    free = new_issue("free", touches=["tests/**"])
    bare = new_issue("declares nothing")
    rows = ready_rows(hive)
    assert f"waits: touches src/x.py like {busy} · waits" in rows[waits]
    assert f"waits: touches docs/guide.md like {done} · waits too" in rows[also]
    assert "waits" not in rows[free] and "waits" not in rows[bare]
    # what the busy issue's work changed counts as well as what it declared
    base = str(worktrees.open_repo(project.paths).references["refs/heads/main"].target)
    worktree = worktrees.create(project.paths, busy, base)
    (worktree.path / "tests").mkdir()
    (worktree.path / "tests" / "test_x.py").write_text("changed\n")
    rows = ready_rows(hive)
    assert f"waits: touches tests/test_x.py like {busy} · free" in rows[free]
    # the order is the ready queue's, waits or not
    assert list(rows) == [i.id for i in issues_ready(project)]
    # and --json says the same, for scripts
    listed = {i["id"]: i for i in json.loads(hive("list", "--ready", "--json").stdout)}
    assert listed[free]["waits"] == f"touches tests/test_x.py like {busy}"
    assert listed[waits]["waits"] == f"touches src/x.py like {busy}"
    assert "waits" not in listed[bare]


def ready_rows(hive: Callable[..., Any]) -> dict[str, str]:
    """`git hive list --ready` on a wide terminal: each row by its id."""
    out = hive("list", "--ready", env={"COLUMNS": "200"}).stdout
    return {line.split()[0]: line for line in out.splitlines()[1:]}


def issues_ready(project: Any) -> list[Any]:
    project.sync(warn=False)
    return project.index.ready()


def test_changed_files_are_what_the_worktree_differs_in_committed_or_not(repo: Path, project: Any,
                                                                         new_issue: Callable[..., str],
                                                                         git: Callable[..., Any]) -> None:
    from hive.workspace.changes import changed_files

    issue = new_issue("work")
    base = str(worktrees.open_repo(project.paths).references["refs/heads/main"].target)
    path = worktrees.create(project.paths, issue, base).path
    assert changed_files(project.paths, issue, "refs/heads/main") == []
    (path / "committed.txt").write_text("1\n")
    git("add", "committed.txt", cwd=path)
    git("commit", "-q", "-m", "one", cwd=path)
    (path / "staged.txt").write_text("2\n")
    git("add", "staged.txt", cwd=path)
    (path / "new" / "deep").mkdir(parents=True)
    (path / "new" / "deep" / "untracked.txt").write_text("3\n")
    (path / ".hive-result.jsonl").write_text("{}\n")
    assert sorted(changed_files(project.paths, issue, "refs/heads/main")) == [
        "committed.txt", "new/deep/untracked.txt", "staged.txt"]
    # the worktree gone, the work branch tells what was committed
    worktrees.adopt_head(project.paths, issue)
    worktrees.remove(project.paths, issue, delete_branch=False)
    assert changed_files(project.paths, issue, "refs/heads/main") == ["committed.txt"]


def test_the_changes_are_read_without_opening_what_the_agent_made_of_its_worktree(
        repo: Path, project: Any, new_issue: Callable[..., str], git: Callable[..., Any], tmp_path: Path,
        monkeypatch: Any) -> None:
    """While its agent works, hive reads the changes of a worktree the agent may have filled with
    FIFOs named `.gitignore` (libgit2 reads each to list new files, and waited there for good, with
    the daemon's event loop) and links to a FIFO of the host's or to a folder of the user's: no
    file is opened, no link followed. A file edited, removed or made executable is seen by its
    `lstat`; past MAX_NEW new files, a new folder is one entry that covers all under it."""
    import multiprocessing

    from hive.state import globs
    from hive.workspace import changes, files_on_disk

    issue = new_issue("work")
    (repo / "src").mkdir()
    for name in ("a.py", "b.py", "c.sh"):
        (repo / "src" / name).write_text(f"{name}\n")
    git("add", "src", cwd=repo)
    git("commit", "-q", "-m", "src", cwd=repo)
    base = str(worktrees.open_repo(project.paths).references["refs/heads/main"].target)
    path = worktrees.create(project.paths, issue, base).path
    host_fifo, users = tmp_path / "host-fifo", tmp_path / "users"
    os.mkfifo(host_fifo)
    users.mkdir()
    (users / "secret.txt").write_text("the user's\n")
    os.mkfifo(path / ".gitignore")
    os.mkfifo(path / "src" / ".gitignore")
    (path / "docs").mkdir()
    os.symlink(host_fifo, path / "docs" / ".gitignore")
    os.symlink(users, path / "linked")
    (path / "src" / "a.py").write_text("a.py, edited\n")
    (path / "src" / "b.py").unlink()
    (path / "src" / "c.sh").chmod(0o755)
    (path / "vendor" / "pkg").mkdir(parents=True)
    for n in range(3):
        (path / "vendor" / "pkg" / f"{n}.js").write_text("x\n")
    (path / "tools" / "clone" / ".git").mkdir(parents=True)        # a repository the agent cloned
    (path / "tools" / "clone" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "tools" / "clone" / "its.py").write_text("I = 1\n")

    read: Any = multiprocessing.get_context("fork").Queue()

    def changes_read() -> None:
        read.put(changes.changed_files(project.paths, issue, "refs/heads/main"))

    child = multiprocessing.get_context("fork").Process(target=changes_read)
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "reading the changes waited on a FIFO"
    found = read.get(timeout=5)
    assert sorted(found) == ["docs/.gitignore", "linked", "src/a.py", "src/b.py", "src/c.sh", "tools/clone/",
                             "vendor/pkg/0.js", "vendor/pkg/1.js", "vendor/pkg/2.js"]
    assert (users / "secret.txt").read_text() == "the user's\n"

    monkeypatch.setattr(files_on_disk, "MAX_NEW", 2)
    found = changes.changed_files(project.paths, issue, "refs/heads/main")
    assert "vendor/pkg/" in found and not [name for name in found if name.startswith("vendor/pkg/") and name != "vendor/pkg/"]
    assert globs.matches("vendor/**/*.js", "vendor/pkg/") and not globs.matches("src/**", "vendor/pkg/")


def test_a_folder_swapped_for_a_link_while_the_worktree_is_read_is_not_listed_through_it(
        repo: Path, git: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent swaps its tracked `src/` for a link to a folder of the user's between the listing
    of the worktree's top and the listing of `src/`: nothing of that folder is listed (each
    folder is opened from the one above it, links not followed)."""
    from hive.workspace import files_on_disk

    (repo / "src").mkdir()
    (repo / "src" / "code.py").write_text("code\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "src", cwd=repo)
    users = tmp_path / "users"
    users.mkdir()
    (users / "secret.txt").write_text("the user's\n")
    entries = files_on_disk.index_entries(repo / ".git" / "index")
    assert entries is not None
    real_scandir = os.scandir
    listings: list[object] = []

    def swapping_scandir(target: Any) -> Any:
        listings.append(target)
        if len(listings) == 2:               # the top listed: `src/` is next
            os.rename(repo / "src", tmp_path / "src-moved")
            os.symlink(users, repo / "src")
        return real_scandir(target)

    monkeypatch.setattr(os, "scandir", swapping_scandir)
    found = files_on_disk.differing(repo, entries)
    monkeypatch.setattr(os, "scandir", real_scandir)

    assert len(listings) >= 2
    assert not [name for name in found if "secret" in name]


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_an_index_is_read_as_git_wrote_it_whatever_its_version(repo: Path, git: Callable[..., Any],
                                                             version: str) -> None:
    """The stat records are read from an index of version 2 or 3 by `struct`, of any other by
    dulwich: the same entries either way, an intent-to-add entry (an extended flag) included."""
    from hive.workspace import files_on_disk

    for n in range(30):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
    git("add", ".", cwd=repo)
    (repo / "later.txt").write_text("later\n")
    git("add", "-N", "later.txt", cwd=repo)
    git("update-index", "--index-version", version, cwd=repo)
    data = (repo / ".git" / "index").read_bytes()

    entries = files_on_disk.index_entries(repo / ".git" / "index")
    assert entries == files_on_disk._read_any(data)
    assert (files_on_disk._read_v2_or_v3(data) is None) == (version == "4")
    assert entries is not None and {"f0.txt", "f29.txt", "later.txt"} <= set(entries)
    assert entries["f3.txt"][:3] == (git("rev-parse", ":f3.txt", cwd=repo).stdout.strip(), 0o100644, 2)


def test_a_dependent_starts_from_its_blockers_unmerged_work_whatever_they_touch(
        repo: Path, new_issue: Callable[..., str], state_log: Callable[..., Any], tmp_path: Path,
        list_json: Callable[..., list[dict]]) -> None:
    """Its base holds the blockers' work (`worktrees.compute_base`): no conflict to wait for."""
    first = new_issue("first", touches=["lines.txt"])
    second = new_issue("second", touches=["lines.txt"], depends_on=[first])
    third = new_issue("third", touches=["lines.txt"], depends_on=[second])
    script = write_script(tmp_path, {"default": steps({"append": "lines.txt", "content": "line of {issue}\n"})})
    proc = run_until_idle(repo, script, max_agents=2, merge_mode="manual")
    assert "waits" not in proc.stdout
    assert set(spans(state_log, repo)) == {first, second, third}
    statuses = {i["id"]: i["status"] for i in list_json()}
    assert statuses == {first: "done", second: "done", third: "done"}
