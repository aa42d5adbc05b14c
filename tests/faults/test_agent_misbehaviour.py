"""Agent misbehaviour: scripted agents do what agents must not, through a real daemon run.

One run, one issue per misbehaviour (max_retries 1, max_agent_switches 1, stall_seconds 5). The
target branch is not checked out anywhere (so git's own "branch is checked out" refusal is out of
the way: only hive's guards stand between an agent and the branch):

    update-ref-main     `git update-ref refs/heads/main HEAD` in its worktree (attempt 1)
    push-main           `git push . HEAD:main` from its worktree (attempt 1)
    main-from-outside   `cd` to the main worktree, then `git update-ref refs/heads/main ...`
    rewrite-state       `git update-ref refs/heads/hive/state HEAD` and a forced push to it
    asks-then-pushes    asks permission for `git update-ref` (hive's policy says no; on_deny fail)
    always-pushes       tries to move main on every attempt: retried, switched, then escalated
    deletes-worktree    `rm -rf` of its own worktree mid-turn (attempt 1)
    writes-outside      asks to write `../../../../../outside.txt`: denied, never written
    fork-bomb-exit      starts 12 children that ignore SIGTERM, succeeds, then exits
    fork-bomb-crash     the same, then dies mid-turn without a result (attempt 1)
    hangs               never answers (attempt 1): a stall after 5 s
    floods              writes 2 × 20 MB lines of garbage on its stdout, then works normally

Invariants: the target branch moved only through the merge pipeline (its reflog names only merged
commits that finalize commits record, each a fast-forward; its tip is the last of them) and every
commit on `hive/state` is a hive state commit; every child process any agent started is gone —
checked by a dependent issue's agent right after its blocker's attempt ended, and at the end; each
issue's events follow the escalation policy exactly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .helpers import (alive, daemon_env, double_claims, leftovers, processes_under, tail,
                      target_history_problems, wait_until, work_steps, write_json)

FIRST = [1]

# run by the agent of a dependent issue: exits 1 if any pid listed in the files is still alive
# (within 4 s: a blocker is `done` a moment before its agent's session is closed)
CHECK_DEAD = r'''
import sys, pathlib, time
def alive(pid):
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")
pids = [p for name in sys.argv[1:] for p in pathlib.Path(name).read_text().split()]
deadline = time.monotonic() + 4
while [p for p in pids if alive(p)] and time.monotonic() < deadline:
    time.sleep(0.05)
left = [p for p in pids if alive(p)]
print("alive:", left)
sys.exit(1 if left or len(pids) != 24 else 0)
'''


def spawn_children(pid_file: Path, count: int = 12) -> dict:
    """A step that starts `count` grandchildren ignoring SIGTERM, in the agent's process group."""
    return {"run": f"for i in $(seq {count}); do (trap '' TERM; exec sleep 1000) >/dev/null 2>&1 & "
                   f'echo $! >> "{pid_file}"; done'}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_misbehaving_agents_cannot_move_the_target_and_leave_nothing_running(
        repo: Path, project, tmp_path: Path, git, new_issue, state_log, daemons):
    git("checkout", "-q", "--detach", cwd=repo)          # main checked out nowhere
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    pids = {name: tmp_path / f"{name}.pids" for name in ("fork-bomb-exit", "fork-bomb-crash")}
    daemons.pid_files.extend(pids.values())      # killed at the end whatever happens
    check = tmp_path / "check_dead.py"
    check.write_text(CHECK_DEAD)
    outside = tmp_path / "outside.txt"
    main_worktree = repo.resolve()

    def once(step: dict) -> dict:
        return {**step, "on_attempts": FIRST}

    def committed_then(*steps: dict) -> list[dict]:
        """Commit the work first (so HEAD is ahead of the target), then misbehave, then succeed."""
        work = work_steps()
        return [*work[:2], *steps, *work[2:]]

    behaviours = {
        "update-ref-main": committed_then(once({"run": "git update-ref refs/heads/main HEAD",
                                                "must_succeed": True})),
        "push-main": committed_then(once({"run": "git push . HEAD:main", "must_succeed": True})),
        "main-from-outside": committed_then(once({"run": f'cd "{main_worktree}" && '
                                                         "git update-ref refs/heads/main hive/state",
                                                  "must_succeed": True})),
        "rewrite-state": committed_then(once({"run": "git update-ref refs/heads/hive/state HEAD || "
                                                     "git push -f . HEAD:hive/state", "must_succeed": True})),
        "asks-then-pushes": work_steps([once({"run": "git update-ref refs/heads/main HEAD", "ask": True,
                                              "on_deny": "fail"})]),
        "always-pushes": committed_then({"run": "git push . HEAD:main", "must_succeed": True}),
        "deletes-worktree": work_steps([once({"run": 'rm -rf "$PWD"'})]),
        "writes-outside": work_steps([{"write": "../../../../../outside.txt", "content": "escaped\n",
                                       "ask": True}]),
        "fork-bomb-exit": [*work_steps(), spawn_children(pids["fork-bomb-exit"]), {"exit": 0}],
        "fork-bomb-crash": work_steps([once(spawn_children(pids["fork-bomb-crash"])), once({"crash": 9})]),
        "hangs": work_steps([once({"hang": True})]),
        "floods": work_steps([{"flood": 20 << 20, "lines": 2}]),
    }
    ids = {name: new_issue(f"misbehaves: {name}", labels=[name]) for name in behaviours}
    # right after the fork bombs' attempts: are their children gone?
    checker = new_issue("checks the fork bombs left nothing", labels=["checker"],
                        depends_on=[ids["fork-bomb-exit"], ids["fork-bomb-crash"]])
    behaviours["checker"] = work_steps([{"run": f'"{sys.executable}" "{check}" "{pids["fork-bomb-exit"]}" '
                                                f'"{pids["fork-bomb-crash"]}"', "must_succeed": True}])
    script = write_json(tmp_path / "agents.json", {"labels": behaviours})
    # unjailed: the fork bombs record their children's host pids in tmp_path, and the agent that deletes
    # its worktree must be able to (tests/test_jail.py is the jail's own corpus)
    env = daemon_env(script, max_retries=1, max_agent_switches=1, stall_seconds=5, test_command="true",
                     sandbox="off")

    code = daemons.run_until_idle(repo, env, max_agents=4, timeout=200, log=tmp_path / "daemon.log")
    assert code == 3, tail(tmp_path / "daemon.log")   # the always-misbehaving issues escalated

    log = state_log(repo)

    def events(issue_id: str) -> list[str]:
        return [c.event for c in log if c.issue == issue_id and c.event not in ("created", "noted")]

    retried_then_merged = ["claimed", "retry", "done", "finalized"]
    expected = {name: retried_then_merged for name in (
        "update-ref-main", "push-main", "main-from-outside", "rewrite-state", "asks-then-pushes",
        "deletes-worktree", "fork-bomb-crash", "hangs")}
    expected.update({"writes-outside": ["claimed", "done", "finalized"],
                     "fork-bomb-exit": ["claimed", "done", "finalized"],
                     "floods": ["claimed", "done", "finalized"],
                     "always-pushes": ["claimed", "retry", "switched", "retry", "escalated"]})
    assert {name: events(ids[name]) for name in expected} == expected
    assert events(checker) == ["claimed", "done", "finalized"], tail(tmp_path / "daemon.log")

    reasons = {name: next(c.trailers.get("Hive-Reason", "") for c in log
                          if c.issue == ids[name] and c.event == "retry") for name in expected
               if "retry" in expected[name]}
    assert "refused" in reasons["update-ref-main"] or "exit 1" in reasons["update-ref-main"]
    assert "stalled" in reasons["hangs"]
    assert "permission denied" in reasons["asks-then-pushes"]

    # the target moved only through the merge pipeline; hive/state holds only hive's commits
    assert target_history_problems(git, repo, state_log, before) == []
    assert [c.subject for c in log if not c.trailers.get("Hive-Event")] == []
    merged = git("log", "--format=%s", f"{before}..main", cwd=repo).stdout.splitlines()
    assert sorted(merged) == sorted(f"{ids[n] if n != 'checker' else checker}: work"
                                    for n in [*expected, "checker"] if n != "always-pushes")
    # nothing written outside, nothing left running, nothing left over but the escalated issue's
    assert not outside.exists()
    children = [int(p) for f in pids.values() for p in f.read_text().split()]
    assert len(children) == 24 and not [p for p in children if alive(p)]
    assert wait_until(lambda: not processes_under(tmp_path), 10), processes_under(tmp_path)
    assert leftovers(git, repo) == {"worktree dirs": [ids["always-pushes"]],
                                    "work branches": [f"hive/work/{ids['always-pushes']}"],
                                    "registered worktrees": [str(repo / ".git/hive/worktrees" / ids["always-pushes"])]}, \
        tail(tmp_path / "daemon.log", 150)
    assert double_claims(repo) == []


def test_what_an_agent_says_reaches_the_runs_output_without_control_characters(repo, new_issue, tmp_path):
    """An agent's summary is quoted in the run's output (`<id> done (...)`): one written to retitle
    the terminal or set its clipboard (OSC 52), or to forge a log line of its own, shows as text,
    never as a control sequence — on the terminal and in daemon.log (which people `tail -f`)."""
    import os
    import subprocess

    issue = new_issue("Says something hostile")
    hostile = "\x1b]52;c;ZXZpbA==\x07\x1b[2Jowned\n12:00:00 hv-forged0 merged into main"
    script = write_json(tmp_path / "script.json", {"default": [
        {"write": "{issue}.txt", "content": "x\n"}, {"commit": "{issue}"},
        {"result": "success", "summary": hostile}]})
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle"],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **daemon_env(script, sandbox="off")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    quoted = f"{issue} done (\\x1b]52;c;ZXZpbA==\\x07\\x1b[2Jowned\\n12:00:00 hv-forged0 merged into main)"
    log = (repo / ".git" / "hive" / "daemon.log").read_text(encoding="utf-8")
    for said in (proc.stdout, log):
        assert quoted in said, said
        assert "\x1b" not in said and "\x07" not in said
        assert not any(line.startswith("12:00:00 hv-forged0") for line in said.splitlines())


def test_links_an_agent_landed_leave_settling_a_new_worktree_at_the_worktree(repo: Path, git) -> None:
    """The target's files are agents' work: a link landed there pointing outside the repository
    (at a file, at a folder) is checked out as a link in a worktree, settled
    (`worktrees.settle_index` dates files back), and only the link is touched, never what it
    names."""
    import os
    import time

    from hive import git as hive_git
    from hive.workspace import worktrees

    outside = repo.parent / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep my time\n")
    old = (time.time_ns() // 1_000_000_000 - 3600) * 1_000_000_000
    for target in (outside / "victim.txt", outside):
        os.utime(target, ns=(old, old))
    for k in range(30):
        (repo / f"module_{k}.py").write_text(f"VALUE = {k}\n")
    os.symlink(outside / "victim.txt", repo / "to-file")
    os.symlink(outside, repo / "to-folder")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "an agent's links", cwd=repo)
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, "hv-l1nk5x", git("rev-parse", "main", cwd=repo).stdout.strip()).path

    assert os.readlink(tree / "to-file") == str(outside / "victim.txt")
    for target in (outside / "victim.txt", outside):
        assert os.stat(target).st_mtime_ns == old
    assert git("status", "--porcelain", cwd=tree).stdout == ""
