"""Forged records: what a collaborator pushes (to `hive/state` or the target) cannot finish work
that was not done, or hold an issue forever (docs/SECURITY.md, "Forged records").

- a claim with no lease, a lease in 2099 or one that is not a time is reclaimed like an expired
  one (`lifecycle.lease_expired`: times compared as times, at most `LEASE_HORIZON` leases ahead);
- a `Hive-Issue: X` trailer in anyone's commit on the target finalizes nothing: a landing counts
  only where hive recorded it before the target moved;
- a forged `done` does not queue this machine's escalated work for a merge, and an `updated`
  from the future does not win every merge;
- a forged `finalized` (or `done` by another agent) of an issue this machine's agent works on
  stops that agent and lands nothing: its work is kept under refs/hive/attempts;
- a forged or garbled `lease-expired`, or one naming another agent, gets no issue claimed again
  for an agent of this machine (only its own lease's expiry, last, does: `history.lapsed_while_away`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon_helpers import stop_daemon

from .helpers import daemon_env, tail, wait_until, work_steps, write_json
from .test_trust import BLOB, Raw, Shared, issue, shared  # noqa: F401 - fixtures

FORGED_CLAIMS = {
    "hv-lea001": "",                                          # no lease at all
    "hv-lea002": 'lease_expires = "2099-01-01T00:00:00Z"\n',  # never ending
    "hv-lea003": 'lease_expires = "whenever"\n',              # not a time ("w" > "2", as text)
    "hv-lea004": "lease_expires = 2099-01-01T00:00:00Z\n",    # a TOML datetime, not a string
}


def push_issues(shared: Shared, git, files: dict[str, bytes]) -> str:
    raw = Raw(shared.attacker)
    git("fetch", "-q", "origin", cwd=shared.attacker)
    base = raw._git("rev-parse", "origin/hive/state")
    tree = raw._git("rev-parse", "origin/hive/state^{tree}")
    for issue_id, data in files.items():
        tree = raw.put(tree, [b"issues", f"{issue_id}.md".encode()], BLOB, raw.blob(data))
    commit = raw.commit(tree, base)
    git("push", "-q", "origin", f"{commit}:refs/heads/hive/state", cwd=shared.attacker)
    return commit


def statuses(cli, repo: Path) -> dict[str, str]:
    return {i["id"]: i["status"] for i in json.loads(cli("list", "--json", cwd=repo).stdout)}


@pytest.mark.timeout(180)
def test_claims_that_would_never_expire_are_reclaimed(repo: Path, shared: Shared, tmp_path: Path, git, cli,
                                                     daemons) -> None:
    push_issues(shared, git, {issue_id: issue(f"held by {issue_id}", status="in_progress",
                                              extra=lease + 'machine = "elsewhere"\n').replace(
        b'assignee = ""', b'assignee = "w-evil01"') for issue_id, lease in FORGED_CLAIMS.items()})
    cli("sync", "origin", cwd=repo)
    assert {statuses(cli, repo)[i] for i in FORGED_CLAIMS} == {"in_progress"}
    script = write_json(tmp_path / "agents.json", {"default": work_steps()})
    code = daemons.run_until_idle(repo, daemon_env(script, lease_seconds=60, sync_remote="origin"), max_agents=2,
                                  timeout=150, log=tmp_path / "daemon.log")
    assert code == 0, tail(tmp_path / "daemon.log")
    assert {i: statuses(cli, repo)[i] for i in FORGED_CLAIMS} == {i: "finalized" for i in FORGED_CLAIMS}, \
        tail(tmp_path / "daemon.log")


def forge(shared: Shared, git, issue_id: str, **fields: str) -> str:
    """The remote's issue file with `fields` replaced (TOML values as written)."""
    git("fetch", "-q", "origin", cwd=shared.attacker)
    raw = Raw(shared.attacker)
    text = raw._git("show", f"origin/hive/state:issues/{issue_id}.md") + "\n"
    for key, value in fields.items():
        lines = text.split("\n")
        lines = [f"{key} = {value}" if line.startswith(f"{key} = ") else line for line in lines]
        text = "\n".join(lines)
    return push_issues(shared, git, {issue_id: text.encode()})


@pytest.mark.timeout(180)
def test_a_forged_done_does_not_merge_this_machine_s_escalated_work(repo: Path, shared: Shared, tmp_path: Path,
                                                                   git, cli, new_issue, daemons) -> None:
    failing = new_issue("work that fails here")
    cli("sync", "origin", cwd=repo)
    script = write_json(tmp_path / "agents.json", {"default": [
        {"write": "hive-work/{issue}.txt", "content": "broken work\n"}, {"commit": "{issue}: broken"},
        {"result": "failure", "summary": "could not do it"}]})
    env = daemon_env(script, max_retries=0, max_agent_switches=0, sync_remote="origin")
    log = tmp_path / "daemon.log"
    daemons.run_until_idle(repo, env, max_agents=1, timeout=120, log=log)
    assert statuses(cli, repo)[failing] == "escalated", tail(log)
    assert git("branch", "--list", f"hive/work/{failing}", cwd=repo).stdout.strip(), "the failed work is kept"
    main_before = git("rev-parse", "main", cwd=repo).stdout.strip()

    forge(shared, git, failing, status='"done"', updated="2099-01-01T00:00:00Z")
    cli("sync", "origin", cwd=repo)
    local = daemon_env(script, max_retries=0, max_agent_switches=0)   # --until-idle ends with a `done` left
    assert daemons.run_until_idle(repo, local, max_agents=1, timeout=120, log=log) == 0, tail(log)
    assert statuses(cli, repo)[failing] == "done", tail(log)          # what the state says, but not merged
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == main_before, tail(log)
    assert git("rev-parse", "origin/main", cwd=repo).stdout.strip() == main_before


@pytest.mark.timeout(180)
@pytest.mark.parametrize("forged", [{"status": '"finalized"'}, {"status": '"done"', "assignee": '"w-evil01"'}])
def test_a_forged_end_of_an_issue_worked_here_stops_its_agent_and_keeps_its_work(
        repo: Path, shared: Shared, tmp_path: Path, git, cli, new_issue, daemons, forged: dict[str, str]) -> None:
    """A collaborator pushes that the issue this machine's agent is working on is finished (or
    done by an agent of theirs): the agent is stopped (nothing will come back to its work), the
    target does not move, and what the agent committed stays reachable."""
    from hive.workspace import attempts

    worked = new_issue("worked on here when the forged end arrives", labels=["slow"])
    cli("sync", "origin", cwd=repo)
    script = write_json(tmp_path / "agents.json", {"default": work_steps(), "labels": {"slow": [
        {"write": "hive-work/{issue}.txt", "content": "work in progress\n"}, {"commit": "{issue}: in progress"},
        {"sleep": 60}, {"result": "success", "summary": "too late"}]}})
    log = tmp_path / "daemon.log"
    # unjailed: a jailed agent's commit is in its private object store until hive takes it in,
    # and the test reads it in the worktree while the agent works
    run = daemons.start(repo, daemon_env(script, lease_seconds=600, sandbox="off"), "--remote", "origin",
                        "--until-idle", "--max-agents", "2", log=log)
    worktree = repo / ".git" / "hive" / "worktrees" / worked
    committed = lambda: git("log", "-1", "--format=%H %s", cwd=worktree, check=False).stdout  # noqa: E731
    assert wait_until(lambda: worktree.is_dir() and f"{worked}: in progress" in committed(), 60), tail(log)
    work = committed().split()[0]
    remote_holds_claim = lambda: '"in_progress"' in git(  # noqa: E731
        "show", f"hive/state:issues/{worked}.md", cwd=shared.remote, check=False).stdout
    assert wait_until(remote_holds_claim, 30), tail(log)

    def forged_in() -> bool:   # the daemon pushes too (the other issue's landing): as an attacker would, again
        try:
            forge(shared, git, worked, **forged)
            return True
        except AssertionError:
            return False

    assert wait_until(forged_in, 30, step=0.2), tail(log)

    why = "finalized" if "finalized" in forged["status"] else "taken over"
    assert wait_until(lambda: f"{worked} {why}: stopping its agent" in log.read_text(errors="replace")
                      and not worktree.exists(), 60), tail(log)   # long before the agent's 60 s
    if why == "finalized":
        assert run.wait(60) == 0, tail(log)
    else:   # a shared queue is idle once all is finalized: the forged `done` waits for its machine's merge
        stop_daemon(run)
    for target in ("main", "origin/main"):   # (the shared fixture's ordinary issue lands there)
        assert f"hive-work/{worked}.txt" not in git("ls-tree", "-r", "--name-only", target, cwd=repo).stdout
    assert not worktree.exists() and git("branch", "--list", f"hive/work/{worked}", cwd=repo).stdout == ""
    assert work in [kept.commit for kept in attempts.kept(repo / ".git", worked)]


def test_an_updated_from_the_future_is_clamped_in_a_merge() -> None:
    from hive.state import issue_file, merge_driver

    base = issue(status="open").replace(b"priority = 0", b"priority = 2")
    ours = base.replace(b"priority = 2", b"priority = 1")
    theirs = base.replace(b"priority = 2", b"priority = 3").replace(b"updated = 2026-01-01T00:00:00Z",
                                                                   b"updated = 2099-01-01T00:00:00Z")
    merged, clean = merge_driver.merge_issue(base, ours, theirs, "issues/hv-abc123.md")
    result = issue_file.parse(merged, "hv-abc123")
    assert clean and result.updated < "2099"
    later = merged.replace(f"updated = {result.updated}".encode(), b"updated = 2098-01-01T00:00:00Z")
    assert later != merged


def test_a_forged_trailer_on_the_target_finalizes_nothing(repo: Path, new_issue, hive, git) -> None:
    """Anyone's commit on main saying `Hive-Issue: X` made `finalize` (and the pipeline, and a
    worker's `_landed_already`) take X as landed, with none of its work on main."""
    issue_id = new_issue("real work to land", status="done")
    git("checkout", "-q", "-b", f"hive/work/{issue_id}", "main", cwd=repo)
    (repo / "the-work.txt").write_text("the real work\n")
    git("add", "the-work.txt", cwd=repo)
    git("commit", "-q", "-m", "the real work", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", f"unrelated\n\nHive-Issue: {issue_id}", cwd=repo)
    forged = git("rev-parse", "main", cwd=repo).stdout.strip()
    out = hive("finalize", issue_id, cwd=repo).stdout
    assert forged[:10] not in out, out
    assert (repo / "the-work.txt").read_text() == "the real work\n"      # landed for real
    shown = json.loads(hive("show", issue_id, "--json", cwd=repo).stdout)
    assert shown["status"] == "finalized" and shown["merged"] != forged
    assert git("rev-parse", f"{shown['merged']}^", cwd=repo).stdout.strip() == forged
    assert git("for-each-ref", "refs/hive/landings/", cwd=repo).stdout == ""   # forgotten once finalized


def test_a_claim_and_a_cancel_merge_into_a_canceled_issue_nobody_holds(tmp_path: Path) -> None:
    """The merge driver keeps the holder rule of every write (`issue_file.holder_after`): a claim
    on one side and a cancel on the other merged into `canceled` with `assignee = "w-…"`."""
    from hive.state import issue_file, merge_driver

    base = issue(status="open")
    claimed = issue(status="in_progress").replace(b'assignee = ""', b'assignee = "w-abc123"')
    canceled = issue(status="canceled")
    for ours, theirs in ((claimed, canceled), (canceled, claimed)):
        decisions: list[str] = []
        merged, clean = merge_driver.merge_issue(base, ours, theirs, "issues/hv-abc123.md", decisions=decisions)
        result = issue_file.parse(merged, "hv-abc123")
        assert clean and (result.status, result.assignee) == ("canceled", ""), merged
    for path, data in (("base", base), ("ours", claimed), ("theirs", canceled)):   # as git runs it
        (tmp_path / path).write_bytes(data)
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "hive", "merge-driver", str(tmp_path / "base"), str(tmp_path / "ours"),
                           str(tmp_path / "theirs"), "issues/hv-abc123.md"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert issue_file.parse((tmp_path / "ours").read_bytes(), "hv-abc123").assignee == ""
    assert "dropped: a canceled issue has none" in proc.stderr



def test_a_landing_recorded_on_hive_state_counts_on_any_machine(repo: Path, git) -> None:
    """A shared daemon writes its candidate into the issue's file (`landing`) and pushes that
    before it moves the target (`SharedQueue._record_landing`): a machine that takes the issue
    over after it died finds the landing recorded; a trailer without that record counts not."""
    import pygit2

    from hive.state.issue_file import Issue
    from hive.workspace import landings

    git("commit", "-q", "--allow-empty", "-m", "landed by a machine that died\n\nHive-Issue: hv-lnd001", cwd=repo)
    landed = git("rev-parse", "main", cwd=repo).stdout.strip()
    pygit2_repo = pygit2.Repository(str(repo))
    recorded = Issue(id="hv-lnd001", title="t", extra={"landing": landed})
    assert landings.recorded_of(recorded) == landed
    assert landings.landed_commit(pygit2_repo, landed, "hv-lnd001", landings.recorded_of(recorded)) == landed
    assert landings.landed_commit(pygit2_repo, landed, "hv-lnd001", landings.recorded_of(
        Issue(id="hv-lnd001", title="t"))) == ""
    assert landings.issue_of_landing(pygit2_repo[landed]) == "hv-lnd001"


def test_only_an_expiry_naming_the_agent_exactly_and_last_gets_its_issue_claimed_again(project, new_issue) -> None:
    """A machine cut off claims again an issue reopened because its agent's lease lapsed
    (`history.lapsed_while_away`, read from fetched history): a forged or garbled expiry, one
    naming another agent, or a reopen or claim after it gets nothing claimed."""
    from hive import issues, lifecycle
    from hive.state import history

    agent, paths = "w-aaaaaa", project.paths
    issue = new_issue("worked on while cut off")
    assert lifecycle.claim(project, issue, agent, lease_seconds=60)
    assert not history.lapsed_while_away(paths, issue, agent)              # held: nothing lapsed
    # the reopen as another machine pushes it (`lifecycle.expire_lease` there, its lease lapsed)
    issues.update(project, issue, {"status": "open", "lease_expires": None, "machine": None},
                  event="lease-expired", summary="reopen", trailers={"Hive-Previous-Agent": agent})
    assert history.lapsed_while_away(paths, issue, agent)
    assert not history.lapsed_while_away(paths, issue, "w-bbbbbb")
    for forged in (agent.upper(), f"{agent}\x1b[2J", f"{agent}-evil", "", "w-bbbbbb"):
        issues.update(project, issue, {"title": f"forged {forged!r}"}, event="lease-expired",
                      summary="forged", trailers={"Hive-Previous-Agent": forged})
        assert not history.lapsed_while_away(paths, issue, agent), repr(forged)
    issues.update(project, issue, {"title": "again"}, event="lease-expired", summary="expiry",
                  trailers={"Hive-Previous-Agent": agent})
    assert history.lapsed_while_away(paths, issue, agent)
    issues.update(project, issue, {"title": "theirs now", "status": "open"}, event="open", summary="a person reopens it")
    assert not history.lapsed_while_away(paths, issue, agent)
    assert lifecycle.claim(project, issue, "w-bbbbbb", lease_seconds=60)       # claimed by another since
    assert not history.lapsed_while_away(paths, issue, agent)
