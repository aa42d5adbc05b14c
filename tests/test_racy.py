"""The racy window of `.hive/` records (hive/state/racy.py): a file is compared by content next
time only while its stat could still hide a save — one tick of its file system's timestamps,
measured — not for a fixed 2 s after every write (which re-read a whole fresh intake)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

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


def test_a_save_that_came_late_does_not_widen_the_tick(tmp_path: Path, monkeypatch) -> None:
    """On a loaded machine the probe's process is descheduled between two saves: that step is
    many ticks long, and is no measure of the file system (a window kept for good)."""
    tick = 4_000_000
    mtimes = iter([0, 0, tick, 9 * tick, 9 * tick, 10 * tick, 11 * tick])   # a pause of 8 ticks
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if Path(path).name.startswith(".hive-mtime-probe-"):
            mtime = next(mtimes)
            return os.stat_result((0o100644, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, mtime, mtime))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    assert racy.measure_tick(tmp_path) == tick


def test_a_file_hive_writes_has_an_exact_record_at_once(project, new_issue) -> None:
    """A queue taken in writes every file less than a tick before its record: those records were
    racy, and each file was read again (by a settling pass, or by the next command). Backdated
    by a nanosecond and read back, a file hive wrote proves its bytes by its stat at once."""
    checkout = project.checkout
    rel = f"issues/{new_issue('Written just now')}.md"
    st = os.lstat(checkout.root / rel)
    assert time.time_ns() - st.st_mtime_ns < checkout.racy_ns      # younger than the window
    record = checkout._records()[rel]
    assert (record.mtime_ns, record.size, record.inode) == (st.st_mtime_ns, st.st_size, st.st_ino)


def _written_then(folder: Path, meanwhile) -> racy.Written:
    """`racy.backdate` of a new file in `folder` written with b"hive's bytes", `meanwhile(path)`
    run before it."""
    folder.mkdir()
    path = folder / "file.md"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        os.write(fd, b"hive's bytes")
        meanwhile(path)
        return racy.backdate(fd, b"hive's bytes")
    finally:
        os.close(fd)


def test_a_save_between_hives_write_and_its_backdating_keeps_the_record_racy(project, tmp_path: Path) -> None:
    def saved_over(path: Path) -> None:
        with open(path, "r+b") as other:
            other.write(b"their  bytes")                          # the same size, in place

    assert _written_then(tmp_path / "alone", lambda path: None).exact
    written = _written_then(tmp_path / "saved over", saved_over)
    assert not written.exact
    rel = "issues/hv-racy.md"
    project.checkout._record(rel, "0" * 40, written)
    assert project.checkout._records()[rel].mtime_ns == RACY_MTIME


@pytest.mark.parametrize("file_system", ["keeps no mtime set", "refuses to set one"])
def test_a_file_system_that_keeps_no_earlier_mtime_leaves_the_record_racy(tmp_path: Path, monkeypatch,
                                                                          file_system: str) -> None:
    def utime(target, *args, **kwargs):
        if file_system == "refuses to set one":
            raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "utime", utime)
    written = _written_then(tmp_path / "folder", lambda path: None)
    assert not written.exact and written.stat.st_size == len(b"hive's bytes")


@pytest.mark.parametrize("looked_at", ["live scan", "watcher's paths"])
def test_a_save_renamed_in_with_the_records_mtime_and_size_is_an_edit(project, new_issue, looked_at: str) -> None:
    """An editor writes its temp file, is descheduled, and renames it over the file only after
    hive wrote that file and made its record exact: the temp file's mtime is as old as hive's
    write (the same tick) and its size the same (a title of the same length). Only the inode
    tells such a save from hive's file; it is committed like any other."""
    from hive.state.checkout import blob_id

    checkout = project.checkout
    issue = new_issue("Title A")
    path = checkout.root / "issues" / f"{issue}.md"
    rel = str(path.relative_to(checkout.root))
    past = time.time_ns() - 10 * checkout.racy_ns
    os.utime(path, ns=(past, past))
    held = path.read_bytes()
    checkout._record(rel, blob_id(held))                     # hive's record of its file: exact
    assert checkout._records()[rel].mtime_ns == past
    temp = path.with_name(f".{issue}.md.swp")
    temp.write_bytes(held.replace(b'title = "Title A"', b'title = "Title B"'))
    os.utime(temp, ns=(past, past))
    os.replace(temp, path)
    absorbed = project.absorb(only={rel} if looked_at == "watcher's paths" else None)
    assert absorbed.committed == [rel]
    assert b'title = "Title B"' in project.store.snapshot().read(rel)


def _as_an_older_hive_kept_them(db_path: Path) -> None:
    """checkout.db's records as an older hive kept them: the table without the inode column."""
    with sqlite3.connect(db_path) as older:
        older.executescript("CREATE TABLE old_files AS SELECT path, blob, mtime_ns, size FROM files; "
                            "DROP TABLE files; ALTER TABLE old_files RENAME TO files;")
    older.close()


def test_records_an_older_hive_kept_without_inodes_are_compared_once_then_kept_with_them(project, new_issue) -> None:
    from hive.project import Project

    issue = new_issue("Recorded by an older hive")
    rel = f"issues/{issue}.md"
    project.close()
    _as_an_older_hive_kept_them(project.paths.hive_dir / "checkout.db")
    again = Project.open(project.paths.worktree)
    try:
        assert again.checkout._records()[rel].inode == -1
        path = again.checkout.root / rel
        past = time.time_ns() - 10 * again.checkout.racy_ns
        os.utime(path, ns=(past, past))
        assert again.absorb().committed == []                  # compared by content: hive's, as recorded
        assert again.checkout._records()[rel].inode == os.lstat(path).st_ino
    finally:
        again.close()


def test_two_commands_upgrading_an_older_hives_records_at_once_both_go_on(project, new_issue, monkeypatch) -> None:
    """The other command adds the column between this one's look and its own change: this one
    looks again under the write lock and adds nothing (no "duplicate column" error)."""
    from hive.project import Project
    from hive.state import checkout as checkout_module

    issue = new_issue("Recorded by an older hive")
    project.close()
    db_path = project.paths.hive_dir / "checkout.db"
    _as_an_older_hive_kept_them(db_path)
    real_columns, looks = checkout_module._columns, []

    def other_command_meanwhile(db, table: str) -> set[str]:
        found = real_columns(db, table)
        looks.append(found)
        if len(looks) == 1:
            with sqlite3.connect(db_path) as other:
                other.execute("ALTER TABLE files ADD COLUMN inode INTEGER NOT NULL DEFAULT -1")
            other.close()
        return found

    monkeypatch.setattr(checkout_module, "_columns", other_command_meanwhile)
    again = Project.open(project.paths.worktree)
    try:
        assert again.checkout._records()[f"issues/{issue}.md"].inode == -1
        assert "inode" not in looks[0]
    finally:
        again.close()
