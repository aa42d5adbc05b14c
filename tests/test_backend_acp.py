"""The `acp` backend: against the small ACP agent of tests/fakes/acp_agent.py (always), and
through the whole pipeline with the real ACP adapters from npm against the fake model APIs.

The shared scenarios run on every ACP agent in tests/backends/test_contract.py (cases `acp`,
`acp-claude`, `acp-codex` of tests/backends/agents.py). The real adapters are found through
`HIVE_TEST_CLAUDE_ACP` / `HIVE_TEST_CODEX_ACP` (paths), else on PATH, else in the npm cache that
`.ci/run` fills; without them those tests skip, unless `HIVE_REQUIRE_AGENT_CLIS=1`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.agents import permissions
from hive.backends.acp import AcpBackend
from hive.backends.acp.translate import permission_outcome, permission_request, turn_usage
from hive.backends.base import EXITED, IDLE, PERMISSION, Event, SessionSpec
from tests.fakes import anthropic_server, openai_server
from tests.test_backend_claude import REQUIRE_CLIS, offline_env

FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "acp_agent.py"
FAKE_COMMAND = f"{sys.executable} {FAKE_AGENT}"
NPM_BIN = Path.home() / ".cache" / "git-hive" / "npm" / "node_modules" / ".bin"
CLAUDE_ACP_PACKAGE = "@agentclientprotocol/claude-agent-acp@0.101.0"
CODEX_ACP_PACKAGE = "@zed-industries/codex-acp@0.16.0"


def _find(env: str, program: str, package: str) -> tuple[str, str]:
    """(path, "") of an ACP adapter, or ("", why not). Resolved at import time (conftest's git_env
    removes HIVE_* variables from the environment)."""
    candidates = [os.environ.get(env, ""), shutil.which(program) or "",
                  str(NPM_BIN / program) if (NPM_BIN / program).exists() else ""]
    path = next((c for c in candidates if c), "")
    if path and os.access(path, os.X_OK):
        return path, ""
    return "", (f"{program} not installed{f' at {path}' if path else ''}: run .ci/run or `npm install --prefix ~/.cache/git-hive/npm "
                f"{package}` (or set {env} to its path)")


# as root, Claude Code refuses to start under claude-agent-acp ("bypass_root") unless it is told it
# runs in a sandbox (docs/acp-protocols.md); hive's jail is one
ROOT_ENV = {"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}
CLAUDE_ACP, CLAUDE_ACP_MISSING = _find("HIVE_TEST_CLAUDE_ACP", "claude-agent-acp", CLAUDE_ACP_PACKAGE)
CODEX_ACP, CODEX_ACP_MISSING = _find("HIVE_TEST_CODEX_ACP", "codex-acp", CODEX_ACP_PACKAGE)


def require(missing: str) -> None:
    """Skip without the adapter (`missing` says why), or fail with HIVE_REQUIRE_AGENT_CLIS=1."""
    if missing and REQUIRE_CLIS:
        pytest.fail(f"HIVE_REQUIRE_AGENT_CLIS is set but {missing}")
    if missing:
        pytest.skip(missing)


def codex_toml(table: dict[str, Any]) -> str:
    """Codex's config.toml of the fake provider, offline (no plugins, analytics, update checks),
    set up as codex-acp must be inside hive's jail: every command asked (hive's policy answers),
    Codex's own sandbox off (it cannot start in the jail; docs/acp-protocols.md)."""
    provider = table["model_providers"]["fake"]
    lines = [f'model = "{table["model"]}"', 'model_provider = "fake"', "check_for_update_on_startup = false",
             'approval_policy = "untrusted"', 'sandbox_mode = "danger-full-access"',
             "[model_providers.fake]", *(f"{k} = {json.dumps(v)}" for k, v in provider.items()),
             "[analytics]", "enabled = false", "[feedback]", "enabled = false",
             "[features]", "plugins = false", "remote_plugin = false", "apps = false", "shell_snapshot = false"]
    return "\n".join(lines) + "\n"



# -- against the fake ACP agent ------------------------------------------------------------------

class Driver:
    """A backend over the fake agent whose events are recorded and whose permission requests
    hive's policy answers, as the daemon does (`permissions.decide` → `reply_permission`)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *steps: dict[str, Any]):
        self.root = tmp_path / "work"
        self.root.mkdir()
        self.script = tmp_path / "script.json"
        self.log = tmp_path / "requests.jsonl"
        self.script.write_text(json.dumps(list(steps)))
        monkeypatch.setenv("FAKE_ACP_SCRIPT", str(self.script))
        monkeypatch.setenv("FAKE_ACP_LOG", str(self.log))
        self.backend = AcpBackend(command=FAKE_COMMAND, hive_dir=str(tmp_path))
        self.events: list[Event] = []
        self.verdicts: list[permissions.Verdict] = []
        self.backend.on("*", self.record)

    async def record(self, event: Event) -> None:
        self.events.append(event)
        if event.type == PERMISSION:
            verdict = permissions.decide(event.data, role="worker", root=str(self.root))
            self.verdicts.append(verdict)
            await self.backend.reply_permission(event.session_id, event.data.request_id, verdict.allow,
                                                verdict.reason)

    def spec(self, **kw: Any) -> SessionSpec:
        return SessionSpec(role="worker", cwd=str(self.root), **kw)

    def requests(self, method: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [m for m in map(json.loads, lines) if m.get("method") == method]

    def run(self, scenario: Callable[[AcpBackend], Any]) -> Any:
        async def main() -> Any:
            await self.backend.connect_with_reconnect()
            try:
                return await asyncio.wait_for(scenario(self.backend), 60)
            finally:
                await self.backend.stop()
        return asyncio.run(main())


def edit(path: str) -> dict[str, Any]:
    return {"toolCallId": "t1", "kind": "edit", "title": f"Write {path}", "locations": [{"path": path}],
            "rawInput": {"file_path": path, "content": "hi\n"}}


def test_a_permitted_edit_in_the_worktree_is_allowed_by_hives_policy(git_env: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "work"
    driver = Driver(tmp_path, monkeypatch, {"ask": edit(str(root / "hello.txt")), "write": ["hello.txt", "hi\n"]})

    async def scenario(backend: AcpBackend) -> Any:
        sid = await backend.create_session(driver.spec())
        return await backend.run_turn(sid, "write hello")
    result = driver.run(scenario)
    assert result.ok and result.text == "allowed yes", result          # allow_once, never "always"
    assert driver.verdicts == [permissions.Verdict(True)]
    assert (root / "hello.txt").read_text() == "hi\n"
    request = next(e.data for e in driver.events if e.type == PERMISSION)
    assert request.tool == "Write" and request.paths == [str(root / "hello.txt")]


def test_an_edit_outside_the_worktree_or_of_agent_settings_is_denied(git_env: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "work"
    driver = Driver(tmp_path, monkeypatch, {"ask": edit(str(tmp_path / "outside.txt")), "write": ["../outside.txt", "x"]},
                    {"ask": edit(str(root / ".claude" / "settings.json"))},
                    {"ask": {"toolCallId": "t3", "kind": "execute", "title": "push",
                             "rawInput": {"command": ["bash", "-lc", "git push origin main"], "cwd": str(root)}}},
                    {"ask": {"toolCallId": "t4", "kind": "switch_mode", "title": "leave plan mode"}})

    async def scenario(backend: AcpBackend) -> Any:
        sid = await backend.create_session(driver.spec())
        return [await backend.run_turn(sid, f"turn {n}") for n in range(4)]
    results = driver.run(scenario)
    assert [r.text for r in results] == ["denied"] * 4
    assert not (tmp_path / "outside.txt").exists()
    assert [v.allow for v in driver.verdicts] == [False] * 4
    assert "outside the worktree" in driver.verdicts[0].reason
    assert "not the agent's to change" in driver.verdicts[1].reason
    assert "git push" in driver.verdicts[2].reason and "acp:switch_mode" in driver.verdicts[3].reason


def test_instructions_go_with_the_first_turn_and_the_asking_mode_is_set(git_env: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(tmp_path, monkeypatch)

    async def scenario(backend: AcpBackend) -> Any:
        sid = await backend.create_session(driver.spec(system_prompt="You are a git-hive worker."))
        first = await backend.run_turn(sid, "one")
        second = await backend.run_turn(sid, "two")
        return first, second, await backend.get_session_status(sid)
    first, second, status = driver.run(scenario)
    assert (first.text, second.text) == ("one", "two")
    prompts = [[b["text"] for b in r["params"]["prompt"]] for r in driver.requests("session/prompt")]
    assert prompts == [["You are a git-hive worker.", "one"], ["two"]]
    assert [r["params"]["modeId"] for r in driver.requests("session/set_mode")] == ["default"]
    init = driver.requests("initialize")[0]["params"]
    assert init["clientCapabilities"] == {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
    # tokens of each answer added up; the cost is the agent's cumulative usage_update figure
    assert (status.usage.input_tokens, status.usage.output_tokens) == (20, 4)
    assert status.usage.cost_usd == pytest.approx(0.02)


def test_a_resumed_session_is_loaded_in_a_new_process_and_its_totals_carry_on(
        git_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(tmp_path, monkeypatch, {}, {"exit": 3})

    async def scenario(backend: AcpBackend) -> Any:
        sid = await backend.create_session(driver.spec(system_prompt="rules"))
        assert (await backend.run_turn(sid, "one")).ok
        crashed = await backend.run_turn(sid, "two")
        assert (await backend.get_session_status(sid)).state == "exited"
        with pytest.raises(RuntimeError):
            await backend.send_message_async(sid, "to nobody")
        again = await backend.create_session(driver.spec(resume=sid, system_prompt="rules"))
        third = await backend.run_turn(again, "three")
        return sid, again, crashed, third, await backend.get_session_status(again)
    sid, again, crashed, third, status = driver.run(scenario)
    assert again == sid and third.ok and third.text == "three"
    assert not crashed.ok and "exited with code 3" in crashed.error
    assert [r["params"]["sessionId"] for r in driver.requests("session/load")] == [sid]
    assert status.usage.input_tokens == 20                    # turn one + turn three
    prompts = [[b["text"] for b in r["params"]["prompt"]] for r in driver.requests("session/prompt")]
    assert prompts[-1] == ["three"]                           # a loaded session has its instructions
    assert [e.type for e in driver.events if e.type == EXITED] == [EXITED]


def test_abort_answers_an_open_permission_request_cancelled(git_env: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(tmp_path, monkeypatch, {"ask": edit(str(tmp_path / "work" / "a.txt"))})
    driver.backend._bus._handlers.clear()                   # nobody answers: the request stays open
    driver.backend.on("*", driver.events.append)

    async def scenario(backend: AcpBackend) -> Any:
        sid = await backend.create_session(driver.spec())
        turn = asyncio.create_task(backend.run_turn(sid, "edit"))
        while not any(e.type == PERMISSION for e in driver.events):
            await asyncio.sleep(0.02)
        await backend.abort_session(sid)
        return await turn
    result = driver.run(scenario)
    assert not result.ok and result.error == "aborted"
    assert [e.type for e in driver.events].count(IDLE) == 1


def test_requests_for_files_and_terminals_are_refused(git_env: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    driver = Driver(tmp_path, monkeypatch)
    answers: list[dict[str, Any]] = []

    async def scenario(backend: AcpBackend) -> None:
        sid = await backend.create_session(driver.spec())
        s = backend._sessions[sid]
        original = s.proc.send

        async def spy(obj: dict[str, Any]) -> None:
            if "method" not in obj:
                answers.append(obj)
            await original(obj)
        s.proc.send = spy
        await backend._handle(s, s.proc, {"jsonrpc": "2.0", "id": 7, "method": "fs/write_text_file",
                                          "params": {"sessionId": sid, "path": "/etc/passwd", "content": "x"}})
    driver.run(scenario)
    assert answers == [{"id": 7, "error": {"code": -32601, "message": "git-hive does not serve fs/write_text_file"}}]


def test_what_acp_messages_mean_to_hive() -> None:
    # codex-acp's command approval, as measured (docs/acp-protocols.md)
    request = permission_request("1-2", {"toolCall": {
        "kind": "execute", "title": "git commit", "toolCallId": "c",
        "rawInput": {"command": ["/bin/bash", "-lc", "git add -A && git commit -m x"], "cwd": "/w"}}})
    assert (request.tool, request.command, request.cwd) == ("Bash", "git add -A && git commit -m x", "/w")
    # codex-acp's patch approval names its files in rawInput.changes and the diff content
    patch = permission_request("1-3", {"toolCall": {"kind": "edit", "rawInput": {"changes": {"/w/a": {}}},
                                                    "content": [{"type": "diff", "path": "/w/b"}]}})
    assert patch.paths == ["/w/a", "/w/b"]
    options = [{"optionId": "always", "kind": "allow_always"}, {"optionId": "once", "kind": "allow_once"},
               {"optionId": "no", "kind": "reject_once"}]
    assert permission_outcome(options, True) == {"outcome": {"outcome": "selected", "optionId": "once"}}
    assert permission_outcome(options, False) == {"outcome": {"outcome": "selected", "optionId": "no"}}
    assert permission_outcome([], False) == {"outcome": {"outcome": "cancelled"}}
    usage = turn_usage({"inputTokens": 100, "outputTokens": 5, "cachedReadTokens": 40, "totalTokens": 145})
    assert (usage.input_tokens, usage.cache_read_tokens) == (100, 40)
    usage = turn_usage({"inputTokens": 100, "outputTokens": 5, "cachedReadTokens": 40, "totalTokens": 105})
    assert (usage.input_tokens, usage.cache_read_tokens) == (60, 40)   # input included the cached
    assert turn_usage(None) is None


# -- through the pipeline: `git hive run --backend acp --until-idle` with claude-agent-acp ----------

def test_run_works_an_issue_end_to_end_with_claude_agent_acp(repo: Path, hive: Callable[..., Any],
                                                             git: Callable[..., Any], tmp_path: Path) -> None:
    require(CLAUDE_ACP_MISSING)
    issue_id = hive("create", "Add a greeting", "-d", "Write hello.txt and commit it.").stdout.strip()
    with anthropic_server.FakeAnthropic() as api:
        api.script(anthropic_server.write("hello.txt", "hello\n"),
                   anthropic_server.bash('git add hello.txt && git commit -q -m "Add hello.txt"'),
                   anthropic_server.write(".hive-result.jsonl", '{"status": "success", "summary": "greeting"}\n'),
                   anthropic_server.text("Done: hello.txt committed."))
        env = claude_acp_run_env(api, tmp_path, merge_mode="manual")
        done = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "acp", "--until-idle"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"git hive run exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert json.loads(hive("show", issue_id, "--json").stdout)["status"] == "done", done.stdout
    branch = f"hive/work/{issue_id}"
    assert git("log", "-1", "--format=%s", branch).stdout.strip() == "Add hello.txt"
    assert git("show", f"{branch}:hello.txt").stdout == "hello\n"
    requests = api.message_requests
    worktree = repo / ".git" / "hive" / "worktrees" / issue_id
    assert any(r.cwd == str(worktree) for r in requests)
    assert any("Add a greeting" in r.text() for r in requests)





def claude_acp_run_env(api: anthropic_server.FakeAnthropic, tmp_path: Path, merge_mode: str) -> dict[str, str]:
    """The environment of a `git hive run --backend acp` over claude-agent-acp and the fake API."""
    config = tmp_path / "claude-config"
    config.mkdir()
    return {**os.environ, **offline_env(api, config), **ROOT_ENV, "HIVE_BACKEND": "acp",
            "HIVE_ACP_COMMAND": CLAUDE_ACP, "HIVE_ACP_ENV": "ANTHROPIC_* CLAUDE_* IS_SANDBOX",
            "HIVE_MAX_AGENTS": "1", "HIVE_MERGE_MODE": merge_mode, "HIVE_STALL_SECONDS": "60"}

def start_run(repo: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`git hive run --backend acp --until-idle` in the background; end it with finish_run."""
    return subprocess.Popen([sys.executable, "-m", "hive", "run", "--backend", "acp", "--until-idle"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_run(daemon: subprocess.Popen[str]) -> str:
    """Its output, once it exited 0."""
    try:
        out, _ = daemon.communicate(timeout=240)
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert daemon.returncode == 0, out
    return out

def test_run_the_claude_agent_acp_refinery_resolves_a_conflict(repo: Path, hive: Callable[..., Any],
                                                                git: Callable[..., Any], tmp_path: Path) -> None:
    """The whole pipeline over ACP, jailed: the worker's replay conflicts with a person's commit
    on the target, the refinery (claude-agent-acp in the issue's worktree) rebases and resolves it,
    its `git rebase` allowed by hive's policy for the refinery; hive checks and lands it."""
    require(CLAUDE_ACP_MISSING)
    issue_id = hive("create", "Greet from the worker").stdout.strip()
    worktree = repo / ".git" / "hive" / "worktrees" / issue_id
    person_committed = threading.Event()

    def commit_once_the_target_moved(request: anthropic_server.Request) -> anthropic_server.Reply:
        person_committed.wait(60)
        return anthropic_server.bash('git commit -q -am "README: greet from the worker"')

    with anthropic_server.FakeAnthropic() as api:
        api.script(anthropic_server.write("README.md", "hello from the worker\n"), commit_once_the_target_moved,
                   anthropic_server.write(".hive-result.jsonl", '{"status": "success", "summary": "greets"}\n'),
                   anthropic_server.text("Done."),
                   # the refinery
                   anthropic_server.bash(f"cd {worktree} && git -c core.editor=true rebase main"),
                   anthropic_server.bash(f"cd {worktree} && printf 'hello from a person\\nhello from the worker\\n'"
                                         " > README.md && git add README.md && git -c core.editor=true rebase --continue"),
                   anthropic_server.write(".hive-result.jsonl", '{"status": "merged", "summary": "kept both"}\n'),
                   anthropic_server.text("Merged."))
        env = claude_acp_run_env(api, tmp_path, merge_mode="auto")
        daemon = start_run(repo, env)
        try:
            deadline = time.monotonic() + 90
            while len([r for r in api.message_requests if not r.side_call]) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)     # the fake's requests are no event this process can wait on
            (repo / "README.md").write_text("hello from a person\n")
            git("commit", "-q", "-am", "README: greet from a person")
        finally:
            person_committed.set()
        out = finish_run(daemon)
        calls = [r for r in api.message_requests if not r.side_call]

    assert json.loads(hive("show", issue_id, "--json").stdout)["status"] == "finalized", out
    assert f"{issue_id} conflict → refinery" in out and "denied" not in out, out
    assert git("show", "main:README.md").stdout == "hello from a person\nhello from the worker\n"
    assert calls[4].cwd == str(worktree)                                 # the refinery starts in the worktree
    rebased = " ".join(anthropic_server.result_text(b) for b in calls[5].tool_results)
    assert "CONFLICT" in rebased, rebased                                # git ran it, in the worktree

def test_run_works_an_issue_end_to_end_with_codex_acp(repo: Path, hive: Callable[..., Any],
                                                      git: Callable[..., Any], tmp_path: Path) -> None:
    require(CODEX_ACP_MISSING)
    issue_id = hive("create", "Add a greeting", "-d", "Write hello.txt and commit it.").stdout.strip()
    home = tmp_path / "codex-home"
    home.mkdir()
    with openai_server.FakeOpenAI() as api:
        (home / "config.toml").write_text(codex_toml(api.codex_config()))
        api.script(openai_server.apply_patch(openai_server.add_file_patch("hello.txt", "hello\n")),
                   openai_server.exec_command('git add hello.txt && git commit -q -m "Add hello.txt"'),
                   openai_server.apply_patch(openai_server.add_file_patch(
                       ".hive-result.jsonl", '{"status": "success", "summary": "greeting"}')),
                   openai_server.text("Done: hello.txt committed."))
        env = {**os.environ, "CODEX_HOME": str(home), "FAKE_OPENAI_API_KEY": "dummy", "HIVE_BACKEND": "acp",
               "HIVE_ACP_COMMAND": CODEX_ACP, "HIVE_ACP_ENV": "CODEX_* FAKE_OPENAI_API_KEY",
               "HIVE_ACP_ENDPOINTS": api.base_url, "HIVE_MAX_AGENTS": "1", "HIVE_MERGE_MODE": "manual",
               "HIVE_STALL_SECONDS": "60"}
        done = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "acp", "--until-idle"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=240)
        requests = api.responses_requests()
    assert done.returncode == 0, f"git hive run exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert json.loads(hive("show", issue_id, "--json").stdout)["status"] == "done", hive("logs", issue_id).stdout
    branch = f"hive/work/{issue_id}"
    assert git("log", "-1", "--format=%s", branch).stdout.strip() == "Add hello.txt"
    assert git("show", f"{branch}:hello.txt").stdout == "hello\n"
    assert any("Add a greeting" in json.dumps(r) for r in requests)


def test_claude_agent_acp_asks_and_hives_policy_denies_a_write_outside_the_worktree(
        git_env: Path, tmp_path: Path) -> None:
    require(CLAUDE_ACP_MISSING)
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    config = tmp_path / "claude-config"
    config.mkdir()
    with anthropic_server.FakeAnthropic() as api:
        api.script(anthropic_server.tool("Write", {"file_path": str(outside), "content": "x\n"}),
                   anthropic_server.write("inside.txt", "ok\n"), anthropic_server.text("done"))
        backend = AcpBackend(command=CLAUDE_ACP, hive_dir=str(tmp_path),
                             extra_env={**offline_env(api, config), **ROOT_ENV}, endpoints=(api.base_url,))
        verdicts: list[permissions.Verdict] = []

        async def answer(event: Event) -> None:
            verdict = permissions.decide(event.data, role="worker", root=str(root))
            verdicts.append(verdict)
            await backend.reply_permission(event.session_id, event.data.request_id, verdict.allow, verdict.reason)
        backend.on(PERMISSION, answer)

        async def main() -> Any:
            try:
                sid = await backend.create_session(SessionSpec(role="worker", cwd=str(root)))
                return await asyncio.wait_for(backend.run_turn(sid, "write two files"), 90)
            finally:
                await backend.stop()
        result = asyncio.run(main())
    assert result.ok and result.text == "done", result
    assert [v.allow for v in verdicts] == [False, True], verdicts
    assert "outside the worktree" in verdicts[0].reason
    assert not outside.exists() and (root / "inside.txt").read_text() == "ok\n"


def test_claude_agent_acp_makes_no_prompt_suggestion_call_after_a_turn(git_env: Path, tmp_path: Path) -> None:
    """claude-agent-acp turns on the SDK's predicted next prompt: a whole-context model call after
    every turn but the first, billed, which no one reads under hive. hive's `_meta` turns it off."""
    require(CLAUDE_ACP_MISSING)
    root = tmp_path / "work"
    root.mkdir()
    config = tmp_path / "claude-config"
    config.mkdir()
    with anthropic_server.FakeAnthropic() as api:
        api.script(*(anthropic_server.text(f"turn {n}") for n in range(1, 4)))
        backend = AcpBackend(command=CLAUDE_ACP, hive_dir=str(tmp_path),
                             extra_env={**offline_env(api, config), **ROOT_ENV}, endpoints=(api.base_url,))

        async def main() -> list[str]:
            try:
                sid = await backend.create_session(SessionSpec(role="worker", cwd=str(root)))
                return [(await asyncio.wait_for(backend.run_turn(sid, f"turn {n}"), 90)).text for n in range(1, 4)]
            finally:
                await backend.stop()
        said = asyncio.run(main())
        calls = [r.side_call for r in api.message_requests]
    assert said == ["turn 1", "turn 2", "turn 3"]
    assert calls.count("") == 3 and "suggestion" not in calls, calls

@pytest.mark.parametrize("agent", ["fake", "claude-agent-acp", "codex-acp"])
def test_doctor_asks_an_acp_agent_what_it_is_with_initialize(agent: str, repo: Path, hive: Callable[..., Any],
                                                             tmp_path: Path) -> None:
    """ACP agents need not answer `--version` (codex-acp exits 2 on it): doctor asks `initialize`."""
    command, missing, expected = {
        "fake": (FAKE_COMMAND, "", "worker backend acp: fake-acp 1"),
        "claude-agent-acp": (CLAUDE_ACP, CLAUDE_ACP_MISSING, "worker backend acp: @agentclientprotocol/claude-agent-acp"),
        "codex-acp": (CODEX_ACP, CODEX_ACP_MISSING, "worker backend acp: codex-acp"),
    }[agent]
    require(missing)
    home = tmp_path / "codex-home"
    home.mkdir()
    env = {"HIVE_BACKEND": "acp", "HIVE_ACP_COMMAND": command, "CODEX_HOME": str(home), **ROOT_ENV}

    report = hive("doctor", env=env, check=False).stdout

    [line] = [line for line in report.splitlines() if "worker backend acp" in line]
    assert expected in line, report
    assert line.startswith("ok "), report


def test_run_the_codex_acp_refinery_resolves_a_conflict(repo: Path, hive: Callable[..., Any],
                                                         git: Callable[..., Any], tmp_path: Path) -> None:
    """The same pipeline through codex-acp, the second real ACP agent: worker, conflict, refinery."""
    require(CODEX_ACP_MISSING)
    issue_id = hive("create", "Greet from the worker").stdout.strip()
    worktree = repo / ".git" / "hive" / "worktrees" / issue_id
    person_committed = threading.Event()
    home = tmp_path / "codex-home"
    home.mkdir()
    with openai_server.FakeOpenAI() as api:
        (home / "config.toml").write_text(codex_toml(api.codex_config()))
        api.script(
            openai_server.apply_patch("*** Begin Patch\n*** Update File: README.md\n@@\n-hello\n"
                                      "+hello from the worker\n*** End Patch\n"),
            openai_server.gate(openai_server.exec_command('git commit -q -am "README: greet from the worker"'),
                               person_committed),
            openai_server.apply_patch(openai_server.add_file_patch(
                ".hive-result.jsonl", '{"status": "success", "summary": "greets"}')),
            openai_server.text("Done."),
            # the refinery
            openai_server.exec_command(f"cd {worktree} && git -c core.editor=true rebase main"),
            openai_server.exec_command(f"cd {worktree} && printf 'hello from a person\\nhello from the worker\\n'"
                                       " > README.md && git add README.md && git -c core.editor=true rebase --continue"),
            openai_server.apply_patch(openai_server.add_file_patch(
                ".hive-result.jsonl", '{"status": "merged", "summary": "kept both"}')),
            openai_server.text("Merged."))
        env = {**os.environ, "CODEX_HOME": str(home), "FAKE_OPENAI_API_KEY": "dummy", "HIVE_BACKEND": "acp",
               "HIVE_ACP_COMMAND": CODEX_ACP, "HIVE_ACP_ENV": "CODEX_* FAKE_OPENAI_API_KEY",
               "HIVE_ACP_ENDPOINTS": api.base_url, "HIVE_MAX_AGENTS": "1", "HIVE_MERGE_MODE": "auto",
               "HIVE_STALL_SECONDS": "60"}
        daemon = start_run(repo, env)
        try:
            api.wait_requests(2, timeout=90)                     # the worker edited README.md
            (repo / "README.md").write_text("hello from a person\n")
            git("commit", "-q", "-am", "README: greet from a person")
        finally:
            person_committed.set()
        out = finish_run(daemon)
        requests = api.responses_requests()

    assert json.loads(hive("show", issue_id, "--json").stdout)["status"] == "finalized", out
    assert f"{issue_id} conflict → refinery" in out and "denied" not in out, out
    assert git("show", "main:README.md").stdout == "hello from a person\nhello from the worker\n"
    outputs = [item for item in requests[5]["body"]["input"] if item.get("type") == "function_call_output"]
    assert "CONFLICT" in json.dumps(outputs[-1]), outputs                # git ran it, in the worktree
