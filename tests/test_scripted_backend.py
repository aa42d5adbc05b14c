"""The scripted backend: real agent subprocesses following scripts, seen through the protocol."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import os
import subprocess
import time
from pathlib import Path

import pytest

from hive.backends.base import (
    BUSY, EXITED, IDLE, MESSAGE, PERMISSION, PROVIDER_ERROR, USAGE, Backend, Event,
    PermissionRequest, SessionSpec, TurnResult, Usage,
)
from hive.backends.registry import load_backend
from hive.backends.scripted import ScriptedBackend
from hive.errors import BadInput

# No global or system git config: the agent must commit with its own fallback identity.
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid", *args],
        cwd=cwd, check=True, capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def hive_dir(repo: Path) -> Path:
    return repo / ".git" / "hive"


def write_script(tmp_path: Path, data: dict, name: str = "script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def spec(cwd: Path, issue: str = "hv-000001", role: str = "worker", labels=(), **kw) -> SessionSpec:
    return SessionSpec(role=role, cwd=str(cwd), issue_id=issue, labels=tuple(labels),
                       env=dict(GIT_ENV), **kw)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (init may reap orphans late, or never)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


class Recorder:
    """Every event of a backend, with a way to wait for the next ones."""

    def __init__(self, backend: ScriptedBackend):
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        backend.on("*", self._on)

    def _on(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()

    def of(self, sid: str, *types: str) -> list[Event]:
        return [e for e in self.events if e.session_id == sid and (not types or e.type in types)]

    async def wait_for(self, predicate, timeout: float = 15.0):
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

    async def turn(self, backend: ScriptedBackend, sid: str, text: str) -> TurnResult:
        before = len(self.of(sid, IDLE))
        await backend.send_message_async(sid, text)
        idles = await self.wait_for(lambda: self.of(sid, IDLE)[before:])
        return idles[0].data


def run(body, backend: ScriptedBackend, timeout: float = 30.0):
    async def main():
        try:
            return await asyncio.wait_for(body(), timeout)
        finally:
            await backend.stop()
    return asyncio.run(main())


def result_of(cwd: Path) -> dict:
    return json.loads((cwd / ".hive-result.jsonl").read_text())


# ----------------------------------------------------------------------------------------------


def test_backend_implements_the_protocol(hive_dir):
    backend = load_backend("scripted", hive_dir=str(hive_dir))
    assert isinstance(backend, ScriptedBackend)
    assert isinstance(backend, Backend)
    assert backend.name == "scripted"

    async def body():
        await backend.connect_with_reconnect()
        assert await backend.health_check() is True
        assert await backend.list_sessions() == []
    run(body, backend)


def test_default_turn_writes_commits_and_succeeds(repo, hive_dir):
    backend = ScriptedBackend(hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo, "hv-abc123"))
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and alive(status.pid)
        result = await rec.turn(backend, sid, "Add a greeting\nwith more details below")
        assert result.ok and result.error == ""
        types = [e.type for e in rec.of(sid) if e.type != MESSAGE]
        assert types == [BUSY, USAGE, IDLE]
        usage = rec.of(sid, USAGE)[0].data
        assert isinstance(usage, Usage) and usage.total_tokens > 0
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.usage == usage
        messages = await backend.get_messages(sid)
        assert messages[0]["role"] == "user"
        assert messages[0]["text"] == "Add a greeting\nwith more details below"
        assert any(m["role"] == "assistant" for m in messages)
        return sid, status.pid

    sid, pid = run(body, backend)
    assert (repo / "hive-work" / "hv-abc123.txt").read_text() == "Add a greeting\n"
    assert git(repo, "log", "-1", "--name-only", "--format=%s").split() == [
        "hv-abc123:", "Add", "a", "greeting", "hive-work/hv-abc123.txt"]
    assert git(repo, "log", "-1", "--format=%ae").strip() == "scripted-agent@hive.invalid"
    assert result_of(repo)["status"] == "success"
    assert ".hive-result.jsonl" not in git(repo, "ls-files")
    assert git(repo, "status", "--porcelain").strip() == "?? .hive-result.jsonl"
    prompts = (hive_dir / "scripted" / "hv-abc123.prompts.jsonl").read_text().splitlines()
    assert [json.loads(p)["text"] for p in prompts] == ["Add a greeting\nwith more details below"]
    assert json.loads(prompts[0])["session"] == sid
    assert (hive_dir / "scripted" / "hv-abc123.attempts").read_text().strip() == "1"
    assert not alive(pid)                   # stop() ended the agent


def test_crash_mid_turn_gives_failed_idle_then_exited(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [{"say": "about to crash"}, {"crash": 3},
                                                 {"write": "never.txt", "content": "x"}]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        result = await rec.turn(backend, sid, "go")
        assert not result.ok
        assert "exited with code 3 mid-turn" in result.error
        exited = await rec.wait_for(lambda: rec.of(sid, EXITED))
        assert exited[0].data == {"exit_code": 3}
        assert [e.type for e in rec.of(sid) if e.type != MESSAGE] == [BUSY, IDLE, EXITED]
        assert (await backend.get_session_status(sid)).state == "exited"
        with pytest.raises(RuntimeError):
            await backend.send_message_async(sid, "again")
    run(body, backend)
    assert not (repo / "never.txt").exists()
    assert not (repo / ".hive-result.jsonl").exists()


def test_hang_then_abort_kills_the_whole_process_group(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"spawn": "exec sleep 60", "pid_file": "child.pid"},
        # a grandchild that ignores SIGTERM: only the SIGKILL after the grace gets it
        {"spawn": "trap '' TERM; touch trapped; exec sleep 60"},
        {"run": "while [ ! -e trapped ]; do sleep 0.01; done"},
        {"say": "spawned both"},
        {"hang": True},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    backend.kill_grace = 0.5
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        await backend.send_message_async(sid, "work")
        await rec.wait_for(lambda: [e for e in rec.of(sid, MESSAGE) if e.data["text"] == "spawned both"])
        pids = [int(e.data["text"].split()[-1]) for e in rec.of(sid, MESSAGE)
                if e.data["text"].startswith("spawned pid")]
        assert len(pids) == 2 and int((repo / "child.pid").read_text()) == pids[0]
        agent_pid = (await backend.get_session_status(sid)).pid
        assert (await backend.get_session_status(sid)).state == "busy"
        assert all(alive(p) for p in [agent_pid, *pids])
        started = time.monotonic()
        await backend.abort_session(sid)
        # the SIGTERM-proof grandchild needed the SIGKILL that follows the grace
        assert backend.kill_grace <= time.monotonic() - started < 3
        # when abort returns, the turn has ended and the agent is gone, with all it started
        idle = rec.of(sid, IDLE)
        assert len(idle) == 1 and not idle[0].data.ok and idle[0].data.error == "aborted"
        assert len(rec.of(sid, EXITED)) == 1
        assert (await backend.get_session_status(sid)).state == "exited"
        for pid in [agent_pid, *pids]:
            assert not alive(pid), pid
        await backend.abort_session(sid)             # idempotent
        assert len(rec.of(sid, EXITED)) == 1
    run(body, backend)


def test_fail_twice_then_succeed_across_three_turns(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"fail_times": 2},
        {"write": "done.txt", "content": "attempt {attempt}\n"},
        {"commit": "{issue}: done"},
        {"result": "success", "summary": "done on attempt {attempt}", "test_command": "true"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo, "hv-fa1100"))
        outcomes = []
        for n in range(3):
            result = await rec.turn(backend, sid, f"try {n + 1}")
            assert result.ok                      # failing work is not a failed turn
            outcomes.append(result_of(repo))
        return outcomes

    outcomes = run(body, backend)
    assert [o["status"] for o in outcomes] == ["failure", "failure", "success"]
    assert outcomes[2] == {"status": "success", "summary": "done on attempt 3", "test_command": "true"}
    assert (repo / "done.txt").read_text() == "attempt 3\n"
    assert (hive_dir / "scripted" / "hv-fa1100.attempts").read_text().strip() == "3"
    assert git(repo, "log", "-1", "--format=%s").strip() == "hv-fa1100: done"


def test_attempt_counter_survives_sessions(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"crash": 1, "on_attempts": [1]},
        {"result": "success", "summary": "attempt {attempt}"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        first = await backend.create_session(spec(repo, "hv-5e5510"))
        assert not (await rec.turn(backend, first, "one")).ok
        await backend.delete_session(first)
        second = await backend.create_session(spec(repo, "hv-5e5510"))
        assert second != first
        assert (await rec.turn(backend, second, "two")).ok
    run(body, backend)
    assert result_of(repo) == {"status": "success", "summary": "attempt 2"}


def test_garbage_result_is_written_verbatim(repo, tmp_path, hive_dir):
    garbage = "this is {not json\n\tstatus: success {issue}"
    script = write_script(tmp_path, {"default": [{"result_raw": garbage}]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        assert (await rec.turn(backend, sid, "go")).ok
    run(body, backend)
    assert (repo / ".hive-result.jsonl").read_text() == garbage


def test_fyi_turns_are_recorded_but_run_no_script(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"append": "runs.txt", "content": "{prompt_first_line}\n"},
        {"result": "success"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo, "hv-f10000"))
        result = await rec.turn(backend, sid, "FYI: tests need PYTHONPATH=src/")
        assert result.ok
        assert not (repo / "runs.txt").exists()
        assert not (hive_dir / "scripted" / "hv-f10000.attempts").exists()
        assert (await rec.turn(backend, sid, "real work")).ok
        messages = await backend.get_messages(sid)
        assert [m["text"] for m in messages if m["role"] == "user"] == [
            "FYI: tests need PYTHONPATH=src/", "real work"]
    run(body, backend)
    assert (repo / "runs.txt").read_text() == "real work\n"
    prompts = [json.loads(line) for line in
               (hive_dir / "scripted" / "hv-f10000.prompts.jsonl").read_text().splitlines()]
    assert [(p["text"], p["fyi"]) for p in prompts] == [
        ("FYI: tests need PYTHONPATH=src/", True), ("real work", False)]
    assert (hive_dir / "scripted" / "hv-f10000.attempts").read_text().strip() == "1"


def test_turns_sent_while_busy_are_queued_in_order(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"sleep": 0.3},
        {"append": "order.txt", "content": "{prompt}\n"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        await backend.send_message_async(sid, "first")
        await backend.send_message_async(sid, "FYI: a sibling's note")
        await backend.send_message_async(sid, "second")
        assert (await backend.get_session_status(sid)).state == "busy"
        await rec.wait_for(lambda: len(rec.of(sid, IDLE)) == 3)
        assert (await backend.get_session_status(sid)).state == "idle"
        assert [e.type for e in rec.of(sid, BUSY, IDLE)] == [BUSY, IDLE] * 3
    run(body, backend)
    assert (repo / "order.txt").read_text() == "first\nsecond\n"


def test_permission_allowed_and_denied(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"write": "allowed.txt", "content": "yes", "ask": True},
        {"run": "touch denied.txt", "ask": True},
        {"say": "after the asks"},
        {"edit": "README.md", "find": "hello", "replace": "bye", "ask": True, "on_deny": "fail"},
        {"write": "unreached.txt", "content": "no"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)
    seen: list[PermissionRequest] = []
    pending_seen: list[list[str]] = []

    async def on_permission(event: Event) -> None:
        req = event.data
        seen.append(req)
        pending = await backend.get_pending_permissions(event.session_id)
        pending_seen.append([p.request_id for p in pending])
        allow = req.tool == "Write"
        await backend.reply_permission(event.session_id, req.request_id, allow,
                                       "" if allow else "policy: no shell here")
    backend.on(PERMISSION, on_permission)

    async def body():
        sid = await backend.create_session(spec(repo))
        result = await rec.turn(backend, sid, "go")
        assert result.ok
        assert await backend.get_pending_permissions(sid) == []
        texts = [e.data["text"] for e in rec.of(sid, MESSAGE)]
        assert any("policy: no shell here" in t for t in texts)
        assert "after the asks" in texts
    run(body, backend)
    assert [(r.tool, r.command, r.paths) for r in seen] == [
        ("Write", "", ["allowed.txt"]), ("Bash", "touch denied.txt", []), ("Edit", "", ["README.md"])]
    assert seen[1].input == {"command": "touch denied.txt"}
    assert all(ids == [r.request_id] for ids, r in zip(pending_seen, seen))
    assert (repo / "allowed.txt").read_text() == "yes"
    assert not (repo / "denied.txt").exists()
    assert (repo / "README.md").read_text() == "hello\n"
    assert not (repo / "unreached.txt").exists()
    result = result_of(repo)
    assert result["status"] == "failure" and "permission denied" in result["summary"]


def test_script_selection_precedence(tmp_path, hive_dir):
    hive_dir.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "script.toml"
    path.write_text("""
[[default]]
write = "chosen.txt"
content = "default"

[[labels.ui]]
write = "chosen.txt"
content = "label ui"

[[labels.backend]]
write = "chosen.txt"
content = "label backend"

[[issues.hv-000001]]
write = "chosen.txt"
content = "issue {issue}"

[[roles.refinery]]
write = "chosen.txt"
content = "role {role}"
""")
    backend = ScriptedBackend(str(path), hive_dir=str(hive_dir))
    rec = Recorder(backend)
    cases = {
        "issue": ("hv-000001", "worker", ["ui"], "issue hv-000001"),
        "first-label": ("hv-000002", "worker", ["nolabel", "backend", "ui"], "label backend"),
        "other-label": ("hv-000003", "refinery", ["x", "ui"], "label ui"),
        "role": ("", "refinery", ["x"], "role refinery"),
        "default": ("hv-000004", "worker", [], "default"),
    }

    async def body():
        sids = {}
        for name, (issue, role, labels, _) in cases.items():
            (tmp_path / name).mkdir()
            sids[name] = await backend.create_session(spec(tmp_path / name, issue, role, labels))
        results = await asyncio.gather(*(rec.turn(backend, sid, "go") for sid in sids.values()))
        assert all(r.ok for r in results)
    run(body, backend)
    for name, (*_, expected) in cases.items():
        assert (tmp_path / name / "chosen.txt").read_text() == expected, name
    assert (hive_dir / "scripted" / "role-refinery.prompts.jsonl").exists()


def test_builtin_roles_without_a_script(tmp_path, hive_dir):
    hive_dir.mkdir(parents=True, exist_ok=True)
    backend = ScriptedBackend(hive_dir=str(hive_dir))
    rec = Recorder(backend)
    (tmp_path / "r").mkdir()

    async def body():
        sid = await backend.create_session(spec(tmp_path / "r", "", "refinery"))
        assert (await rec.turn(backend, sid, "resolve the conflict")).ok
    run(body, backend)
    assert result_of(tmp_path / "r")["status"] == "merged"


def test_bad_script_is_refused_up_front(tmp_path):
    for data, needle in [
        ({"default": [{"frobnicate": 1}]}, "exactly one action"),
        ({"default": [{"write": "a", "contents": "typo"}]}, "contents"),
        ({"tasks": []}, "unknown top-level key"),
        ({"issues": {"hv-1": [{"crash": "soon"}]}}, "issues.hv-1[1]"),
    ]:
        with pytest.raises(BadInput) as err:
            ScriptedBackend(write_script(tmp_path, data))
        assert needle in str(err.value) and "script.json" in str(err.value)
    (tmp_path / "bad.toml").write_text("[[default]\n")
    with pytest.raises(BadInput):
        ScriptedBackend(str(tmp_path / "bad.toml"))


def test_flood_of_output_does_not_break_the_backend(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"flood": 50_000_000},
        {"flood": 3_000_000, "lines": 3},
        {"say": "after the flood"},
        {"result": "success"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        result = await rec.turn(backend, sid, "go")
        assert result.ok and result.text == "after the flood"
        assert [e.data["text"] for e in rec.of(sid, MESSAGE)] == ["after the flood"]
        messages = await backend.get_messages(sid)
        assert sum(len(m["text"]) for m in messages) < 1000
        assert backend._sessions[sid].discarded_lines == 4
        assert (await rec.turn(backend, sid, "again")).ok       # the session still works
    run(body, backend)
    assert result_of(repo)["status"] == "success"


def test_message_history_is_bounded(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [{"say": "line {attempt}"}]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        backend._sessions[sid].messages = collections.deque(maxlen=6)   # instead of 500
        for n in range(5):
            await rec.turn(backend, sid, f"turn {n + 1}")
        messages = await backend.get_messages(sid)
        assert [(m["role"], m["text"]) for m in messages] == [
            ("user", "turn 3"), ("assistant", "line 3"), ("user", "turn 4"),
            ("assistant", "line 4"), ("user", "turn 5"), ("assistant", "line 5")]
    run(body, backend)


def test_file_steps_notes_run_and_usage(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"write": "src/app.py", "content": "print('hi')\n"},
        {"append": "src/app.py", "content": "print('more')\n"},
        {"edit": "src/app.py", "find": "hi", "replace": "hello"},
        {"note": "tests need PYTHONPATH=src/", "category": "gotcha"},
        {"run": "exit 4"},
        {"say": "last exit {last_exit}"},
        {"tokens": {"input": 100, "output": 10, "cost_usd": 0.5}},
        {"tokens": {"input": 1, "output": 2}},
        {"commit": "work"},
        {"run": "git status --porcelain > ../status-{attempt}.txt"},
        {"result": "success", "summary": "ok"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        assert (await rec.turn(backend, sid, "one")).ok
        texts = [e.data["text"] for e in rec.of(sid, MESSAGE)]
        assert "$ exit 4\n(exit 4)" in texts and "last exit 4" in texts
        assert [e.data.total_tokens for e in rec.of(sid, USAGE)] == [110, 113]
        assert (await rec.turn(backend, sid, "two")).ok
        usage = (await backend.get_session_status(sid)).usage
        assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (202, 24, 1.0)
    run(body, backend)
    assert (repo / "src/app.py").read_text() == "print('hello')\nprint('more')\n"
    notes = (repo / ".hive-notes.jsonl").read_text().splitlines()
    assert json.loads(notes[0]) == {"category": "gotcha", "content": "tests need PYTHONPATH=src/"}
    assert len(notes) == 2
    assert set(git(repo, "ls-files").split()) == {"README.md", "src/app.py"}
    # notes and result are never committed: after each commit only they are left
    assert (tmp_path / "status-1.txt").read_text().splitlines() == ["?? .hive-notes.jsonl"]
    assert sorted((tmp_path / "status-2.txt").read_text().splitlines()) == [
        "?? .hive-notes.jsonl", "?? .hive-result.jsonl"]


def test_a_commit_step_leaves_the_protocol_files_out_even_when_a_step_staged_one(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [
        {"write": "src/work.py", "content": "WORK = 1\n"},
        {"note": "a note"},
        {"run": "git add -f .hive-notes.jsonl"},
        {"commit": "work"},
        {"run": "git ls-tree -r --name-only HEAD > ../tree.txt"},
        {"commit": "again"},
        {"result": "success", "summary": "ok"},
    ]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        assert (await rec.turn(backend, sid, "go")).ok
        assert "Nothing to commit." in [e.data["text"] for e in rec.of(sid, MESSAGE)]
    run(body, backend)
    assert (tmp_path / "tree.txt").read_text().split() == ["README.md", "src/work.py"]
    assert git(repo, "log", "--format=%s").split() == ["work", "initial"]


def test_must_succeed_and_turn_errors(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {
        "issues": {
            "hv-a00001": [{"run": "echo boom; exit 2", "must_succeed": True},
                          {"write": "unreached.txt", "content": ""}],
            "hv-a00002": [{"edit": "missing.txt", "find": "x", "replace": "y"}],
            "hv-a00003": [{"turn_error": "tool loop"}],
        }})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        out = {}
        for issue in ("hv-a00001", "hv-a00002", "hv-a00003"):
            sid = await backend.create_session(spec(repo, issue))
            out[issue] = await rec.turn(backend, sid, "go")
            assert (await backend.get_session_status(sid)).state == "idle"
        return out
    out = run(body, backend)
    assert not out["hv-a00001"].ok and "exit 2" in out["hv-a00001"].error
    assert not out["hv-a00002"].ok and out["hv-a00002"].error.startswith("step 1 (edit): missing.txt")
    assert not out["hv-a00003"].ok and out["hv-a00003"].error == "tool loop"
    assert not (repo / "unreached.txt").exists()


def test_provider_error_budget_and_clean_exit(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"issues": {
        "hv-b00001": [{"provider_error": 529, "message": "Overloaded"}],
        "hv-b00002": [{"exceed_budget": True}, {"result": "success"}],
        "hv-b00003": [{"say": "done, but no result file"}, {"exit": 0}],
    }})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        s1 = await backend.create_session(spec(repo, "hv-b00001"))
        r1 = await rec.turn(backend, s1, "go")
        assert not r1.ok and r1.provider_error and "529" in r1.error
        assert rec.of(s1, PROVIDER_ERROR)[0].data == {"status": 529, "message": "Overloaded"}

        s2 = await backend.create_session(spec(repo, "hv-b00002"))
        assert (await rec.turn(backend, s2, "go")).ok
        assert (await backend.get_session_status(s2)).usage.total_tokens >= 1_000_000_000

        s3 = await backend.create_session(spec(repo, "hv-b00003"))
        r3 = await rec.turn(backend, s3, "go")
        assert r3.ok and r3.text == "done, but no result file"
        exited = await rec.wait_for(lambda: rec.of(s3, EXITED))
        assert exited[0].data == {"exit_code": 0}
        assert len(rec.of(s3, IDLE)) == 1
    run(body, backend)


def test_delete_resume_and_stop(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [{"tokens": {"input": 10, "output": 1}}]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(repo))
        await rec.turn(backend, sid, "one")
        pid = (await backend.get_session_status(sid)).pid
        # resuming a live session returns it as it is
        assert await backend.create_session(spec(repo, resume=sid)) == sid
        assert (await backend.get_session_status(sid)).pid == pid
        before = len(rec.events)
        await backend.delete_session(sid)
        assert not alive(pid)
        assert len(rec.events) == before             # nothing after delete, not even exited
        with pytest.raises(KeyError):
            await backend.get_session_status(sid)
        await backend.delete_session(sid)            # idempotent
        # resuming a deleted session: same id, new process, usage carries on
        assert await backend.create_session(spec(repo, resume=sid)) == sid
        status = await backend.get_session_status(sid)
        assert status.pid != pid and status.usage.total_tokens == 11
        await rec.turn(backend, sid, "two")
        assert (await backend.get_session_status(sid)).usage.total_tokens == 22
        other = await backend.create_session(spec(repo, "hv-000002"))
        pids = [s.pid for s in await backend.list_sessions()]
        assert len(pids) == 2 and other != sid
        await backend.stop()
        assert await backend.list_sessions() == []
        assert not any(alive(p) for p in pids)
    run(body, backend)


def test_agent_exits_when_stdin_closes(tmp_path):
    """The agent program on its own: closing stdin ends it with exit 0."""
    from hive.backends import scripted_agent
    lines = [json.dumps({"type": "user", "text": "FYI: hello"}),
             json.dumps({"type": "user", "message": {"role": "user", "content": "claude shape"}})]
    done = subprocess.run(
        [sys.executable, "-I", "-S", scripted_agent.__file__, "--session-id", "s1", "--issue", "hv-c00001",
         "--hive-dir", str(tmp_path / "hive")],
        input="\n".join(lines) + "\n", capture_output=True, text=True, cwd=tmp_path, timeout=20,
        env={**os.environ, **GIT_ENV})
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert out[0]["type"] == "init" and out[0]["script"] == "builtin"
    assert [o["type"] for o in out[1:]][:2] == ["busy", "result"]
    assert out[-1]["type"] == "result"
    prompts = (tmp_path / "hive" / "scripted" / "hv-c00001.prompts.jsonl").read_text().splitlines()
    assert [json.loads(p)["text"] for p in prompts] == ["FYI: hello", "claude shape"]
    assert (tmp_path / "hive-work" / "hv-c00001.txt").read_text() == "claude shape\n"


def test_handlers_may_delete_or_abort_from_inside_events(repo, tmp_path, hive_dir):
    """The orchestrator reacts to events by calling the backend back: that must not deadlock."""
    script = write_script(tmp_path, {"issues": {
        "hv-d00001": [{"result": "success"}],
        "hv-d00002": [{"run": "touch asked", "ask": True}, {"hang": True}],
    }})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    rec = Recorder(backend)
    deleted: list[str] = []

    async def on_idle(event: Event) -> None:
        if event.data.ok:
            await backend.delete_session(event.session_id)
            deleted.append(event.session_id)

    async def on_permission(event: Event) -> None:
        await backend.abort_session(event.session_id)
    backend.on(IDLE, on_idle)
    backend.on(PERMISSION, on_permission)

    async def body():
        s1 = await backend.create_session(spec(repo, "hv-d00001"))
        pid1 = (await backend.get_session_status(s1)).pid
        await backend.send_message_async(s1, "go")
        await rec.wait_for(lambda: deleted)
        assert deleted == [s1] and not alive(pid1)
        assert await backend.list_sessions() == [] and not rec.of(s1, EXITED)

        s2 = await backend.create_session(spec(repo, "hv-d00002"))
        await backend.send_message_async(s2, "go")
        exited = await rec.wait_for(lambda: rec.of(s2, EXITED))
        assert exited[0].data["exit_code"] < 0          # killed by a signal
        assert [e.data.error for e in rec.of(s2, IDLE)] == ["aborted"]
        assert not (repo / "asked").exists()
    run(body, backend)


def test_stop_kills_busy_agents_at_once(repo, tmp_path, hive_dir):
    script = write_script(tmp_path, {"default": [{"hang": True}]})
    backend = ScriptedBackend(script, hive_dir=str(hive_dir))
    backend.kill_grace = 5.0
    rec = Recorder(backend)

    async def body():
        sids = [await backend.create_session(spec(repo, f"hv-e0000{n}")) for n in range(3)]
        for sid in sids:
            await backend.send_message_async(sid, "go")
        await rec.wait_for(lambda: all(rec.of(sid, BUSY) for sid in sids))
        pids = [s.pid for s in await backend.list_sessions()]
        started = time.monotonic()
        await backend.stop()
        assert time.monotonic() - started < 2
        assert not any(alive(pid) for pid in pids)
        assert await backend.list_sessions() == []
    run(body, backend)


def test_hive_dir_defaults_to_the_git_common_dir_and_start_is_recorded(repo, tmp_path):
    git(repo, "worktree", "add", "-q", "-b", "hive/work/hv-f00001", str(tmp_path / "wt"))
    backend = ScriptedBackend()                        # no hive_dir: <git-common-dir>/hive
    rec = Recorder(backend)

    async def body():
        sid = await backend.create_session(spec(tmp_path / "wt", "hv-f00001", labels=["-x"],
                                                model="m-1", system_prompt="Be brief."))
        assert (await rec.turn(backend, sid, "Work in a linked worktree")).ok
        return sid
    sid = run(body, backend)
    common = repo / ".git" / "hive" / "scripted"
    start = json.loads((common / "hv-f00001.sessions.jsonl").read_text())
    assert start["session"] == sid and start["model"] == "m-1"
    assert start["system_prompt"] == "Be brief." and start["labels"] == ["-x"]
    assert start["script"] == "builtin"
    assert (common / "hv-f00001.attempts").read_text().strip() == "1"
    assert git(repo, "log", "-1", "--format=%s", "hive/work/hv-f00001").strip() == \
        "hv-f00001: Work in a linked worktree"


def test_the_agent_starts_from_its_modules_bytecode_in_its_jail(repo, hive_dir):
    """A program named by path is compiled anew at every start (~6 ms of each agent's): the agent
    is imported instead, from the bytecode beside its module (hive's package, readable in a jail)."""
    import py_compile

    from hive import git as hive_git
    from hive.backends import scripted
    from hive.jail import prepare, roles
    from hive.jail.environment import jail_environment
    from hive.workspace import worktrees
    from tests.hostile import require_jail

    require_jail()
    py_compile.compile(scripted.AGENT_PATH, cfile=scripted.AGENT_BYTECODE, doraise=True)
    paths = hive_git.discover(repo)
    worktrees.create(paths, "hv-b7tec0", git(repo, "rev-parse", "main").strip())
    tree = worktrees.worktree_path(paths, "hv-b7tec0")
    backend = ScriptedBackend(hive_dir=str(hive_dir))
    session = spec(tree, "hv-b7tec0", jail=roles.worktree_jail(paths, tree))
    argv = backend._argv("s1", session)
    launch = prepare([argv[0], "-v", *argv[1:]], cwd=str(tree), env=jail_environment(dict(os.environ)),
                     jail=backend._jail(session))
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, cwd=tree, input="", capture_output=True, text=True,
                          timeout=30)
    launch.release()
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[0])["type"] == "init"
    assert f"code object from '{scripted.AGENT_BYTECODE}'" in done.stderr
    assert "scripted_agent.py" not in argv[argv.index("-c") + 1]    # not a program named by path
