"""Several machines on one queue, exactly once and in order (issue 18).

Three clones of one repository on a shared bare remote, each running
`git hive run --backend scripted --remote origin --max-agents 2 --until-idle` on issues made of
chains, a fan-out and stand-alone issues. During the run, at moments drawn from a seeded random
generator: one daemon is SIGKILLed while it holds a claim (its lease then expires and another
machine takes the issue over), a git lock is left behind in its repository (as a kill in the middle
of a fetch leaves one), the others lose the remote for a while (their address of it leads nowhere,
then back), and the killed daemon is restarted. Everything asserted afterwards is read from git alone:

- no issue held by two agents at once (the `hive/state` history);
- exactly-once landing: each issue's `Hive-Issue` trailer once on the target's first-parent history;
- order: every blocker's landing before its dependents' on that history;
- convergence: every clone's `hive/state` is the remote's, every issue finalized everywhere;
- no leftovers: no `hive/work/*` branch on the remote or in any clone, no worktree, no git lock.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.daemon_helpers import alive

from .helpers import (bulk_issues, daemon_env, double_claims, fsck_problems, git_locks, leftovers,
                      tail, wait_until, work_steps, write_json)

LEASE_SECONDS = 8


def plan() -> list[dict[str, Any]]:
    """Two chains of four, a fan-out of one root and four children, five stand-alone issues.
    The `slow` ones take a second: a daemon killed at a random moment likely holds one."""
    specs: list[dict[str, Any]] = []
    for chain in range(2):
        for step in range(4):
            deps = [len(specs) - 1] if step else []
            specs.append({"title": f"chain {chain} step {step}", "deps": deps, "labels": ["slow"] if step % 2 else []})
    root = len(specs)
    specs.append({"title": "fan-out root", "labels": ["slow"]})
    specs += [{"title": f"fan-out child {n}", "deps": [root]} for n in range(4)]
    specs += [{"title": f"stand-alone {n}", "labels": ["slow"] if n % 2 else []} for n in range(5)]
    return specs


def landings(git: Callable[..., Any], where: Path, ref: str = "main") -> list[str]:
    """The `Hive-Issue` trailers of `ref`'s first-parent history, oldest first."""
    out = git("log", "--first-parent", "--reverse", "--format=%(trailers:key=Hive-Issue,valueonly)%x1e",
              ref, cwd=where).stdout
    return [record.strip() for record in out.split("\x1e") if record.strip()]


def state_of(git: Callable[..., Any], clone: Path) -> dict[str, dict[str, Any]]:
    """Every issue file of `hive/state` read from git: id → front matter."""
    import tomllib

    tip = git("rev-parse", "hive/state", cwd=clone).stdout.strip()   # one commit: the ref moves
    names = git("ls-tree", "-r", "--name-only", tip, "issues/", cwd=clone).stdout.split()
    issues = {}
    for name in (n for n in names if n.endswith(".md")):
        text = git("show", f"{tip}:{name}", cwd=clone).stdout
        issues[Path(name).stem] = tomllib.loads(text.split("+++")[1])
    return issues


def holds_twice(state_log: Callable[..., list], clone: Path) -> list[str]:
    holder: dict[str, str] = {}
    problems = []
    releasing = {"done", "released", "recovered", "escalated", "canceled", "rejected", "finalized", "failed",
                 "lease-expired"}
    for commit in state_log(clone):
        if commit.event == "claimed":
            if holder.get(commit.issue):
                problems.append(f"{commit.issue}: {commit.trailers.get('Hive-Agent')} over {holder[commit.issue]}")
            holder[commit.issue] = commit.trailers.get("Hive-Agent", "?")
        elif commit.event in releasing:
            holder.pop(commit.issue, None)
    return problems


class Machines:
    """The three clones and their daemons."""

    def __init__(self, clones: list[Path], env: dict[str, str], daemons: Any) -> None:
        self.clones, self.env, self.daemons = clones, env, daemons
        self.procs: dict[Path, subprocess.Popen] = {}

    def log(self, clone: Path) -> Path:
        return clone.parent / f"{clone.name}-daemon.log"

    def start(self, clone: Path) -> None:
        self.procs[clone] = self.daemons.start(clone, self.env, "--remote", "origin", "--until-idle",
                                               "--max-agents", "2", log=self.log(clone))

    def holding(self, git: Callable[..., Any], clone: Path, where: Path | None = None) -> list[str]:
        """The issues in progress under one of `clone`'s agents, in `where`'s state (`clone`'s)."""
        mine = {line.split(" claimed by ", 1)[1].split(":", 1)[0]
                for line in self.log(clone).read_text(errors="replace").splitlines() if " claimed by " in line}
        return [i for i, fields in state_of(git, where or clone).items()
                if fields.get("status") == "in_progress" and fields.get("assignee") in mine]

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for clone, proc in self.procs.items():
            try:
                code = proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{clone.name}'s daemon did not finish\n{self.tails()}") from None
            assert code == 0, f"{clone.name}'s daemon exited {code}\n{self.tails()}"

    def tails(self) -> str:
        return "\n".join(f"--- {c.name}\n{tail(self.log(c), 60)}" for c in self.clones)


def git_children(pid: int) -> list[int]:
    """The `git` processes `pid` has started and not yet reaped (its fetches and pushes)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if int(fields[1]) == pid and name.startswith("git"):
            found.append(int(stat.parent.name))
    return found


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", [18, 1800])
def test_three_machines_kill_lock_unreachable_lease(seed: int, clones, cli, git, state_log, daemons,
                                                     tmp_path: Path):
    rng = random.Random(seed)
    remote, machines = clones("c0", "c1", "c2")
    from hive.project import Project

    project = Project.open(machines[0])
    try:
        specs = plan()
        ids = bulk_issues(project, specs)
    finally:
        project.close()
    blockers = {ids[n]: [ids[d] for d in spec.get("deps", ())] for n, spec in enumerate(specs)}
    for clone in machines:
        cli("sync", cwd=clone)
    script = write_json(tmp_path / "script.json", {
        "default": work_steps(),
        "labels": {"slow": work_steps([{"sleep": 1}])}})
    # unjailed: the agents of the killed daemon are checked by the pids they record
    run = Machines(machines, daemon_env(script, lease_seconds=LEASE_SECONDS, sandbox="off"), daemons)
    for clone in machines:
        run.start(clone)

    # 1. the victim is SIGKILLed at a random moment while it holds a claim: the seed picks it among
    # the machines seen holding one (an instant agent holds its claim for milliseconds: a machine
    # picked beforehand could finish its whole share unseen, CI saw it once)
    holders: list[Path] = []
    assert wait_until(lambda: holders.extend(c for c in machines if run.holding(git, c)) or holders, 60), run.tails()
    victim = holders[rng.randrange(len(holders))]
    time.sleep(rng.uniform(0.0, 0.8))   # a seeded moment within the claim, not a wait for a state
    in_flight = git_children(run.procs[victim].pid)
    run.procs[victim].send_signal(signal.SIGKILL)
    run.procs[victim].wait(10)
    # a push the victim had started goes on without it (a `done` may still land): wait it out
    assert wait_until(lambda: not any(alive(pid) for pid in in_flight), 60), in_flight
    held = run.holding(git, victim, remote)   # pushed claims: those are what a lease can expire
    # 2. a git lock left behind, as a kill in the middle of a fetch leaves one
    lock = victim / ".git" / "refs" / "remotes" / "origin" / "hive" / "work" / f"{ids[0]}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("0" * 40 + "\n")
    old = time.time() - 60
    os.utime(lock, (old, old))
    # 3. the remote briefly unreachable for the others: their address of it leads nowhere (moving
    # the remote's folder instead cut the pushes it was receiving short, leaving its ref locks)
    away = tmp_path / "remote-away.git"
    others = [c for c in machines if c is not victim]
    for clone in others:
        git("remote", "set-url", "origin", str(away), cwd=clone)
    assert wait_until(lambda: any("does not appear to be a git repository" in run.log(c).read_text(errors="replace")
                                  for c in others), 30), run.tails()
    time.sleep(rng.uniform(0.2, 1.5))   # how long it stays away: seeded
    for clone in others:
        git("remote", "set-url", "origin", str(remote), cwd=clone)
    # 4. a lease that expires: another machine takes the victim's claim over
    if held:
        assert wait_until(lambda: any(c.event == "lease-expired" and c.issue in held for c in state_log(remote)),
                          60), run.tails()
    # 5. the victim comes back: its stale lock cleared, its lost agents ended
    run.start(victim)
    run.wait_all(180)
    assert not lock.exists()
    assert "removed a stale git lock left by a killed process" in run.log(victim).read_text(errors="replace")
    said = "\n".join(run.log(c).read_text(errors="replace") for c in others)
    assert "remote origin unreachable: " in said and "does not appear to be a git repository" in said, said[-3000:]

    for _ in range(2):   # convergence: two rounds of sync reach every clone
        for clone in machines:
            cli("sync", cwd=clone)
    remote_state = git("rev-parse", "hive/state", cwd=remote).stdout
    on_target = landings(git, remote)
    for clone in machines:
        assert git("rev-parse", "hive/state", cwd=clone).stdout == remote_state
        assert {i: f.get("status") for i, f in state_of(git, clone).items()} == {i: "finalized" for i in ids}
        assert double_claims(clone) == [] and holds_twice(state_log, clone) == []
        assert leftovers(git, clone) == {}, (clone, run.tails())
        assert git_locks(clone) == [], clone
        assert fsck_problems(git, clone) == []
        git("fetch", "-q", "origin", cwd=clone)
        assert landings(git, clone, "origin/main") == on_target
    # exactly once, and in order
    assert Counter(on_target) == Counter({i: 1 for i in ids}), on_target
    position = {issue_id: n for n, issue_id in enumerate(on_target)}
    for issue_id, deps in blockers.items():
        for blocker in deps:
            assert position[blocker] < position[issue_id], (blocker, issue_id, on_target)
    assert git("for-each-ref", "refs/heads/hive/work/", cwd=remote).stdout == ""
    # every dependent started from its blockers' work (their unmerged branch on the same machine,
    # the target once they were on it when done on another): its recorded base holds their files
    last_done = {c.issue: c for c in state_log(remote) if c.event == "done"}
    for issue_id, deps in blockers.items():
        base = last_done[issue_id].trailers.get("Hive-Base", "")
        # a base combined from unmerged work is made by the machine that ran the dependent and
        # reaches the others only while its work branch is on the remote: read it where it is
        holders = [clone for clone in machines
                   if git("cat-file", "-e", f"{base}^{{commit}}", cwd=clone, check=False).returncode == 0]
        assert holders, (issue_id, base)
        for blocker in deps:
            assert git("cat-file", "-e", f"{base}:hive-work/{blocker}.txt", cwd=holders[0],
                       check=False).returncode == 0, (issue_id, blocker, base)
    # the victim's lost agents are gone
    for clone in machines:
        for sessions in (clone / ".git" / "hive" / "scripted").glob("*.sessions.jsonl"):
            for row in (json.loads(line) for line in sessions.read_text().splitlines() if line.strip()):
                assert not alive(row["pid"]), (clone.name, row)
