"""AgentSession: one session of any role — its own events, usage growth, permission answers,
the one resume-on-error rule — over real scripted agent processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from hive import git as hive_git
from hive.agents.session import AgentSession, Grant, stored_usage
from hive.backends.base import EXITED, SessionSpec, Usage
from hive.backends.scripted import ScriptedBackend
from hive.backends.sessions import UNHEARD
from hive.runtime import Runtime

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args], cwd=path,
                       check=True, capture_output=True, env={**os.environ, **GIT_ENV})
    return path


def backend_for(tmp_path: Path, repo: Path, steps: list[dict]) -> ScriptedBackend:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": steps}))
    return ScriptedBackend(str(script), hive_dir=str(repo / ".git" / "hive"))


def spec(repo: Path, **kw: object) -> SessionSpec:
    return SessionSpec(role="worker", cwd=str(repo), issue_id="hv-000001", env=dict(GIT_ENV), **kw)  # type: ignore[arg-type]


def run(body, backend: ScriptedBackend):
    async def main():
        try:
            return await asyncio.wait_for(body(), 60)
        finally:
            await backend.stop()
    return asyncio.run(main())


def test_each_session_hears_only_its_own_usage_and_keeps_its_totals(repo, tmp_path):
    backend = backend_for(tmp_path, repo, [{"tokens": {"input": 100, "output": 10}}])
    runtime = Runtime(hive_git.discover(repo))
    grown: dict[str, list[int]] = {"a": [], "b": []}
    a = AgentSession(backend, runtime, Grant("worker"), on_usage=lambda u: grown["a"].append(u.counted_tokens))
    b = AgentSession(backend, runtime, Grant("worker"), on_usage=lambda u: grown["b"].append(u.counted_tokens))

    async def body():
        await a.open(spec(repo))
        await b.open(spec(repo))
        assert (await a.turn("one")).ok and (await a.turn("two")).ok and (await b.turn("one")).ok
        return a.id, b.id

    a_id, b_id = run(body, backend)
    assert grown == {"a": [110, 110], "b": [110]}       # growth, each session its own
    assert stored_usage(runtime, a_id) == Usage(input_tokens=200, output_tokens=20)
    assert stored_usage(runtime, b_id) == Usage(input_tokens=100, output_tokens=10)


def test_a_resume_after_a_restart_carries_the_stored_totals_on(repo, tmp_path):
    steps = [{"tokens": {"input": 100, "output": 0}}]
    runtime = Runtime(hive_git.discover(repo))
    first = backend_for(tmp_path, repo, steps)
    session = AgentSession(first, runtime, Grant("worker"))

    async def before() -> str:
        await session.open(spec(repo))
        await session.turn("one")
        sid = session.id
        await session.close()
        return sid

    old_id = run(before, first)
    second = backend_for(tmp_path, repo, steps)          # a new daemon: the backend knows nothing
    grown: list[int] = []
    again = AgentSession(second, runtime, Grant("worker"), on_usage=lambda u: grown.append(u.input_tokens))

    async def after():
        assert await again.open(spec(repo, resume=old_id)) == old_id
        assert again.usage == Usage(input_tokens=100)
        await again.turn("two")

    run(after, second)
    assert grown == [100] and again.usage == Usage(input_tokens=200)


def test_permissions_are_answered_by_the_sessions_grant(repo, tmp_path):
    outside = tmp_path / "outside.txt"
    backend = backend_for(tmp_path, repo, [
        {"write": "inside.txt", "content": "yes", "ask": True},
        {"write": str(outside), "content": "no", "ask": True},
    ])
    logged: list[str] = []
    session = AgentSession(backend, None, Grant("worker"), log=logged.append)

    async def body():
        await session.open(spec(repo))
        return await session.turn("go")

    assert run(body, backend).ok
    assert (repo / "inside.txt").exists() and not outside.exists()
    assert len(logged) == 1 and logged[0].startswith("denied Write to worker")


def test_a_permission_nobody_hears_is_refused_not_left_waiting(repo, tmp_path):
    backend = backend_for(tmp_path, repo, [{"write": "x.txt", "content": "x", "ask": True, "on_deny": "fail"}])

    async def body():
        sid = await backend.create_session(spec(repo))
        return await backend.run_turn(sid, "go")

    assert run(body, backend).ok
    result = json.loads((repo / ".hive-result.jsonl").read_text())
    assert result["status"] == "failure" and UNHEARD in result["summary"]


def test_a_session_that_ended_after_its_turn_is_resumed_once_and_sent_again(repo, tmp_path):
    backend = backend_for(tmp_path, repo, [{"tokens": {"input": 50, "output": 0}},
                                           {"append": "turns.txt", "content": "{prompt}\n"},
                                           {"exit": 0}])
    opened: list[str] = []
    grown: list[int] = []
    session = AgentSession(backend, None, Grant("worker"), on_open=lambda s: opened.append(s.id),
                           on_usage=lambda u: grown.append(u.input_tokens))

    async def body():
        exited = asyncio.Event()
        backend.on(EXITED, lambda event: exited.set())
        await session.open(spec(repo))
        assert (await session.turn("one")).ok
        await exited.wait()                              # the process ended after its turn
        assert not await session.alive()
        return await session.turn("two")

    assert run(body, backend).ok
    assert (repo / "turns.txt").read_text() == "one\ntwo\n"
    assert len(opened) == 2 and opened[0] == opened[1]   # the same session, resumed
    assert grown == [50, 50]                              # its totals carried on, not counted twice


def test_a_turn_hive_aborts_ends_with_hives_reason(repo, tmp_path):
    backend = backend_for(tmp_path, repo, [{"hang": True}])
    async def body():
        started = asyncio.Event()
        session = AgentSession(backend, None, Grant("worker"), on_activity=started.set)
        await session.open(spec(repo))
        started.clear()
        turn = asyncio.create_task(session.turn("work"))
        await started.wait()                             # BUSY: the turn is under way
        await session.abort("stalled: no agent activity for 5s")
        result = await turn
        await session.close()
        await session.abort("after the end")              # idempotent, no session left
        return result

    result = run(body, backend)
    assert not result.ok and result.error == "stalled: no agent activity for 5s"
