"""Forged records: what a collaborator pushes (to `hive/state` or the target) cannot finish work
that was not done, or hold an issue forever (docs/SECURITY.md, "Forged records").

- a claim with no lease, a lease in 2099 or one that is not a time is reclaimed like an expired
  one (`lifecycle.lease_expired`: times compared as times, at most `LEASE_HORIZON` leases ahead);
- a `Hive-Issue: X` trailer in anyone's commit on the target finalizes nothing: a landing counts
  only where hive recorded it before the target moved;
- a forged `done` does not queue this machine's escalated work for a merge, and an `updated`
  from the future does not win every merge.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import daemon_env, tail, work_steps, write_json
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
