"""The rules that keep several machines' landings exactly once and in order (issue 18), each shown
on its own, deterministically: the `Hive-Issue` trailer a landing carries and how it is found
again, a dependent held back until its blockers are on the target, no target push while
`hive/state` cannot reach the remote, remote work branches pruned, claims shown with their
machine and lease.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.daemon_helpers import start_daemon, stop_daemon

from .helpers import daemon_env, wait_until, work_steps, write_json


def _branch_with_commit(git, repo: Path, issue_id: str, message: str, name: str | None = None) -> str:
    git("checkout", "-q", "-b", f"hive/work/{issue_id}", "main", cwd=repo)
    (repo / "hive-work").mkdir(exist_ok=True)
    (repo / "hive-work" / f"{name or issue_id}.txt").write_text(f"work of {issue_id}\n")
    git("add", "hive-work", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    git("checkout", "-q", "main", cwd=repo)
    return head


def _trailers(git, repo: Path, ref: str = "main") -> list[str]:
    out = git("log", "--first-parent", "--format=%(trailers:key=Hive-Issue,valueonly)%x1e", ref, cwd=repo).stdout
    return [r.strip() for r in out.split("\x1e") if r.strip()]


def test_a_landing_carries_its_issue_trailer_and_an_agents_own_is_dropped(repo, new_issue, hive, git):
    other = new_issue("someone else's issue")
    issue = new_issue("the work", status="done")
    _branch_with_commit(git, repo, issue, f"the work\n\nHive-Issue: {other}\n")
    hive("finalize", issue, cwd=repo)
    assert _trailers(git, repo) == [issue]          # the forged trailer of `other` is gone
    shown = json.loads(hive("show", issue, "--json", cwd=repo).stdout)
    assert shown["status"] == "finalized" and shown["merged"] == git("rev-parse", "main", cwd=repo).stdout.strip()


def test_an_issue_already_on_the_target_is_finalized_not_landed_again(repo, new_issue, hive, git):
    issue = new_issue("landed before its finalize was lost", status="done")
    _branch_with_commit(git, repo, issue, "the work, again")
    # the same issue's landing already on main (another machine, or before a crash)
    (repo / "landed.txt").write_text("landed\n")
    git("add", "landed.txt", cwd=repo)
    git("commit", "-q", "-m", f"the work\n\nHive-Issue: {issue}", cwd=repo)
    tip = git("rev-parse", "main", cwd=repo).stdout.strip()
    git("update-ref", f"refs/hive/landings/{issue}", tip, cwd=repo)   # recorded before the target moved
    out = hive("finalize", issue, cwd=repo).stdout
    assert tip[:10] in out
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == tip     # nothing landed twice
    assert not (repo / "hive-work").exists()
    assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["merged"] == tip


def test_a_dependent_never_lands_before_its_blocker(repo, new_issue, hive, git):
    blocker = new_issue("the blocker", status="done")
    dependent = new_issue("the dependent", status="done", depends_on=[blocker])
    _branch_with_commit(git, repo, blocker, "blocker work")
    _branch_with_commit(git, repo, dependent, "dependent work")
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    refused = hive("finalize", dependent, cwd=repo, check=False)
    assert refused.returncode == 1
    assert f"waits for its blocker(s) {blocker} to be on main" in refused.stderr
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == before
    hive("finalize", blocker, cwd=repo)
    hive("finalize", dependent, cwd=repo)
    assert _trailers(git, repo) == [dependent, blocker]   # newest first: the blocker landed first


def test_a_blocker_landing_in_the_same_train_is_on_the_target_only_where_its_landing_is(
        repo, new_issue, project, git):
    """In a merge train a dependent may ride behind its blocker: the blocker, not finalized yet,
    counts as on the target at the commit that lands it — on a tip that holds that commit, and on
    no other."""
    import pygit2

    from hive.workspace import landings

    blocker = new_issue("the blocker", status="done")
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    git("commit", "-q", "--allow-empty", "-m", f"blocker work\n\nHive-Issue: {blocker}", cwd=repo)
    landed = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    pygit2_repo = pygit2.Repository(str(repo))
    blockers = {blocker: project.index.get(blocker)}   # `done`: not on any target by itself
    assert landings.blockers_off_target(pygit2_repo, landed, blockers) == [blocker]
    assert landings.blockers_off_target(pygit2_repo, landed, blockers, {blocker: landed}) == []
    assert landings.blockers_off_target(pygit2_repo, before, blockers, {blocker: landed}) == [blocker]
    assert landings.blockers_off_target(pygit2_repo, landed, blockers, {blocker: "0" * 40}) == [blocker]
    assert landings.blockers_off_target(pygit2_repo, landed, {"hv-zzz999": None}, {blocker: landed}) == ["hv-zzz999"]


def test_a_landing_counts_only_as_hive_recorded_it(repo, git):
    """`landed_commit` answers only with a recorded commit (this machine's `refs/hive/landings/<id>`
    or the issue's `merged`) that is in the target's history and carries the trailer."""
    import pygit2

    from hive.workspace import landings

    def commit(message: str) -> str:
        git("commit", "-q", "--allow-empty", "-m", message, cwd=repo)
        return git("rev-parse", "HEAD", cwd=repo).stdout.strip()

    forged = commit("anyone's commit\n\nHive-Issue: hv-aaa001")
    pygit2_repo = pygit2.Repository(str(repo))
    assert landings.landed_commit(pygit2_repo, forged, "hv-aaa001") == ""           # not recorded
    landings.record_landing(pygit2_repo, "hv-aaa001", forged)
    assert landings.landed_commit(pygit2_repo, forged, "hv-aaa001") == forged
    later = commit("a person's commit, no trailer")
    assert landings.landed_commit(pygit2_repo, later, "hv-aaa001") == forged        # in the history
    assert landings.landed_commit(pygit2_repo, later, "hv-aaa00") == ""             # whole lines only
    landings.record_landing(pygit2_repo, "hv-bbb002", later)
    assert landings.landed_commit(pygit2_repo, later, "hv-bbb002") == ""            # no trailer of it
    assert landings.landed_commit(pygit2_repo, later, "hv-ccc003", recorded=forged) == ""
    other = commit("elsewhere\n\nHive-Issue: hv-ccc003")
    assert landings.landed_commit(pygit2_repo, other, "hv-ccc003", recorded=other) == other
    git("reset", "-q", "--hard", later, cwd=repo)
    assert landings.landed_commit(pygit2_repo, later, "hv-ccc003", recorded=other) == ""   # not on this tip
    landings.forget_landing(pygit2_repo, "hv-aaa001")
    assert landings.landed_commit(pygit2_repo, later, "hv-aaa001") == ""


def test_in_a_merge_train_an_agents_trailer_naming_another_car_lands_nothing_for_it(repo, git):
    """A worker's commit that claims another issue of the same train (or one outside it): each car
    lands with its own trailer only, and the forged ones are not landings of anything."""
    import pygit2

    from hive import git as hive_git
    from hive.merge import mechanical
    from hive.workspace import landings

    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    forger = _branch_with_commit(git, repo, "hv-aaa001", "work\n\nHive-Issue: hv-ccc003\nHive-Issue: hv-zzz009")
    honest = _branch_with_commit(git, repo, "hv-ccc003", "honest work")
    plans = [mechanical.Plan(issue, head, base, "", "", 60) for issue, head in
             (("hv-aaa001", forger), ("hv-ccc003", honest))]

    landed = mechanical.land_train(paths, "main", plans, [mechanical.Quiet()] * 2).landed

    assert set(landed) == {"hv-aaa001", "hv-ccc003"}
    assert _trailers(git, repo) == ["hv-ccc003", "hv-aaa001"]     # newest first, one each
    pygit2_repo = pygit2.Repository(str(repo))
    tip = git("rev-parse", "main", cwd=repo).stdout.strip()
    assert landings.landed_commit(pygit2_repo, tip, "hv-ccc003") == landed["hv-ccc003"].commit
    assert landings.landed_commit(pygit2_repo, tip, "hv-zzz009") == ""


PRE_RECEIVE = """#!/bin/sh
# refuse hive/state while the flag file exists: this machine's state commits cannot reach us
while read old new ref; do
  if [ "$ref" = refs/heads/hive/state ] && [ -e "{flag}" ]; then
    echo "state refused for the test" >&2; exit 1
  fi
done
exit 0
"""


def test_a_remotes_words_are_one_bounded_printable_line():
    """What a remote says when it refuses a push (a hook's output: anyone's server) goes into the
    log and `git hive status` as one line: no control character reaches a terminal, no flood."""
    from hive.remote import MAX_REASON_CHARS, PushResult

    said = ("To origin\n!\trefs/heads/hive/state:refs/heads/hive/state\t[remote rejected] (pre-receive hook declined)\n"
            "remote: \x1b]52;c;ZXZpbA==\x07\x1b[2Jrefused" + "!" * 5000 + "\nremote: second line\nDone\n")
    reason = PushResult(False, rejected=True, message=said).reason
    assert reason.startswith("[remote rejected] (pre-receive hook declined): \\x1b]52;c;ZXZpbA==\\x07\\x1b[2Jrefused")
    assert len(reason) == MAX_REASON_CHARS
    assert all(ch.isprintable() for ch in reason)


@pytest.mark.timeout(120)
def test_no_target_push_while_the_state_cannot_reach_the_remote(clones, cli, git, tmp_path: Path):
    remote, (a,) = clones("A")
    ids = [cli("create", f"issue {n}", "-l", "slow", cwd=a).stdout.strip() for n in range(2)]
    cli("sync", cwd=a)
    flag = tmp_path / "refuse-state"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(PRE_RECEIVE.replace("{flag}", str(flag)))
    hook.chmod(0o755)
    script = write_json(tmp_path / "script.json", {"labels": {"slow": work_steps([{"sleep": 2}])}})
    log = tmp_path / "daemon.log"
    main_before = git("rev-parse", "main", cwd=remote).stdout.strip()
    proc = start_daemon(a, daemon_env(script), "--remote", "origin", "--until-idle", "--max-agents", "2", log=log)
    try:
        def claimed_on_the_remote() -> bool:
            out = git("log", "--format=%s", "hive/state", cwd=remote).stdout
            return all(f"claim {i}" in out for i in ids)

        assert wait_until(claimed_on_the_remote, 60), log.read_text()
        flag.touch()
        # both done here, their merges waiting: main on the remote never moves meanwhile
        waits = [f"{i} remote origin refused the update of hive/state (no other push moved it): "
                 "[remote rejected] (pre-receive hook declined): state refused for the test: the merge waits"
                 for i in ids]
        assert wait_until(lambda: all(w in log.read_text() for w in waits), 60), log.read_text()
        assert git("rev-parse", "main", cwd=remote).stdout.strip() == main_before
        flag.unlink()
        assert proc.wait(90) == 0, log.read_text()
    finally:
        stop_daemon(proc)
    assert sorted(_trailers(git, remote)) == sorted(ids)
    assert git("for-each-ref", "refs/heads/hive/work/", cwd=remote).stdout == ""


def test_sync_prune_removes_the_remote_work_branches_of_finished_issues(clones, cli, git):
    remote, (a,) = clones("A")
    finished = cli("create", "finished", cwd=a).stdout.strip()
    live = cli("create", "still open", cwd=a).stdout.strip()
    cli("update", finished, "--status", "finalized", "--force", cwd=a)
    for issue_id in (finished, live):
        git("push", "-q", "origin", f"main:refs/heads/hive/work/{issue_id}", cwd=a)
    git("push", "-q", "origin", "main:refs/heads/hive/work/not-an-issue", cwd=a)
    out = cli("sync", "--prune", cwd=a).stdout
    assert f"pruned 1 finished work branch(es): hive/work/{finished}" in out
    left = git("for-each-ref", "--format=%(refname)", "refs/heads/hive/work/", cwd=remote).stdout.split()
    assert left == [f"refs/heads/hive/work/{live}", "refs/heads/hive/work/not-an-issue"]


def test_status_shows_which_machine_holds_which_claim_and_its_lease(project, new_issue, cli, repo):
    from hive import lifecycle

    issue = new_issue("held on another machine")
    assert lifecycle.claim(project, issue, "w-abc123", lease_seconds=600, machine="box:clone2")
    data = json.loads(cli("status", "--json", cwd=repo).stdout)
    [claim] = data["claims"]
    assert claim["issue"] == issue and claim["agent"] == "w-abc123" and claim["machine"] == "box:clone2"
    assert claim["lease_expires"] > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = cli("status", cwd=repo).stdout
    assert f"{issue}  w-abc123   on box:clone2  lease until {claim['lease_expires']}" in text
