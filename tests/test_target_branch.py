"""The target branch: detected by `init`, checked by `run` and `doctor`; `config set` says where
a value takes effect (issue 17)."""

from __future__ import annotations

from pathlib import Path


def _master_repo(make_repo, git, name: str = "repo") -> Path:
    path = make_repo(name)
    git("branch", "-m", "main", "master", cwd=path)
    return path


def test_init_records_the_branch_checked_out(make_repo, git, cli):
    path = _master_repo(make_repo, git)
    done = cli("init", cwd=path)
    assert "target branch: master" in done.stdout
    assert git("config", "hive.targetBranch", cwd=path).stdout.strip() == "master"
    assert cli("config", "get", "target_branch", cwd=path).stdout.strip() == "master"


def test_init_records_the_remotes_default_branch(make_repo, git, cli, tmp_path):
    origin = make_repo("origin")
    git("checkout", "-q", "-b", "trunk", cwd=origin)
    clone = tmp_path / "clone"
    git("clone", "-q", str(origin), str(clone))
    git("checkout", "-q", "-b", "feature", cwd=clone)
    cli("init", cwd=clone)
    assert cli("config", "get", "target_branch", cwd=clone).stdout.strip() == "trunk"


def test_init_falls_back_to_master_when_head_is_detached(make_repo, git, cli):
    path = _master_repo(make_repo, git)
    git("checkout", "-q", "--detach", cwd=path)
    cli("init", cwd=path)
    assert cli("config", "get", "target_branch", cwd=path).stdout.strip() == "master"


def test_config_set_on_the_target_branch_takes_effect(make_repo, git, cli):
    path = _master_repo(make_repo, git)
    cli("init", cwd=path)
    said = cli("config", "set", "backend", "scripted", cwd=path).stdout
    assert "in effect now" in said
    assert cli("config", "get", "backend", cwd=path).stdout.strip() == "scripted"


def test_config_set_on_another_branch_says_it_is_pending(make_repo, git, cli):
    path = _master_repo(make_repo, git)
    cli("init", cwd=path)
    git("checkout", "-q", "-b", "feature", cwd=path)
    said = cli("config", "set", "max_agents", "5", cwd=path).stdout
    assert "not in effect yet" in said and "committed on master" in said
    got = cli("config", "get", "max_agents", cwd=path)
    assert got.stdout.strip() == "3"
    assert "max_agents = 5" in got.stderr and "committed on master" in got.stderr
    listed = cli("config", "list", cwd=path).stdout
    line = next(l for l in listed.splitlines() if l.startswith("max_agents"))
    assert "pending in .hive.toml: 5" in line


def test_run_refuses_a_missing_target_branch_and_claims_nothing(repo, git, hive, new_issue, list_json):
    issue = new_issue("some work")
    git("config", "hive.targetBranch", "gone", cwd=repo)
    before = git("rev-parse", "hive/state", cwd=repo).stdout
    done = hive("run", "--backend", "scripted", "--until-idle", cwd=repo, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "target branch 'gone' does not exist" in lines[0] and "main" in lines[0]
    assert git("rev-parse", "hive/state", cwd=repo).stdout == before
    assert [i["status"] for i in list_json(cwd=repo) if i["id"] == issue] == ["open"]


def test_doctor_reports_a_missing_target_branch(repo, git, hive):
    git("config", "hive.targetBranch", "gone", cwd=repo)
    done = hive("doctor", cwd=repo, check=False)
    assert done.returncode == 1
    assert "!!  target branch 'gone' does not exist" in done.stdout
