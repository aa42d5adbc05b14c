"""No work is ever lost (issue 29): kept attempts under `refs/hive/attempts/<id>/<n>`, a person's
commit in a kept worktree is what lands, `prune`, transcripts that outlive the merge, and
`run --until-idle` telling by its exit code whether everything it ran finished.

Real daemons (`python -m hive run --backend scripted`), real repositories, the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.daemon_helpers import RUN, hive_dir, write_script

RUN_TIMEOUT = 120
FAILING_TEST = "test ! -e code.txt || ! grep -q BAD code.txt"


def run_until_idle(repo: Path, env: dict[str, str], expect: int) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*RUN, "--until-idle"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "HIVE_ANOMALY_FAILURE_THRESHOLD": "100", **env}, timeout=RUN_TIMEOUT)
    assert proc.returncode == expect, f"run exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def kept_refs(git, repo: Path, issue_id: str = "") -> dict[str, str]:
    out = git("for-each-ref", "--format=%(refname) %(objectname)", f"refs/hive/attempts/{issue_id}", cwd=repo).stdout
    return dict(line.split() for line in out.splitlines())


def unreachable_commits(git, repo: Path) -> dict[str, str]:
    """Commit -> subject of every commit no ref holds (reflogs do not count)."""
    out = git("fsck", "--unreachable", "--no-reflogs", "--no-progress", cwd=repo).stdout
    oids = [line.split()[2] for line in out.splitlines() if line.startswith("unreachable commit")]
    return {oid: git("log", "-1", "--format=%s", oid, cwd=repo).stdout.strip() for oid in oids}


def hopeless(steps_before: list[dict]) -> list[dict]:
    return [*steps_before, {"fail_times": 1000, "summary": "it cannot be done"}]


# -- a person's fix in an escalated worktree -------------------------------------------------------

def _escalate(repo: Path, tmp_path: Path, hive, env: dict[str, str]) -> str:
    issue = hive("create", "Hard one", cwd=repo).stdout.strip()
    script = write_script(tmp_path, {"issues": {issue: hopeless([
        {"write": "agent.txt", "content": "the agent's try\n"}, {"commit": "agent: a try"}])}})
    env.update({"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0"})
    run_until_idle(repo, env, expect=3)
    return issue


def _commands_of(line: str) -> list[list[str]]:
    return [shlex.split(command) for command in re.findall(r"`([^`]+)`", line)]


def test_the_recovery_steps_show_gives_land_the_persons_commit(repo, tmp_path, hive, git):
    """Done as `show` says, step by step: commit in the worktree it names, `git hive update ID
    --status done`, `git hive run`: the person's commit is on main, the agent's try is kept."""
    env: dict[str, str] = {}
    issue = _escalate(repo, tmp_path, hive, env)
    [line] = [l for l in hive("show", issue, cwd=repo).stdout.splitlines() if "fix it yourself" in l]
    worktree = Path(re.search(r"the work is in (\S+)", line).group(1))
    update, run, _finalize = _commands_of(line)
    assert update == ["git", "hive", "update", issue, "--status", "done"] and run == ["git", "hive", "run"]

    (worktree / "person.txt").write_text("the person's fix\n")
    git("add", "person.txt", cwd=worktree)
    git("commit", "-q", "-m", "person: the fix", cwd=worktree)
    mine = git("rev-parse", "HEAD", cwd=worktree).stdout.strip()
    hive(*update[2:], cwd=repo)
    # `git hive run` as the person would start it; --until-idle ends it once the merge is done
    run_until_idle(repo, env, expect=0)

    assert git("show", "main:person.txt", cwd=repo).stdout == "the person's fix\n"
    assert "person: the fix" in git("log", "--format=%s", "main", cwd=repo).stdout
    assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["status"] == "finalized"
    assert not worktree.exists()
    # the person's own commit (before the replay onto main) is kept too: nothing unreachable
    assert mine in kept_refs(git, repo, issue).values()
    assert not [s for s in unreachable_commits(git, repo).values() if s.startswith(("person:", "agent:"))]


def test_finalize_by_hand_lands_the_persons_commit_too(repo, tmp_path, hive, git):
    env: dict[str, str] = {}
    issue = _escalate(repo, tmp_path, hive, env)
    worktree = hive_dir(repo) / "worktrees" / issue
    (worktree / "person.txt").write_text("by hand\n")
    git("add", "person.txt", cwd=worktree)
    git("commit", "-q", "-m", "person: by hand", cwd=worktree)
    hive("update", issue, "--status", "done", cwd=repo)
    hive("finalize", issue, cwd=repo)
    assert git("show", "main:person.txt", cwd=repo).stdout == "by hand\n"


# -- kept attempts: a switch, a rejection, a finalize ----------------------------------------------

def test_no_commit_an_agent_made_becomes_unreachable_and_log_lists_the_kept_ones(repo, tmp_path, hive, git,
                                                                                 new_issue):
    switched = new_issue("Switched once")
    rejected = new_issue("Rejected once")
    script = write_script(tmp_path, {
        "issues": {
            switched: [{"write": "switched.txt", "content": "try\n"},
                       {"commit": "work: switched attempt"},
                       {"fail_times": 1, "summary": "not yet"}, {"result": "success"}],
            rejected: [{"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
                       {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2, 3]},
                       {"commit": "work: rejected attempt"}, {"result": "success"}]},
        "roles": {"refinery": [{"cd": "{worktree}"},
                               {"result": {"status": "rejected", "summary": "code.txt must never say BAD"}}]}})
    proc = run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0",
                                 "HIVE_TEST_COMMAND": FAILING_TEST}, expect=0)

    lost = {oid: s for oid, s in unreachable_commits(git, repo).items() if s.startswith("work:")}
    assert not lost, lost
    assert kept_refs(git, repo, switched) and kept_refs(git, repo, rejected)
    kept = [e for e in json.loads(hive("log", switched, "--json", cwd=repo).stdout) if e["event"] == "kept"]
    assert kept and all(e["summary"].startswith(f"refs/hive/attempts/{switched}/") for e in kept)
    assert set(kept_refs(git, repo, switched)) == {e["trailers"]["Hive-Ref"] for e in kept}
    assert f"refs/hive/attempts/{switched}/1: work: switched attempt" in hive("log", switched, cwd=repo).stdout
    # the fresh agent was told where the work of the one before it is kept
    switched_prompts = _worker_prompts(repo, switched)
    assert "switch 1 of 2: a fresh agent, in a clean worktree" in proc.stdout
    assert f"`refs/hive/attempts/{switched}/1`" in switched_prompts[-1]["text"]
    # the rejected commit itself (BAD) is among the kept heads
    assert any(git("show", f"{oid}:code.txt", cwd=repo).stdout == "BAD\n"
               for oid in kept_refs(git, repo, rejected).values())


def test_prune_removes_kept_attempts_and_transcripts_past_their_retention(repo, tmp_path, hive, git):
    env: dict[str, str] = {}
    issue = _escalate(repo, tmp_path, hive, env)
    hive("cancel", issue, cwd=repo)
    run_until_idle(repo, env, expect=0)    # the canceled issue's worktree goes: its head is kept
    assert kept_refs(git, repo, issue)
    transcripts = hive_dir(repo) / "transcripts" / issue
    assert list(transcripts.glob("*.jsonl"))
    assert "pruned 0 kept attempt(s) and 0 transcript(s)" in hive("prune", cwd=repo).stdout
    out = json.loads(hive("prune", "--json", cwd=repo, env={"HIVE_ATTEMPT_RETENTION_DAYS": "0"}).stdout)
    assert {a["ref"] for a in out["attempts"]} and not out["transcripts"]
    assert not kept_refs(git, repo, issue)
    assert re.search(r"and [1-9]\d* transcript\(s\)", hive("prune", "--older-than", "0", cwd=repo).stdout)
    assert not transcripts.exists()
    bad = hive("prune", "--older-than", "-1", cwd=repo, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# -- transcripts outlive the merge -----------------------------------------------------------------

def test_logs_work_on_a_finalized_and_a_canceled_issue(repo, tmp_path, hive, new_issue):
    finalized = new_issue("Lands")
    canceled = new_issue("Given up")
    script = write_script(tmp_path, {"issues": {
        finalized: [{"say": "working on it"}, {"write": "f.txt", "content": "f\n"}, {"commit": "work: f"},
                    {"result": "success"}],
        canceled: hopeless([{"say": "trying"}])}})
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0"}
    run_until_idle(repo, env, expect=3)
    hive("cancel", canceled, cwd=repo)
    run_until_idle(repo, env, expect=0)   # a run's start keeps transcripts within their retention
    for issue, said in ((finalized, "working on it"), (canceled, "trying")):
        assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["status"] in ("finalized", "canceled")
        assert said in hive("logs", issue, cwd=repo).stdout
        sessions = json.loads(hive("logs", issue, "--json", cwd=repo).stdout)
        assert sessions and any(e.get("text") == said for s in sessions for e in s["entries"])


# -- run --until-idle exit codes --------------------------------------------------------------------

def test_until_idle_exits_3_when_an_issue_escalated_and_says_which(repo, tmp_path, hive, new_issue):
    fine, stuck = new_issue("Fine"), new_issue("Stuck")
    script = write_script(tmp_path, {"issues": {stuck: hopeless([])}})
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0"}
    proc = run_until_idle(repo, env, expect=3)
    assert "1 finalized · 0 failed · 1 escalated" in proc.stdout
    assert f"escalated {stuck} Stuck: " in proc.stdout and fine not in proc.stdout.split("run summary:")[1]
    assert proc.stderr.strip().splitlines()[-1].startswith("git hive: idle, but 1 escalated and 0 failed")
    assert "Traceback" not in proc.stderr
    hive("cancel", stuck, cwd=repo)
    again = run_until_idle(repo, env, expect=0)   # nothing it ran needs a person
    assert "0 escalated" in again.stdout


# -- retries tell the truth and keep the work -------------------------------------------------------

SAYS_BAD = 'if grep -q BAD code.txt; then echo "code.txt still says BAD"; exit 1; fi'
REJECTING_REFINERY = [{"cd": "{worktree}"},
                      {"result": {"status": "rejected", "summary": "code.txt must never say BAD"}}]


def _worker_prompts(repo: Path, issue: str) -> list[dict]:
    from tests.daemon_helpers import jsonl

    return [p for p in jsonl(hive_dir(repo) / "scripted" / f"{issue}.prompts.jsonl")
            if p["role"] == "worker" and not p["fyi"]]


def _worker_sessions(repo: Path, issue: str) -> list[str]:
    from tests.daemon_helpers import jsonl

    return [s["session"] for s in jsonl(hive_dir(repo) / "scripted" / f"{issue}.sessions.jsonl")
            if s["role"] == "worker"]


def test_a_rejection_retried_by_the_same_agent_resumes_its_session_at_the_rejected_commit(
        repo, tmp_path, hive, git, new_issue):
    issue = new_issue("Write the code")
    at_rejected = "grep -q BAD code.txt && git log -1 --format=%s | grep -q '^work: bad'"
    script = write_script(tmp_path, {"issues": {issue: [
        {"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
        {"commit": "work: bad", "on_attempts": [1]},
        {"run": at_rejected, "must_succeed": True, "on_attempts": [2]},
        {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2]},
        {"commit": "work: good", "on_attempts": [2]},
        {"result": "success"}]}, "roles": {"refinery": REJECTING_REFINERY}})
    proc = run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": SAYS_BAD}, expect=0)

    assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["status"] == "finalized"
    assert git("show", "main:code.txt", cwd=repo).stdout == "GOOD\n"
    first, second = _worker_prompts(repo, issue)
    rejected = re.search(r"rejected the work at commit ([0-9a-f]{40})", second["text"]).group(1)
    assert git("show", f"{rejected}:code.txt", cwd=repo).stdout == "BAD\n"
    assert "code.txt must never say BAD" in second["text"] and "code.txt still says BAD" in second["text"]
    assert len(set(_worker_sessions(repo, issue))) == 1          # the same session, resumed
    claims = {e["agent"] for e in json.loads(hive("log", issue, "--json", cwd=repo).stdout) if e["event"] == "claimed"}
    assert len(claims) == 1                                      # by the same agent
    assert (f"{issue} rejected → open (retry 1 of 2 with the same agent, whose session resumes in its worktree "
            "at the rejected commit)") in proc.stdout
    assert f"{issue} resumes its session in its worktree at the rejected commit" in proc.stdout


def test_an_agent_switch_after_a_rejection_starts_clean_and_is_told_the_kept_ref(repo, tmp_path, hive, git,
                                                                                 new_issue):
    issue = new_issue("Write the code")
    script = write_script(tmp_path, {"issues": {issue: [
        {"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
        {"run": "test ! -e code.txt", "must_succeed": True, "on_attempts": [2]},   # a clean worktree
        {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2]},
        {"commit": "work: code"}, {"result": "success"}]}, "roles": {"refinery": REJECTING_REFINERY}})
    proc = run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": SAYS_BAD,
                                 "HIVE_MAX_RETRIES": "0"}, expect=0)

    assert git("show", "main:code.txt", cwd=repo).stdout == "GOOD\n"
    _, second = _worker_prompts(repo, issue)
    ref = re.search(r"`(refs/hive/attempts/[^`]+)`", second["text"]).group(1)
    assert git("show", f"{ref}:code.txt", cwd=repo).stdout == "BAD\n"
    assert "rejected the work at commit" in second["text"] and "code.txt still says BAD" in second["text"]
    assert len(set(_worker_sessions(repo, issue))) == 2
    assert f"(switch 1 of 2: a fresh agent, in a clean worktree; the rejected attempt is kept as {ref})" in proc.stdout
    assert f"{issue} starts clean; the last attempt is kept as {ref}" in proc.stdout


# -- every way a run ends releases what it held ----------------------------------------------------

HANGING = [{"say": "at work"}, {"hang": True}]


def _hanging_run(repo: Path, tmp_path: Path, new_issue, count: int = 2) -> tuple[list[str], dict[str, str]]:
    ids = [new_issue(f"Hangs {n}") for n in range(count)]
    script = write_script(tmp_path, {"default": HANGING})
    # unjailed: the agents' pids as this process sees them
    return ids, {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_AGENTS": "3", "HIVE_SANDBOX": "off"}


def _end_leftovers(repo: Path, *procs: subprocess.Popen) -> None:
    """Whatever a failed test left running: its processes, then every agent's process group."""
    from tests.daemon_helpers import all_agent_pids, alive

    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for pid in all_agent_pids(repo):
        if alive(pid):
            try:
                os.killpg(pid, 9)
            except OSError:
                pass


def _agents_at_work(repo: Path, count: int) -> bool:
    from tests.daemon_helpers import all_agent_pids, alive

    return len([p for p in all_agent_pids(repo) if alive(p)]) == count


def _assert_released(repo: Path, hive, ids: list[str]) -> None:
    from tests.daemon_helpers import all_agent_pids, alive

    listed = {i["id"]: i for i in json.loads(hive("list", "--json", cwd=repo).stdout)}
    assert [(listed[i]["status"], listed[i]["assignee"]) for i in ids] == [("open", "")] * len(ids)
    assert not [p for p in all_agent_pids(repo) if alive(p)]
    data = json.loads(hive("status", "--json", cwd=repo).stdout)
    assert not data["daemon"]["running"] and data["agents"] == []
    assert not [a for a in data["needs_attention"] if a["status"] == "in_progress"]


def _piped_run(repo: Path, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen, subprocess.Popen]:
    """`git hive run | tee run.log`, both in one new process group (what a terminal's job is)."""
    read, write = os.pipe()
    tee = subprocess.Popen(["tee", str(tmp_path / "run.log")], stdin=read, stdout=subprocess.DEVNULL,
                           process_group=0)
    hive_proc = subprocess.Popen(RUN, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=write,
                                 stderr=subprocess.DEVNULL, process_group=tee.pid)
    os.close(read)
    os.close(write)
    return hive_proc, tee


@pytest.mark.parametrize("sig, code", [(2, 130), (15, 143), (1, 129)], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_process_group_of_a_piped_run_releases_everything(repo, tmp_path, hive, new_issue,
                                                                          wait_for, sig, code):
    ids, env = _hanging_run(repo, tmp_path, new_issue)
    hive_proc, tee = _piped_run(repo, env, tmp_path)
    try:
        wait_for(lambda: _agents_at_work(repo, 2), "both agents to work", timeout=60)
        os.killpg(tee.pid, sig)                       # Ctrl-C, `kill -TERM -PGID`, a closed terminal
        assert hive_proc.wait(60) == code
        tee.wait(10)
    finally:
        _end_leftovers(repo, hive_proc, tee)
    _assert_released(repo, hive, ids)


def test_a_closed_stdout_ends_the_run_and_releases_everything(repo, tmp_path, hive, new_issue, wait_for):
    ids, env = _hanging_run(repo, tmp_path, new_issue)
    hive_proc, tee = _piped_run(repo, env, tmp_path)
    try:
        wait_for(lambda: _agents_at_work(repo, 2), "both agents to work", timeout=60)
        tee.kill()                                    # the reader dies alone: the next line is EPIPE
        tee.wait(10)
        ids.append(hive("create", "One more", cwd=repo).stdout.strip())   # something for the run to say
        assert hive_proc.wait(60) == 141
    finally:
        _end_leftovers(repo, hive_proc, tee)
    _assert_released(repo, hive, ids)


def test_a_signal_to_a_wrapper_shells_group_releases_everything(repo, tmp_path, hive, new_issue, wait_for):
    from hive import git as hive_git
    from hive.runtime import DaemonLock
    from tests.daemon_helpers import alive

    ids, env = _hanging_run(repo, tmp_path, new_issue)
    command = " ".join(shlex.quote(a) for a in RUN)
    wrapper = subprocess.Popen(["bash", "-c", f"{command} > run.log 2>&1; echo after"], cwd=repo, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _agents_at_work(repo, 2), "both agents to work", timeout=60)
        daemon = DaemonLock(hive_git.discover(repo)).holder()
        assert daemon and daemon != wrapper.pid
        os.killpg(wrapper.pid, 1)                     # SIGHUP: the terminal it ran in was closed
        wait_for(lambda: not alive(daemon), "the daemon to end", timeout=60)
        wrapper.wait(10)
    finally:
        _end_leftovers(repo, wrapper)
    _assert_released(repo, hive, ids)


def test_status_flags_issues_held_by_a_daemon_that_is_gone(repo, tmp_path, hive, new_issue, wait_for):
    ids, env = _hanging_run(repo, tmp_path, new_issue, count=1)
    daemon = subprocess.Popen(RUN, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _agents_at_work(repo, 1), "the agent to work", timeout=60)
        daemon.kill()                                 # SIGKILL: nothing is released
        daemon.wait(10)
    finally:
        _end_leftovers(repo, daemon)                  # and the agent it left behind
    data = json.loads(hive("status", "--json", cwd=repo).stdout)
    [flagged] = [a for a in data["needs_attention"] if a["issue"] == ids[0]]
    assert flagged["status"] == "in_progress" and "the next `git hive run` (or `git hive doctor --fix`)" \
        in flagged["reason"]
    text = hive("status", cwd=repo).stdout
    assert "daemon: not running" in text and f"{ids[0]}  in_progress" in text
    doctor = hive("doctor", cwd=repo, check=False).stdout
    assert f"1 issue(s) in_progress for a hive daemon that is gone ({ids[0]})" in doctor
    hive("doctor", "--fix", cwd=repo, check=False)
    _assert_released(repo, hive, ids)
    assert "issues in progress: none left" in hive("doctor", cwd=repo, check=False).stdout


def test_transcripts_go_past_their_retention_or_the_size_cap_oldest_first_never_an_issue_at_work(tmp_path):
    from hive.workspace import retention

    root = tmp_path / "hive" / "transcripts"
    now = 1_000_000_000.0
    made = {}
    for issue, days_old, size in (("hv-old001", 40, 10), ("hv-mid001", 5, 300), ("hv-new001", 1, 300),
                                  ("hv-busy01", 60, 10)):
        path = root / issue / f"{int(now - days_old * 86400) * 10**9:020d}-worker-w-abcdef.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - days_old * 86400, now - days_old * 86400))
        made[issue] = path
    removed = retention.prune_transcripts(tmp_path / "hive", 30, 10_000, busy={"hv-busy01"}, now=now)
    assert removed == [made["hv-old001"]] and not (root / "hv-old001").exists()   # its empty folder too
    # past the cap (here 400 bytes of 620): the oldest of the rest go first, the one at work stays
    removed = retention.prune_transcripts(tmp_path / "hive", 30, 400, busy={"hv-busy01"}, now=now)
    assert removed == [made["hv-mid001"]]
    assert made["hv-new001"].exists() and made["hv-busy01"].exists()


def test_a_commit_an_agent_made_before_its_daemon_was_killed_is_kept(repo, tmp_path, hive, git, new_issue,
                                                                     wait_for):
    """SIGKILL while the (jailed) agent works: its commit is in its private object store and on
    its worktree's detached HEAD only. The next run recovers the issue; the commit stays reachable."""
    issue = new_issue("Interrupted")
    script = write_script(tmp_path, {"issues": {issue: [
        {"write": "early.txt", "content": "early\n", "on_attempts": [1]},
        {"commit": "work: before the crash", "on_attempts": [1]},
        {"write": "committed.marker", "content": "", "on_attempts": [1]},
        {"hang": True, "on_attempts": [1]},
        {"write": "late.txt", "content": "late\n"}, {"commit": "work: after the crash"}, {"result": "success"}]}})
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_ANOMALY_FAILURE_THRESHOLD": "100"}
    daemon = subprocess.Popen(RUN, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (hive_dir(repo) / "worktrees" / issue / "committed.marker").exists(),
                 "the agent to commit", timeout=60)
        daemon.kill()
        daemon.wait(10)
    finally:
        _end_leftovers(repo, daemon)
    run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script)}, expect=0)
    assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["status"] == "finalized"
    kept = kept_refs(git, repo, issue)
    assert any(git("log", "-1", "--format=%s", oid, cwd=repo).stdout.strip() == "work: before the crash"
               for oid in kept.values()), kept
    assert not [s for s in unreachable_commits(git, repo).values() if s.startswith("work:")]
