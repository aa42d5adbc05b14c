"""The codex backend against the real `codex` CLI (app-server) and a fake OpenAI API on 127.0.0.1.

The CLI comes from `HIVE_TEST_CODEX` (a path), else `codex` on PATH, else the npm cache that
`.ci/run` fills (`~/.cache/git-hive/npm`; the native binary next to the npm launcher is preferred);
without one these tests skip, unless `HIVE_REQUIRE_AGENT_CLIS=1` (CI) makes them fail. The fake
(tests/fakes/openai_server.py) scripts the model: tool calls, text, HTTP errors, hangs. Codex is
pointed at it through the `[codex]` table (`model_provider = "fake"`, `base_url` on 127.0.0.1,
no retries) and runs with a private CODEX_HOME under the repository's hive dir: no test reaches
any address but 127.0.0.1.

Backend-level tests drive `CodexBackend` the way the daemon does (permissions answered by
hive.agents.permissions); the last tests run a real `git hive run --backend codex`.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, Backend, Event, SessionSpec,
    TurnResult,
)
from hive.backends.registry import load_backend
from hive.backends.codex import CodexBackend
from hive.backends.codex.backend import _unwrap_shell
from hive.backends.codex.errors import classify_error
from hive.backends.codex.sandbox import bundled_bwrap_dir, git_writable_roots
from hive.backends.processes import group_alive
from hive.agents import permissions
from tests.fakes import openai_server as fake_api
from tests.fakes.openai_server import FakeOpenAI
from hive.jail import JailSpec
from tests.daemon_helpers import NewProcesses, budget_spent, issue_events, recorded_process, still_running
from tests.hostile import Scene, require_jail, subset

NPM_CACHE = Path.home() / ".cache" / "git-hive" / "npm"      # read before any fixture moves HOME
INSTALL_HINT = ("codex CLI not installed: run .ci/run or "
                "`npm install --prefix ~/.cache/git-hive/npm @openai/codex@0.171.0`")
ISSUE = "hv-c0dex1"
TURN_TIMEOUT = 60.0


def _native_of(launcher: str) -> str:
    """The native binary next to the npm launcher (`bin/codex.js`), which saves a node process."""
    real = os.path.realpath(launcher)
    if not real.endswith(os.path.join("@openai", "codex", "bin", "codex.js")):
        return launcher
    modules = Path(real).parents[2]
    for candidate in sorted(glob.glob(str(modules / "codex-*" / "vendor" / "*" / "bin" / "codex"))):
        if os.access(candidate, os.X_OK):
            return candidate
    return launcher


def find_codex() -> str | None:
    explicit = os.environ.get("HIVE_TEST_CODEX")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    import shutil

    found = shutil.which("codex") or (str(NPM_CACHE / "node_modules" / ".bin" / "codex")
                                      if os.access(NPM_CACHE / "node_modules" / ".bin" / "codex", os.X_OK)
                                      else None)
    return _native_of(found) if found else None


CODEX = find_codex()
# CI (.ci/run) sets HIVE_REQUIRE_AGENT_CLIS=1: there a missing CLI fails the tests instead of skipping
REQUIRED = any(os.environ.get(name) for name in ("HIVE_REQUIRE_AGENT_CLIS", "HIVE_TEST_REQUIRE_CLIS"))


@pytest.fixture
def _codex_is_required() -> None:
    if CODEX is None:
        pytest.fail(INSTALL_HINT + " (required here: HIVE_REQUIRE_AGENT_CLIS is set)")


needs_codex = (pytest.mark.usefixtures("_codex_is_required") if REQUIRED
               else pytest.mark.skipif(CODEX is None, reason=INSTALL_HINT))


# -- fixtures ----------------------------------------------------------------------------------

@pytest.fixture
def fake() -> Any:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def api_env(git_env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The isolated HOME and git identity of conftest, plus the fake provider's key."""
    monkeypatch.setenv("FAKE_OPENAI_API_KEY", "dummy")
    for name in ("CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return git_env


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def worktree(api_env: Path, tmp_path: Path) -> Path:
    """A repository with a linked worktree laid out the way hive lays out workers' worktrees."""
    repo = tmp_path / "repo"
    repo.mkdir()
    sh(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    sh(repo, "add", "README.md")
    sh(repo, "commit", "-q", "-m", "initial")
    path = repo / ".git" / "hive" / "worktrees" / ISSUE
    path.parent.mkdir(parents=True)
    sh(repo, "branch", f"hive/work/{ISSUE}")
    sh(repo, "worktree", "add", "-q", "--detach", str(path), f"hive/work/{ISSUE}")   # as hive's: detached
    return path


def hive_dir_of(worktree: Path) -> Path:
    return worktree.parents[1]


def make_backend(fake: FakeOpenAI, worktree: Path, **extra: Any) -> CodexBackend:
    config = {**fake.codex_config(), **extra}
    backend = load_backend("codex", command=CODEX, hive_dir=str(hive_dir_of(worktree)), codex_config=config)
    assert isinstance(backend, CodexBackend)
    return backend


def spec(cwd: Path, role: str = "worker", model: str = "claude-sonnet-4-6", **kw: Any) -> SessionSpec:
    return SessionSpec(role=role, cwd=str(cwd), model=model, issue_id=ISSUE,
                       system_prompt="You are a git-hive test worker.",
                       env={"HIVE_ISSUE": ISSUE, "HIVE_AGENT_ID": "w-test01"}, **kw)


class Recorder:
    """Every event, a way to wait for more, and hive's policy answering permissions."""

    def __init__(self, backend: CodexBackend, role: str = "worker", root: Path | None = None):
        self.backend = backend
        self.events: list[Event] = []
        self.verdicts: list[tuple[Any, permissions.Verdict]] = []
        self.role, self.root = role, root
        self._changed = asyncio.Event()
        backend.on("*", self._on)
        backend.on(PERMISSION, self._answer)

    def _on(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()

    async def _answer(self, event: Event) -> None:
        verdict = permissions.decide(event.data, role=self.role, root=str(self.root))
        self.verdicts.append((event.data, verdict))
        await self.backend.reply_permission(event.session_id, event.data.request_id, verdict.allow,
                                            verdict.reason)

    def of(self, sid: str, *types: str) -> list[Event]:
        return [e for e in self.events if e.session_id == sid and (not types or e.type in types)]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = TURN_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = predicate()
            if found:
                return found
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; events: {[(e.type, e.data) for e in self.events]}")
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def turn(self, sid: str, text: str) -> TurnResult:
        before = len(self.of(sid, IDLE))
        await self.backend.send_message_async(sid, text)
        idles = await self.wait_for(lambda: self.of(sid, IDLE)[before:])
        return idles[0].data


def run(body: Callable[[], Any], *backends: Backend, timeout: float = 90.0) -> Any:
    async def main() -> Any:
        try:
            return await asyncio.wait_for(body(), timeout)
        finally:
            for backend in backends:
                await backend.stop()
    return asyncio.run(main())


def inputs_text(request: dict[str, Any]) -> str:
    return json.dumps(request["body"]["input"])


def process_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


# -- pure helpers (no CLI needed) --------------------------------------------------------------

def test_error_classification_and_shell_unwrapping():
    assert classify_error({"message": "x", "codexErrorInfo": "internalServerError"}) == (True, 500)
    assert classify_error({"codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 401}}}) == (True, 401)
    assert classify_error({"codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": None}}}) == (True, None)
    assert classify_error({"codexErrorInfo": "contextWindowExceeded"}) == (False, None)
    assert classify_error({"codexErrorInfo": "other", "message": "stream disconnected before completion"}) \
        == (True, None)
    assert _unwrap_shell('/bin/bash -lc "git add -A && git commit -q -m \'x\'"') == "git add -A && git commit -q -m 'x'"
    assert _unwrap_shell("/bin/bash -lc 'echo hi > ../x'") == "echo hi > ../x"
    assert _unwrap_shell("git status") == "git status"


def test_git_writable_roots_of_a_worktree_and_of_a_directory_of_worktrees(worktree: Path):
    objects = str(worktree.parents[3] / ".git" / "objects")    # never the whole common dir
    admin = str(worktree.parents[3] / ".git" / "worktrees" / ISSUE)
    assert git_writable_roots(str(worktree)) == [objects, admin]
    assert git_writable_roots(str(worktree.parent)) == [objects, admin]
    assert git_writable_roots(str(worktree.parents[3])) == [objects]


def test_codex_home_config_prices_and_model(fake: FakeOpenAI, worktree: Path):
    backend = make_backend(fake, worktree, hive_prices={"gpt-5.5": [2.0, 8.0, 0.5], "default": [1, 1]},
                           features={"apps": True}, approval_policy="on-request")
    home = backend.prepare_home()
    assert home == hive_dir_of(worktree) / "codex-home"
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False} and config["feedback"] == {"enabled": False}
    assert config["features"] == {"plugins": False, "remote_plugin": False, "apps": True, "shell_snapshot": False}
    assert config["model_provider"] == "fake" and config["model_providers"]["fake"]["base_url"] == fake.base_url
    assert "hive_prices" not in config
    assert backend.price_of("gpt-5.5") == (2.0, 8.0, 0.5)
    assert backend.price_of("gpt-5-mini-2025") == (0.25, 2.0, 0.025)      # longest known prefix
    assert backend.price_of("something-else") == (1.0, 1.0, 0.1)          # the user's default
    assert backend.estimate_cost("gpt-5.5", 1000, 200, 50) == pytest.approx((800 * 2 + 200 * 0.5 + 50 * 8) / 1e6)
    params = backend._thread_params(spec(worktree))
    assert params["model"] == "gpt-5.5"                  # a Claude model in the spec gives way
    assert params["approvalPolicy"] == "on-request" and params["sandbox"] == "workspace-write"
    assert params["config"]["sandbox_workspace_write"]["writable_roots"] == git_writable_roots(str(worktree))
    assert backend._thread_params(spec(worktree, model="gpt-5-mini"))["model"] == "gpt-5-mini"


def test_inside_hives_jail_codexs_own_sandbox_is_not_nested(fake: FakeOpenAI, worktree: Path):
    """hive's jail is the guarantee; Codex's bwrap sandbox nested in it would depend on the system's
    bwrap (an old one makes every patch and command silently do nothing)."""
    backend = make_backend(fake, worktree)
    jailed = backend._thread_params(spec(worktree, jail=JailSpec(writable=(str(worktree),))))
    assert jailed["sandbox"] == "danger-full-access" and "config" not in jailed
    assert jailed["approvalPolicy"] == "untrusted"                   # hive's policy is still asked
    assert backend._thread_params(spec(worktree))["sandbox"] == "workspace-write"


def test_codex_finds_the_bwrap_its_package_ships(tmp_path: Path):
    vendor = tmp_path / "node_modules" / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl"
    launcher = tmp_path / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
    for program in (vendor / "bin" / "codex", vendor / "codex-resources" / "bwrap", launcher):
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    assert bundled_bwrap_dir(str(vendor / "bin" / "codex")) == str(vendor / "codex-resources")   # the native binary
    assert bundled_bwrap_dir(str(launcher)) == str(vendor / "codex-resources")               # the npm launcher
    assert bundled_bwrap_dir(str(tmp_path / "elsewhere" / "codex")) == ""

def test_a_user_login_is_linked_into_the_private_codex_home(fake: FakeOpenAI, worktree: Path, api_env: Path):
    login = api_env / ".codex" / "auth.json"
    login.parent.mkdir()
    login.write_text('{"OPENAI_API_KEY": "sk-user"}')
    backend = load_backend("codex", command="codex", hive_dir=str(hive_dir_of(worktree)), codex_config={})
    home = backend.prepare_home()
    assert (home / "auth.json").resolve() == login.resolve()
    url, headers = backend.probe_target()
    assert url == "https://api.openai.com/v1/models"
    assert headers["Authorization"] == "Bearer sk-user"


def test_health_check_probes_the_provider_models_endpoint(fake: FakeOpenAI, worktree: Path):
    backend = make_backend(fake, worktree)

    async def body():
        assert await backend.health_check() is True
        fake.models_status = 500
        assert await backend.health_check() is False
        fake.models_status = 429
        assert await backend.health_check() is False
        fake.models_status = 401                          # reachable: a key problem is not an outage
        assert await backend.health_check() is True
    run(body, backend)
    probes = [r for r in fake.requests if r["method"] == "GET"]
    assert [r["path"] for r in probes] == ["/v1/models"] * 4
    assert probes[0]["headers"].get("authorization") == "Bearer dummy"
    assert not fake.responses_requests()                  # no tokens spent

    fake.close()
    closed = make_backend(fake, worktree)
    assert run(closed.health_check, closed) is False      # nothing listens: unhealthy


# -- the real CLI ------------------------------------------------------------------------------

@needs_codex
def test_a_turn_edits_and_commits_with_approvals_and_counts_usage(fake: FakeOpenAI, worktree: Path):
    fake.script(
        fake_api.apply_patch(fake_api.add_file_patch("hello.txt", "hello from codex")),
        fake_api.exec_command('printf %s "$HIVE_ISSUE" > issue.txt && git add -A && git commit -q -m "Add hello"'),
        fake_api.text("All done."),
    )
    backend = make_backend(fake, worktree, hive_prices={"gpt-5.5": [2.0, 8.0, 0.5]})
    rec = Recorder(backend, root=worktree)

    async def body():
        await backend.connect_with_reconnect()
        sid = await backend.create_session(spec(worktree))
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.pid
        result = await rec.turn(sid, "Create hello.txt and commit it.")
        assert result == TurnResult(ok=True, text="All done.")
        types = [e.type for e in rec.of(sid)]
        assert types[0] == BUSY and types[-1] == IDLE and PERMISSION in types and MESSAGE in types
        usage = rec.of(sid, USAGE)[-1].data
        # OpenAI's input_tokens (3000) include the cached 600: hive keeps them apart
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (2400, 600, 150)
        assert usage.cost_usd == pytest.approx((2400 * 2.0 + 600 * 0.5 + 150 * 8.0) / 1e6)
        assert (await backend.get_session_status(sid)).usage == usage
        assert await backend.get_pending_permissions(sid) == []
        messages = await backend.get_messages(sid)
        assert messages[0]["role"] == "user" and messages[-1] == {**messages[-1], "role": "assistant",
                                                                   "text": "All done."}
        return sid
    run(body, backend)

    assert (worktree / "hello.txt").read_text() == "hello from codex\n"
    assert (worktree / "issue.txt").read_text() == ISSUE          # the session's env reached the command
    assert sh(worktree, "log", "-1", "--format=%s", "HEAD").strip() == "Add hello"
    assert sh(worktree, "status", "--porcelain") == ""
    tools = [(request.tool, verdict.allow) for request, verdict in rec.verdicts]
    assert tools == [("fileChange", True), ("commandExecution", True)]
    patch, command = rec.verdicts[0][0], rec.verdicts[1][0]
    assert patch.paths == [str(worktree / "hello.txt")]
    assert command.command == 'printf %s "$HIVE_ISSUE" > issue.txt && git add -A && git commit -q -m "Add hello"'
    assert command.cwd == str(worktree) and command.paths == []   # judged by the folder it runs in
    first = fake.responses_requests()[0]
    assert first["headers"]["authorization"] == "Bearer dummy"
    assert first["headers"]["originator"] == "git-hive"
    assert first["body"]["model"] == "gpt-5.5"
    assert "You are a git-hive test worker." in inputs_text(first)


@needs_codex
def test_a_declined_command_is_not_run_and_the_model_is_told(fake: FakeOpenAI, worktree: Path):
    outside = worktree.parents[3] / "outside.txt"
    fake.script(fake_api.exec_command("echo pwned > ../../../../outside.txt"), fake_api.text("Understood."))
    backend = make_backend(fake, worktree)
    rec = Recorder(backend, root=worktree)

    async def body():
        sid = await backend.create_session(spec(worktree))
        assert await rec.turn(sid, "Write outside.") == TurnResult(ok=True, text="Understood.")
        assert await backend.get_pending_permissions(sid) == []
    run(body, backend)

    assert not outside.exists()
    [(request, verdict)] = rec.verdicts
    assert request.tool == "commandExecution" and request.command == "echo pwned > ../../../../outside.txt"
    assert not verdict.allow and "outside the worktree" in verdict.reason
    second = fake.responses_requests()[1]
    assert "rejected by user" in inputs_text(second)


@needs_codex
def test_http_500_is_a_provider_error_and_the_session_survives(fake: FakeOpenAI, worktree: Path):
    fake.script(fake_api.http_error(500, "scripted boom"), fake_api.text("Back."))
    backend = make_backend(fake, worktree)
    rec = Recorder(backend, root=worktree)

    async def body():
        sid = await backend.create_session(spec(worktree))
        failed = await rec.turn(sid, "Do something.")
        assert not failed.ok and failed.provider_error and failed.error
        [error] = rec.of(sid, PROVIDER_ERROR)
        assert error.data["status"] == 500 and error.data["message"]
        assert rec.of(sid).index(error) < rec.of(sid).index(rec.of(sid, IDLE)[0])
        assert await rec.turn(sid, "Again.") == TurnResult(ok=True, text="Back.")
    run(body, backend)


@needs_codex
def test_abort_interrupts_the_turn_and_drops_queued_ones(fake: FakeOpenAI, worktree: Path):
    fake.script(fake_api.hang(), fake_api.text("After the interrupt."))
    backend = make_backend(fake, worktree)
    rec = Recorder(backend, root=worktree)

    async def body():
        sid = await backend.create_session(spec(worktree))
        pid = (await backend.get_session_status(sid)).pid
        await backend.send_message_async(sid, "A long job.")
        await backend.send_message_async(sid, "FYI: queued behind it.")
        assert (await backend.get_session_status(sid)).state == "busy"
        await asyncio.to_thread(fake.wait_requests, 1)
        await backend.abort_session(sid)
        idles = rec.of(sid, IDLE)
        assert [i.data for i in idles] == [TurnResult(ok=False, error="aborted")] * 2
        assert len(rec.of(sid, BUSY)) == 1                  # the queued turn never started
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.pid == pid and process_alive(pid)
        assert await rec.turn(sid, "Go on.") == TurnResult(ok=True, text="After the interrupt.")
        await backend.delete_session(sid)
        assert not process_alive(pid)
        count = len(rec.events)
        await backend.abort_session(sid)                    # unknown now: nothing happens
        with pytest.raises(KeyError):
            await backend.send_message_async(sid, "gone")
        assert len(rec.events) == count
    run(body, backend)


@needs_codex
def test_killed_mid_turn_then_resumed_in_a_new_process(fake: FakeOpenAI, worktree: Path):
    fake.script(fake_api.text("Noted: zebra."), fake_api.hang(), fake_api.text("The word was zebra."))
    backend = make_backend(fake, worktree)
    rec = Recorder(backend, root=worktree)

    async def body():
        sid = await backend.create_session(spec(worktree))
        assert (await rec.turn(sid, "Remember the word zebra.")).ok
        before = (await backend.get_session_status(sid)).usage
        pid = (await backend.get_session_status(sid)).pid
        await backend.send_message_async(sid, "Now work for a long time.")
        await asyncio.to_thread(fake.wait_requests, 2)
        os.killpg(pid, signal.SIGKILL)
        await rec.wait_for(lambda: rec.of(sid, EXITED))
        idle, exited = rec.of(sid, IDLE)[-1], rec.of(sid, EXITED)[-1]
        assert not idle.data.ok and "exited" in idle.data.error and not idle.data.provider_error
        assert rec.events.index(idle) < rec.events.index(exited)
        assert (await backend.get_session_status(sid)).state == "exited"

        again = await backend.create_session(spec(worktree, resume=sid))     # same-agent retry
        assert again == sid
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.pid != pid
        assert await rec.turn(sid, "What was the word?") == TurnResult(ok=True, text="The word was zebra.")
        after = (await backend.get_session_status(sid)).usage
        assert after.input_tokens == before.input_tokens + 800        # totals carry over the restart
        assert after.cache_read_tokens == before.cache_read_tokens + 200
        assert after.output_tokens == before.output_tokens + 50
    run(body, backend)
    last = fake.responses_requests()[-1]
    assert "Remember the word zebra." in inputs_text(last)              # the history came back
    assert inputs_text(last).count("You are a git-hive test worker.") == 1


@needs_codex
def test_resume_after_delete_in_a_new_backend(fake: FakeOpenAI, worktree: Path):
    fake.script(fake_api.text("One."), fake_api.text("Two."))
    first = make_backend(fake, worktree)
    rec = Recorder(first, root=worktree)

    async def one():
        sid = await first.create_session(spec(worktree))
        assert (await rec.turn(sid, "Remember the word okapi.")).ok
        await first.delete_session(sid)
        assert await first.list_sessions() == []
        return sid
    sid = run(one, first)

    second = make_backend(fake, worktree)
    rec2 = Recorder(second, root=worktree)

    async def two():
        assert await second.create_session(spec(worktree, resume=sid)) == sid
        assert await rec2.turn(sid, "Which word?") == TurnResult(ok=True, text="Two.")
        usage = (await second.get_session_status(sid)).usage
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1600, 400, 100)
    run(two, second)
    assert "Remember the word okapi." in inputs_text(fake.responses_requests()[-1])


@needs_codex
def test_refinery_starts_in_its_worktree_and_works_by_cd(fake: FakeOpenAI, worktree: Path):
    """The refinery's session starts in the worktree it is given, so Codex reports that folder as
    the cwd and `cd <worktree> && git ...` is allowed; a command Codex runs from another folder
    (`workdir`) is judged by that folder, and denied."""
    directory = worktree.parent
    (worktree / "README.md").write_text("hello\nmerged\n")
    fake.script(
        fake_api.apply_patch(fake_api.add_file_patch("resolved.txt", "resolved")),
        fake_api.exec_command(f'cd {worktree} && git add -A && git commit -q -m "refinery: resolve"'),
        fake_api.exec_command("git status --short", workdir=str(directory)),
        fake_api.apply_patch(fake_api.add_file_patch(".hive-result.jsonl",
                                                     '{"status": "merged", "summary": "resolved"}')),
        fake_api.text("Merged."),
    )
    backend = make_backend(fake, worktree)
    rec = Recorder(backend, role="refinery", root=worktree)

    async def body():
        sid = await backend.create_session(SessionSpec(role="refinery", cwd=str(worktree),
                                                       model="claude-opus-4-6", system_prompt="You are the refinery."))
        result = await rec.turn(sid, f"Refinery task: merge issue {ISSUE}.\nworktree: {worktree}\n")
        assert result == TurnResult(ok=True, text="Merged.")
    run(body, backend)

    assert [(r.tool, v.allow) for r, v in rec.verdicts] == [
        ("fileChange", True), ("commandExecution", True), ("commandExecution", False), ("fileChange", True)]
    assert rec.verdicts[1][0].cwd == str(worktree)                   # where its session started
    assert rec.verdicts[2][0].cwd == str(directory)                  # as Codex reported it
    assert "outside the worktree" in rec.verdicts[2][1].reason
    assert (worktree / "resolved.txt").read_text() == "resolved\n"   # a relative patch lands in the worktree


# -- through the orchestrator: a real `git hive run --backend codex` ---------------------------

def hive_toml(fake: FakeOpenAI) -> str:
    return f"""backend = "codex"
codex_command = {json.dumps(CODEX)}
max_agents = 1
merge_mode = "manual"
stall_seconds = 60

[codex]
model = "gpt-5.5"
model_provider = "fake"

[codex.model_providers.fake]
name = "Fake OpenAI (127.0.0.1)"
base_url = "{fake.base_url}"
wire_api = "responses"
env_key = "FAKE_OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.fixture
def project_repo(repo: Path, fake: FakeOpenAI, api_env: Path, git: Callable[..., Any]) -> Path:
    """A hive repository whose `.hive.toml` (committed on main) selects codex and the fake."""
    (repo / ".hive.toml").write_text(hive_toml(fake))
    git("add", ".hive.toml", cwd=repo)
    git("commit", "-q", "-m", "use codex", cwd=repo)
    # the person approves the backend, command and [codex] table it names (DESIGN §7)
    subprocess.run([sys.executable, "-m", "hive", "config", "approve"], cwd=repo, check=True, capture_output=True)
    return repo


def start_run(repo: Path, **hive: str) -> subprocess.Popen[str]:
    """The daemon in the background; end it with `finish`. `hive` overrides config keys through
    the environment (`stall_seconds="600"` → HIVE_STALL_SECONDS=600, over `.hive.toml`)."""
    env = {**os.environ, "FAKE_OPENAI_API_KEY": "dummy", **{f"HIVE_{k.upper()}": v for k, v in hive.items()}}
    return subprocess.Popen([sys.executable, "-m", "hive", "run", "--backend", "codex", "--until-idle"],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def finish(proc: subprocess.Popen[str], timeout: float = 90.0, expect: int = 0) -> str:
    """Wait for a start_run daemon to exit 0; its output. Never leaves it running."""
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
    assert proc.returncode == expect, out
    return out


def runtime_tokens(repo: Path, issue_id: str) -> tuple[int, int]:
    db = repo / ".git" / "hive" / "runtime.db"
    if not db.exists():
        return 0, 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            budget = conn.execute("SELECT tokens FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone()
            agent = conn.execute("SELECT tokens FROM agents WHERE issue_id = ?", (issue_id,)).fetchone()
    except sqlite3.OperationalError:                  # the daemon has not created its tables yet
        return 0, 0
    return (budget[0] if budget else 0), (agent[0] if agent else 0)


def finish_steps(commit_gate: threading.Event | None = None) -> list[fake_api.Step]:
    commit = fake_api.exec_command('git add -A && git commit -q -m "Add hello"')
    return [
        fake_api.apply_patch(fake_api.add_file_patch("hello.txt", "hello from the codex worker")),
        fake_api.gate(commit, commit_gate) if commit_gate else commit,
        fake_api.apply_patch(fake_api.add_file_patch(
            ".hive-result.jsonl", '{"status": "success", "summary": "added hello.txt"}')),
        fake_api.text("Done: hello.txt is committed."),
    ]


@needs_codex
def test_run_works_an_issue_end_to_end_with_the_real_cli(project_repo: Path, fake: FakeOpenAI, hive: Any,
                                                        git: Callable[..., Any], wait_for: Any):
    issue_id = hive("create", "Add hello.txt", "-d", "Create hello.txt and commit it.", cwd=project_repo,
                    check=True).stdout.strip()
    gate = threading.Event()
    fake.script(*finish_steps(gate))
    proc = start_run(project_repo)
    try:
        # mid-run, after the first answer: the worker's tokens are in the runtime db
        tokens = wait_for(lambda: all(runtime_tokens(project_repo, issue_id)) and runtime_tokens(project_repo, issue_id),
                          "tokens recorded in runtime.db", timeout=60)
        assert tokens == (850, 850)   # 1000 input of which 200 cached (not counted) + 50 output
    finally:
        gate.set()
    out = finish(proc)

    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "done", out
    branch = f"hive/work/{issue_id}"
    assert git("log", "-1", "--format=%s", branch, cwd=project_repo).stdout.strip() == "Add hello"
    assert git("show", f"{branch}:hello.txt", cwd=project_repo).stdout == "hello from the codex worker\n"
    files = git("show", "--name-only", "--format=", branch, cwd=project_repo).stdout.split()
    assert files == ["hello.txt"]                                  # the result file is not committed
    requests = fake.responses_requests()
    assert len(requests) == 4 and all(r["body"]["model"] == "gpt-5.5" for r in requests)
    assert issue_id in inputs_text(requests[0])                    # hive's prompt reached the model
    assert (project_repo / ".git" / "hive" / "codex-home" / "config.toml").is_file()


def budget_row(repo: Path, issue_id: str) -> dict[str, Any]:
    with sqlite3.connect(repo / ".git" / "hive" / "runtime.db", timeout=5) as conn:
        conn.row_factory = sqlite3.Row
        return dict(conn.execute("SELECT * FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone())


@needs_codex
def test_a_worker_of_40_model_calls_billed_like_codex_finishes_within_the_default_budget(
        project_repo: Path, fake: FakeOpenAI, hive: Any):
    """Every call resends the ~10k-token prefix and the history, mostly from the prompt cache:
    about 800k input tokens in all, four times max_tokens_per_issue had the cached ones been
    counted; the worker finishes, the cache reads recorded and priced at the cached rate."""
    issue_id = hive("create", "Long work", "-d", "Many small steps.", cwd=project_repo, check=True).stdout.strip()
    steps = [fake_api.exec_command(f"echo step {n}") for n in range(40)] + finish_steps()
    for n, step in enumerate(steps):
        step.usage = fake_api.billed_like_codex(n)
    fake.script(*steps)
    out = finish(start_run(project_repo), timeout=300)

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "done", out
    assert len(fake.responses_requests()) == 44
    calls = [fake_api.billed_like_codex(n) for n in range(44)]
    billed_input = sum(c["input_tokens"] for c in calls)
    cached = sum(c["cached_tokens"] for c in calls)
    budget = budget_row(project_repo, issue_id)
    assert budget["cache_read_tokens"] == cached and billed_input > 800_000 > 200_000 > budget["tokens"]
    assert budget["input_tokens"] == billed_input - cached and budget["output_tokens"] == 44 * 150
    assert budget["tokens"] == budget["input_tokens"] + budget["cache_write_tokens"] + budget["output_tokens"]
    price_in, price_out, price_cached = 1.25, 10.0, 0.125      # gpt-5.5 is priced as gpt-5
    expected = ((billed_input - cached) * price_in + cached * price_cached + 44 * 150 * price_out) / 1e6
    assert budget["cost_usd"] == pytest.approx(expected, rel=1e-3)


@needs_codex
def test_a_looping_codex_worker_is_stopped_by_the_budget_with_the_figures(project_repo: Path, fake: FakeOpenAI,
                                                                          hive: Any, git: Callable[..., Any]):
    issue_id = hive("create", "Loops", "-d", "Never ends.", cwd=project_repo, check=True).stdout.strip()
    fake.script(*[fake_api.exec_command("true", usage=fake_api.billed_like_codex(n, growth=6000, output=2000))
                  for n in range(200)])
    out = finish(start_run(project_repo), timeout=300, expect=3)

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "escalated", out
    assert len(fake.responses_requests()) < 60                  # stopped mid-loop, not at its end
    reason = git("log", "-1", "--format=%(trailers:key=Hive-Reason,valueonly)", "hive/state",
                 cwd=project_repo).stdout
    assert "token budget exceeded" in reason and "> max_tokens_per_issue 200,000" in reason, reason
    assert "counted; cache reads" in reason and "$" in reason
    budget = budget_row(project_repo, issue_id)
    assert budget["tokens"] > 200_000 and budget["cache_read_tokens"] > budget["tokens"]


@needs_codex
def test_run_declines_a_command_outside_the_worktree(project_repo: Path, fake: FakeOpenAI, hive: Any,
                                                    git: Callable[..., Any]):
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    outside = project_repo / "outside.txt"
    fake.script(fake_api.exec_command("echo pwned > ../../../../outside.txt"), *finish_steps())
    out = finish(start_run(project_repo))

    assert not outside.exists()
    assert "denied commandExecution to worker" in out and "outside the worktree" in out
    assert "rejected by user" in inputs_text(fake.responses_requests()[1])
    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "done", out
    assert git("log", "-1", "--format=%s", f"hive/work/{issue_id}", cwd=project_repo).stdout.strip() == "Add hello"


def agent_pid(repo: Path, issue_id: str) -> int:
    db = repo / ".git" / "hive" / "runtime.db"
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            row = conn.execute("SELECT pid FROM agents WHERE issue_id = ?", (issue_id,)).fetchone()
    except sqlite3.OperationalError:
        return 0
    return int(row[0] or 0) if row else 0


@needs_codex
def test_run_api_error_degrades_then_recovers(project_repo: Path, fake: FakeOpenAI, hive: Any, wait_for: Any):
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    fake.models_status = 503                                  # the first probe finds it still down
    fake.script(fake_api.http_error(500, "scripted outage"), *finish_steps())
    proc = start_run(project_repo)
    try:
        wait_for(lambda: any(r["method"] == "GET" for r in list(fake.requests)), "a health probe", timeout=60)
        fake.models_status = 200
    finally:
        out = finish(proc)

    assert "degraded: provider error 500" in out and "provider healthy again" in out, out
    assert "provider failure (not counted)" in out
    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "done", out
    probes = [r for r in fake.requests if r["method"] == "GET"]
    assert len(probes) >= 2 and all(r["path"] == "/v1/models" for r in probes)
    # the retry went to the same Codex thread: its history holds the first attempt's prompt twice
    assert inputs_text(fake.responses_requests()[1]).count(f"# Issue {issue_id}") == 2


@needs_codex
def test_run_resumes_the_thread_after_the_cli_is_killed_mid_turn(project_repo: Path, fake: FakeOpenAI,
                                                                 hive: Any, git: Callable[..., Any], wait_for: Any):
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    steps = finish_steps()
    fake.script(steps[0], fake_api.hang(), *steps[1:])
    proc = start_run(project_repo)
    try:
        fake.wait_requests(2, timeout=60)                     # the patch is applied; the model "thinks"
        pid = wait_for(lambda: agent_pid(project_repo, issue_id), "the agent's pid")
        os.killpg(pid, signal.SIGKILL)
    finally:
        out = finish(proc)

    assert "codex app-server exited with code -9 mid-turn" in out and "→ retry" in out, out
    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "done", out
    assert git("show", f"hive/work/{issue_id}:hello.txt", cwd=project_repo).stdout == "hello from the codex worker\n"
    requests = fake.responses_requests()
    sessions = {r["headers"].get("session-id") for r in requests}
    assert len(sessions) == 1                                 # one Codex thread, resumed in a new process
    retry = requests[2]
    assert "*** Add File: hello.txt" in inputs_text(retry)    # the killed turn's history came back
    assert "Your previous attempt failed" in inputs_text(retry)


@needs_codex
def test_run_cancel_aborts_the_running_turn(project_repo: Path, fake: FakeOpenAI, hive: Any, wait_for: Any,
                                           monkeypatch: pytest.MonkeyPatch):
    issue_id = hive("create", "Never finishes", cwd=project_repo, check=True).stdout.strip()
    monkeypatch.setattr(fake_api, "GATE_TIMEOUT", 600.0)      # the model "thinks" until the fake closes
    fake.script(fake_api.hang())
    # no stall detection within the test's time: only the cancel can stop this turn
    proc = start_run(project_repo, stall_seconds="600")
    try:
        fake.wait_requests(1, timeout=60)
        pid = wait_for(lambda: agent_pid(project_repo, issue_id), "the agent's pid")
        assert group_alive(pid)                               # mid-turn: the CLI waits on its model call
        hive("cancel", issue_id, cwd=project_repo, check=True)
        # the CLI and anything it started are gone (interrupt, else kill: seconds, not the stall)
        wait_for(lambda: not group_alive(pid), "the canceled agent's CLI to exit", timeout=30)
    finally:
        out = finish(proc)

    assert f"{issue_id} canceled: stopping its agent" in out, out
    assert not group_alive(pid), out
    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "canceled"
    assert len(fake.responses_requests()) == 1


def last_output(request: dict[str, Any]) -> str:
    """What the last command's output was, as the model was told it."""
    outputs = [item for item in request["body"]["input"] if item.get("type") == "function_call_output"]
    return json.dumps(outputs[-1]) if outputs else ""


@needs_codex
def test_run_escape_attempts_through_the_real_cli_reach_nothing(project_repo: Path, fake: FakeOpenAI, hive: Any,
                                                               git: Callable[..., Any], api_env: Path,
                                                               tmp_path: Path, make_repo: Callable[..., Path]):
    """Codex's exec tool runs escape attempts the text policy lets through: hive's jail refuses
    each (the model is told what), nothing outside the worktree changes, no secret is read, and
    the worker still does its honest work."""
    require_jail()
    scene = Scene.build(project_repo, api_env, tmp_path, git, make_repo)
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    tried = subset(scene)
    fake.script(*[fake_api.exec_command(command) for _, command, _ in tried], *finish_steps())
    scene.snapshot(git)
    out = finish(start_run(project_repo), timeout=240)

    requests = fake.responses_requests()
    for (label, _, refused), request in zip(tried, requests[1:]):
        said = last_output(request)
        assert re.search(refused, said) and "rejected by user" not in said, (label, said)
    shown = json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)
    assert shown["status"] == "done", out
    scene.assert_nothing_escaped(git, out + json.dumps([r["body"] for r in requests]))


# no retry, no switch, the anomaly detector at its tightest: a crash charged to the issue escalates it
CRASH_LIMITS = {"max_retries": "0", "max_agent_switches": "0", "anomaly_failure_threshold": "1"}


def run_until_killed(repo: Path, wait_for: Any, until: Callable[[], Any], issue_id: str, role: str,
                     **hive: str) -> tuple[int, str]:
    """Run the daemon until `until()` holds and a `role` process of the issue is on record; then
    SIGKILL it. That process (pid, start time) as hive recorded it."""
    daemon = start_run(repo, **CRASH_LIMITS, **hive)
    try:
        until()
        return wait_for(lambda: recorded_process(repo, issue_id, role), f"the {role}'s pid in runtime.db",
                        timeout=60)
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.communicate(timeout=30)


@needs_codex
def test_sigkill_of_the_daemon_during_a_worker_turn_spends_no_budget_and_overlaps_nothing(
        project_repo: Path, fake: FakeOpenAI, hive: Any, git: Callable[..., Any], wait_for: Any, state_log: Any):
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    fake.script(finish_steps()[0], fake_api.hang())
    # the patch is applied; the model "thinks"
    old = run_until_killed(project_repo, wait_for, lambda: fake.wait_requests(2, timeout=60), issue_id, "worker")
    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "in_progress"

    # the restart's first model call waits until the test has seen whether the lost agent still runs
    release, seen_alive = threading.Event(), []
    first, *rest = finish_steps()
    fake.script(fake_api.gate(first, release), *rest)

    def look() -> None:
        try:
            fake.wait_requests(3, timeout=60)
            seen_alive.append(still_running(old))
        finally:
            release.set()

    looker = threading.Thread(target=look, daemon=True)
    looker.start()
    out = finish(start_run(project_repo, **CRASH_LIMITS))
    looker.join(5)

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "done", out
    assert seen_alive == [False]                  # the lost agent was ended before the new attempt began
    assert not still_running(old)
    assert issue_events(state_log(project_repo), issue_id) == ["claimed", "recovered", "claimed", "done"]
    assert budget_spent(project_repo, issue_id) == (0, 0, [])
    assert "no budget spent" in out
    assert git("show", f"hive/work/{issue_id}:hello.txt", cwd=project_repo).stdout == "hello from the codex worker\n"


@needs_codex
def test_run_the_codex_refinery_resolves_a_conflict_working_by_cd(project_repo: Path, fake: FakeOpenAI, hive: Any,
                                                                 git: Callable[..., Any], state_log: Any):
    """The target moved under the worker (a person changed the same line): the replay conflicts and
    the refinery, a codex session started in the issue's worktree, resolves it by `cd <worktree> &&
    git ...` (rebase, resolve, continue), says merged; hive checks it and lands it."""
    issue_id = hive("create", "Greet from the worker", cwd=project_repo, check=True).stdout.strip()
    worktree = project_repo / ".git" / "hive" / "worktrees" / issue_id
    person_committed = threading.Event()
    fake.script(
        fake_api.apply_patch("*** Begin Patch\n*** Update File: README.md\n@@\n-hello\n+hello from the worker\n"
                             "*** End Patch\n"),
        fake_api.gate(fake_api.exec_command('git commit -q -am "README: greet from the worker"'), person_committed),
        fake_api.apply_patch(fake_api.add_file_patch(".hive-result.jsonl", '{"status": "success", "summary": "greets"}')),
        fake_api.text("Done."),
        # the refinery
        fake_api.exec_command(f"cd {worktree} && git -c core.editor=true rebase main"),
        fake_api.exec_command(f"cd {worktree} && printf 'hello from a person\\nhello from the worker\\n' > README.md"
                              " && git add README.md && git -c core.editor=true rebase --continue"),
        fake_api.apply_patch(fake_api.add_file_patch(".hive-result.jsonl",
                                                     '{"status": "merged", "summary": "kept both greetings"}')),
        fake_api.text("Merged."),
    )
    proc = start_run(project_repo, merge_mode="auto")
    try:
        fake.wait_requests(2, timeout=60)                       # the worker edited README.md
        (project_repo / "README.md").write_text("hello from a person\n")
        git("commit", "-q", "-am", "README: greet from a person", cwd=project_repo)
    finally:
        person_committed.set()
    out = finish(proc, timeout=180)

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "finalized", out
    assert f"{issue_id} conflict → refinery" in out and "denied" not in out, out
    assert git("show", "main:README.md", cwd=project_repo).stdout == "hello from a person\nhello from the worker\n"
    assert issue_events(state_log(project_repo), issue_id) == ["claimed", "done", "finalized"]
    requests = fake.responses_requests()
    assert len(requests) == 8 and "Refinery task" in inputs_text(requests[4])
    rebased = last_output(requests[5])
    assert "CONFLICT" in rebased and "rejected by user" not in rebased, rebased   # it ran, in the worktree


@needs_codex
def test_sigkill_of_the_daemon_right_after_the_worker_finished_keeps_the_work(
        project_repo: Path, fake: FakeOpenAI, hive: Any, git: Callable[..., Any], wait_for: Any, state_log: Any):
    """Committed and a success result written, its turn not ended: the restart takes it as done."""
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    fake.script(*finish_steps()[:3], fake_api.hang())
    old = run_until_killed(project_repo, wait_for, lambda: fake.wait_requests(4, timeout=60), issue_id, "worker")

    out = finish(start_run(project_repo, **CRASH_LIMITS))

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "done", out
    assert len(fake.responses_requests()) == 4                 # not redone: no model call after the restart
    assert issue_events(state_log(project_repo), issue_id) == ["claimed", "done"]
    [done] = [c for c in state_log(project_repo) if c.trailers.get("Hive-Event") == "done"]
    assert done.trailers["Hive-Head"] == git("rev-parse", f"hive/work/{issue_id}", cwd=project_repo).stdout.strip()
    assert int(done.trailers["Hive-Tokens"]) > 0 and int(done.trailers["Hive-Cache-Read-Tokens"]) > 0
    assert budget_spent(project_repo, issue_id) == (0, 0, [])
    assert not still_running(old)


@needs_codex
def test_sigkill_of_the_daemon_during_a_merge_test_merges_once_on_restart(
        project_repo: Path, fake: FakeOpenAI, hive: Any, git: Callable[..., Any], wait_for: Any, state_log: Any):
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    fake.script(*finish_steps())
    old = run_until_killed(project_repo, wait_for, lambda: None, issue_id, "test",
                           merge_mode="auto", test_command="sleep 60")
    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "done"

    with NewProcesses(project_repo, issue_id, "test", old) as tests:
        out = finish(start_run(project_repo, **CRASH_LIMITS, merge_mode="auto", test_command="sleep 0.5"))

    assert json.loads(hive("show", issue_id, "--json", cwd=project_repo).stdout)["status"] == "finalized", out
    assert len(fake.responses_requests()) == 4                 # the finished work was not redone
    assert issue_events(state_log(project_repo), issue_id) == ["claimed", "done", "finalized"]
    assert git("show", "main:hello.txt", cwd=project_repo).stdout == "hello from the codex worker\n"
    assert tests.alive == [False]                             # one new test, with the old one already gone
    assert not still_running(old)


@needs_codex
def test_logs_shows_the_codex_workers_transcript(project_repo: Path, fake: FakeOpenAI, hive: Any):
    """`git hive logs` through the real CLI: hive's prompt, each command and patch with hive's
    answer, what Codex said, and the turn's tokens; shown escaped."""
    issue_id = hive("create", "Add hello.txt", cwd=project_repo, check=True).stdout.strip()
    fake.script(fake_api.exec_command("echo pwned > ../../../../outside.txt"), *finish_steps()[:-1],
                fake_api.text("Done \x1b]0;pwned\x07 hello.txt is committed."))
    finish(start_run(project_repo))

    sessions = json.loads(hive("logs", issue_id, "--json", cwd=project_repo).stdout)
    assert len(sessions) == 1
    entries = sessions[0]["entries"]
    head = entries[0]
    assert head["type"] == "session" and head["backend"] == "codex" and head["role"] == "worker"
    assert head["model"] == "gpt-5.5" and head["issue"] == issue_id and head["label"].startswith("worker-w-")
    prompts = [e["text"] for e in entries if e["type"] == "prompt"]
    assert prompts and prompts[0].startswith(f"# Issue {issue_id}: Add hello.txt")
    asked = [(e["tool"], e["allow"]) for e in entries if e["type"] == "permission"]
    assert asked[0] == ("commandExecution", False) and ("fileChange", True) in asked
    assert ("commandExecution", True) in asked
    denied = next(e for e in entries if e["type"] == "permission" and not e["allow"])
    assert denied["command"] == "echo pwned > ../../../../outside.txt" and "outside the worktree" in denied["reason"]
    said = [e["text"] for e in entries if e["type"] == "message"]
    assert "Done \x1b]0;pwned\x07 hello.txt is committed." in said
    assert any(text.startswith("$ git add -A") for text in said)
    turns = [e for e in entries if e["type"] == "turn"]
    assert turns[0]["ok"] and turns[0]["usage"]["input_tokens"] + turns[0]["usage"]["cache_read_tokens"] > 0
    assert "cost_usd" in turns[0]["usage"]

    shown = hive("logs", issue_id, cwd=project_repo).stdout
    assert "\x1b" not in shown and "Done \\x1b]0;pwned\\x07 hello.txt" in shown
    assert "DENIED   commandExecution: echo pwned > ../../../../outside.txt" in shown
