"""Work split between this process and a forked child (`hive.state.halves`)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from hive.state import halves


@pytest.fixture
def few(monkeypatch):
    """Few items are enough to split, on two cores whatever the machine has."""
    monkeypatch.setattr(halves, "MIN_ITEMS", 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert threading.active_count() == 1, "another thread runs in this test process: nothing would fork"


def squared_where(n: int) -> tuple[int, int]:
    return n * n, os.getpid()


def children() -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def test_the_second_half_is_computed_in_a_child_and_the_order_kept(few):
    results = halves.map_halves(squared_where, range(10))
    assert [value for value, _ in results] == [n * n for n in range(10)]
    pids = [pid for _, pid in results]
    assert set(pids[:5]) == {os.getpid()} and len(set(pids[5:])) == 1 and pids[5] != os.getpid()
    assert not children()


def test_too_few_items_or_a_second_thread_keep_everything_here(few):
    assert {pid for _, pid in halves.map_halves(squared_where, range(3))} == {os.getpid()}
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert {pid for _, pid in halves.map_halves(squared_where, range(10))} == {os.getpid()}
    finally:
        stop.set()
        other.join()


def dies_in_the_child(n: int) -> tuple[int, int]:
    if n == 7 and os.getpid() != PARENT[0]:
        os._exit(3)
    return squared_where(n)


def raises_in_the_child(n: int) -> tuple[int, int]:
    if n == 8 and os.getpid() != PARENT[0]:
        raise MemoryError("the child ran out")
    return squared_where(n)


PARENT = [0]


@pytest.mark.parametrize("fn", [dies_in_the_child, raises_in_the_child])
def test_a_child_that_fails_costs_only_time(few, fn):
    PARENT[0] = os.getpid()
    results = halves.map_halves(fn, range(10))
    assert results == [(n * n, os.getpid()) for n in range(10)]   # its half redone here
    assert not children()


def fails_here(n: int) -> int:
    if n == 2:
        raise ValueError("bad item")
    return n


def test_an_error_here_ends_the_child_and_is_raised(few):
    with pytest.raises(ValueError, match="bad item"):
        halves.map_halves(fails_here, range(10))
    assert not children()


def where_am_i() -> int:
    return os.getpid()


def test_beside_computes_in_a_child_while_the_caller_goes_on(few):
    with halves.Beside(where_am_i) as child:
        assert len(children()) == 1                      # running now, not when asked
        assert child.result() not in (os.getpid(), None)
    assert not children()
    assert halves.Beside(where_am_i, fork=False).result() == os.getpid()   # not worth a process


def test_beside_redoes_here_what_a_failed_child_did_not_send(few):
    PARENT[0] = os.getpid()
    dies = halves.Beside(lambda: dies_in_the_child(7))
    assert dies.result() == (49, os.getpid())
    assert not children()


def test_leaving_beside_without_its_result_ends_the_child(few):
    with halves.Beside(lambda: [os.pause() for _ in iter(int, 1)]):   # a child that never ends
        assert len(children()) == 1
    assert not children()


def test_a_caller_with_a_child_at_work_beside_it_forks_no_other(few):
    with halves.Beside(lambda: [os.pause() for _ in iter(int, 1)]):   # a child that never ends
        assert {pid for _, pid in halves.map_halves(squared_where, range(10))} == {os.getpid()}
    assert len({pid for _, pid in halves.map_halves(squared_where, range(10))}) == 2   # ended: a core is free


def test_a_child_splits_its_work_only_once_its_caller_waits_for_it(few):
    said, hear = os.pipe()

    def beside_a_busy_caller() -> tuple[set[int], set[int]]:
        first = {pid for _, pid in halves.map_halves(squared_where, range(10))}
        os.write(hear, b"done")
        deadline = time.monotonic() + 60
        while halves.free_cores() < 2 and time.monotonic() < deadline:
            pass                                   # the caller is about to wait: a moment
        return first, {pid for _, pid in halves.map_halves(squared_where, range(10))}

    with halves.Beside(beside_a_busy_caller) as child:
        assert os.read(said, 4) == b"done"         # its first split made while this caller works
        first, second = child.result()
    os.close(said)
    os.close(hear)
    assert len(first) == 1 and os.getpid() not in first       # all of it in the child
    assert len(second) == 2 and first < second                # half of it in a child of its own
    assert not children()
