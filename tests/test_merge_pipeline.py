"""The merge pipeline (done → finalized) end to end: real `git hive run` daemons, scripted workers
and a scripted refinery, real repositories.

What is proven here (issue "Merge pipeline and refinery", *Done means*):
conflicts go to the refinery, which resolves them; a failing test is rejected, the issue reopened
with the rejection as a note and the next attempt merged; a refinery that keeps rejecting ends in
`escalated`; `needs_human` escalates and keeps the worktree; a crashed refinery is replaced once and
a `merged` claim is verified by hive; the refinery session is renewed after
20 messages (and 100k tokens); a person's branch is routed by the hook to a running daemon; the
guard hook refuses target/state updates from worker worktrees; manual mode with review/finalize;
a dirty checkout of the target is never overwritten; a daemon SIGKILLed mid-merge finishes the
entry exactly once on restart; merges are bounded by real work, not sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

RUN_TIMEOUT = 90          # a deadline for one `git hive run --until-idle`, never a wait

# The scripted refinery's conflict resolver: keep both sides of every conflict block, in order.
RESOLVER = r'''
import re, sys, pathlib
for name in sys.argv[1:]:
    p = pathlib.Path(name)
    text = p.read_text()
    def both(m):
        lines = m.group(1).splitlines() + m.group(2).splitlines()
        return "\n".join(dict.fromkeys(lines))
    p.write_text(re.sub(r"<<<<<<<[^\n]*\n(.*?)\n?=======\n(.*?)\n?>>>>>>>[^\n]*", both, text, flags=re.S))
'''


# -- local helpers ---------------------------------------------------------------------------------


@pytest.fixture
def paths(repo: Path) -> Any:
    from hive import git as hive_git

    return hive_git.discover(repo)


@pytest.fixture
def script(tmp_path: Path) -> Callable[[dict], str]:
    """`script(data)`: write a scripted-backend script file; its absolute path."""

    def write(data: dict) -> str:
        path = tmp_path / "agents.json"
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture
def run_hive(git_env: Path) -> Callable[..., str]:
    """`run_hive(script_path, max_agents=2, **env)`: `git hive run --backend scripted --until-idle`.

    Fails the test if the daemon does not exit `expect` (0; a loop shows up as the RUN_TIMEOUT expiring).
    Returns the daemon's log (stdout, then stderr).
    """

    def run(script_path: str, max_agents: int = 2, expect: int = 0, **env: str) -> str:
        environ = {"HIVE_SCRIPTED_SCRIPT": script_path, **env}
        try:
            proc = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle",
                                   "--max-agents", str(max_agents)], capture_output=True, text=True,
                                  env={**os.environ, **environ}, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            raise AssertionError(f"`git hive run --until-idle` still running after {RUN_TIMEOUT}s:\n"
                                 + "\n".join(out.splitlines()[-40:])) from None
        assert proc.returncode == expect, f"run exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout + proc.stderr

    return run


@pytest.fixture
def status_of(project: Any) -> Callable[[str], str]:
    def get(issue_id: str) -> str:
        project.sync(warn=False)
        issue = project.index.get(issue_id)
        return issue.status if issue is not None else "?"

    return get


def events_of(state_log: Callable[..., list], issue_id: str, event: str) -> list:
    return [c for c in state_log() if c.issue == issue_id and c.event == event]


def assert_finalized_once(git: Callable[..., Any], state_log: Callable[..., list], issue_id: str,
                          target: str = "main") -> str:
    """One `finalized` commit whose Hive-Merged is a commit on the target; returns that commit."""
    finals = events_of(state_log, issue_id, "finalized")
    assert len(finals) == 1, [c.subject for c in state_log() if c.issue == issue_id]
    merged = finals[0].trailers.get("Hive-Merged", "")
    assert merged, finals[0].trailers
    assert git("merge-base", "--is-ancestor", merged, target, check=False).returncode == 0
    assert finals[0].trailers.get("Hive-Target") == target
    return merged


def assert_cleaned_up(git: Callable[..., Any], paths: Any, issue_id: str) -> None:
    assert not (paths.worktrees_dir / issue_id).exists()
    assert git("rev-parse", "--verify", "-q", f"refs/heads/hive/work/{issue_id}", check=False).returncode != 0


def commits_touching(git: Callable[..., Any], path: str, ref: str = "main") -> list[str]:
    return git("log", "--format=%H", ref, "--", path).stdout.split()


def refinery_prompts(paths: Any) -> list[dict]:
    file = paths.hive_dir / "scripted" / "role-refinery.prompts.jsonl"
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def refinery_sessions(paths: Any) -> list[str]:
    file = paths.hive_dir / "scripted" / "role-refinery.sessions.jsonl"
    if not file.exists():
        return []
    return [json.loads(line)["session"] for line in file.read_text().splitlines() if line.strip()]


def barrier(directory: Path, parties: int) -> dict:
    """A worker step that waits (polling, with a deadline) until `parties` workers reached it:
    all of them then work from worktrees made from the same target commit."""
    directory.mkdir(exist_ok=True)
    return {"run": f'touch "{directory}/{{issue}}" && i=0; '
                   f'while [ "$(ls "{directory}" | wc -l)" -lt {parties} ] && [ $i -lt 1500 ]; '
                   f'do sleep 0.01; i=$((i+1)); done',
            "must_succeed": True}


def rebase_refinery(resolver: Path, verdict: str = "merged") -> list[dict]:
    return [
        {"cd": "{worktree}"},
        {"run": "git -c core.editor=true rebase {target}"},
        {"run": f'"{sys.executable}" "{resolver}" README.md && git add README.md && '
                "git -c core.editor=true rebase --continue", "must_succeed": True},
        {"tokens": {"input": 3000, "output": 300}},
        {"result": {"status": verdict, "summary": "kept both sides of the README conflict"}},
    ]


# -- 1. conflict → refinery ------------------------------------------------------------------------


def test_same_lines_conflict_is_resolved_by_the_refinery(repo, paths, new_issue, script, run_hive, git,
                                                         state_log, status_of, tmp_path):
    resolver = tmp_path / "resolve.py"
    resolver.write_text(RESOLVER)
    gate = barrier(tmp_path / "barrier", 2)

    def worker(who: str) -> list[dict]:
        return [gate,
                {"edit": "README.md", "find": "hello", "replace": f"hello from {who}"},
                {"commit": f"README: greet from {who}"},
                {"result": "success", "summary": f"{who} greets"}]

    path = script({"labels": {"a": worker("A"), "b": worker("B")},
                   "roles": {"refinery": rebase_refinery(resolver)}})
    a = new_issue("Greet from A", labels=["a"])
    b = new_issue("Greet from B", labels=["b"])

    # unjailed: the agents meet at a barrier and run a resolver outside their worktrees
    log = run_hive(path, max_agents=2, HIVE_SANDBOX="off")

    assert status_of(a) == "finalized" and status_of(b) == "finalized", log
    readme = git("show", "main:README.md").stdout
    assert "hello from A" in readme and "hello from B" in readme, readme
    assert "<<<<<<<" not in readme and ">>>>>>>" not in readme
    merged = {i: assert_finalized_once(git, state_log, i) for i in (a, b)}
    assert git("rev-parse", "main").stdout.strip() in merged.values()
    # exactly one of the two merges needed the refinery, for a conflict
    prompts = refinery_prompts(paths)
    assert len(prompts) == 1, log
    second = a if f"issue: {a}" in prompts[0]["text"] else b
    assert f"issue: {second}" in prompts[0]["text"]
    assert "conflict" in prompts[0]["text"] and "README.md" in prompts[0]["text"]
    # the main worktree (target checked out, clean) follows the target
    assert (repo / "README.md").read_text() == readme
    assert git("status", "--porcelain", "--untracked-files=no").stdout == ""
    for issue_id in (a, b):
        assert_cleaned_up(git, paths, issue_id)


# -- 2. failing tests → rejected → next attempt merged; a refinery that keeps rejecting ------------


FAILING_TEST = "test ! -e code.txt || ! grep -q BAD code.txt"


def test_rejected_by_the_refinery_reopens_with_a_note_and_the_next_attempt_merges(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of, hive):
    worker = [
        {"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
        {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2, 3, 4, 5, 6]},
        {"commit": "code, attempt {attempt}"},
        {"result": "success", "summary": "wrote code.txt"},
    ]
    refinery = [{"cd": "{worktree}"},
                {"result": {"status": "rejected", "summary": "code.txt must never say BAD"}}]
    path = script({"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("Write the code")

    log = run_hive(path, HIVE_TEST_COMMAND=FAILING_TEST)

    assert status_of(issue) == "finalized", log
    events = [c.event for c in state_log() if c.issue == issue]
    assert events.count("done") == 2 and events.count("rejected") == 1, events
    assert events.index("rejected") < events.index("finalized")
    rejected = events_of(state_log, issue, "rejected")[0]
    assert "never say BAD" in rejected.trailers.get("Hive-Reason", "")
    # the rejection is a note of the issue, on hive/state
    notes = [json.loads(line) for line in
             git("show", f"hive/state:notes/{issue}.jsonl").stdout.splitlines() if line.strip()]
    assert any("never say BAD" in n["content"] and n["agent"] == "refinery" for n in notes), notes
    assert "never say BAD" in hive("notes", "--issue", issue).stdout
    # the second worker was told why
    prompts = [json.loads(line) for line in
               (paths.hive_dir / "scripted" / f"{issue}.prompts.jsonl").read_text().splitlines()]
    work_prompts = [p["text"] for p in prompts if not p["fyi"]]
    assert len(work_prompts) == 2 and "never say BAD" in work_prompts[1]
    assert git("show", "main:code.txt").stdout == "GOOD\n"
    # the retry went on from the rejected commit in the same worktree: the fix is a commit on top
    assert len(commits_touching(git, "code.txt")) == 2
    assert_finalized_once(git, state_log, issue)
    assert_cleaned_up(git, paths, issue)


def test_a_refinery_that_keeps_rejecting_ends_escalated(repo, paths, new_issue, script, run_hive, git,
                                                        state_log, status_of):
    worker = [{"write": "code.txt", "content": "BAD {attempt}\n"},
              {"commit": "code, attempt {attempt}"},
              {"result": "success", "summary": "wrote code.txt"}]
    refinery = [{"cd": "{worktree}"},
                {"result": {"status": "rejected", "summary": "still BAD"}}]
    path = script({"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("Never good enough")

    log = run_hive(path, expect=3, HIVE_TEST_COMMAND=FAILING_TEST)

    assert status_of(issue) == "escalated", log
    events = [c.event for c in state_log() if c.issue == issue]
    # bounded by the retry budget (anomaly threshold 3 / retries 2 + switches 2): never a loop
    assert 1 <= events.count("rejected") <= 5, events
    assert events.count("done") == events.count("rejected"), events
    assert "finalized" not in events
    assert not commits_touching(git, "code.txt")


# -- 3. needs_human ---------------------------------------------------------------------------------


def test_needs_human_escalates_and_keeps_the_worktree(repo, paths, new_issue, script, run_hive, git,
                                                      state_log, status_of):
    worker = [{"write": "feature.txt", "content": "half done\n"},
              {"commit": "feature"},
              {"result": "success", "summary": "feature"}]
    refinery = [{"cd": "{worktree}"},
                {"result": {"status": "needs_human", "summary": "the test needs a database I cannot start"}}]
    path = script({"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("A feature")
    main_before = git("rev-parse", "main").stdout.strip()

    log = run_hive(path, expect=3, HIVE_TEST_COMMAND="echo 'no database' >&2; exit 3")

    assert status_of(issue) == "escalated", log
    escalated = events_of(state_log, issue, "escalated")
    assert len(escalated) == 1
    assert "database" in escalated[0].trailers.get("Hive-Reason", "")
    assert not events_of(state_log, issue, "finalized")
    assert git("rev-parse", "main").stdout.strip() == main_before
    worktree = paths.worktrees_dir / issue
    assert (worktree / "feature.txt").read_text() == "half done\n"
    assert git("rev-parse", "--verify", "-q", f"refs/heads/hive/work/{issue}", check=False).returncode == 0
    # the refinery got the test output
    prompts = refinery_prompts(paths)
    assert len(prompts) == 1 and "no database" in prompts[0]["text"]
    # a new run leaves the escalated issue and its worktree alone
    run_hive(path, HIVE_TEST_COMMAND="exit 3")
    assert status_of(issue) == "escalated"
    assert (worktree / "feature.txt").exists()


def test_a_refinery_that_crashes_is_replaced_once_then_the_issue_escalates(repo, paths, new_issue, script,
                                                                           run_hive, state_log, status_of):
    path = script({"roles": {"refinery": [{"cd": "{worktree}"}, {"crash": 3}]}})
    issue = new_issue("Breaks the refinery")

    log = run_hive(path, expect=3, HIVE_TEST_COMMAND="exit 1")

    assert status_of(issue) == "escalated", log
    assert "crashed twice" in events_of(state_log, issue, "escalated")[0].trailers["Hive-Reason"]
    started = refinery_sessions(paths)
    assert len(started) == 2 and started[0] != started[1]     # the crashed session was replaced


def test_a_refinery_that_claims_merged_is_verified_by_hive(repo, paths, new_issue, script, run_hive, git,
                                                           state_log, status_of):
    """The built-in scripted refinery answers `merged` without fixing anything: hive's own check
    (replay + tests) catches it, the refinery gets a second chance, then a person does."""
    path = script({})
    issue = new_issue("Tests never pass")
    main_before = git("rev-parse", "main").stdout.strip()

    log = run_hive(path, expect=3, HIVE_TEST_COMMAND="echo still failing; exit 1")

    assert status_of(issue) == "escalated", log
    assert git("rev-parse", "main").stdout.strip() == main_before
    prompts = refinery_prompts(paths)
    assert len(prompts) == 2
    assert "hive's check failed" in prompts[1]["text"] and "still failing" in prompts[1]["text"]
    assert "could not land" in events_of(state_log, issue, "escalated")[0].trailers["Hive-Reason"]


# -- 4. refinery session renewal ------------------------------------------------------------------


def _a_refinery(project: Any, paths: Any, new_issue: Any, script: Any, tmp_path: Path,
                steps: list[dict]) -> tuple[Any, Any, Any, Any, Path, list[str]]:
    """A daemon's refinery on the scripted backend following `steps`, an issue for its tasks and
    a folder for their worktree: (backend, daemon, refinery, issue, worktree, the daemon's log)."""
    from hive.backends.scripted import ScriptedBackend
    from hive.merge.refinery import Refinery
    from hive.orchestrator.daemon import Daemon

    backend = ScriptedBackend(script_path=script({"roles": {"refinery": steps}}), hive_dir=str(paths.hive_dir))
    logs: list[str] = []
    daemon = Daemon(project, backend, project.config, log=logs.append)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return backend, daemon, Refinery(daemon, backend), project.index.get(new_issue("Conflicting work")), worktree, logs


def test_refinery_session_is_renewed_after_20_messages_and_100k_tokens(project, paths, new_issue, script,
                                                                       tmp_path):
    from hive.merge import refinery as refinery_module

    assert refinery_module.RENEW_MESSAGES == 20 and refinery_module.RENEW_TOKENS == 100_000
    steps = [{"cd": "{worktree}"},
             {"tokens": {"input": 150_000, "output": 0}, "on_attempts": [22]},
             {"result": {"status": "merged", "summary": "task {attempt}"}}]
    backend, daemon, refinery, issue, worktree, logs = _a_refinery(project, paths, new_issue, script, tmp_path, steps)

    async def drive() -> tuple[list[str], list[str]]:
        sessions, summaries = [], []
        try:
            for n in range(23):
                verdict = await refinery.resolve(issue, worktree, "main", f"conflict number {n}")
                assert verdict.status == "merged", verdict
                sessions.append(refinery.session_id)
                summaries.append(verdict.summary)
            try:   # the old session was ended
                assert (await backend.get_session_status(sessions[0])).state == "exited"
            except KeyError:
                pass
        finally:
            await refinery.close()
            await backend.stop()
        return sessions, summaries

    sessions, summaries = asyncio.run(drive())
    assert summaries[-1] == "task 23"
    # messages 1..20 in the first session; the 21st opens a new one
    assert len(set(sessions[:20])) == 1
    assert sessions[20] != sessions[19]
    # the 22nd task pushed the second session past 100k tokens: the 23rd gets a third session
    assert sessions[21] == sessions[20]
    assert sessions[22] not in (sessions[0], sessions[21])
    assert daemon.runtime.get("refinery_renewals") == "2"
    assert daemon.runtime.get("refinery_messages") == "1"
    assert any("renewing" in line for line in logs)


def test_the_refinerys_process_ends_after_each_task_and_a_session_it_cannot_resume_is_replaced(
        project, paths, new_issue, script, tmp_path):
    """Between two tasks in one worktree no refinery process runs (hive rewrites that worktree
    then); the second resumes the session. A session the backend cannot resume is replaced by a new
    one, and the task is done all the same."""
    steps = [{"cd": "{worktree}"}, {"result": {"status": "merged", "summary": "task {attempt}"}}]
    backend, daemon, refinery, issue, worktree, logs = _a_refinery(project, paths, new_issue, script, tmp_path, steps)
    real_create = backend.create_session
    refuse_resume = [False]

    async def create_session(spec):   # type: ignore[no-untyped-def]
        if spec.resume and refuse_resume[0]:
            raise RuntimeError("no such session")
        return await real_create(spec)

    backend.create_session = create_session   # type: ignore[method-assign]

    async def ended(session_id: str) -> bool:
        try:
            return (await backend.get_session_status(session_id)).state == "exited"
        except KeyError:
            return True

    async def drive() -> tuple[list[str], list[bool]]:
        sessions, running = [], []
        try:
            for n in range(3):
                verdict = await refinery.resolve(issue, worktree, "main", f"conflict number {n}")
                assert verdict.status == "merged", verdict
                sessions.append(refinery.session_id)
                running.append(refinery.in_worktree(worktree) or not await ended(refinery.session_id))
                refuse_resume[0] = n == 1
        finally:
            await refinery.close()
            await backend.stop()
        return sessions, running

    sessions, running = asyncio.run(drive())
    assert not any(running)
    assert sessions[0] == sessions[1] != sessions[2]
    assert any("could not be resumed (no such session): a new one starts" in line for line in logs), logs
    assert daemon.runtime.agents("refinery") == []


def test_refinery_sessions_start_in_the_worktree_of_their_task(repo, paths, new_issue, script, monkeypatch,
                                                               status_of):
    """The daemon's own refinery: each task's session is started in that task's worktree (so a CLI
    reports it as the cwd), and a task in another worktree gets a session of its own (a session's
    jail lets it write only its own worktree)."""
    from hive.orchestrator.assemble import build_daemon
    from hive.project import Project
    from hive.runtime import Runtime

    refinery = [{"result": {"status": "needs_human", "summary": "look at it"}}]
    monkeypatch.setenv("HIVE_SCRIPTED_SCRIPT", script({"roles": {"refinery": refinery}}))
    monkeypatch.setenv("HIVE_TEST_COMMAND", "false")
    ids = [new_issue(f"Task {n}") for n in range(3)]
    fresh = Project.open(repo)
    fresh.sync(warn=False)
    daemon = build_daemon(fresh, backend="scripted", max_agents=3, until_idle=True, log=lambda _: None)
    asyncio.run(asyncio.wait_for(daemon.run(), RUN_TIMEOUT))
    fresh.close()

    assert [status_of(i) for i in ids] == ["escalated"] * 3
    assert len(set(refinery_sessions(paths))) == 3
    rows = [json.loads(line) for line in (paths.hive_dir / "scripted" / "role-refinery.sessions.jsonl")
            .read_text().splitlines() if line.strip()]
    assert sorted(Path(row["cwd"]).name for row in rows) == sorted(ids)
    assert all(Path(row["cwd"]).parent == paths.worktrees_dir.resolve() for row in rows)
    assert not Runtime(paths).get("refinery_renewals")   # another worktree is no renewal


# -- 5. a person's branch, routed to a running daemon -------------------------------------------------


@pytest.fixture
def daemon_running(hive, repo, paths, script):
    """Start a background daemon (`run --detach`); stopped at teardown."""
    started: list[bool] = []

    def start(script_path: str, **env: str) -> None:
        hive("run", "--backend", "scripted", "--detach",
             env={"HIVE_SCRIPTED_SCRIPT": script_path, **env})
        started.append(True)

    yield start
    if started:
        hive("stop", "--timeout", "30", check=False)
        log = paths.hive_dir / "daemon.log"
        if log.exists():
            print(log.read_text())   # shown when the test failed


def test_a_branch_committed_by_a_person_is_routed_to_the_merge_queue(repo, paths, new_issue, script,
                                                                      daemon_running, hive, git, state_log,
                                                                      status_of, wait_for, tmp_path):
    issue = new_issue("A person does this one")
    hive("update", issue, "--status", "escalated")   # a person takes it over: no agent will claim it
    daemon_running(script({}))
    # the person works on the issue's branch in a worktree of their own
    mine = tmp_path / "my-checkout"
    git("worktree", "add", "-q", "-b", f"hive/work/{issue}", str(mine), "main")
    (mine / "person.txt").write_text("written by hand\n")
    git("add", "person.txt", cwd=mine)
    git("commit", "-q", "-m", "by hand", cwd=mine)
    head = git("rev-parse", "HEAD", cwd=mine).stdout.strip()
    # the hook reported the branch update to the daemon's ref-events file
    events = (paths.hive_dir / "ref-events").read_text()
    assert f"{head} refs/heads/hive/work/{issue}" in events
    # meanwhile main moves on: the person's commit has to be replayed
    (repo / "other.txt").write_text("other\n")
    git("add", "other.txt")
    git("commit", "-q", "-m", "meanwhile on main")

    hive("update", issue, "--status", "done")

    wait_for(lambda: status_of(issue) == "finalized", f"{issue} finalized by the running daemon", timeout=30)
    merged = assert_finalized_once(git, state_log, issue)
    assert git("show", "main:person.txt").stdout == "written by hand\n"
    assert git("show", "main:other.txt").stdout == "other\n"
    assert git("rev-parse", "main").stdout.strip() == merged
    assert git("log", "-1", "--format=%s", merged).stdout.strip() == "by hand"
    # the person's own checkout is left alone: same commit, clean, on their branch
    assert git("rev-parse", "HEAD", cwd=mine).stdout.strip() == head
    assert git("status", "--porcelain", cwd=mine).stdout == ""
    assert (mine / "person.txt").read_text() == "written by hand\n"
    assert not (paths.worktrees_dir / issue).exists()
    assert (repo / "person.txt").read_text() == "written by hand\n"   # the main worktree followed


# -- 6. the guard hook ------------------------------------------------------------------------------


def test_guard_hook_refuses_target_and_state_updates_from_a_worker_worktree(repo, paths, git, tmp_path):
    # main is not checked out anywhere, so that git itself would allow every update below
    git("checkout", "-q", "--detach", cwd=repo)
    worker = paths.worktrees_dir / "hv-guard1"
    git("worktree", "add", "-q", "-b", "hive/work/hv-guard1", str(worker), "main")
    (worker / "work.txt").write_text("work\n")
    git("add", "work.txt", cwd=worker)
    git("commit", "-q", "-m", "a worker commits on its own branch", cwd=worker)   # allowed
    work_head = git("rev-parse", "HEAD", cwd=worker).stdout.strip()
    main_before = git("rev-parse", "main").stdout.strip()
    state_before = git("rev-parse", "hive/state").stdout.strip()
    state_tree = git("rev-parse", "hive/state^{tree}").stdout.strip()

    def refused(*args: str, cwd: Path) -> None:
        proc = git(*args, cwd=cwd, check=False)
        assert proc.returncode != 0, f"git {' '.join(args)} was allowed"
        assert "git-hive: refused" in proc.stderr, proc.stderr

    refused("update-ref", "refs/heads/main", "HEAD", cwd=worker)
    refused("branch", "-f", "main", "HEAD", cwd=worker)
    state_commit = git("commit-tree", state_tree, "-p", state_before, "-m", "sneaky state edit",
                       cwd=worker).stdout.strip()
    refused("update-ref", "refs/heads/hive/state", state_commit, cwd=worker)
    # a commit with the target checked out in the worker worktree
    git("checkout", "-q", "main", cwd=worker)
    refused("commit", "-q", "--allow-empty", "-m", "straight to main", cwd=worker)
    git("checkout", "-q", f"hive/work/hv-guard1", cwd=worker)
    assert git("rev-parse", "main").stdout.strip() == main_before
    assert git("rev-parse", "hive/state").stdout.strip() == state_before

    # the same from the main worktree are allowed
    git("update-ref", "refs/heads/main", work_head, cwd=repo)
    assert git("rev-parse", "main").stdout.strip() == work_head
    git("branch", "-f", "main", main_before, cwd=repo)
    assert git("rev-parse", "main").stdout.strip() == main_before
    git("update-ref", "refs/heads/hive/state", state_commit, state_before, cwd=repo)
    assert git("rev-parse", "hive/state").stdout.strip() == state_commit
    git("checkout", "-q", "main", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", "a person commits on main", cwd=repo)
    assert git("rev-parse", "main~1").stdout.strip() == main_before


# -- 7. manual mode --------------------------------------------------------------------------------


def test_manual_mode_leaves_done_issues_for_review_and_finalize(repo, paths, new_issue, script, run_hive,
                                                                 hive, git, state_log, status_of):
    worker = [{"write": "{issue}.txt", "content": "one\ntwo\nthree\n"},
              {"commit": "{issue}: three lines"},
              {"result": "success", "summary": "three lines"}]
    path = script({"roles": {"worker": worker}})
    a, b = new_issue("First"), new_issue("Second")
    main_before = git("rev-parse", "main").stdout.strip()

    log = run_hive(path, HIVE_MERGE_MODE="manual")

    assert status_of(a) == "done" and status_of(b) == "done", log
    assert git("rev-parse", "main").stdout.strip() == main_before
    rows = {r["id"]: r for r in json.loads(hive("review", "--json").stdout)}
    assert set(rows) == {a, b}
    for issue_id in (a, b):
        row = rows[issue_id]
        assert row["branch"] == f"hive/work/{issue_id}"
        assert (row["commits"], row["files"], row["insertions"], row["deletions"]) == (1, 1, 3, 0)
        assert row["inspect"] == f"git diff main...hive/work/{issue_id}"
        assert row["merge"] == f"git hive finalize {issue_id}"
        # the inspect command works as printed
        shown = subprocess.run(row["inspect"].split(), capture_output=True, text=True, check=True).stdout
        assert f"+++ b/{issue_id}.txt" in shown
    text = hive("review").stdout
    for issue_id in (a, b):
        assert issue_id in text and f"git diff main...hive/work/{issue_id}" in text
        assert f"git hive finalize {issue_id}" in text
    assert "1 files +3 -0" in text or "1 file +3 -0" in text

    out = hive("finalize", a).stdout
    assert a in out and "finalized" in out
    assert status_of(a) == "finalized" and status_of(b) == "done"
    assert_finalized_once(git, state_log, a)
    assert git("show", f"main:{a}.txt").stdout == "one\ntwo\nthree\n"
    assert_cleaned_up(git, paths, a)
    assert [r["id"] for r in json.loads(hive("review", "--json").stdout)] == [b]

    hive("finalize", b)
    assert status_of(b) == "finalized"
    assert_finalized_once(git, state_log, b)
    assert git("show", f"main:{b}.txt").stdout == "one\ntwo\nthree\n"
    assert hive("review", "--json").stdout.strip() in ("[]", "")
    # finalizing again is an error, not a second merge
    again = hive("finalize", b, check=False)
    assert again.returncode == 1
    assert len(commits_touching(git, f"{b}.txt")) == 1


def _done_with_a_failing_own_test(new_issue, script, run_hive, status_of) -> str:
    """An issue done in manual mode whose agent named a test command its work fails."""
    worker = [{"write": "{issue}.txt", "content": "work\n"}, {"commit": "{issue}: work"},
              {"result": "success", "summary": "work", "test_command": "test -f {issue}.proof"}]
    issue = new_issue("Gated by its own test")
    run_hive(script({"roles": {"worker": worker}}), HIVE_MERGE_MODE="manual")
    assert status_of(issue) == "done"
    return issue


def test_finalize_runs_the_agents_own_test_command_too(repo, new_issue, script, run_hive, hive, git, status_of):
    issue = _done_with_a_failing_own_test(new_issue, script, run_hive, status_of)
    main_before = git("rev-parse", "main").stdout.strip()

    refused = hive("finalize", issue, check=False)

    assert refused.returncode == 1 and "not merged" in refused.stderr, refused.stderr
    assert git("rev-parse", "main").stdout.strip() == main_before
    assert status_of(issue) == "done"


def test_after_a_restart_the_pipeline_still_runs_the_agents_own_test_command(repo, new_issue, script, run_hive,
                                                                           git, status_of):
    issue = _done_with_a_failing_own_test(new_issue, script, run_hive, status_of)
    main_before = git("rev-parse", "main").stdout.strip()

    # a new daemon finds the done hand-off (as after a crash between `done` and the merge)
    log = run_hive(script({"roles": {"worker": [{"result": "failure", "summary": "cannot"}]}}),
                   expect=3, HIVE_MERGE_MODE="auto", HIVE_MAX_RETRIES="0", HIVE_MAX_AGENT_SWITCHES="0")

    assert git("rev-parse", "main").stdout.strip() == main_before, log
    assert f"`test -f {issue}.proof` failed" in log, log
    assert status_of(issue) == "escalated"


# -- 8. a dirty checkout of the target --------------------------------------------------------------


def test_a_dirty_checkout_of_the_target_is_never_overwritten(repo, paths, new_issue, script, run_hive, hive,
                                                             git, state_log, status_of, tmp_path):
    lines = [f"line {n}" for n in range(1, 11)]
    (repo / "README.md").write_text("\n".join(lines) + "\n")
    git("commit", "-q", "-am", "a longer README")
    worker = [{"edit": "README.md", "find": "line 1\n", "replace": "line 1 (by the agent)\n"},
              {"commit": "README: the agent's line"},
              {"result": "success", "summary": "edited line 1"}]
    path = script({"roles": {"worker": worker}})
    issue = new_issue("Edit line 1")
    # the person's uncommitted work, in a file the merge touches
    mine = (repo / "README.md").read_text().replace("line 10\n", "line 10 (the person's, uncommitted)\n")
    (repo / "README.md").write_text(mine)
    main_before = git("rev-parse", "main").stdout.strip()
    test_runs = tmp_path / "test-runs"
    # unjailed: the test counts its runs outside the worktree
    tests = {"HIVE_TEST_COMMAND": f'echo run >> "{test_runs}"', "HIVE_SANDBOX": "off"}

    log = run_hive(path, expect=1, **tests)   # --until-idle ends naming the merge that waits

    assert f"git hive: idle, but the merge of {issue} waits: " in log and "README.md" in log
    assert (repo / "README.md").read_text() == mine          # nothing lost
    assert git("rev-parse", "main").stdout.strip() == main_before
    assert status_of(issue) == "done", log
    status = json.loads(hive("status", "--json").stdout)
    queue = [e for e in status["merge_queue"] if e["issue"] == issue]
    assert len(queue) == 1 and queue[0]["state"] == "waiting", status["merge_queue"]
    assert "README.md" in queue[0]["detail"] and "uncommitted" in queue[0]["detail"]
    attention = [a for a in status["needs_attention"] if a["issue"] == issue]
    assert attention and "README.md" in attention[0]["title"]
    assert "README.md" in hive("status").stdout
    assert not test_runs.exists()      # a merge that must wait does not run the test suite

    git("commit", "-q", "-am", "the person's change")
    person = git("rev-parse", "HEAD").stdout.strip()
    log = run_hive(path, **tests)

    assert status_of(issue) == "finalized", log
    merged = assert_finalized_once(git, state_log, issue)
    assert git("merge-base", "--is-ancestor", person, merged, check=False).returncode == 0
    final = (repo / "README.md").read_text()
    assert "line 1 (by the agent)" in final and "line 10 (the person's, uncommitted)" in final
    assert git("show", "main:README.md").stdout == final
    assert git("status", "--porcelain", "--untracked-files=no").stdout == ""
    assert json.loads(hive("status", "--json").stdout)["merge_queue"] == []
    assert test_runs.read_text() == "run\n"


def test_a_dirty_checkout_elsewhere_does_not_block_the_merge(repo, paths, new_issue, script, run_hive, git,
                                                             status_of):
    path = script({"roles": {"worker": [{"write": "new.txt", "content": "new\n"}, {"commit": "new"},
                                        {"result": "success", "summary": "new"}]}})
    issue = new_issue("Add a file")
    (repo / "README.md").write_text("my unsaved thoughts\n")   # not a path the merge touches

    run_hive(path)

    assert status_of(issue) == "finalized"
    assert (repo / "README.md").read_text() == "my unsaved thoughts\n"
    assert (repo / "new.txt").read_text() == "new\n"


# -- 9. SIGKILL in the middle of a merge --------------------------------------------------------------


# one worker step: a file written and committed, a success
ONCE_WORKER = {"roles": {"worker": [{"write": "{issue}.txt", "content": "once\n"}, {"commit": "{issue}"},
                                    {"result": "success", "summary": "once"}]}}
RUN_ONE_AGENT = "from hive.cli import main\nmain(['run', '--backend', 'scripted', '--until-idle', '--max-agents', '1'])\n"


def _start_daemon(script_path: str, extra_env: dict[str, str], patch: str | None = None) -> subprocess.Popen:
    """`git hive run --until-idle`; with `patch` (Python run first: a fault injected), one agent."""
    argv = [sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle"]
    if patch is not None:
        argv = [sys.executable, "-c", patch + RUN_ONE_AGENT]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HIVE_SCRIPTED_SCRIPT": script_path, **extra_env})


def _killed_at(script_path: str, extra_env: dict[str, str], function: str) -> str:
    """A daemon (one agent) that SIGKILLs itself when `function` of `hive.merge` is called; its output."""
    patch = ("import os, signal\n"
             "from hive.merge import mechanical, pipeline\n"
             f"{function} = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n")
    daemon = _start_daemon(script_path, extra_env, patch)
    try:
        out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate()
    assert daemon.returncode == -signal.SIGKILL, out
    return out


def test_daemon_killed_while_the_tests_run_finishes_the_merge_once_on_restart(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of, wait_for, tmp_path):
    path = script(ONCE_WORKER)
    issue = new_issue("Exactly once")
    marker, pidfile = tmp_path / "tests-started", tmp_path / "test.pid"
    # the killed daemon's test outlives it (its own process group) unless the next daemon ends it;
    # unjailed: the test marks its start outside the worktree (a jailed one dies with its daemon)
    daemon = _start_daemon(path, {"HIVE_TEST_COMMAND": f'echo $$ > "{pidfile}"; touch "{marker}"; exec sleep 120',
                                  "HIVE_SANDBOX": "off"})
    try:
        wait_for(marker.exists, "the merge's test command to start", timeout=30)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.communicate()
    assert status_of(issue) == "done"
    assert not git("ls-tree", "main", f"{issue}.txt").stdout
    old_test = int(pidfile.read_text())
    os.kill(old_test, 0)                        # still running after its daemon died

    # the new test fails if the old one still runs beside it (a zombie left to init does not run)
    gone = f'test ! -e /proc/{old_test} || grep -q ") [ZX] " /proc/{old_test}/stat'
    log = run_hive(path, HIVE_TEST_COMMAND=gone, HIVE_SANDBOX="off")   # the host's /proc

    assert status_of(issue) == "finalized", log
    assert_finalized_once(git, state_log, issue)
    assert len(commits_touching(git, f"{issue}.txt")) == 1
    assert len(events_of(state_log, issue, "done")) == 1


def test_daemon_killed_between_the_fast_forward_and_the_finalize_commit(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of, tmp_path):
    path = script(ONCE_WORKER)
    first, second = new_issue("Lands, then the daemon dies", priority=0), new_issue("Queued behind it")
    # a daemon that dies (SIGKILL) right after the target moved, before the finalize commit
    out = _killed_at(path, {}, "pipeline.MergeProcessor._finalize")
    landed = [i for i in (first, second) if git("ls-tree", "main", f"{i}.txt").stdout]
    assert len(landed) == 1, out            # the target moved for one issue ...
    assert status_of(landed[0]) == "done"   # ... whose finalize commit never happened

    log = run_hive(path)

    for issue_id in (first, second):
        assert status_of(issue_id) == "finalized", log
        assert_finalized_once(git, state_log, issue_id)
        assert len(commits_touching(git, f"{issue_id}.txt")) == 1, git("log", "--oneline", "main").stdout
        assert_cleaned_up(git, paths, issue_id)


def test_an_issue_finalized_by_another_machine_during_its_merge_leaves_no_worktree_behind(
        repo, paths, new_issue, script, git, state_log, status_of):
    """The merge lands, and before this machine's finalize commit another one finalizes the issue
    (its own agent's landing, after the lease of this one expired): the finalize is refused, the
    entry leaves the queue, and this machine's copy of the work goes too (its heads kept), as
    when the issue is found finished before the merge — nothing is left for no one to clean."""
    path = script(ONCE_WORKER)
    issue = new_issue("Finalized elsewhere meanwhile")
    # the first finalize is the other machine's; this machine's own, right after it, is refused
    patch = ("from hive import lifecycle\n"
            "from hive.merge import pipeline\n"
            "real = lifecycle.finalize\n"
            "def raced(*args, **kwargs):\n"
            "    real(*args, **kwargs)\n"
            "    return real(*args, **kwargs)\n"
            "pipeline.lifecycle.finalize = raced\n")
    daemon = _start_daemon(path, {}, patch)
    out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
    assert daemon.returncode == 0, out
    assert "left the merge queue" in out and status_of(issue) == "finalized", out
    assert_finalized_once(git, state_log, issue)
    assert len(commits_touching(git, f"{issue}.txt")) == 1   # what the branch held is on main first
    assert_cleaned_up(git, paths, issue)


def test_a_failed_look_around_does_not_stop_the_merge_queue(repo, new_issue, script, git, state_log):
    """Each pass of the merge queue first looks around (done issues to queue, leftovers to
    remove); an error there ended the queue's task for good — the run then waited forever with
    its entries queued. It is said once and the pass goes on; the look is tried again."""
    path = script(ONCE_WORKER)
    issue = new_issue("Merged despite a failed look around")
    patch = ("from hive.merge import pipeline\n"
            "real = pipeline.MergeProcessor.scan\n"
            "calls = []\n"
            "def flaky(self):\n"
            "    calls.append(1)\n"
            "    if len(calls) == 2:   # the first pass's (the start's own is the first)\n"
            "        raise KeyError('refs/heads/hive/work/hv-gone01')\n"
            "    return real(self)\n"
            "pipeline.MergeProcessor.scan = flaky\n")
    daemon = _start_daemon(path, {}, patch)
    try:
        out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        daemon.kill()
        out, _ = daemon.communicate()
        raise AssertionError(f"the run did not end\n{out}") from None
    assert daemon.returncode == 0, out
    assert out.count("warning: the merge queue's look around failed: 'refs/heads/hive/work/hv-gone01'") == 1, out
    assert_finalized_once(git, state_log, issue)


# -- 10. bounded by real work -----------------------------------------------------------------------


def test_ten_independent_issues_merge_without_fixed_sleeps(repo, paths, new_issue, script, git, state_log,
                                                           list_json):
    path = script({})   # the built-in worker: one file per issue, committed
    epic = new_issue("Ten trivial things", type="epic")
    ids = [new_issue(f"Trivial {n}", parent=epic) for n in range(10)]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle",
                           "--max-agents", "4"], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          env={**os.environ, "HIVE_SCRIPTED_SCRIPT": path, "HIVE_TEST_COMMAND": "true"})
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    statuses = {i["id"]: i["status"] for i in list_json()}
    assert all(statuses[i] == "finalized" for i in ids), statuses
    assert len(git("log", "--format=%H", "main").stdout.split()) == 11
    finals = [c for c in state_log() if c.event == "finalized" and c.issue != epic]
    assert len(finals) == 10
    assert statuses[epic] == "finalized"    # its children are all finalized
    # nothing left behind on disk
    assert not paths.worktrees_dir.exists() or not any(paths.worktrees_dir.iterdir())
    assert not git("branch", "--list", "hive/work/*").stdout.strip()
    # ~6.5 s of fixed sleeps per merge in the original would be 65 s; the work itself is ~2-3 s
    # on an idle 2-core machine (the bound leaves room for a loaded one)
    assert took < 30, f"10 trivial issues took {took:.1f}s\n{proc.stdout}"


# -- 11. merge trains -------------------------------------------------------------------------------


def _three_done(new_issue, script, run_hive, status_of) -> tuple[list[str], str]:
    """Three independent issues done in manual mode (the built-in worker: `hive-work/<id>.txt`);
    a daemon started after them finds all three in its merge queue at once."""
    path = script({})
    ids = [new_issue(f"Trivial {n}") for n in range(3)]
    run_hive(path, max_agents=3, HIVE_MERGE_MODE="manual")
    assert [status_of(i) for i in ids] == ["done"] * 3
    return ids, path


def test_done_issues_queued_together_land_as_one_train_tested_once_on_all_of_them(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    ids, path = _three_done(new_issue, script, run_hive, status_of)
    main_before = git("rev-parse", "main").stdout.strip()
    # passes only where all three files are: no issue could land alone
    all_three = " && ".join(f"test -f hive-work/{i}.txt" for i in ids)

    log = run_hive(path, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND=all_three)

    assert [status_of(i) for i in ids] == ["finalized"] * 3, log
    queued = [line.split()[1] for line in log.splitlines() if line.endswith(" queued for merge")]
    assert sorted(queued) == sorted(ids), log
    assert f"{', '.join(queued)} land together (tested once, on " in log, log
    landed = [assert_finalized_once(git, state_log, i) for i in queued]
    # each issue keeps its own landing commit, with its trailer, in queue order on a linear main
    assert git("rev-list", "--reverse", f"{main_before}..main").stdout.split() == landed
    for issue_id, commit in zip(queued, landed):
        assert git("show", "-s", "--format=%B", commit).stdout.strip().endswith(f"Hive-Issue: {issue_id}")
        assert_cleaned_up(git, paths, issue_id)
    assert not git("for-each-ref", "refs/hive/landings/").stdout.strip()


def test_a_train_whose_tests_fail_lands_each_issue_alone(repo, paths, new_issue, script, run_hive, git,
                                                         state_log, status_of):
    ids, _ = _three_done(new_issue, script, run_hive, status_of)
    first, bad, last = ids
    refinery = [{"cd": "{worktree}"}, {"result": {"status": "needs_human", "summary": "it breaks the build"}}]
    path = script({"roles": {"refinery": refinery}})

    log = run_hive(path, expect=3, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND=f"! test -f hive-work/{bad}.txt")

    assert " land together (tested once" not in log, log
    assert f"did not land together (`! test -f hive-work/{bad}.txt` failed on all of them): each lands alone" in log
    assert {i: status_of(i) for i in ids} == {first: "finalized", bad: "escalated", last: "finalized"}, log
    for issue_id in (first, last):
        assert_finalized_once(git, state_log, issue_id)
    assert git("cat-file", "-e", f"main:hive-work/{bad}.txt", check=False).returncode != 0
    # the escalated issue's worktree is where its own landing left it: at its branch
    worktree = paths.worktrees_dir / bad
    assert git("rev-parse", "HEAD", cwd=worktree).stdout == git("rev-parse", f"hive/work/{bad}").stdout
    # the train's candidate (all three files) was not kept as anyone's attempt: it was hive's own
    for kept in git("for-each-ref", "--format=%(refname)", "refs/hive/attempts/").stdout.split():
        files = git("ls-tree", "-r", "--name-only", kept, "hive-work").stdout.split()
        assert len(files) < 3, (kept, files)


def test_what_a_failing_train_test_committed_in_a_worktree_is_kept_before_the_worktree_is_put_back(
        repo, paths, new_issue, script, run_hive, git, status_of):
    """The train checks each car's worktree out at its last candidate and puts it back after a
    failure: a commit the agent's own test command made there is kept (an attempt ref) first."""
    ids = [new_issue(f"Trivial {n}") for n in range(3)]
    committing = ("git -c user.name=t -c user.email=t@example.com commit -q --allow-empty "
                  "-m 'made by the test run' && exit 1")
    worker = [{"write": "hive-work/{issue}.txt", "content": "work\n"}, {"commit": "{issue}: work"},
              {"result": "success", "summary": "work", "test_command": committing}]
    refinery = [{"cd": "{worktree}"}, {"result": {"status": "needs_human", "summary": "its test fails"}}]
    path = script({"issues": {ids[0]: worker}, "roles": {"refinery": refinery}})
    run_hive(path, max_agents=3, HIVE_MERGE_MODE="manual")
    assert [status_of(i) for i in ids] == ["done"] * 3

    log = run_hive(path, expect=3, HIVE_MERGE_MODE="auto")

    assert "did not land together (`git -c user.name=t" in log, log
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{ids[0]}/").stdout.split()
    messages = [git("show", "-s", "--format=%s", commit).stdout.strip() for commit in kept]
    assert "made by the test run" in messages, (messages, log)


def test_a_merges_checkouts_write_nothing_through_a_link_an_agent_left_nor_read_its_fifo(
        repo, tmp_path, new_issue, script, run_hive, git, status_of):
    """Each agent commits `pkg/<id>.txt`, then replaces `pkg` by a link out of its worktree and
    its own tracked file by a FIFO. The tests run on exactly each candidate: its files are
    written into the worktree, not through the link into what it names, no read waits on the
    FIFO, and the tests see the committed folder. All three land."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a file of the user's\n")
    worker = [{"write": "hive-work/{issue}.txt", "content": "work\n"},
              {"write": "pkg/{issue}.txt", "content": "the agent's\n"}, {"commit": "{issue}: work"},
              {"run": f"rm -r pkg && ln -s {outside} pkg && rm hive-work/{{issue}}.txt && mkfifo hive-work/{{issue}}.txt",
               "must_succeed": True},
              {"result": "success", "summary": "work"}]
    path = script({"roles": {"worker": worker}})
    ids = [new_issue(f"Trivial {n}") for n in range(3)]

    log = run_hive(path, max_agents=3, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND="test ! -L pkg && ls pkg/hv-*.txt")

    assert [status_of(i) for i in ids] == ["finalized"] * 3, log
    assert os.listdir(outside) == ["keep.txt"], log
    assert sorted(git("ls-tree", "--name-only", "main", "pkg/").stdout.split()) == sorted(f"pkg/{i}.txt" for i in ids)


def test_the_merge_starts_only_once_the_agents_session_and_what_it_spawned_are_gone(
        repo, new_issue, script, run_hive, status_of):
    """The agent leaves a process behind that keeps writing into its worktree, and its CLI takes
    3 s to exit once its session is closed. The merge rewrites that worktree and runs the tests
    only after the session is closed (its jail's processes gone): nothing writes there meanwhile."""
    worker = [{"write": "hive-work/{issue}.txt", "content": "work\n"}, {"commit": "{issue}: work"},
              {"spawn": "while true; do echo beat > beat.txt; sleep 0.01; done"},
              {"linger": 3}, {"result": "success", "summary": "work"}]
    path = script({"roles": {"worker": worker}})
    issue = new_issue("Trivial")

    log = run_hive(path, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND="rm -f beat.txt; sleep 0.3; test ! -e beat.txt")

    assert status_of(issue) == "finalized", log


def test_hive_rewrites_the_refinerys_worktree_only_once_its_session_and_what_it_spawned_are_gone(
        repo, tmp_path, new_issue, script, run_hive, status_of):
    """The refinery fixes the failing test, leaves a process behind that keeps writing into the
    worktree and swapping a tracked folder for a link out of it, and answers `merged`. Hive resets
    that worktree and runs the tests only after the refinery's process and what it spawned are
    gone: nothing is written through the link, nothing writes into the worktree meanwhile."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a file of the user's\n")
    worker = [{"write": "hive-work/{issue}.txt", "content": "work\n"},
              {"write": "pkg/{issue}.txt", "content": "the agent's\n"}, {"commit": "{issue}: work"},
              {"result": "success", "summary": "work"}]
    swapping = f"while true; do echo beat > beat.txt; rm -rf pkg; ln -s {outside} pkg; rm -f pkg; mkdir pkg; done"
    refinery = [{"cd": "{worktree}"}, {"write": "fixed.txt", "content": "fixed\n"}, {"commit": "{issue}: fix"},
                {"spawn": swapping}, {"result": {"status": "merged", "summary": "fixed"}}]
    path = script({"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("Trivial")

    log = run_hive(path, HIVE_MERGE_MODE="auto",
                   HIVE_TEST_COMMAND="rm -f beat.txt; sleep 0.3; test ! -e beat.txt && test -f fixed.txt "
                                     "&& test -f pkg/hv-*.txt")

    assert status_of(issue) == "finalized", log
    assert os.listdir(outside) == ["keep.txt"], log


def test_what_the_tests_leave_in_a_landed_issues_worktree_is_not_kept_as_work(
        repo, new_issue, script, run_hive, git, status_of):
    """The tests write a file into the worktree; the issue lands and its worktree is retired: that
    file was no one's work (the merge had made the worktree exactly the candidate before the
    tests), so no attempt is kept for it."""
    issue = new_issue("Trivial")

    log = run_hive(script({}), HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND="echo report > test-report.txt")

    assert status_of(issue) == "finalized", log
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{issue}/").stdout.split()
    assert not [c for c in kept if git("show", "-s", "--format=%s", c).stdout.startswith("uncommitted")], kept


def test_the_tests_run_on_what_the_agent_committed_not_on_what_it_left_uncommitted(
        repo, new_issue, script, run_hive, git, status_of):
    """The agent commits its work but leaves the file its test needs uncommitted: the tests run
    on the commit alone, fail, and nothing lands; the file is kept (an attempt) before it goes."""
    worker = [{"write": "hive-work/{issue}.txt", "content": "work\n"}, {"commit": "{issue}: work"},
              {"write": "generated.txt", "content": "only on the agent's disk\n"},
              {"result": "success", "summary": "work"}]
    refinery = [{"cd": "{worktree}"}, {"result": {"status": "needs_human", "summary": "its tests fail"}}]
    path = script({"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("Trivial")
    main_before = git("rev-parse", "main").stdout.strip()

    log = run_hive(path, expect=3, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND="test -f generated.txt")

    assert status_of(issue) == "escalated", log
    assert git("rev-parse", "main").stdout.strip() == main_before
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{issue}/").stdout.split()
    assert any(git("show", f"{c}:generated.txt", check=False).stdout == "only on the agent's disk\n" for c in kept), kept


def test_a_train_leaves_out_a_branch_that_does_not_replay_onto_the_ones_before_it(repo, paths, git):
    from hive.merge import mechanical

    base = git("rev-parse", "main").stdout.strip()

    def branch(name: str, path: str, text: str) -> mechanical.Plan:
        git("switch", "-q", "-c", f"hive/work/{name}", base)
        Path(path).write_text(text)
        git("add", path)
        git("commit", "-q", "-m", f"{name}: {path}")
        head = git("rev-parse", "HEAD").stdout.strip()
        git("switch", "-q", "main")
        return mechanical.Plan(name, head, base, "", "", 60)

    a = branch("hv-aaaaaa", "README.md", "a's readme\n")
    b = branch("hv-bbbbbb", "README.md", "b's readme\n")     # conflicts with a
    c = branch("hv-cccccc", "c.txt", "c\n")
    quiet = [mechanical.Quiet()] * 3

    # a, and b cannot follow it: a train of one is no train — nothing moved, nothing recorded
    assert mechanical.land_train(paths, "main", [a, b], quiet) == mechanical.Train()
    assert git("rev-parse", "main").stdout.strip() == base
    assert not git("for-each-ref", "refs/hive/landings/").stdout.strip()

    landed = mechanical.land_train(paths, "main", [a, b, c], quiet).landed

    assert list(landed) == ["hv-aaaaaa", "hv-cccccc"]           # b left for a landing of its own
    commits = [landed["hv-aaaaaa"].commit, landed["hv-cccccc"].commit]
    assert git("rev-list", "--reverse", f"{base}..main").stdout.split() == commits
    assert git("show", "main:README.md").stdout == "a's readme\n"
    recorded = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/hive/landings/").stdout.split("\n")
    assert sorted(filter(None, recorded)) == [f"refs/hive/landings/hv-aaaaaa {commits[0]}",
                                              f"refs/hive/landings/hv-cccccc {commits[1]}"]
    # alone, b conflicts (the refinery's case), as it would have without the train
    assert mechanical.land(paths, mechanical.Target("main"), b).status == "conflict"


def test_a_conflicting_issue_is_left_out_of_the_train_and_goes_to_the_refinery_alone(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    # queued in this order (priority first): the train starts with `one`, and `two` cannot follow it
    one, two, other = (new_issue("Shared file, one way", priority=0),
                       new_issue("Shared file, another way", priority=1), new_issue("Apart", priority=2))

    def writes(path: str, text: str) -> list[dict]:
        return [{"write": path, "content": text}, {"commit": "{issue}: " + path},
                {"result": "success", "summary": path}]

    refinery = [{"cd": "{worktree}"}, {"result": {"status": "needs_human", "summary": "both changed shared.txt"}}]
    path = script({"issues": {one: writes("shared.txt", "one\n"), two: writes("shared.txt", "two\n"),
                              other: writes("apart.txt", "apart\n")},
                   "roles": {"refinery": refinery}})
    run_hive(path, max_agents=3, HIVE_MERGE_MODE="manual")
    assert [status_of(i) for i in (one, two, other)] == ["done"] * 3

    log = run_hive(path, expect=3, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND="true")

    assert {i: status_of(i) for i in (one, two, other)} == {one: "finalized", two: "escalated",
                                                             other: "finalized"}, log
    assert f"{one}, {other} land together (tested once, on " in log, log
    assert f"{two} conflict → refinery" in log, log
    for issue_id in (one, other):
        assert_finalized_once(git, state_log, issue_id)
    assert git("show", "main:shared.txt").stdout == "one\n"


@pytest.mark.parametrize("killed_in", ["fast_forward", "_finalize"])
def test_a_daemon_killed_mid_train_lands_and_finalizes_each_issue_once_on_restart(
        killed_in, repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    ids, path = _three_done(new_issue, script, run_hive, status_of)
    main_before = git("rev-parse", "main").stdout.strip()
    # SIGKILL with the train's landings recorded, right before the target moves (fast_forward) or
    # right after it moved, before the first finalize commit (_finalize)
    owner = "mechanical" if killed_in == "fast_forward" else "pipeline.MergeProcessor"
    out = _killed_at(path, {"HIVE_MERGE_MODE": "auto"}, f"{owner}.{killed_in}")
    assert "land together" in out or killed_in == "fast_forward", out
    moved = git("rev-parse", "main").stdout.strip() != main_before
    assert moved == (killed_in == "_finalize"), out
    assert [status_of(i) for i in ids] == ["done"] * 3

    log = run_hive(path, HIVE_MERGE_MODE="auto")

    for issue_id in ids:
        assert status_of(issue_id) == "finalized", log
        assert_finalized_once(git, state_log, issue_id)
        assert len(commits_touching(git, f"hive-work/{issue_id}.txt")) == 1, git("log", "--oneline", "main").stdout
        assert_cleaned_up(git, paths, issue_id)


def _train_landed_with(script_path: str, patch: str) -> str:
    """The three done issues of `_three_done` landed as one train by a daemon with `patch` run
    first (`_start_daemon`); its output."""
    daemon = _start_daemon(script_path, {"HIVE_MERGE_MODE": "auto"}, patch)
    out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
    assert daemon.returncode == 0, out
    assert " land together (tested once" in out, out
    return out


def _fails_once(package: str, target: str) -> str:
    """A patch for `_start_daemon`: `target` (`module.name`, the module in `package`) raises
    OSError('disk trouble') on its first call and works from then on."""
    module = target.split(".")[0]
    return (f"from {package} import {module}\n"
            f"real, calls = {target}, []\n"
            "def failing_once(*args, **kwargs):\n"
            "    calls.append(args)\n"
            "    if len(calls) == 1:\n"
            "        raise OSError('disk trouble')\n"
            "    return real(*args, **kwargs)\n"
            f"{target} = failing_once\n")


def _work_heads(git: Callable[..., Any], ids: list[str]) -> list[str]:
    return [git("rev-parse", f"refs/heads/hive/work/{issue_id}").stdout.strip() for issue_id in ids]


def _each_finalized_once_and_cleaned_up(ids: list[str], out: str, status_of: Callable[[str], str],
                                        git: Callable[..., Any], state_log: Callable[..., list],
                                        paths: Any, heads: list[str]) -> None:
    """Each issue finalized once, its worktree and branch gone, and the work its branch held
    (`heads`, read before the run) still reachable from a ref."""
    for issue_id in ids:
        assert status_of(issue_id) == "finalized", out
        assert_finalized_once(git, state_log, issue_id)
        assert_cleaned_up(git, paths, issue_id)
    reachable = set(git("rev-list", "--all").stdout.split())
    assert set(heads) <= reachable, (heads, git("for-each-ref").stdout)


def test_a_trains_finalize_commits_do_not_wait_for_the_cars_before_them_to_be_retired(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of, tmp_path):
    ids, path = _three_done(new_issue, script, run_hive, status_of)
    heads = _work_heads(git, ids)
    seen = tmp_path / "retires"
    # the n-th retire (in a thread) waits until the n+1-th car is finalized: made only if the
    # event loop goes on to the next car's commit without waiting for this retire to end
    patch = ("import subprocess, time\n"
             "from hive.workspace import worktrees\n"
             "retire, calls = worktrees.retire, []\n"
             "def finalized():\n"
             "    log = subprocess.run(['git', 'log', '--format=%(trailers:key=Hive-Event,valueonly)', 'hive/state'],\n"
             "                         capture_output=True, text=True, check=True).stdout\n"
             "    return log.split().count('finalized')\n"
             "def waiting_retire(paths, issue_id, *args, **kwargs):\n"
             "    calls.append(issue_id)\n"
             "    wanted, deadline = min(len(calls) + 1, 3), time.monotonic() + 15\n"
             "    while finalized() < wanted and time.monotonic() < deadline:\n"
             "        time.sleep(0.01)\n"
             f"    with open({str(seen)!r}, 'a') as out:\n"
             "        out.write(f'{issue_id} {wanted} {finalized()}\\n')\n"
             "    return retire(paths, issue_id, *args, **kwargs)\n"
             "worktrees.retire = waiting_retire\n")
    out = _train_landed_with(path, patch)
    retires = [line.split() for line in seen.read_text().splitlines()]
    assert [r[0] for r in retires] == [line.split()[1] for line in out.splitlines()
                                       if line.endswith(" and finalized")], out   # in the train's order
    assert all(int(found) >= int(wanted) for _, wanted, found in retires), retires
    _each_finalized_once_and_cleaned_up(ids, out, status_of, git, state_log, paths, heads)


def test_a_dependent_queued_behind_its_blocker_rides_the_same_train(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    path = script({})
    blocker = new_issue("Blocker", priority=1)   # first in the merge queue
    dependent = new_issue("Dependent", priority=3, depends_on=[blocker])
    run_hive(path, max_agents=2, HIVE_MERGE_MODE="manual")   # the dependent starts from the blocker's work
    heads = _work_heads(git, [blocker, dependent])
    both = f"test -f hive-work/{blocker}.txt && test -f hive-work/{dependent}.txt"

    out = run_hive(path, HIVE_MERGE_MODE="auto", HIVE_TEST_COMMAND=both)

    assert f"{blocker}, {dependent} land together (tested once, on " in out, out
    main_log = git("log", "--format=%(trailers:key=Hive-Issue,valueonly)", "main").stdout.split()
    assert main_log[:2] == [dependent, blocker], main_log   # each landed once, the blocker first
    finalized = [line.split()[1] for line in out.splitlines() if line.endswith(" and finalized")]
    assert finalized == [blocker, dependent], out
    _each_finalized_once_and_cleaned_up([blocker, dependent], out, status_of, git, state_log, paths, heads)


def test_an_issue_finalized_while_its_agent_still_closes_is_no_agent_stopped(
        repo, paths, new_issue, script, git, status_of):
    """The merge step may finalize an issue before its worker has closed its agent's session:
    that worker is not stopped as one whose issue was taken (it said "finalized: stopping its
    agent" and retired the worktree a second time); its session closes as usual."""
    path = script({})
    issue_id = new_issue("Trivial")
    patch = ("import asyncio\n"
             "from hive.orchestrator import worker\n"
             "close = worker.Worker._close_session\n"
             "async def slow_close(self):\n"
             "    await asyncio.sleep(1.0)\n"
             "    await close(self)\n"
             "worker.Worker._close_session = slow_close\n")
    daemon = _start_daemon(path, {"HIVE_MERGE_MODE": "auto"}, patch)
    out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
    assert daemon.returncode == 0, out
    assert f"{issue_id} merged into main" in out, out
    assert "stopping its agent" not in out, out
    assert status_of(issue_id) == "finalized"
    assert_cleaned_up(git, paths, issue_id)


def test_a_finalize_commit_that_fails_mid_train_is_made_again_and_the_cars_after_it_too(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    ids, path = _three_done(new_issue, script, run_hive, status_of)
    heads = _work_heads(git, ids)
    out = _train_landed_with(path, _fails_once("hive.merge", "pipeline.MergeProcessor._finalize"))
    first = next(line.split()[1].rstrip(",") for line in out.splitlines() if " land together" in line)
    assert f"{first} merge error: disk trouble" in out, out
    _each_finalized_once_and_cleaned_up(ids, out, status_of, git, state_log, paths, heads)


def test_a_retire_that_fails_mid_train_leaves_every_car_finalized_and_cleaned_up_by_the_end(
        repo, paths, new_issue, script, run_hive, git, state_log, status_of):
    ids, path = _three_done(new_issue, script, run_hive, status_of)
    heads = _work_heads(git, ids)
    out = _train_landed_with(path, _fails_once("hive.workspace", "worktrees.retire"))
    first = next(line.split()[1] for line in out.splitlines() if line.endswith(" and finalized"))
    assert f"warning: {first}'s worktree and branch were not retired (disk trouble)" in out, out
    _each_finalized_once_and_cleaned_up(ids, out, status_of, git, state_log, paths, heads)
