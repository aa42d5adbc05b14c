"""The racy window of `.hive/` records (hive/state/racy.py): a file is compared by content next
time only while its stat could still hide a save — one tick of its file system's timestamps,
measured — not for a fixed 2 s after every write (which re-read a whole fresh intake)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hive.state import racy
from hive.state.checkout import RACY_MTIME


def test_the_tick_is_measured_once_per_file_system_and_kept(project, monkeypatch) -> None:
    window = project.checkout.racy_ns
    assert racy.FLOOR_NS <= window <= racy.FALLBACK_NS
    from hive.project import Project

    def no_measuring(folder: Path) -> int:
        raise AssertionError("measured again")

    monkeypatch.setattr(racy, "measure_tick", no_measuring)
    again = Project.open(project.paths.worktree)
    try:
        assert again.checkout.racy_ns == window              # read from checkout.db
    finally:
        again.close()


def test_only_a_record_made_within_the_window_is_racy(project, new_issue) -> None:
    old, fresh = new_issue("Saved a while ago"), new_issue("Saved just now")
    checkout = project.checkout
    root = checkout.root
    settled = root / "issues" / f"{old}.md"
    past = time.time_ns() - 10 * checkout.racy_ns
    os.utime(settled, ns=(past, past))
    young = root / "issues" / f"{fresh}.md"
    young.write_bytes(young.read_bytes())                     # saved now
    for path in (settled, young):
        checkout._record(str(path.relative_to(root)), "0" * 40)
    records = checkout._records()
    assert records[f"issues/{old}.md"].mtime_ns == past       # its stat proves it: not read again
    assert records[f"issues/{fresh}.md"].mtime_ns == RACY_MTIME


def test_a_coarse_file_system_falls_back_to_two_seconds(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(racy, "MEASURE_NS", 1_000_000)        # a tick longer than the time allowed:
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: os.stat_result((0,) * 10))   # mtime never moves
    assert racy.measure_tick(tmp_path) == racy.FALLBACK_NS
    assert racy.racy_window(racy.FALLBACK_NS) == racy.FALLBACK_NS
    assert racy.racy_window(700_000) == racy.FLOOR_NS
