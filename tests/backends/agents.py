"""One stand-in agent per backend for the shared contract test (tests/backends/test_contract.py).

Every backend is driven through the same scenarios; an `AgentCase` is what differs: how the
backend is built and how its agent is told what the next turns say or do. The scripted backend
always runs; claude and codex run their real CLIs against the fake APIs of `tests/fakes` (found
as `tests/test_backend_claude.py` and `tests/test_backend_codex.py` find them: `HIVE_TEST_CLAUDE`
/ `HIVE_TEST_CODEX`, PATH, the npm cache), skip without them, and fail instead when
`HIVE_REQUIRE_AGENT_CLIS=1`.

A new backend: one more `AgentCase` subclass here and one line in `CASES` (a backend may have
several: `acp` runs over the fake ACP agent and over the real `claude-agent-acp` and `codex-acp`).
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from hive.backends.base import Backend, SessionSpec
from hive.backends.registry import load_backend
from tests.fakes import anthropic_server, openai_server
from tests.test_backend_claude import CLAUDE, REQUIRE_CLIS, WHY_NOT, offline_env
from tests.test_backend_codex import CODEX, INSTALL_HINT as CODEX_HINT
from tests.test_backend_acp import (
    CLAUDE_ACP, CLAUDE_ACP_MISSING, CODEX_ACP, CODEX_ACP_MISSING, FAKE_COMMAND, ROOT_ENV, codex_toml,
)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def work_repo(root: Path) -> Path:
    """A repository with one commit and a linked worktree laid out as hive lays out workers'."""
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "initial")
    worktree = repo / ".git" / "hive" / "worktrees" / "hv-c0ntra"
    worktree.parent.mkdir(parents=True)
    _git(repo, "worktree", "add", "-q", "-b", "hive/work/hv-c0ntra", str(worktree))
    return worktree


class AgentCase:
    """A backend under test, and the agent behind it."""

    name = ""
    kind = ""                                   # the registered backend it drives ("": `name`)
    missing = ""                                # why the agent CLI cannot run here ("" if it can)

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.tmp_path = tmp_path
        self.monkeypatch = monkeypatch
        self.worktree = work_repo(tmp_path)
        self.hive_dir = self.worktree.parents[1]

    def backend(self) -> Backend:
        raise NotImplementedError

    def spec(self) -> SessionSpec:
        return SessionSpec(role="worker", cwd=str(self.worktree), issue_id="hv-c0ntra")

    def replies(self, *texts: str) -> None:
        """The next turns answer these texts, one turn each (and spend some tokens)."""
        raise NotImplementedError

    def long_turn(self) -> None:
        """The next turn runs until it is aborted or its process is killed."""
        raise NotImplementedError

    def slow_then_quick(self, first: str, second: str) -> None:
        """The next turn answers `first` after about two seconds; the one after it `second`."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class ScriptedCase(AgentCase):
    name = "scripted"

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        super().__init__(tmp_path, monkeypatch)
        self.script = tmp_path / "script.json"
        self.replies("ok")

    def backend(self) -> Backend:
        return load_backend("scripted", script_path=str(self.script), hive_dir=str(self.hive_dir))

    def replies(self, *texts: str) -> None:
        # a script is the same for every turn: each turn says what its prompt asks it to
        self.script.write_text('{"default": [{"tokens": {"input": 10, "output": 2}}, '
                               '{"say": "{prompt_first_line}"}]}')

    def long_turn(self) -> None:
        self.script.write_text('{"default": [{"say": "working"}, {"hang": true}]}')

    def slow_then_quick(self, first: str, second: str) -> None:
        # each turn says its prompt's first line; only the first (attempt 1) sleeps
        self.script.write_text('{"default": [{"tokens": {"input": 10, "output": 2}}, '
                               '{"sleep": 2, "on_attempts": [1]}, {"say": "{prompt_first_line}"}]}')


class ClaudeCase(AgentCase):
    name = "claude"
    missing = "" if CLAUDE else WHY_NOT

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        super().__init__(tmp_path, monkeypatch)
        self.api = anthropic_server.FakeAnthropic().start()
        config = tmp_path / "claude-config"
        config.mkdir()
        self.env = offline_env(self.api, config)

    def backend(self) -> Backend:
        return load_backend("claude", command=CLAUDE, hive_dir=str(self.hive_dir), extra_env=self.env)

    def spec(self) -> SessionSpec:
        return SessionSpec(role="worker", cwd=str(self.worktree), issue_id="hv-c0ntra",
                           model="claude-sonnet-4-6")

    def replies(self, *texts: str) -> None:
        self.api.script(*(anthropic_server.text(t) for t in texts))

    def long_turn(self) -> None:
        self.api.script(anthropic_server.stall(120))

    def slow_then_quick(self, first: str, second: str) -> None:
        self.api.script(anthropic_server.stall(2, then=first), anthropic_server.text(second))

    def close(self) -> None:
        self.api.stop()


class CodexCase(AgentCase):
    name = "codex"
    missing = "" if CODEX else CODEX_HINT

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        super().__init__(tmp_path, monkeypatch)
        monkeypatch.setenv("FAKE_OPENAI_API_KEY", "dummy")
        for name in ("CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
            monkeypatch.delenv(name, raising=False)
        self.api = openai_server.FakeOpenAI()

    def backend(self) -> Backend:
        return load_backend("codex", command=CODEX, hive_dir=str(self.hive_dir),
                            codex_config=self.api.codex_config())

    def replies(self, *texts: str) -> None:
        self.api.script(*(openai_server.text(t) for t in texts))

    def long_turn(self) -> None:
        self.api.script(openai_server.hang())

    def slow_then_quick(self, first: str, second: str) -> None:
        release = threading.Event()
        timer = threading.Timer(2.0, release.set)
        timer.daemon = True
        timer.start()
        self.api.script(openai_server.gate(openai_server.text(first), release), openai_server.text(second))

    def close(self) -> None:
        self.api.close()


class AcpCase(AgentCase):
    """The `acp` backend over the small ACP agent of tests/fakes/acp_agent.py (always runs)."""

    name = "acp"

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        super().__init__(tmp_path, monkeypatch)
        self.script = tmp_path / "acp-script.json"
        monkeypatch.setenv("FAKE_ACP_SCRIPT", str(self.script))
        self.replies("ok")

    def backend(self) -> Backend:
        return load_backend("acp", command=FAKE_COMMAND, hive_dir=str(self.hive_dir))

    def replies(self, *texts: str) -> None:
        self.script.write_text(json.dumps([{"say": t} for t in texts]))

    def long_turn(self) -> None:
        self.script.write_text('[{"hang": true}]')

    def slow_then_quick(self, first: str, second: str) -> None:
        self.script.write_text(json.dumps([{"sleep": 2, "say": first}, {"say": second}]))


class ClaudeAcpCase(ClaudeCase):
    """`claude-agent-acp` (Claude Code behind ACP) against the fake Anthropic API."""

    name = "acp-claude"
    kind = "acp"
    missing = CLAUDE_ACP_MISSING

    def backend(self) -> Backend:
        return load_backend("acp", command=CLAUDE_ACP, hive_dir=str(self.hive_dir),
                            extra_env={**self.env, **ROOT_ENV}, endpoints=(self.api.base_url,))


class CodexAcpCase(CodexCase):
    """`codex-acp` (Codex behind ACP) against the fake OpenAI API, with a CODEX_HOME of its own."""

    name = "acp-codex"
    kind = "acp"
    missing = CODEX_ACP_MISSING

    def backend(self) -> Backend:
        home = self.tmp_path / "codex-home"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(codex_toml(self.api.codex_config()))
        return load_backend("acp", command=CODEX_ACP, hive_dir=str(self.hive_dir),
                            extra_env={"CODEX_HOME": str(home)}, endpoints=(self.api.base_url,),
                            provider_env=("OPENAI_*", "CODEX_*", "FAKE_OPENAI_API_KEY"))


CASES: dict[str, type[AgentCase]] = {case.name: case for case in (
    ScriptedCase, ClaudeCase, CodexCase, AcpCase, ClaudeAcpCase, CodexAcpCase)}


def make_case(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AgentCase:
    """The case `name`; skips (or, with HIVE_REQUIRE_AGENT_CLIS=1, fails) without its CLI."""
    kind = CASES[name]
    if kind.missing:
        if REQUIRE_CLIS:
            pytest.fail(f"HIVE_REQUIRE_AGENT_CLIS is set but {kind.missing}")
        pytest.skip(kind.missing)
    return kind(tmp_path, monkeypatch)
