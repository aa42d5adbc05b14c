"""`hive.lifecycle.claim`: a compare-and-swap on `hive/state`, so each issue is claimed exactly once.

The race runs 8 real processes against the same 50 issues at once; the claim re-checks status,
assignee and blockers against the tip it builds on, never against a possibly stale index.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from hive import issues, lifecycle
from hive.errors import HiveError
from hive.state import issue_file, layout
from hive.state.issue_file import Issue
from hive.state.store import Change

WORKERS = 8
ISSUES = 50

CLAIMER = textwrap.dedent("""
    import json, os, random, sys, time
    from hive.project import Project
    from hive.lifecycle import claim

    repo, agent, go, ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    project = Project.open(repo)
    project.index.ensure_current()
    random.Random(agent).shuffle(ids)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    results = {issue: claim(project, issue, agent) for issue in ids}
    print(json.dumps(results), flush=True)
""")


def add_issues(project, count: int) -> list[str]:
    """`count` open issues in one commit (set-up only: hive itself writes one commit each)."""
    stamp = issue_file.format_time(issue_file.now())
    made = [Issue(id=issue_file.new_id(), title=f"race {n}", created=stamp, updated=stamp)
            for n in range(count)]
    project.store.commit(lambda snap: Change(
        {layout.live_path(i.id): issue_file.render(i).encode() for i in made},
        summary=f"{count} issues", event="created"))
    project.after_write()
    return [i.id for i in made]


def test_eight_processes_claim_fifty_issues_each_exactly_once(repo, project, state_log, tmp_path):
    ids = add_issues(project, ISSUES)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(repo), f"w-{n}", str(go), ",".join(ids)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(WORKERS)]
    try:
        for proc in procs:  # everyone has opened the project before anyone starts
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        go.touch()
        results = {}
        for n, proc in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            results[f"w-{n}"] = json.loads(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # the returned booleans: every issue won by exactly one process
    winners: dict[str, str] = {}
    for agent, outcome in results.items():
        assert set(outcome) == set(ids)
        for issue, won in outcome.items():
            if won:
                assert issue not in winners, f"{issue} claimed by {winners.get(issue)} and {agent}"
                winners[issue] = agent
    assert set(winners) == set(ids)
    assert len(set(winners.values())) > 1  # it was a race, not one process taking everything

    # the history: exactly one `claimed` commit per issue, by the process that was told it won
    claims = [c for c in state_log(repo) if c.event == "claimed"]
    assert Counter(c.issue for c in claims) == Counter({issue: 1 for issue in ids})
    assert {c.issue: c.trailers["Hive-Agent"] for c in claims} == winners

    # and the files agree
    project.sync(warn=False)
    for issue in ids:
        claimed = project.index.get(issue)
        assert (claimed.status, claimed.assignee) == ("in_progress", winners[issue])
    project.update_index()
    assert project.index.ready() == []


def test_claim_refuses_what_is_not_claimable(repo, project, new_issue):
    blocker = new_issue("blocker")
    blocked = new_issue("blocked", depends_on=[blocker])
    epic = new_issue("epic", type="epic")
    done = new_issue("done already", status="done")
    assert not lifecycle.claim(project, blocked, "w-1")
    assert not lifecycle.claim(project, epic, "w-1")
    assert not lifecycle.claim(project, done, "w-1")
    assert lifecycle.claim(project, blocker, "w-1")
    assert not lifecycle.claim(project, blocker, "w-2")  # already taken
    assert project.index.get(blocker).assignee == "w-1"
    with pytest.raises(HiveError, match="unknown issue"):
        lifecycle.claim(project, "hv-zzzzzz", "w-1")


def test_claim_checks_the_branch_not_a_stale_index(repo, project, git, new_issue):
    blocker = new_issue("blocker", status="done")
    waiting = new_issue("waiting", depends_on=[blocker])
    other = new_issue("other")
    project.sync(warn=False)
    project.update_index()
    assert {i.id for i in project.index.ready()} == {waiting, other}  # same second: no order
    # plain git commits reopen the blocker and give `other` away; no index has seen them yet
    checkout = repo / ".hive"
    for issue, old, new in ((blocker, 'status = "done"', 'status = "open"'),
                            (other, 'assignee = ""', 'assignee = "w-9"')):
        path = checkout / "issues" / f"{issue}.md"
        path.write_text(path.read_text().replace(old, new))
    git("commit", "-q", "-am", "by hand", cwd=checkout)
    assert project.index.get(blocker).status == "done"  # stale, on purpose
    assert not lifecycle.claim(project, waiting, "w-1")
    assert not lifecycle.claim(project, other, "w-1")
    assert issues.read_at(project.store.snapshot(), other)[2].assignee == "w-9"
