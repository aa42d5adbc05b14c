"""The `claude` backend against the real Claude Code CLI and a fake Anthropic API on 127.0.0.1.

The CLI is found through `HIVE_TEST_CLAUDE` (a path), else `claude` on PATH, else the npm cache
that `.ci/run` fills; without it these tests skip (the health-probe and stand-in tests need no CLI),
unless `HIVE_REQUIRE_AGENT_CLIS=1`, which makes them fail instead. Every
process started here talks only to the fake server (`tests/fakes/anthropic_server.py`) on
127.0.0.1: `ANTHROPIC_BASE_URL` points there, nonessential traffic is off, the CLI's config dir is
a temp dir, and no proxy applies to 127.0.0.1.

Two layers:
* backend level: `ClaudeBackend` seen through the protocol (events, permissions, usage and cost,
  API errors, abort, a killed process, resume, the refinery's working directory);
* orchestrator level: a real `git hive run --backend claude --until-idle` in a temp repository.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, Event, PermissionRequest, SessionSpec,
    TurnResult,
)
from hive.backends.registry import load_backend
from hive.backends.claude import ClaudeBackend
from hive.backends.processes import group_alive
from hive.agents import permissions
from tests.fakes.anthropic_server import (
    FakeAnthropic, Reply, Request, bash, billed_like_claude_code, error, result_text, stall, text, tool, write,
)
from tests.daemon_helpers import NewProcesses, budget_spent, issue_events, recorded_process, still_running
from tests.hostile import Scene, require_jail, subset

CLAUDE_VERSION = "2.1.332"
NPM_CACHE_BIN = Path.home() / ".cache" / "git-hive" / "npm" / "node_modules" / ".bin" / "claude"
INSTALL_HINT = ("claude CLI not installed: run .ci/run or `npm install --prefix ~/.cache/git-hive/npm "
                f"@anthropic-ai/claude-code@{CLAUDE_VERSION}` (or set HIVE_TEST_CLAUDE to its path)")


def _find_claude() -> tuple[str, str]:
    """(path, "") of a working claude CLI, or ("", why not). Resolved once, at import time
    (conftest's git_env fixture removes HIVE_* variables from the environment)."""
    candidates = [os.environ.get("HIVE_TEST_CLAUDE", ""), shutil.which("claude") or "",
                  str(NPM_CACHE_BIN) if NPM_CACHE_BIN.exists() else ""]
    path = next((c for c in candidates if c), "")
    if not path:
        return "", INSTALL_HINT
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"{path} --version failed ({exc}); {INSTALL_HINT}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        return "", f"{path} --version exited {done.returncode} ({why[-1] if why else ''}); {INSTALL_HINT}"
    return path, ""


CLAUDE, WHY_NOT = _find_claude()
# CI sets HIVE_REQUIRE_AGENT_CLIS=1 after installing the CLIs: there a missing CLI fails, never skips
REQUIRE_CLIS = os.environ.get("HIVE_REQUIRE_AGENT_CLIS", "") not in ("", "0")


@pytest.fixture
def _claude_is_required() -> None:
    pytest.fail(f"HIVE_REQUIRE_AGENT_CLIS is set but {WHY_NOT or INSTALL_HINT}")


if CLAUDE or not REQUIRE_CLIS:
    needs_claude = pytest.mark.skipif(not CLAUDE, reason=WHY_NOT or INSTALL_HINT)
else:
    needs_claude = pytest.mark.usefixtures("_claude_is_required")

TURN_TIMEOUT = 45.0


# -- fixtures -----------------------------------------------------------------------------------------

@pytest.fixture
def api():
    server = FakeAnthropic()
    server.start()
    yield server
    server.stop()


def offline_env(api: FakeAnthropic, config_dir: Path) -> dict[str, str]:
    """What every CLI started by these tests gets: only 127.0.0.1, a private config dir."""
    return {
        "ANTHROPIC_BASE_URL": api.base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@pytest.fixture
def claude_env(api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "claude-config"
    config.mkdir()
    return offline_env(api, config)


@pytest.fixture
def wrepo(make_repo: Callable[..., Path]) -> Path:
    """A plain repository with one commit (conftest's isolated git identity applies)."""
    return make_repo("work")


def git_out(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_claude_codes_side_calls_leave_the_script_to_the_conversation(api: FakeAnthropic) -> None:
    """A session title or prompt suggestion Claude Code asks for between turns (claude-agent-acp
    does, at any moment) must not take the reply scripted for the conversation's next turn."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(body: dict[str, Any]) -> str:
        request = urllib.request.Request(api.base_url + "/v1/messages", json.dumps({**body, "stream": False}).encode(),
                                         {"content-type": "application/json"})
        with opener.open(request, timeout=10) as answer:
            return json.loads(answer.read())["content"][0]["text"]

    api.script(text("turn two"))
    title = post({"system": [{"type": "text", "text": "You are naming a coding session so the user ..."}],
                  "messages": [{"role": "user", "content": "<session>turn one</session>"}]})
    suggestion = post({"system": "You are a Claude agent", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "turn one"}]},
        {"role": "user", "content": [{"type": "text", "text": "... Reply with ONLY the suggestion, no quotes."}]}]})
    turn = post({"system": "You are a Claude agent", "messages": [{"role": "user", "content": "turn two"}]})
    assert (title, suggestion, turn) == ("Fake session", "Fake session", "turn two")
    assert [r.side_call for r in api.message_requests] == ["title", "suggestion", ""]



class Recorder:
    """Every event of a backend; answers permissions with hive's policy for `role` in `root`."""

    def __init__(self, backend: ClaudeBackend, *, root: str = "", role: str = "worker",
                 answer: bool = True):
        self.backend = backend
        self.root, self.role, self.answer = root, role, answer
        self.events: list[Event] = []
        self.verdicts: list[tuple[PermissionRequest, permissions.Verdict]] = []
        self._changed = asyncio.Event()
        backend.on("*", self._on)

    async def _on(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        if event.type == PERMISSION and self.answer:
            verdict = permissions.decide(event.data, role=self.role, root=self.root)
            self.verdicts.append((event.data, verdict))
            await self.backend.reply_permission(event.session_id, event.data.request_id, verdict.allow,
                                                verdict.reason)

    def of(self, type_: str, sid: str | None = None) -> list[Event]:
        return [e for e in self.events if e.type == type_ and (sid is None or e.session_id == sid)]

    async def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = TURN_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; events: "
                                     f"{[(e.type, str(e.data)[:120]) for e in self.events]}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    async def turn(self, sid: str, count: int, timeout: float = TURN_TIMEOUT) -> TurnResult:
        """Wait for the `count`-th idle event of `sid`; its TurnResult."""
        events = await self.wait_for(lambda: len(self.of(IDLE, sid)) >= count and self.of(IDLE, sid),
                                     f"idle #{count} of {sid}", timeout)
        return events[count - 1].data


def run(coro, timeout: float = 120.0):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


def worker_spec(cwd: Path, **kw: Any) -> SessionSpec:
    kw.setdefault("model", "claude-sonnet-4-6")
    return SessionSpec(role=kw.pop("role", "worker"), cwd=str(cwd), issue_id=kw.pop("issue_id", "hv-abc123"), **kw)


# -- the health probe (no CLI needed) -------------------------------------------------------------------

def test_health_check_probes_the_models_endpoint(api: FakeAnthropic) -> None:
    backend = ClaudeBackend(command="claude", extra_env={"ANTHROPIC_BASE_URL": api.base_url,
                                                        "ANTHROPIC_API_KEY": "sk-probe",
                                                        "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})

    async def main() -> list[bool]:
        verdicts = []
        for status in (200, 401, 404, 500, 529, 429, 200):
            api.models_status = status
            verdicts.append(await backend.health_check())
        return verdicts

    assert run(main(), 30) == [True, True, True, False, False, False, True]
    probes = [r for r in api.requests if r.path == "/v1/models"]
    assert len(probes) == 7
    assert probes[0].method == "GET" and probes[0].headers["x-api-key"] == "sk-probe"
    assert not any(r.path.startswith("/v1/messages") for r in api.requests)   # no tokens spent


def test_health_check_fails_when_the_provider_is_unreachable(api: FakeAnthropic) -> None:
    base = api.base_url
    api.stop()                                    # nothing listens there any more
    backend = ClaudeBackend(extra_env={"ANTHROPIC_BASE_URL": base, "NO_PROXY": "127.0.0.1",
                                       "no_proxy": "127.0.0.1"})
    started = time.monotonic()
    assert run(backend.health_check(), 30) is False
    assert time.monotonic() - started < 10


def test_health_check_goes_through_the_users_proxy(api: FakeAnthropic) -> None:
    with FakeAnthropic() as gone:
        unreachable = gone.base_url                   # a port nothing listens on once it stops
    env = {"ANTHROPIC_BASE_URL": unreachable, "http_proxy": api.base_url, "HTTP_PROXY": api.base_url,
           "no_proxy": "", "NO_PROXY": ""}
    assert run(ClaudeBackend(extra_env=env).health_check(), 30) is True
    assert api.requests[-1].path == f"{unreachable}/v1/models"     # the proxy got the absolute URL
    bypass = {**env, "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    assert run(ClaudeBackend(extra_env=bypass).health_check(), 30) is False


def test_load_backend_builds_the_claude_backend() -> None:
    backend = load_backend("claude", command="env FOO=1 /opt/claude --flag", hive_dir="/tmp")
    assert isinstance(backend, ClaudeBackend) and backend.name == "claude"
    assert backend.argv0 == ["env", "FOO=1", "/opt/claude", "--flag"]


# -- stream edge cases, with a stand-in CLI (no real CLI needed) ------------------------------------------

STUB = r"""
import json, os, subprocess, sys
mode = os.environ["STUB_MODE"]
sys.stdin.readline()
print(json.dumps({"type": "system", "subtype": "init", "session_id": "stub", "model": "stub"}), flush=True)
if mode == "orphan":
    # a helper in another session keeps our stdout open after we die
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    open(os.environ["STUB_PIDFILE"], "w").write(str(child.pid))
    sys.exit(3)
if mode == "overlong":
    request = {"type": "control_request", "request_id": "big-1", "request": {
        "subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "x", "content": "A" * 200000}}}
    print(json.dumps(request), flush=True)
    answer = sys.stdin.readline()
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": answer.strip(),
                      "usage": {"input_tokens": 5, "output_tokens": 1}, "total_cost_usd": 0.001}), flush=True)
    sys.stdin.readline()
"""


def stub_backend(tmp_path: Path, mode: str) -> ClaudeBackend:
    script = tmp_path / "stub_claude.py"
    script.write_text(STUB)
    return ClaudeBackend(command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
                         extra_env={"STUB_MODE": mode, "STUB_PIDFILE": str(tmp_path / "orphan.pid")})


def test_a_cli_that_dies_while_a_helper_holds_its_stdout_still_ends_the_turn(tmp_path: Path) -> None:
    backend = stub_backend(tmp_path, "orphan")
    backend.kill_grace = 0.5
    rec = Recorder(backend, root=str(tmp_path))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(tmp_path))
        await backend.send_message_async(sid, "go")
        result = await rec.turn(sid, 1, timeout=15)
        assert not result.ok and "exited with code 3 mid-turn" in result.error
        await rec.wait_for(lambda: rec.of(EXITED, sid), "exited", timeout=5)
        await backend.delete_session(sid)

    try:
        run(main(), 30)
    finally:
        pidfile = tmp_path / "orphan.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_an_overlong_permission_prompt_is_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hive.backends.claude as claude_module

    monkeypatch.setattr(claude_module, "LINE_LIMIT", 64 * 1024)
    backend = stub_backend(tmp_path, "overlong")
    rec = Recorder(backend, root=str(tmp_path))

    async def main() -> TurnResult:
        sid = await backend.create_session(worker_spec(tmp_path))
        await backend.send_message_async(sid, "go")
        result = await rec.turn(sid, 1, timeout=15)
        assert (await backend.get_session_status(sid)).usage.input_tokens == 5
        await backend.delete_session(sid)
        return result

    result = run(main(), 30)
    assert result.ok and not rec.of(PERMISSION)
    answer = json.loads(result.text)
    assert answer["type"] == "control_response"
    assert answer["response"]["request_id"] == "big-1"
    assert answer["response"]["response"]["behavior"] == "deny"


# -- backend level, with the real CLI ----------------------------------------------------------------

@needs_claude
def test_a_turn_writes_and_commits_through_permissions(api: FakeAnthropic, claude_env: dict[str, str],
                                                       wrepo: Path) -> None:
    api.script(write("hello.txt", "hello from claude\n"),
               bash('git add hello.txt && git commit -q -m "Add hello.txt"'),
               text("Created hello.txt and committed it."))
    # a command with arguments is split like a shell would
    backend = ClaudeBackend(command=f"env HIVE_WRAPPED=1 {shlex.quote(CLAUDE)}", extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo, system_prompt="HIVE-INSTRUCTIONS-7f3a"))
        assert (await backend.get_session_status(sid)).state == "idle"
        await backend.send_message_async(sid, "Create hello.txt and commit it.")
        assert (await backend.get_session_status(sid)).state == "busy"
        result = await rec.turn(sid, 1)
        assert result.ok, result
        assert result.text == "Created hello.txt and committed it."
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.pid
        assert status.usage.input_tokens == 3000 and status.usage.output_tokens == 150
        assert status.usage.cost_usd > 0
        assert await backend.get_pending_permissions(sid) == []
        messages = await backend.get_messages(sid)
        assert messages[0]["role"] == "user" and messages[-1]["text"] == "Created hello.txt and committed it."
        await backend.delete_session(sid)
        with pytest.raises(KeyError):
            await backend.get_session_status(sid)
        return sid

    sid = run(main())
    assert (wrepo / "hello.txt").read_text() == "hello from claude\n"
    assert git_out(wrepo, "log", "-1", "--format=%s").strip() == "Add hello.txt"
    types = [e.type for e in rec.events]
    assert types[0] == BUSY and types[-1] == IDLE and EXITED not in types   # none after delete
    usage_at = [i for i, t in enumerate(types) if t == USAGE]
    assert usage_at[0] < types.index(PERMISSION)   # a model call is counted as it starts ...
    assert usage_at[-1] < types.index(IDLE)        # ... and settled by the turn's result, before idle
    requests = [req for req, _ in rec.verdicts]
    assert [r.tool for r in requests] == ["Write", "Bash"]
    assert requests[0].paths == [str(wrepo / "hello.txt")]
    assert requests[0].input == {"file_path": str(wrepo / "hello.txt"), "content": "hello from claude\n"}
    assert requests[1].command.startswith("git add hello.txt")
    assert all(v.allow for _, v in rec.verdicts)
    assert any(e.data.get("tool") == "Bash" for e in rec.of(MESSAGE))
    # what the CLI sent: hive's flags arrived
    first = api.message_requests[0]
    assert first.body["model"] == "claude-sonnet-4-6"
    assert "HIVE-INSTRUCTIONS-7f3a" in first.system_text()
    assert first.headers["x-claude-code-session-id"] == sid
    assert first.cwd == str(wrepo)
    results = api.message_requests[2].all_tool_results
    assert len(results) == 2 and not any(r.get("is_error") for r in results)


@needs_claude
def test_usage_and_cost_across_turns_and_resume(api: FakeAnthropic, claude_env: dict[str, str],
                                               wrepo: Path) -> None:
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        # turn 1: two model calls of 1000 in / 50 out; turn 2: one call with cache tokens too
        api.script(write("a.txt", "a\n"), text("turn one"),
                   text("turn two", cache_read_input_tokens=400, cache_creation_input_tokens=100))
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "first turn: SECRET-WORD-1")
        assert (await rec.turn(sid, 1)).ok
        u1 = (await backend.get_session_status(sid)).usage
        assert (u1.input_tokens, u1.output_tokens) == (2000, 100)
        await backend.send_message_async(sid, "second turn")
        assert (await rec.turn(sid, 2)).ok
        u2 = (await backend.get_session_status(sid)).usage
        # uncached input, cache writes and cache reads kept apart, as Anthropic bills them
        assert (u2.input_tokens, u2.cache_write_tokens, u2.cache_read_tokens, u2.output_tokens) == (3000, 100, 400, 150)
        assert u2.counted_tokens == 3250 and u2.total_tokens == 3650
        turn1_cost, turn2_cost = u1.cost_usd, u2.cost_usd - u1.cost_usd
        assert turn1_cost > 0 and turn2_cost > 0
        # usage events carry the session totals
        assert rec.of(USAGE, sid)[-1].data == u2

        # the process ends; a retry resumes the same conversation in a new process
        await backend.delete_session(sid)
        api.script(text("turn three"))
        again = await backend.create_session(worker_spec(wrepo, resume=sid))
        assert again == sid
        await backend.send_message_async(sid, "third turn")
        assert (await rec.turn(sid, 3)).ok
        u3 = (await backend.get_session_status(sid)).usage
        assert (u3.input_tokens, u3.cache_write_tokens, u3.cache_read_tokens, u3.output_tokens) == (4000, 100, 400, 200)
        turn3_cost = u3.cost_usd - u2.cost_usd
        # one plain call (1000 in / 50 out) is half of turn 1's two calls: not the CLI's running
        # total, which after --resume includes everything before
        assert turn3_cost == pytest.approx(turn1_cost / 2, rel=1e-6)
        await backend.delete_session(sid)

    run(main())
    last = api.message_requests[-1]
    assert "SECRET-WORD-1" in last.text()        # --resume brought the history back
    assert last.headers["x-claude-code-session-id"] == api.message_requests[0].headers["x-claude-code-session-id"]


@needs_claude
def test_usage_carries_on_over_a_killed_cli_and_a_daemon_restart(api: FakeAnthropic, claude_env: dict[str, str],
                                                                wrepo: Path) -> None:
    """After a SIGKILL the CLI's cumulative total_cost_usd starts again from zero: a turn's cost is
    not its growth over the killed process's total. A new backend (the daemon restarted) that
    resumes the session carries on from hive's record of its totals (spec.usage)."""
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        api.script(write("a.txt", "a\n"), text("turn one"))         # two calls of 1000 in / 50 out
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "first turn")
        assert (await rec.turn(sid, 1)).ok
        u1 = (await backend.get_session_status(sid)).usage
        one_call = u1.cost_usd / 2
        api.script(write("b.txt", "b\n"), stall(60))                 # turn 2: killed on its 2nd call
        await backend.send_message_async(sid, "second turn")
        await rec.wait_for(lambda: len(api.message_requests) >= 4, "the stalled model call")
        os.killpg((await backend.get_session_status(sid)).pid, signal.SIGKILL)
        assert not (await rec.turn(sid, 2)).ok
        api.clear()
        api.script(text("turn three"))
        assert await backend.create_session(worker_spec(wrepo, resume=sid)) == sid
        await backend.send_message_async(sid, "third turn")
        assert (await rec.turn(sid, 3)).ok
        u3 = (await backend.get_session_status(sid)).usage
        # the killed turn's answered call is counted as its line showed it (output 1: its start)
        assert (u3.input_tokens, u3.output_tokens) == (4000, 151)
        assert u3.cost_usd - u1.cost_usd == pytest.approx(one_call, rel=1e-6)
        await backend.stop()

        restarted = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
        rec2 = Recorder(restarted, root=str(wrepo))
        api.script(text("turn four"))
        assert await restarted.create_session(worker_spec(wrepo, resume=sid, usage=u3)) == sid
        await restarted.send_message_async(sid, "fourth turn")
        assert (await rec2.turn(sid, 1)).ok
        u4 = (await restarted.get_session_status(sid)).usage
        assert (u4.input_tokens, u4.output_tokens) == (5000, 201)
        assert u4.cost_usd == pytest.approx(u3.cost_usd + one_call, rel=1e-6)
        assert rec2.of(USAGE, sid)[-1].data == u4                     # events carry the session's totals
        await restarted.stop()

    run(main())
    assert "first turn" in api.message_requests[-1].text()          # one conversation throughout


@needs_claude
def test_a_denied_permission_reaches_the_model_as_an_error(api: FakeAnthropic, claude_env: dict[str, str],
                                                          wrepo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "stolen.txt"
    outside.parent.mkdir()
    api.script(tool("Write", {"file_path": str(outside), "content": "nope\n"}),
               text("I could not write there."))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "write outside")
        result = await rec.turn(sid, 1)
        assert result.ok                          # the turn itself went fine; the tool was refused
        await backend.delete_session(sid)

    run(main())
    assert not outside.exists()
    [(request, verdict)] = rec.verdicts
    assert request.tool == "Write" and request.paths == [str(outside)] and not verdict.allow
    [denial] = api.message_requests[1].tool_results
    assert denial.get("is_error") is True
    assert "outside the worktree" in result_text(denial)


@needs_claude
def test_api_overload_is_a_provider_error_and_the_session_recovers(api: FakeAnthropic,
                                                                   claude_env: dict[str, str],
                                                                   wrepo: Path) -> None:
    # (a 400 would not do: the CLI retries it once without some beta headers)
    api.script(error(529), error(401), text("back to work"))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "hello")
        overloaded = await rec.turn(sid, 1)
        assert not overloaded.ok and overloaded.provider_error
        assert "529" in overloaded.error
        [event] = rec.of(PROVIDER_ERROR, sid)
        assert event.data["status"] == 529 and "Overloaded" in event.data["message"]
        assert (await backend.get_session_status(sid)).state == "idle"   # the process lives on
        # a 4xx such as 401 is not the provider being down: a plain failure, no degraded mode
        await backend.send_message_async(sid, "again")
        bad = await rec.turn(sid, 2)
        assert not bad.ok and not bad.provider_error and "401" in bad.error
        assert len(rec.of(PROVIDER_ERROR, sid)) == 1
        await backend.send_message_async(sid, "and again")
        assert (await rec.turn(sid, 3)).ok
        await backend.delete_session(sid)

    run(main())
    assert len(api.message_requests) == 3        # CLAUDE_CODE_MAX_RETRIES=0: one request per error


@needs_claude
def test_abort_interrupts_the_turn_and_keeps_the_session(api: FakeAnthropic, claude_env: dict[str, str],
                                                        wrepo: Path) -> None:
    api.script(stall(60), text("after the interrupt"))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "a long task")
        await rec.wait_for(lambda: api.message_requests, "the model request")
        started = time.monotonic()
        await backend.abort_session(sid)
        assert time.monotonic() - started < backend.interrupt_grace
        [idle] = rec.of(IDLE, sid)
        assert not idle.data.ok and "aborted" in idle.data.error
        assert not rec.of(EXITED, sid)
        status = await backend.get_session_status(sid)
        assert status.state == "idle"
        await backend.abort_session(sid)          # nothing running: nothing to do
        await backend.send_message_async(sid, "go on")
        assert (await rec.turn(sid, 2)).ok
        await backend.delete_session(sid)

    run(main())


@needs_claude
def test_abort_kills_a_cli_that_does_not_answer(api: FakeAnthropic, claude_env: dict[str, str],
                                               wrepo: Path) -> None:
    api.script(stall(60))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    backend.interrupt_grace = 1.0
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "a long task")
        await rec.wait_for(lambda: api.message_requests, "the model request")
        pid = (await backend.get_session_status(sid)).pid
        os.kill(pid, signal.SIGSTOP)              # wedged: it cannot answer the interrupt
        await backend.abort_session(sid)
        assert [e.type for e in rec.events if e.type in (IDLE, EXITED)] == [IDLE, EXITED]
        # (woken by the kill, it may still get to answer the interrupt before it dies)
        assert not rec.of(IDLE, sid)[0].data.ok and rec.of(IDLE, sid)[0].data.error.startswith("aborted")
        assert (await backend.get_session_status(sid)).state == "exited"
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
        await backend.delete_session(sid)

    run(main())


@needs_claude
def test_a_killed_cli_fails_the_turn_and_resume_continues(api: FakeAnthropic, claude_env: dict[str, str],
                                                         wrepo: Path) -> None:
    api.script(write("first.txt", "1\n"), stall(60))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo))
        await backend.send_message_async(sid, "remember PASSWORD-42, then work")
        await rec.wait_for(lambda: len(api.message_requests) >= 2, "the second model request")
        pid = (await backend.get_session_status(sid)).pid
        os.killpg(pid, signal.SIGKILL)
        result = await rec.turn(sid, 1)
        assert not result.ok and not result.provider_error
        assert "mid-turn" in result.error
        await rec.wait_for(lambda: rec.of(EXITED, sid), "exited")
        assert [e.type for e in rec.events if e.type in (IDLE, EXITED)] == [IDLE, EXITED]
        assert rec.of(EXITED, sid)[0].data["exit_code"] == -signal.SIGKILL
        assert (await backend.get_session_status(sid)).state == "exited"
        with pytest.raises(RuntimeError):
            await backend.send_message_async(sid, "anyone there?")

        api.clear()
        api.script(text("resumed fine"))
        assert await backend.create_session(worker_spec(wrepo, resume=sid)) == sid
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.pid != pid
        await backend.send_message_async(sid, "continue")
        assert (await rec.turn(sid, 2)).ok
        await backend.delete_session(sid)

    run(main())
    assert (wrepo / "first.txt").exists()
    assert "PASSWORD-42" in api.message_requests[-1].text()


@needs_claude
def test_resume_of_an_unknown_conversation_starts_afresh_under_that_id(api: FakeAnthropic,
                                                                       claude_env: dict[str, str],
                                                                       wrepo: Path) -> None:
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(wrepo))
    wanted = str(uuid.uuid4())

    async def main() -> None:
        sid = await backend.create_session(worker_spec(wrepo, resume=wanted))
        assert sid == wanted
        await backend.send_message_async(sid, "hello")
        assert (await rec.turn(sid, 1)).ok
        # the daemon may hand over an id of another backend: a fresh session replaces it
        other = await backend.create_session(worker_spec(wrepo, resume="not-a-uuid"))
        assert other != "not-a-uuid"
        uuid.UUID(other)
        await backend.stop()

    run(main())
    assert api.message_requests[0].headers["x-claude-code-session-id"] == wanted


@needs_claude
def test_the_refinery_starts_in_its_worktree_and_works_by_cd(api: FakeAnthropic, claude_env: dict[str, str],
                                                            wrepo: Path) -> None:
    worktrees = wrepo / ".git" / "hive" / "worktrees"
    worktrees.mkdir(parents=True)
    tree = worktrees / "hv-abc123"
    git_out(wrepo, "worktree", "add", "-q", "-b", "hive/work/hv-abc123", str(tree))

    api.script(write("resolved.txt", "both sides\n"),
               bash(f"cd {tree} && git add resolved.txt && git commit -q -m resolve"),
               bash(f"cd {worktrees} && git status"),                      # acts outside: denied
               write(".hive-result.jsonl", '{"status": "merged", "summary": "resolved"}\n'),
               text("merged"))
    backend = ClaudeBackend(command=CLAUDE, extra_env=claude_env)
    rec = Recorder(backend, root=str(tree), role="refinery")   # the daemon's root: the task's worktree

    async def main() -> None:
        sid = await backend.create_session(SessionSpec(role="refinery", cwd=str(tree),
                                                       model="claude-opus-4-6", system_prompt="REFINERY"))
        await backend.send_message_async(sid, f"Refinery task\nworktree: {tree}\n")
        assert (await rec.turn(sid, 1)).ok
        await backend.delete_session(sid)

    run(main())
    assert api.message_requests[0].cwd == str(tree)           # the CLI reports the worktree as its cwd
    assert api.message_requests[0].body["model"] == "claude-opus-4-6"
    assert [v.allow for _, v in rec.verdicts] == [True, True, False, True]
    assert git_out(tree, "log", "-1", "--format=%s").strip() == "resolve"
    assert json.loads((tree / ".hive-result.jsonl").read_text())["status"] == "merged"


# -- through the orchestrator: `git hive run --backend claude --until-idle` ----------------------------

def daemon_env(api: FakeAnthropic, config_dir: Path, **hive: str) -> dict[str, str]:
    env = {**os.environ, **offline_env(api, config_dir), "HIVE_BACKEND": "claude",
           "HIVE_CLAUDE_COMMAND": CLAUDE, "HIVE_MAX_AGENTS": "1", "HIVE_MERGE_MODE": "manual",
           "HIVE_STALL_SECONDS": "60"}
    env.update({f"HIVE_{k.upper()}": v for k, v in hive.items()})
    return env


DAEMON = [sys.executable, "-m", "hive", "run", "--backend", "claude", "--until-idle"]


def run_daemon(repo: Path, env: dict[str, str], timeout: float = 120,
               expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(DAEMON, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == expect, f"git hive run exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def start_daemon(repo: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """The daemon in the background, for a test that acts while it runs; end it with finish_daemon."""
    return subprocess.Popen(DAEMON, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish_daemon(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for a start_daemon daemon to exit 0; its output (stdout and stderr)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)               # the daemon ends its agents, then exits
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        raise AssertionError(f"git hive run did not finish within {timeout}s:\n{out}")
    assert proc.returncode == 0, f"git hive run exited {proc.returncode}\n{out}"
    return out


def agent_pid(repo: Path, issue_id: str) -> int:
    """The pid (== process group) of the agent working `issue_id`, from runtime.db; 0 if none yet."""
    try:
        db = sqlite3.connect(f"file:{repo / '.git' / 'hive' / 'runtime.db'}?mode=ro", uri=True, timeout=1)
        try:
            row = db.execute("SELECT pid FROM agents WHERE issue_id = ? AND pid > 0", (issue_id,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return 0
    return int(row[0]) if row else 0


def show(hive: Callable[..., Any], issue_id: str) -> dict[str, Any]:
    return json.loads(hive("show", issue_id, "--json").stdout)


class RuntimeWatcher:
    """Polls runtime.db from another thread: the largest token counts it ever showed."""

    def __init__(self, path: Path):
        self.path = path
        self.agent_tokens = 0
        self.budget_tokens = 0
        self.seen = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.path.exists():
                try:
                    db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=1)
                    try:
                        self.agent_tokens = max(self.agent_tokens,
                                                db.execute("SELECT max(tokens) FROM agents").fetchone()[0] or 0)
                        self.budget_tokens = max(self.budget_tokens,
                                                 db.execute("SELECT max(tokens) FROM budgets").fetchone()[0] or 0)
                    finally:
                        db.close()
                except sqlite3.Error:
                    pass
                if self.agent_tokens and self.budget_tokens:
                    self.seen.set()
            self._stop.wait(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@needs_claude
def test_run_works_an_issue_end_to_end(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                       tmp_path: Path, git: Callable[..., Any]) -> None:
    issue_id = hive("create", "Add a greeting", "-d", "Write hello.txt and commit it.").stdout.strip()
    watcher = RuntimeWatcher(repo / ".git" / "hive" / "runtime.db")

    def after_tokens_seen(step: Callable[[Request], Reply]) -> Callable[[Request], Reply]:
        def reply(request: Request) -> Reply:
            watcher.seen.wait(20)                 # hold attempt 2 until the first usage is on record
            return step(request)
        return reply

    # attempt 1 forgets the result file (a failure: retried with the same session);
    # attempt 2 writes, commits, and reports
    api.script(text("I think I am done."),
               after_tokens_seen(write("hello.txt", "hello\n")),
               bash('git add hello.txt && git commit -q -m "Add hello.txt"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "greeting added"}\n'),
               text("Done: hello.txt committed."))
    try:
        done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"))
    finally:
        watcher.close()
    assert show(hive, issue_id)["status"] == "done", done.stdout
    branch = f"hive/work/{issue_id}"
    assert git("log", "-1", "--format=%s", branch).stdout.strip() == "Add hello.txt"
    assert git("show", f"{branch}:hello.txt").stdout == "hello\n"
    assert ".hive-result.jsonl" not in git("ls-tree", "-r", "--name-only", branch).stdout
    # tokens reached the runtime db (agents row and issue budget) while the agent ran
    assert watcher.agent_tokens >= 1000 and watcher.budget_tokens >= 1000, (watcher.agent_tokens,
                                                                            watcher.budget_tokens)
    requests = api.message_requests
    assert len(requests) == 5 and api.pending == 0
    assert len({r.headers["x-claude-code-session-id"] for r in requests}) == 1   # same session retried
    assert "Add a greeting" in requests[0].text() and "git-hive" in requests[0].system_text()
    assert requests[1].text().count("Add a greeting") >= 2      # the retry prompt, in the same conversation
    worktree = Path(requests[0].cwd)
    assert worktree.name == issue_id and worktree.parent == repo / ".git" / "hive" / "worktrees"
    assert requests[0].body["model"] == "claude-sonnet-4-6"


def budget_row(repo: Path, issue_id: str) -> dict[str, Any]:
    db = sqlite3.connect(repo / ".git" / "hive" / "runtime.db")
    db.row_factory = sqlite3.Row
    try:
        return dict(db.execute("SELECT * FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone())
    finally:
        db.close()


@needs_claude
def test_a_worker_of_40_model_calls_billed_like_claude_code_finishes_within_the_default_budget(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, git: Callable[..., Any]) -> None:
    """Each call rereads the ~25k-token prefix from the cache: over a million tokens in all, far
    over max_tokens_per_issue had cache reads counted; the worker finishes, the reads recorded."""
    issue_id = hive("create", "Long work", "-d", "Many small steps.").stdout.strip()
    steps: list[Any] = [bash(f"echo step {n}", **billed_like_claude_code(n)) for n in range(40)]
    steps += [write("hello.txt", "hello\n", **billed_like_claude_code(40)),
              bash('git add hello.txt && git commit -q -m "Add hello.txt"', **billed_like_claude_code(41)),
              write(".hive-result.jsonl", '{"status": "success", "summary": "done"}\n', **billed_like_claude_code(42)),
              text("Done.", **billed_like_claude_code(43))]
    api.script(*steps)
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"), timeout=300)
    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert len(api.message_requests) == 44
    budget = budget_row(repo, issue_id)
    assert budget["cache_read_tokens"] > 1_000_000 > 200_000 > budget["tokens"]
    assert budget["tokens"] == budget["input_tokens"] + budget["cache_write_tokens"] + budget["output_tokens"]
    assert budget["cache_write_tokens"] == 25_000 + 43 * 400 and budget["output_tokens"] == 44 * 150
    assert budget["cost_usd"] > 0   # the CLI's own total_cost_usd


@needs_claude
def test_a_looping_worker_is_stopped_by_the_budget_with_the_figures(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path) -> None:
    issue_id = hive("create", "Loops", "-d", "Never ends.").stdout.strip()
    api.script(*[bash("true", **billed_like_claude_code(n, growth=3000, output=1000)) for n in range(200)])
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"), timeout=300, expect=3)
    shown = show(hive, issue_id)
    assert shown["status"] == "escalated", done.stdout
    assert len(api.message_requests) < 200                      # stopped mid-loop, not at its end
    reason = subprocess.run(["git", "log", "-1", "--format=%(trailers:key=Hive-Reason,valueonly)", "hive/state"],
                            cwd=repo, capture_output=True, text=True).stdout
    assert "token budget exceeded" in reason and "> max_tokens_per_issue 200,000" in reason, reason
    assert "counted; cache reads" in reason


@needs_claude
def test_run_denies_a_write_outside_the_worktree(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                                 tmp_path: Path, git: Callable[..., Any]) -> None:
    issue_id = hive("create", "Touch a file").stdout.strip()
    target = tmp_path / "elsewhere" / "passwd"
    target.parent.mkdir()
    api.script(tool("Write", {"file_path": str(target), "content": "root::0:0::/:/bin/sh\n"}),
               write("note.txt", "inside\n"),
               bash('git add note.txt && git commit -q -m "Add note"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "note added"}\n'),
               text("Done."))
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"))
    assert not target.exists()
    assert "denied Write to worker" in done.stdout
    denial = api.message_requests[1].tool_results
    assert len(denial) == 1 and denial[0].get("is_error") is True
    assert "outside the worktree" in result_text(denial[0])
    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert git("log", "-1", "--format=%s", f"hive/work/{issue_id}").stdout.strip() == "Add note"


@needs_claude
def test_logs_shows_the_claude_workers_transcript(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                                  tmp_path: Path) -> None:
    """`git hive logs` through the real CLI: hive's prompt, each tool call with hive's answer,
    the results, what Claude said, the turn's tokens and cost; shown escaped."""
    issue_id = hive("create", "Touch a file").stdout.strip()
    target = tmp_path / "elsewhere" / "passwd"
    target.parent.mkdir()
    api.script(tool("Write", {"file_path": str(target), "content": "root::0:0::/:/bin/sh\n"}),
               write("note.txt", "inside\n"),
               bash('git add note.txt && git commit -q -m "Add note"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "note added"}\n'),
               text("Done \x1b]0;pwned\x07 note added."))
    run_daemon(repo, daemon_env(api, tmp_path / "claude-config"))
    sessions = json.loads(hive("logs", issue_id, "--json").stdout)
    assert len(sessions) == 1
    entries = sessions[0]["entries"]
    head = entries[0]
    assert head["type"] == "session" and head["backend"] == "claude" and head["role"] == "worker"
    assert head["issue"] == issue_id and head["model"] == "claude-sonnet-4-6" and len(head["session"]) == 36
    prompts = [e["text"] for e in entries if e["type"] == "prompt"]
    assert len(prompts) == 1 and prompts[0].startswith(f"# Issue {issue_id}: Touch a file")
    asked = [(e["tool"], e["allow"]) for e in entries if e["type"] == "permission"]
    assert asked == [("Write", False), ("Write", True), ("Bash", True), ("Write", True)]
    denied = next(e for e in entries if e["type"] == "permission")
    assert denied["paths"] == [str(target)] and "outside the worktree" in denied["reason"]
    calls = [e["text"] for e in entries if e["type"] == "message" and e.get("tool")]
    assert calls[0] == f"[Write] {target}" and 'git add note.txt && git commit -q -m "Add note"' in calls[2]
    results = [e["text"] for e in entries if e["type"] == "message" and e["role"] == "tool"]
    assert results[0].startswith("[error] ") and "outside the worktree" in results[0]
    said = [e["text"] for e in entries if e["type"] == "message" and e["role"] == "assistant" and not e.get("tool")]
    assert said[-1] == "Done \x1b]0;pwned\x07 note added."
    turn = next(e for e in entries if e["type"] == "turn")
    assert turn["ok"] and turn["usage"]["input_tokens"] > 0 and turn["usage"]["output_tokens"] > 0
    assert turn["usage"]["cost_usd"] > 0 and turn["total"] == turn["usage"]

    shown = hive("logs", issue_id).stdout
    assert "\x1b" not in shown and "Done \\x1b]0;pwned\\x07 note added." in shown
    assert f"DENIED   Write: {target} — " in shown and "allowed  Bash: git add note.txt" in shown


@needs_claude
def test_run_rides_out_an_overloaded_api(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                         tmp_path: Path, git: Callable[..., Any]) -> None:
    """529 → provider_error → degraded (no retry budget burned) → health probe → the work resumes."""
    issue_id = hive("create", "Survive an outage").stdout.strip()
    api.script(error(529),
               write("ok.txt", "ok\n"),
               bash('git add ok.txt && git commit -q -m "Add ok"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "ok"}\n'),
               text("Done."))
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"))
    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert "degraded" in done.stdout, done.stdout
    assert any(r.path == "/v1/models" for r in api.requests)        # the health probe
    assert git("log", "-1", "--format=%s", f"hive/work/{issue_id}").stdout.strip() == "Add ok"


@needs_claude
def test_run_retries_a_killed_cli_with_resume(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                              tmp_path: Path, git: Callable[..., Any]) -> None:
    issue_id = hive("create", "Outlive a crash").stdout.strip()
    killed: list[int] = []

    def kill_the_cli(request: Request) -> Reply:
        """Kill the agent process group while its model call is in flight."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not killed:
            pid = agent_pid(repo, issue_id)
            if pid:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            else:
                time.sleep(0.05)
        return text("never seen")

    api.script(kill_the_cli,
               write("survivor.txt", "alive\n"),
               bash('git add survivor.txt && git commit -q -m "Add survivor"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "survived"}\n'),
               text("Done."))
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"))
    assert killed, "the agent's pid never showed up in runtime.db"
    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert git("log", "-1", "--format=%s", f"hive/work/{issue_id}").stdout.strip() == "Add survivor"
    sessions = {r.headers["x-claude-code-session-id"] for r in api.message_requests}
    assert len(sessions) == 1                                          # --resume kept the session
    assert "Outlive a crash" in api.message_requests[-1].text()        # ... and its history
    assert "mid-turn" in done.stdout


@needs_claude
def test_run_cancel_aborts_the_claude_agent(api: FakeAnthropic, repo: Path, hive: Callable[..., Any],
                                            tmp_path: Path, wait_for: Callable[..., Any]) -> None:
    issue_id = hive("create", "Never finishes").stdout.strip()
    api.script(stall(600))                        # the model "thinks" until the CLI hangs up
    # no stall detection within the test's time: only the cancel can stop this turn
    proc = start_daemon(repo, daemon_env(api, tmp_path / "claude-config", stall_seconds="600"))
    try:
        wait_for(lambda: api.message_requests, "the agent's model request", timeout=60)
        pid = wait_for(lambda: agent_pid(repo, issue_id), "the agent's pid in runtime.db")
        assert group_alive(pid)                   # mid-turn: the CLI is waiting on its model call
        hive("cancel", issue_id)
        # the CLI and anything it started are gone (interrupt, else kill: seconds, not the stall)
        wait_for(lambda: not group_alive(pid), "the canceled agent's CLI to exit", timeout=30)
    finally:
        out = finish_daemon(proc)

    assert f"{issue_id} canceled: stopping its agent" in out, out
    assert not group_alive(pid), out
    assert show(hive, issue_id)["status"] == "canceled", out
    assert len(api.message_requests) == 1, out    # aborted, not retried


@needs_claude
def test_run_escape_attempts_through_the_real_cli_reach_nothing(api: FakeAnthropic, repo: Path,
                                                               hive: Callable[..., Any], tmp_path: Path,
                                                               git: Callable[..., Any], git_env: Path,
                                                               make_repo: Callable[..., Path]) -> None:
    """Claude's Bash tool runs escape attempts the text policy lets through: hive's jail refuses
    each (the model is told what), nothing outside the worktree changes, no secret is read, and
    the worker still does its honest work."""
    require_jail()
    scene = Scene.build(repo, git_env, tmp_path, git, make_repo)
    issue_id = hive("create", "Add a note").stdout.strip()
    tried = subset(scene)
    api.script(*[bash(command) for _, command, _ in tried],
               write("note.txt", "inside\n"),
               bash('git add note.txt && git commit -q -m "Add note"'),
               write(".hive-result.jsonl", '{"status": "success", "summary": "note added"}\n'),
               text("Done."))
    scene.snapshot(git)
    done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config"), timeout=240)

    for (label, _, refused), request in zip(tried, api.message_requests[1:]):
        said = " ".join(result_text(block) for block in request.tool_results)
        assert re.search(refused, said) and "denied" not in said, (label, said)
    assert show(hive, issue_id)["status"] == "done", done.stdout
    told = json.dumps([r.body for r in api.message_requests])
    scene.assert_nothing_escaped(git, done.stdout + done.stderr + told)


# -- SIGKILL of the daemon, then a restart (the real CLI) ----------------------------------------------

# no retry, no switch, the anomaly detector at its tightest: a crash charged to the issue escalates it
CRASH_LIMITS = {"max_retries": "0", "max_agent_switches": "0", "anomaly_failure_threshold": "1"}


def signal_then_stall(reached: threading.Event) -> Callable[[Request], Reply]:
    """A model call that is never answered (until the CLI hangs up); `reached` says it came."""
    def reply(request: Request) -> Reply:
        reached.set()
        return stall(60)
    return reply


def first_checking(process: tuple[int, str], seen_alive: list[bool], step: Callable[[Request], Reply] | Reply
                   ) -> Callable[[Request], Reply]:
    """`step`, noting first whether the killed daemon's agent `process` (pid, start) still runs."""
    def reply(request: Request) -> Reply:
        seen_alive.append(still_running(process))
        return step(request) if callable(step) else step
    return reply


def kill_daemon(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, out
    return out


WORK = [write("hello.txt", "hello\n"), bash('git add hello.txt && git commit -q -m "Add hello.txt"'),
        write(".hive-result.jsonl", '{"status": "success", "summary": "greeting added"}\n'), text("Done.")]


@needs_claude
def test_sigkill_of_the_daemon_during_a_worker_turn_spends_no_budget_and_overlaps_nothing(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, wait_for: Callable[..., Any],
        state_log: Callable[..., Any]) -> None:
    issue_id = hive("create", "Add a greeting").stdout.strip()
    env = daemon_env(api, tmp_path / "claude-config", **CRASH_LIMITS)
    reached = threading.Event()
    api.script(WORK[0], signal_then_stall(reached))
    daemon = start_daemon(repo, env)
    assert reached.wait(60), "the worker's second model call never came"
    old = wait_for(lambda: recorded_process(repo, issue_id, "worker"), "the agent's pid in runtime.db")
    kill_daemon(daemon)
    assert show(hive, issue_id)["status"] == "in_progress"

    api.clear()
    seen_alive: list[bool] = []
    api.script(first_checking(old, seen_alive, WORK[0]), *WORK[1:])
    done = run_daemon(repo, env)

    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert seen_alive == [False]                   # the lost agent was ended before the new attempt began
    assert not still_running(old)
    assert issue_events(state_log(repo), issue_id) == ["claimed", "recovered", "claimed", "done"]
    assert budget_spent(repo, issue_id) == (0, 0, [])
    assert "no budget spent" in done.stdout


@needs_claude
def test_sigkill_of_the_daemon_right_after_the_worker_finished_keeps_the_work(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, wait_for: Callable[..., Any],
        state_log: Callable[..., Any], git: Callable[..., Any]) -> None:
    """Committed and a success result written, its turn not ended: the restart takes it as done."""
    issue_id = hive("create", "Add a greeting").stdout.strip()
    env = daemon_env(api, tmp_path / "claude-config", **CRASH_LIMITS)
    reached = threading.Event()
    api.script(*WORK[:3], signal_then_stall(reached))
    daemon = start_daemon(repo, env)
    assert reached.wait(60), "the worker never finished its work"
    old = wait_for(lambda: recorded_process(repo, issue_id, "worker"), "the agent's pid in runtime.db")
    kill_daemon(daemon)
    calls = len(api.message_requests)

    done = run_daemon(repo, env)

    assert show(hive, issue_id)["status"] == "done", done.stdout
    assert len(api.message_requests) == calls       # not redone: no model call after the restart
    assert issue_events(state_log(repo), issue_id) == ["claimed", "done"]
    [commit] = [c for c in state_log(repo) if c.trailers.get("Hive-Event") == "done"]
    assert commit.trailers["Hive-Head"] == git("rev-parse", f"hive/work/{issue_id}").stdout.strip()
    assert int(commit.trailers["Hive-Tokens"]) > 0          # the usage before the crash is on record
    assert git("show", f"hive/work/{issue_id}:hello.txt").stdout == "hello\n"
    assert budget_spent(repo, issue_id) == (0, 0, [])
    assert not still_running(old)


@needs_claude
def test_sigkill_of_the_daemon_during_a_merge_test_merges_once_on_restart(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, wait_for: Callable[..., Any],
        state_log: Callable[..., Any], git: Callable[..., Any]) -> None:
    issue_id = hive("create", "Add a greeting").stdout.strip()
    api.script(*WORK)
    daemon = start_daemon(repo, daemon_env(api, tmp_path / "claude-config", merge_mode="auto",
                                           test_command="sleep 60", **CRASH_LIMITS))
    old = wait_for(lambda: recorded_process(repo, issue_id, "test"), "the merge's test in runtime.db",
                   timeout=90)
    kill_daemon(daemon)
    assert show(hive, issue_id)["status"] == "done"
    calls = len(api.message_requests)

    with NewProcesses(repo, issue_id, "test", old) as tests:
        done = run_daemon(repo, daemon_env(api, tmp_path / "claude-config", merge_mode="auto",
                                           test_command="sleep 0.5", **CRASH_LIMITS))

    assert show(hive, issue_id)["status"] == "finalized", done.stdout
    assert len(api.message_requests) == calls        # the finished work was not redone
    assert issue_events(state_log(repo), issue_id) == ["claimed", "done", "finalized"]
    assert git("show", "main:hello.txt").stdout == "hello\n"
    assert len(git("log", "--format=%H", "main", "--", "hello.txt").stdout.split()) == 1
    assert tests.alive == [False]                   # one new test, with the old one already gone
    assert not still_running(old)


def _a_conflict_for_the_refinery(api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path,
                                 wait_for: Callable[..., Any], git: Callable[..., Any],
                                 first: Callable[[Path], list[Any]]) -> tuple[str, Path, str]:
    """A daemon whose worker's edit conflicts with a person's commit to the same line, and whose
    refinery (a claude session in the issue's worktree) replies `first(worktree)`, then resolves it
    by `cd <worktree> && git ...` (rebase, resolve, continue) and says merged: (issue, its
    worktree, the daemon's log)."""
    issue_id = hive("create", "Greet from the worker").stdout.strip()
    worktree = repo / ".git" / "hive" / "worktrees" / issue_id
    person_committed = threading.Event()

    def commit_once_the_target_moved(request: Request) -> Reply:
        person_committed.wait(60)
        return bash('git commit -q -am "README: greet from the worker"')

    api.script(write("README.md", "hello from the worker\n"), commit_once_the_target_moved,
               write(".hive-result.jsonl", '{"status": "success", "summary": "greets"}\n'), text("Done."),
               *first(worktree),
               bash(f"cd {worktree} && git -c core.editor=true rebase main"),
               bash(f"cd {worktree} && printf 'hello from a person\\nhello from the worker\\n' > README.md"
                    " && git add README.md && git -c core.editor=true rebase --continue"),
               write(".hive-result.jsonl", '{"status": "merged", "summary": "kept both greetings"}\n'),
               text("Merged."))
    daemon = start_daemon(repo, daemon_env(api, tmp_path / "claude-config", merge_mode="auto"))
    try:
        wait_for(lambda: len(api.message_requests) >= 2, "the worker's edit", timeout=60)
        (repo / "README.md").write_text("hello from a person\n")
        git("commit", "-q", "-am", "README: greet from a person")
    finally:
        person_committed.set()
    return issue_id, worktree, finish_daemon(daemon)


@needs_claude
def test_run_the_claude_refinery_resolves_a_conflict_working_by_cd(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, wait_for: Callable[..., Any],
        state_log: Callable[..., Any], git: Callable[..., Any]) -> None:
    """The target moved under the worker (a person changed the same line): the replay conflicts and
    the refinery, a claude session started in the issue's worktree, resolves it by `cd <worktree> &&
    git ...` (rebase, resolve, continue), says merged; hive checks it and lands it."""
    issue_id, worktree, out = _a_conflict_for_the_refinery(api, repo, hive, tmp_path, wait_for, git, lambda worktree: [])

    assert show(hive, issue_id)["status"] == "finalized", out
    assert f"{issue_id} conflict → refinery" in out and "denied" not in out, out
    assert git("show", "main:README.md").stdout == "hello from a person\nhello from the worker\n"
    assert issue_events(state_log(repo), issue_id) == ["claimed", "done", "finalized"]
    requests = api.message_requests
    assert len(requests) == 8 and requests[4].cwd == str(worktree)      # the refinery starts in the worktree
    rebased = result_text(requests[5].tool_results[0])
    assert "CONFLICT" in rebased, rebased                                # git ran it, in the worktree


@needs_claude
def test_run_the_claude_refinery_resumes_its_session_for_the_next_task_in_that_worktree(
        api: FakeAnthropic, repo: Path, hive: Callable[..., Any], tmp_path: Path, wait_for: Callable[..., Any],
        git: Callable[..., Any]) -> None:
    """The refinery says merged without resolving the conflict; hive's check fails and the task goes
    back to it. Its process ended after the first answer (hive rewrites that worktree meanwhile),
    and the second task resumes the same claude session, its conversation kept."""
    # the refinery's first task: merged, but nothing done
    issue_id, worktree, out = _a_conflict_for_the_refinery(
        api, repo, hive, tmp_path, wait_for, git,
        lambda worktree: [write(".hive-result.jsonl", '{"status": "merged", "summary": "nothing to do"}\n'),
                          text("Merged.")])

    assert show(hive, issue_id)["status"] == "finalized", out
    assert out.count(f"{issue_id} conflict → refinery") == 2, out
    assert git("show", "main:README.md").stdout == "hello from a person\nhello from the worker\n"
    refinery = api.message_requests[4:]
    assert len(refinery) == 6 and all(r.cwd == str(worktree) for r in refinery)
    assert len({r.headers["x-claude-code-session-id"] for r in refinery}) == 1   # one session, resumed
    started = sorted((repo / ".git" / "hive" / "transcripts" / issue_id).glob("*-refinery.jsonl"))
    assert len(started) == 2                                      # by a second process
    said = json.dumps(refinery[2].messages)
    assert "nothing to do" in said and "Merged." in said          # the first task's turn is in its context
