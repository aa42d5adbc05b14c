"""The backend contract: the same scenarios on every backend (see tests/backends/agents.py).

What the orchestrator, the merge pipeline and the Queen rely on, whichever agent runs: a turn's
events and result, `run_turn` returning each turn's own result, idempotent abort and delete,
KeyError for unknown sessions, and a turn that ends when its process dies or is aborted.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import pytest

from hive.backends.base import BUSY, EXITED, IDLE, USAGE, Backend, Event
from hive.backends.registry import BACKENDS, backend_class
from tests.backends.agents import CASES, AgentCase, make_case

TIMEOUT = 90.0


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, git_env: Path, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentCase]:
    agent = make_case(request.param, tmp_path, monkeypatch)
    yield agent
    agent.close()


def drive(case: AgentCase, scenario: Callable[[Backend, list[Event]], Awaitable[Any]]) -> Any:
    """Run `scenario(backend, events)` with a fresh backend that records every event."""
    async def main() -> Any:
        backend = case.backend()
        events: list[Event] = []
        backend.on("*", events.append)
        await backend.connect_with_reconnect()
        try:
            return await asyncio.wait_for(scenario(backend, events), TIMEOUT)
        finally:
            await backend.stop()
    return asyncio.run(main())


async def until(predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def of(events: list[Event], type_: str, sid: str) -> list[Event]:
    return [e for e in events if e.type == type_ and e.session_id == sid]


def test_every_registered_backend_has_a_case_and_follows_the_protocol(tmp_path: Path) -> None:
    assert sorted({case.kind or case.name for case in CASES.values()}) == sorted(BACKENDS)
    for name in BACKENDS:
        kind = backend_class(name)
        assert kind.name == name and callable(getattr(kind, "from_settings", None))
        for method in ("on", "connect_with_reconnect", "stop", "health_check", "create_session",
                       "abort_session", "delete_session", "get_session_status", "send_message_async",
                       "run_turn", "reply_permission"):
            assert callable(getattr(kind, method, None)), f"{name}: {method}"
    with pytest.raises(ValueError):
        backend_class("nope")


def test_a_turn_returns_the_agents_last_words_with_its_events(case: AgentCase) -> None:
    case.replies("turn one")

    async def scenario(backend: Backend, events: list[Event]) -> None:
        assert isinstance(backend, Backend)
        sid = await backend.create_session(case.spec())
        assert (await backend.get_session_status(sid)).state == "idle"
        result = await backend.run_turn(sid, "turn one")
        assert result.ok and result.text == "turn one", result
        types = [e.type for e in events if e.session_id == sid]
        assert types[0] == BUSY and types[-1] == IDLE and USAGE in types
        status = await backend.get_session_status(sid)
        assert status.state == "idle" and status.usage.total_tokens > 0 and status.pid
    drive(case, scenario)


def test_each_run_turn_gets_its_own_turns_result(case: AgentCase) -> None:
    case.replies("turn one", "turn two")

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        first = await backend.run_turn(sid, "turn one")
        second = await backend.run_turn(sid, "turn two")
        assert (first.text, second.text) == ("turn one", "turn two")
        assert len(of(events, IDLE, sid)) == 2
    drive(case, scenario)


def test_a_turn_sent_during_another_runs_after_it_with_its_own_result(case: AgentCase) -> None:
    case.slow_then_quick("turn one", "turn two")

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        first = asyncio.create_task(backend.run_turn(sid, "turn one"))
        await until(lambda: of(events, BUSY, sid), "the turn to start")
        second = asyncio.create_task(backend.run_turn(sid, "turn two"))   # queued behind it
        results = await asyncio.gather(first, second)
        assert [(r.ok, r.text) for r in results] == [(True, "turn one"), (True, "turn two")], results
        assert len(of(events, IDLE, sid)) == 2
    drive(case, scenario)


def test_abort_and_delete_are_idempotent_and_unknown_sessions_raise_key_error(case: AgentCase) -> None:
    async def scenario(backend: Backend, events: list[Event]) -> None:
        await backend.abort_session("no-such-session")
        await backend.delete_session("no-such-session")
        await backend.reply_permission("no-such-session", "no-such-request", True)
        for call in (backend.get_session_status("no-such-session"),
                     backend.send_message_async("no-such-session", "hello"),
                     backend.run_turn("no-such-session", "hello")):
            with pytest.raises(KeyError):
                await call
        sid = await backend.create_session(case.spec())
        await backend.abort_session(sid)                  # no turn to end: no idle
        await backend.abort_session(sid)
        assert not of(events, IDLE, sid)
        await backend.delete_session(sid)
        await backend.delete_session(sid)
        with pytest.raises(KeyError):
            await backend.get_session_status(sid)
    drive(case, scenario)


def test_abort_ends_the_turn_in_progress(case: AgentCase) -> None:
    case.long_turn()

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        turn = asyncio.create_task(backend.run_turn(sid, "work until stopped"))
        await until(lambda: of(events, BUSY, sid), "the turn to start")
        assert (await backend.get_session_status(sid)).state == "busy"
        await backend.abort_session(sid)
        assert of(events, IDLE, sid)                      # abort returns after the turn's idle
        result = await asyncio.wait_for(turn, 5)
        assert not result.ok
        await backend.abort_session(sid)
    drive(case, scenario)


def test_a_killed_agent_ends_its_turn(case: AgentCase) -> None:
    case.long_turn()

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        turn = asyncio.create_task(backend.run_turn(sid, "work until killed"))
        await until(lambda: of(events, BUSY, sid), "the turn to start")
        pid = (await backend.get_session_status(sid)).pid
        assert pid
        os.killpg(pid, signal.SIGKILL)
        result = await asyncio.wait_for(turn, 30)
        assert not result.ok and result.error
        await until(lambda: of(events, EXITED, sid), "exited")
        assert (await backend.get_session_status(sid)).state == "exited"
    drive(case, scenario)


def test_deleting_a_session_ends_the_turn_waiting_on_it(case: AgentCase) -> None:
    case.long_turn()

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        turn = asyncio.create_task(backend.run_turn(sid, "work until deleted"))
        await until(lambda: of(events, BUSY, sid), "the turn to start")
        seen = len(events)
        await backend.delete_session(sid)
        result = await asyncio.wait_for(turn, 5)
        assert not result.ok
        assert all(e.session_id != sid for e in events[seen:])   # no event after delete
    drive(case, scenario)


def test_abort_ends_the_turns_queued_behind_the_one_in_progress(case: AgentCase) -> None:
    case.long_turn()

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        first = asyncio.create_task(backend.run_turn(sid, "work until stopped"))
        await until(lambda: of(events, BUSY, sid), "the turn to start")
        queued = asyncio.create_task(backend.run_turn(sid, "FYI: a note for later"))
        await asyncio.sleep(0.2)                          # sent, queued behind the first
        await backend.abort_session(sid)
        result, _ = await asyncio.wait_for(asyncio.gather(first, queued), 30)
        assert not result.ok
    drive(case, scenario)


def test_abort_right_after_sending_ends_the_turn(case: AgentCase) -> None:
    case.long_turn()

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        turn = asyncio.create_task(backend.run_turn(sid, "work until stopped"))
        await asyncio.sleep(0)                            # sent; the agent has not started it
        await backend.abort_session(sid)
        result = await asyncio.wait_for(turn, 30)
        assert not result.ok
    drive(case, scenario)


def test_abort_ends_a_turn_sent_to_an_ended_agent(case: AgentCase) -> None:
    case.replies("turn one")

    async def scenario(backend: Backend, events: list[Event]) -> None:
        sid = await backend.create_session(case.spec())
        assert (await backend.run_turn(sid, "turn one")).ok     # a conversation to resume
        pid = (await backend.get_session_status(sid)).pid
        assert pid
        os.killpg(pid, signal.SIGKILL)
        await until(lambda: of(events, EXITED, sid), "exited")
        case.long_turn()
        turn = asyncio.create_task(backend.run_turn(sid, "work until stopped"))
        await asyncio.sleep(0)                            # sent: refused, or restarting the agent
        await backend.abort_session(sid)
        try:
            result = await asyncio.wait_for(turn, 30)
        except RuntimeError:
            return                                        # the backend does not restart an ended agent
        assert not result.ok
    drive(case, scenario)
