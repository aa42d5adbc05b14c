"""Shared daemon mode: two clones of one bare remote, each running `git hive run --remote origin`.

Every test here starts real daemons (`python -m hive run --backend scripted --remote origin`) as
subprocesses in two clones of a local bare repository, with real scripted agent processes, and
proves what happened from the outside: the commits and trailers of `hive/state`, the remote's
target branch, `git hive list --json` on each clone, and the daemons' logs.

Issue 7's "Done means": the same 60-issue DAG worked by both clones at once (every issue finalized
exactly once, each issue's work on the remote target exactly once, identical `hive/state` after a
final sync, a person's edits on each clone kept); the remote unreachable for a while, then back;
one clone killed with SIGKILL, its claims taken over by the other after lease expiry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pygit2
import pytest

from hive.state.trust import printable
from tests.daemon_helpers import all_agent_pids, alive, hive_dir, start_daemon, stop_daemon, write_script


# -- helpers --------------------------------------------------------------------------------------

def _works_in(pid: int, clone: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd").startswith(str(clone.resolve()))
    except OSError:
        return False


def daemon_env(script: Path | None = None, **config: Any) -> dict[str, str]:
    env = {"HIVE_ANOMALY_FAILURE_THRESHOLD": "100", "HIVE_STALL_SECONDS": "120"}
    if script is not None:
        env["HIVE_SCRIPTED_SCRIPT"] = str(script)
    env.update({f"HIVE_{key.upper()}": str(value) for key, value in config.items()})
    return env


class Daemons:
    """The daemons a test started, and their agents: all gone when the test ends."""

    def __init__(self) -> None:
        self.started: list[tuple[subprocess.Popen, Path, Path]] = []

    def start(self, clone: Path, env: dict[str, str], *args: str, shared: bool = True) -> subprocess.Popen:
        log = clone.parent / f"{clone.name}-daemon.log"
        proc = start_daemon(clone, env, *(["--remote", "origin"] if shared else []), *args, log=log)
        self.started.append((proc, clone, log))
        return proc

    def log_of(self, proc: subprocess.Popen) -> str:
        for started, _, log in self.started:
            if started is proc:
                return log.read_text(encoding="utf-8", errors="replace")
        return ""

    def wait(self, proc: subprocess.Popen, timeout: float) -> None:
        """Wait for a daemon to exit on its own (`--until-idle`) with code 0."""
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not finish within {timeout}s\n{self.logs()}") from None
        assert code == 0, f"the daemon exited {code}\n{self.logs()}"

    def logs(self) -> str:
        """Each daemon's output, and where an unexpected stop came from (its daemon.log)."""
        parts = []
        for _, clone, log in self.started:
            if log.exists():
                parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-6000:]}")
            kept = clone / ".git" / "hive" / "daemon.log"
            text = kept.read_text(errors="replace") if kept.exists() else ""
            if "daemon stopped by" in text:
                parts.append(f"--- {clone.name}/.git/hive/daemon.log\n{text[text.rindex('daemon stopped by'):][:4000]}")
        return "\n".join(parts)

    def cleanup(self) -> None:
        for proc, _, _ in self.started:
            stop_daemon(proc)
        for _, clone, _ in self.started:
            for pid in all_agent_pids(clone):  # agents are process-group leaders
                # a jailed agent records its jail's pid, not the host's: only what works in the clone
                if alive(pid) and _works_in(pid, clone):
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


@pytest.fixture
def daemons() -> Any:
    tracker = Daemons()
    yield tracker
    tracker.cleanup()


def create_issues(clone: Path, plan: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Create issues in `clone`, in this process (fast): `(title, fields)` where the fields are
    those of `issues.create`, with `depends_on` given as indexes into the plan."""
    from hive.project import Project
    from hive import issues

    project = Project.open(clone)
    ids: list[str] = []
    try:
        project.sync(warn=False)
        for title, fields in plan:
            fields = dict(fields)
            fields["depends_on"] = [ids[i] for i in fields.get("depends_on", [])]
            ids.append(issues.create(project, title, **fields).id)
    finally:
        project.close()
    return ids


def double_claims(clone: Path) -> list[str]:
    from hive import git as hive_git
    from hive.state.history import double_claims as find

    return find(hive_git.discover(clone))


def statuses(cli: Callable[..., Any], clone: Path) -> dict[str, str]:
    return {issue["id"]: issue["status"] for issue in json.loads(cli("list", "--json", cwd=clone).stdout)}


def state_tip(git: Callable[..., Any], where: Path, ref: str = "hive/state") -> str:
    return git("rev-parse", ref, cwd=where).stdout.strip()


def work_commits(git: Callable[..., Any], remote: Path, branch: str = "main") -> Counter:
    """How many commits of the remote's branch touched each `hive-work/<issue>.txt`."""
    out = git("log", "--format=", "--name-only", branch, "--", "hive-work/", cwd=remote).stdout
    return Counter(Path(line).stem for line in out.split() if line.startswith("hive-work/"))


def agents_in_log(text: str) -> set[str]:
    """The agent ids a daemon's log says it claimed issues for."""
    return {line.split(" claimed by ", 1)[1].split(":", 1)[0] for line in text.splitlines()
            if " claimed by " in line}


def holds_twice(log: list[Any]) -> list[str]:
    """Claims made while another agent held the issue, reading the history in order (a lease
    that expired releases the issue too)."""
    holder: dict[str, str] = {}
    problems = []
    for commit in log:
        if not commit.issue:
            continue
        if commit.event == "claimed":
            if holder.get(commit.issue):
                problems.append(f"{commit.issue}: {commit.trailers.get('Hive-Agent')} over {holder[commit.issue]}")
            holder[commit.issue] = commit.trailers.get("Hive-Agent", "?")
        elif commit.event in ("done", "released", "recovered", "escalated", "canceled", "rejected",
                              "finalized", "failed", "lease-expired"):
            holder.pop(commit.issue, None)
    return problems


def dag(groups: int = 10) -> list[tuple[str, dict[str, Any]]]:
    """`6 * groups` issues, per group two chains joined by a fan-in and a tail that also waits
    for the previous group's fan-in (blockers as indexes):

        a; b <- a; c <- b; d <- a; e <- c, d; f <- e (+ the previous group's e)
    """
    plan: list[tuple[str, dict[str, Any]]] = []
    for g in range(groups):
        a, b, c, d, e, _ = range(6 * g, 6 * g + 6)
        for key, deps in (("a", []), ("b", [a]), ("c", [b]), ("d", [a]), ("e", [c, d]),
                          ("f", [e] + ([e - 6] if g else []))):
            plan.append((f"group {g} step {key}", {"depends_on": deps}))
    return plan


# -- 1. the same 60-issue DAG, two machines at once ------------------------------------------------

@pytest.mark.timeout(200)
def test_two_clones_work_one_60_issue_dag_every_issue_once(clones, cli, git, state_log, wait_for, daemons):
    remote, (a, b) = clones("A", "B")
    plan = dag(10)
    ids = create_issues(a, plan)
    blockers_of = {ids[n]: [ids[i] for i in fields["depends_on"]] for n, (_, fields) in enumerate(plan)}
    cli("sync", cwd=a)
    cli("sync", cwd=b)
    assert len(ids) == 60 and set(statuses(cli, b)) == set(ids)

    env = daemon_env(max_agents=3)
    started = time.monotonic()
    run_a = daemons.start(a, env, "--until-idle", "--max-agents", "3")
    run_b = daemons.start(b, env, "--until-idle", "--max-agents", "3")

    # a person on each clone, while both daemons run
    wait_for(lambda: "finalized" in statuses(cli, a).values(), "a first issue finalized", timeout=60)
    cli("note", "the person on A wrote this", "--category", "context", cwd=a)
    late = ids[-1]
    cli("update", late, "-l", "touched-by-b", cwd=b)
    extra = cli("create", "a person's issue, made on B", cwd=b).stdout.strip()
    assert statuses(cli, a)[late] != "finalized"   # the edits really happened mid-run

    daemons.wait(run_a, 150)
    daemons.wait(run_b, 150)
    elapsed = time.monotonic() - started
    cli("sync", cwd=a)
    cli("sync", cwd=b)

    # the two clones agree, commit for commit, and with the remote
    assert state_tip(git, a, "hive/state^{tree}") == state_tip(git, b, "hive/state^{tree}")
    assert state_tip(git, a) == state_tip(git, b) == state_tip(git, remote)

    every = ids + [extra]
    for clone in (a, b):
        assert statuses(cli, clone) == {i: "finalized" for i in every}
    log = state_log(a)
    finalized = Counter(c.issue for c in log if c.event == "finalized")
    assert {i: finalized[i] for i in every} == {i: 1 for i in every}
    assert double_claims(a) == []
    # the remote target holds each issue's work exactly once
    assert work_commits(git, remote) == Counter({i: 1 for i in every})
    # one claim per issue: a claim whose push lost left no trace in the shared history
    claimed = Counter(c.issue for c in log if c.event == "claimed")
    assert {i: claimed[i] for i in every} == {i: 1 for i in every}
    # both machines worked, and every claim was made knowing its blockers were done
    claims = {c.issue: c for c in log if c.event == "claimed"}
    agents_a, agents_b = agents_in_log(daemons.log_of(run_a)), agents_in_log(daemons.log_of(run_b))
    by_a = [i for i, c in claims.items() if c.trailers.get("Hive-Agent") in agents_a]
    by_b = [i for i, c in claims.items() if c.trailers.get("Hive-Agent") in agents_b]
    assert by_a and by_b and sorted(by_a + by_b) == sorted(every)
    repo = pygit2.Repository(str(a / ".git"))
    done = {c.issue: c.oid for c in log if c.event == "done"}
    for issue_id, blockers in blockers_of.items():
        for blocker in blockers:
            assert repo.descendant_of(claims[issue_id].oid, done[blocker]), (issue_id, blocker)
    # the person's edits survived
    notes = json.loads(cli("notes", "--json", cwd=b).stdout)
    assert [n["content"] for n in notes].count("the person on A wrote this") == 1
    assert "touched-by-b" in json.loads(cli("show", late, "--json", cwd=a).stdout)["labels"]
    print(f"\n60-issue DAG on two clones: {elapsed:.1f}s; claims A {len(by_a)}, B {len(by_b)}")


# -- 2. the remote unreachable for a while, then back ----------------------------------------------

@pytest.mark.timeout(150)
def test_remote_unreachable_for_a_while_then_back(clones, cli, git, state_log, wait_for, daemons, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    plan = [(f"slow {i}", {"labels": ["slow"], "priority": 0}) for i in range(3)]
    plan += [(f"quick {i}", {"priority": 1}) for i in range(5)]
    plan += [("after the slow ones", {"priority": 1, "depends_on": [0, 1, 2]})]
    ids = create_issues(a, plan)
    slow = ids[:3]
    cli("sync", cwd=a)
    script = write_script(tmp_path, {"labels": {"slow": [
        {"sleep": 6}, {"write": "hive-work/{issue}.txt", "content": "work of {issue}\n"},
        {"commit": "{issue}: work"}, {"result": "success", "summary": "slow work"}]}})
    run = daemons.start(a, daemon_env(script), "--until-idle", "--max-agents", "3")

    def slow_at_work() -> bool:
        sessions = [hive_dir(a) / "scripted" / f"{i}.sessions.jsonl" for i in slow]
        return all(path.exists() for path in sessions)

    wait_for(slow_at_work, "the three slow agents at work", timeout=30)
    claimed_before = sum(1 for c in state_log(a) if c.event == "claimed")
    away = tmp_path / "remote-away.git"
    remote.rename(away)
    wait_for(lambda: "unreachable" in daemons.log_of(run), "the daemon to notice", timeout=20)

    # offline: the running work goes on and is done locally; no new claim; the merges wait
    wait_for(lambda: all(statuses(cli, a)[i] == "done" for i in slow), "the slow work done offline", timeout=30)
    cli("note", "written while the remote was away", cwd=a)

    def merges_wait() -> bool:
        queue = json.loads(cli("status", "--json", cwd=a).stdout)["merge_queue"]
        return len(queue) == 3 and all(e["state"] == "waiting" and "unreachable" in e["detail"] for e in queue)

    wait_for(merges_wait, "the merges waiting for the remote", timeout=20)
    offline = statuses(cli, a)
    assert sum(1 for c in state_log(a) if c.event == "claimed") == claimed_before
    assert not [i for i, s in offline.items() if s == "in_progress"], offline
    assert sorted(i for i, s in offline.items() if s == "open") == sorted(ids[3:])
    assert run.poll() is None

    away.rename(remote)
    daemons.wait(run, 100)

    text = daemons.log_of(run)
    assert "reachable again" in text
    log = state_log(a)
    finalized = Counter(c.issue for c in log if c.event == "finalized")
    assert {i: finalized[i] for i in ids} == {i: 1 for i in ids}
    assert double_claims(a) == []
    assert work_commits(git, remote) == Counter({i: 1 for i in ids})
    # nothing lost: the other clone gets it all from the remote
    cli("sync", cwd=b)
    assert statuses(cli, b) == {i: "finalized" for i in ids}
    notes = [n["content"] for n in json.loads(cli("notes", "--json", cwd=b).stdout)]
    assert notes.count("written while the remote was away") == 1
    assert state_tip(git, b) == state_tip(git, remote)


@pytest.mark.timeout(150)
def test_a_lease_that_lapsed_while_the_machine_was_cut_off_is_claimed_again_for_the_agent_at_work(
        clones, cli, git, state_log, wait_for, daemons, tmp_path: Path):
    """A is cut off while its agent works; B sees the lease lapse on the remote and reopens the
    issue. Back online, A merges the reopen while its agent still works: it claims the issue
    again for that agent (no second worker, no wasted work) and lands the work once."""
    from hive import lifecycle
    from hive.project import Project

    lease = 4
    remote, (a, b) = clones("A", "B")
    (issue,) = create_issues(a, [("slow", {"labels": ["slow"]})])
    cli("sync", cwd=a)
    gate = tmp_path / "go-on"
    script = write_script(tmp_path, {"labels": {"slow": [
        {"run": f"while [ ! -e {gate} ]; do sleep 0.1; done", "timeout": 120},
        {"write": "hive-work/{issue}.txt", "content": "A's work\n"},
        {"commit": "{issue}: work"}, {"result": "success", "summary": "slow work"}]}})
    # unjailed: the agent waits for a file of the test's
    run = daemons.start(a, daemon_env(script, lease_seconds=lease, sandbox="off"), "--until-idle",
                        "--max-agents", "2")
    wait_for(lambda: (hive_dir(a) / "scripted" / f"{issue}.sessions.jsonl").exists(), "A's agent at work", timeout=30)
    url = git("config", "remote.origin.url", cwd=a).stdout.strip()
    git("config", "remote.origin.url", str(tmp_path / "nowhere.git"), cwd=a)
    wait_for(lambda: "working locally" in daemons.log_of(run), "A to notice it is cut off", timeout=20)

    # B, as any machine would: the lease it sees has lapsed, the issue is reopened and pushed
    cli("sync", cwd=b)
    project = Project.open(b)
    try:
        held = project.index.get(issue)
        assert held is not None and held.status == "in_progress"
        wait_for(lambda: lifecycle.lease_expired(held, lease), "the lease to lapse on B's copy", timeout=3 * lease)
        lifecycle.expire_lease(project, issue, held.assignee, str(held.extra["lease_expires"]), lease)
    finally:
        project.close()
    git("push", "-q", "origin", "hive/state", cwd=b)

    git("config", "remote.origin.url", url, cwd=a)
    wait_for(lambda: "claimed again" in daemons.log_of(run), "A to claim it again", timeout=60)
    gate.touch()
    daemons.wait(run, 60)

    events = [c for c in state_log(a) if c.issue == issue]
    names = [c.event for c in events]
    # (A's extensions made while cut off are concurrent with the expiry: either order)
    after = [name for name in names[names.index("lease-expired"):] if name not in ("lease-extended", "synced")]
    assert after[:2] == ["lease-expired", "claimed"] and after.count("finalized") == 1, names
    assert [c.trailers.get("Hive-Agent") for c in events if c.event == "claimed"] == [held.assignee] * 2
    assert double_claims(a) == []
    assert work_commits(git, remote) == Counter({issue: 1})
    assert "A's work" in git("show", f"main:hive-work/{issue}.txt", cwd=remote).stdout


# -- 3. one clone killed with SIGKILL: its claims are taken over after the lease -------------------

@pytest.mark.timeout(150)
def test_sigkilled_clone_issues_are_taken_over_after_lease_expiry(clones, cli, git, state_log, wait_for, daemons,
                                                                  tmp_path: Path):
    lease = 6
    remote, (a, b) = clones("A", "B")
    plan = [(f"slow {i}", {"labels": ["slow"], "priority": 0}) for i in range(3)]
    plan += [(f"quick {i}", {"priority": 1}) for i in range(4)]
    ids = create_issues(a, plan)
    slow = ids[:3]
    cli("sync", cwd=a)
    cli("sync", cwd=b)
    # on A the slow issues take long; on B every issue is quick
    slow_script = write_script(tmp_path, {"labels": {"slow": [
        {"sleep": 30}, {"write": "hive-work/{issue}.txt", "content": "A's work\n"},
        {"commit": "{issue}: work"}, {"result": "success", "summary": "slow"}]}}, "slow.json")
    # unjailed: the test kills A's agents by the pids they record (a jail's are its own namespace's)
    run_a = daemons.start(a, daemon_env(slow_script, lease_seconds=lease, sandbox="off"), "--until-idle",
                          "--max-agents", "3")

    def a_holds_the_slow_ones() -> bool:
        states = statuses(cli, a)
        sessions = [hive_dir(a) / "scripted" / f"{i}.sessions.jsonl" for i in slow]
        return all(states[i] == "in_progress" for i in slow) and all(p.exists() for p in sessions)

    wait_for(a_holds_the_slow_ones, "A's agents on the three slow issues", timeout=30)
    run_b = daemons.start(b, daemon_env(lease_seconds=lease), "--until-idle", "--max-agents", "3")
    wait_for(lambda: all(s == "finalized" for i, s in statuses(cli, b).items() if i not in slow),
             "B finishing the quick issues", timeout=60)
    # A keeps its leases alive while it works: B has reopened nothing so far; hold a lease long
    deadline = time.monotonic() + lease + 1
    while time.monotonic() < deadline:
        assert run_b.poll() is None
        time.sleep(0.2)
    # the machine dies: the daemon and its agents
    holders = {i: json.loads(cli("show", i, "--json", cwd=a).stdout)["assignee"] for i in slow}
    killed_at = time.time()
    run_a.send_signal(signal.SIGKILL)
    run_a.wait(10)
    for pid in all_agent_pids(a):
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)

    daemons.wait(run_b, 90)

    cli("sync", cwd=b)
    log = state_log(b)
    for issue_id in slow:
        events = [c for c in log if c.issue == issue_id]
        names = [c.event for c in events]
        expired = [c for c in events if c.event == "lease-expired"]
        assert len(expired) == 1, names
        assert expired[0].trailers.get("Hive-Previous-Agent") == holders[issue_id]
        after = names[names.index("lease-expired"):]
        assert after[:2] == ["lease-expired", "claimed"] and after.count("finalized") == 1, names
    # no lease expired while A was alive (its leases were extended), none before it died
    expiry_times = [int(git("log", "-1", "--format=%ct", c.oid, cwd=b).stdout) for c in log
                    if c.event == "lease-expired"]
    assert min(expiry_times) >= int(killed_at) - 1
    assert statuses(cli, b) == {i: "finalized" for i in ids}
    finalized = Counter(c.issue for c in log if c.event == "finalized")
    assert {i: finalized[i] for i in ids} == {i: 1 for i in ids}
    assert holds_twice(log) == []
    assert work_commits(git, remote) == Counter({i: 1 for i in ids})
    assert "A's work" not in git("log", "-p", "main", cwd=remote).stdout


HOSTILE_MACHINE = "\x1b]52;c;ZXZpbA==\x07\x1b[2Jbox:B\nforged line " + "x" * 500   # as hive/state may hold it


@pytest.mark.timeout(60)
@pytest.mark.parametrize("branch_left, hostile", [(False, False), (True, False), (False, True)])
def test_a_merge_queued_before_the_issue_was_taken_over_is_left_to_the_machine_that_did_it(
        branch_left: bool, hostile: bool, clones, cli, git, wait_for, daemons):
    """A killed machine had queued its issue for merge; its lease expired, another machine claimed
    the issue and its agent finished it. Back, the first machine finds the issue done: that `done`
    is the other machine's to merge. The stale entry leaves this queue and this machine's copy of
    the work is retired (its head kept) — whether its recovery had already removed the work branch
    (the issue failed then: "branch hive/work/<id> is gone") or not (its stale work landed)."""
    from hive import lifecycle
    from hive.orchestrator.orphans import machine_name
    from hive.project import Project
    from hive.runtime import Runtime
    from hive.workspace import worktrees

    remote, (a, b) = clones("A", "B")
    (issue_id,) = create_issues(a, [("taken over while A was down", {})])
    base = git("rev-parse", "main", cwd=a).stdout.strip()
    stale = ""
    if branch_left:
        git("switch", "-q", "-c", worktrees.branch_name(issue_id), cwd=a)
        (a / "stale.txt").write_text("A's copy\n")
        git("add", "stale.txt", cwd=a)
        git("commit", "-q", "-m", "A's copy", cwd=a)
        stale = git("rev-parse", "HEAD", cwd=a).stdout.strip()
        git("switch", "-q", "main", cwd=a)
    project = Project.open(a)
    runtime = Runtime(project.paths)
    try:
        runtime.merge_queue.add(issue_id, worktrees.branch_name(issue_id), base)   # A's, from before
        runtime.record_handoff(issue_id)
        other = HOSTILE_MACHINE if hostile else machine_name(Project.open(b).paths)
        assert lifecycle.claim(project, issue_id, "w-b00001", lease_seconds=600, machine=other)
        lifecycle.finish(project, issue_id, "w-b00001", "done on B", {})
    finally:
        runtime.close()
        project.close()

    run = daemons.start(a, daemon_env(lease_seconds=600), "--max-agents", "1")
    shown = printable(other)[:120]   # a machine name from hive/state: never a control character on a terminal
    assert not hostile or ("\x1b" not in shown and "\n" not in shown and len(shown) == 120)
    left = f"{issue_id} left the merge queue: done by an agent of {shown}, whose merge lands it"
    outcomes = (left, "is gone", "merged into")
    wait_for(lambda: any(o in daemons.log_of(run) for o in outcomes), "A's merge step on the entry", timeout=30)
    stop_daemon(run)   # it waits for B to land the issue: a shared queue is idle once all is finalized
    assert run.returncode == 143, daemons.logs()
    said = daemons.log_of(run)
    assert left in said and "is gone" not in said and "merged into" not in said, said
    assert statuses(cli, a)[issue_id] == "done"    # B's to land
    git("fetch", "-q", "origin", cwd=a)
    assert issue_id not in git("log", "--format=%B", "origin/main", cwd=a).stdout
    assert git("branch", "--list", worktrees.branch_name(issue_id), cwd=a).stdout == ""
    if stale:   # retired, not lost
        kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{issue_id}", cwd=a).stdout
        assert stale in kept.split(), kept


@pytest.mark.timeout(120)
def test_a_remote_that_refuses_the_state_update_is_reported_as_such_and_work_resumes_once_it_takes_it(
        clones, cli, git, wait_for, daemons):
    """A lock file left on the remote (a push cut short there) makes it refuse every update of
    `hive/state`; no other machine's push moved the branch, so hive says what git says instead of
    taking it for a lost race ("lost to another machine's claim", retried forever). It is said
    once, while the claim is tried again at every round. Following git's advice — remove the
    lock — the run goes on and finishes."""
    remote, (a,) = clones("A")
    ids = create_issues(a, [("one", {}), ("two", {})])
    cli("sync", cwd=a)
    lock = remote / "refs" / "heads" / "hive" / "state.lock"
    lock.write_text("0" * 40 + "\n")
    pushes = remote / "pushes-seen"
    hook = remote / "hooks" / "pre-receive"   # runs before the refs are locked: counts every try
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\necho push >> '{pushes}'\n")
    hook.chmod(0o755)
    run = daemons.start(a, daemon_env(lease_seconds=600), "--until-idle", "--max-agents", "1")
    refused = "remote origin refused the update of hive/state (no other push moved it): "
    wait_for(lambda: refused in daemons.log_of(run), "the refusal reported", timeout=30)
    tried = len(pushes.read_text().splitlines())
    wait_for(lambda: len(pushes.read_text().splitlines()) >= tried + 3, "claims tried again", timeout=30)
    said = daemons.log_of(run)
    assert "cannot lock ref 'refs/heads/hive/state'" in said.split(refused, 1)[1].splitlines()[0], said
    assert "lost to another machine's claim" not in said, said
    assert said.count(" not claimed: ") == 1, said
    assert run.poll() is None
    lock.unlink()
    daemons.wait(run, 90)
    assert statuses(cli, a) == {i: "finalized" for i in ids}
    assert "lost to another machine's claim" not in daemons.log_of(run)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "local"])
def test_a_blobless_clone_lands_onto_a_target_that_moved_while_its_agents_worked(
        clones, cli, git, wait_for, daemons, tmp_path: Path, shared: bool):
    """A blobless clone (`--filter=blob:none`) whose target moved on while its agents worked:
    another machine pushed a file to `main`, and hive fetched it (shared mode), or the person did
    (`git fetch origin main:main` from a feature branch). libgit2 fetches no missing file, so each
    landing's replay failed "invalid object specified - from-a.txt", again every two seconds,
    forever. The target's files are brought from the promisor remote before a landing reads
    them: the tests (which read that file) pass, and both issues land on the new `main`."""
    remote, (a,) = clones("A")
    git("config", "uploadpack.allowFilter", "true", cwd=remote)
    b = tmp_path / "B"
    git("clone", "-q", "--filter=blob:none", f"file://{remote}", str(b))
    git("checkout", "-q", "-b", "feature", cwd=b)
    cli("init", cwd=b)
    ids = create_issues(b, [("one", {"labels": ["slow"]}), ("two", {"labels": ["slow"]})])
    gate = tmp_path / "go-on"
    script = write_script(tmp_path, {"labels": {"slow": [
        {"run": f"while [ ! -e {gate} ]; do sleep 0.1; done", "timeout": 60},
        {"write": "hive-work/{issue}.txt", "content": "B's work\n"},
        {"commit": "{issue}: work"}, {"result": "success", "summary": "done"}]}})
    # unjailed: the agents wait for a file of the test's
    env = daemon_env(script, lease_seconds=600, sandbox="off", test_command="grep -q 'A' from-a.txt")
    run = daemons.start(b, env, "--until-idle", "--max-agents", "2", shared=shared)
    wait_for(lambda: all((hive_dir(b) / "scripted" / f"{i}.sessions.jsonl").exists() for i in ids),
             "both agents at work", timeout=30)
    (a / "from-a.txt").write_text("A's work\n" * 100, encoding="utf-8")
    git("add", "from-a.txt", cwd=a)
    git("commit", "-q", "-m", "A's own work", cwd=a)
    git("push", "-q", "origin", "main", cwd=a)
    if not shared:   # the person's fetch brings no file of it: the shared daemon's neither
        git("fetch", "-q", "origin", "main:main", cwd=b)
        assert "?" in git("rev-list", "--objects", "--no-walk", "--missing=print", "main", cwd=b).stdout
    gate.write_text("", encoding="utf-8")
    daemons.wait(run, 60)
    assert statuses(cli, b) == {i: "finalized" for i in ids}, daemons.logs()
    assert "merge error" not in daemons.log_of(run)
    landed = "origin/main" if shared else "main"
    assert git("show", f"{landed}:from-a.txt", cwd=b).stdout == "A's work\n" * 100
    assert {f"hive-work/{i}.txt" for i in ids} <= set(git("ls-tree", "-r", "--name-only", landed, cwd=b).stdout.split())


def test_recovery_retires_the_copy_of_an_issue_another_machine_finished_and_keeps_its_own(clones, cli, git):
    """At a start (`doctor --fix` does the same), a done issue's work branch is kept for its merge —
    only when this machine's agent did it: the copy of an issue another machine took over and
    finished is stale here and goes (its head kept), or it stays behind forever."""
    from hive import lifecycle
    from hive.orchestrator.orphans import machine_name
    from hive.project import Project
    from hive.workspace import worktrees

    remote, (a, b) = clones("A", "B")
    theirs, ours = create_issues(a, [("taken over and finished by B", {}), ("finished here", {})])
    project = Project.open(a)
    try:
        base = git("rev-parse", "main", cwd=a).stdout.strip()
        heads = {}
        for issue_id, machine in ((theirs, machine_name(Project.open(b).paths)), (ours, machine_name(project.paths))):
            tree = worktrees.create(project.paths, issue_id, base).path
            (tree / f"{issue_id}.txt").write_text("work\n")
            git("add", "-A", cwd=tree)
            git("commit", "-q", "-m", f"{issue_id} work", cwd=tree)
            heads[issue_id] = worktrees.adopt_head(project.paths, issue_id)
            assert lifecycle.claim(project, issue_id, "w-000001", lease_seconds=600, machine=machine)
            lifecycle.finish(project, issue_id, "w-000001", "done", {})
    finally:
        project.close()

    cli("doctor", "--fix", cwd=a, check=False)
    assert git("branch", "--list", f"hive/work/{theirs}", cwd=a).stdout == ""
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{theirs}", cwd=a).stdout.split()
    assert heads[theirs] in kept
    assert git("rev-parse", f"hive/work/{ours}", cwd=a).stdout.strip() == heads[ours]   # for this machine's merge


def test_a_draft_claim_moves_no_ref_until_it_is_published(project, new_issue):
    """Shared mode builds its claim as a draft, pushes it, and only then publishes it locally."""
    from hive import lifecycle

    issue = new_issue("claimed through a remote")
    store = project.store
    base = store.tip()
    assert base is not None
    with store.draft(base) as draft:
        assert lifecycle.claim(project, issue, "w-aaaaaa")
    assert draft.made and store.tip() == base                      # built, not on the branch
    assert store.repo[draft.made].parents[0].id == pygit2.Oid(hex=base)
    assert store.publish(draft, "claim") and store.tip() == draft.made
    assert not store.publish(draft, "claim again")                   # the base is not the tip any more
    project.update_index()
    assert (project.index.get(issue).status, project.index.get(issue).assignee) == ("in_progress", "w-aaaaaa")
