"""The live scan kept by inotify (hive/state/live_folder.py): after every kind of change a person,
git or hive makes in `.hive/`, the kept scan is the scan a command would make itself; what it
cannot keep it gives up (None: the command scans) or makes anew once commands pause."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from hive.state import live_folder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

ISSUE = '+++\ntitle = "{}"\n+++\n'


def skip_unless_watchable(path: Path) -> None:
    """The watcher keeps no scan on a file system whose changes may come from elsewhere: where
    the tests' temporary folder is on one (a runner's network /tmp), there is nothing to test."""
    kind = live_folder._file_system(str(path))
    if kind not in live_folder.LOCAL_FILE_SYSTEMS:
        pytest.skip(f"the temporary folder's file system ({kind:#x}) is not one the watcher keeps scans on")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A folder laid out as `.hive/` is: three issues, a context file, an archive, notes."""
    skip_unless_watchable(tmp_path)
    root = tmp_path / "hive"
    for folder in ("issues/archive/ab", "notes"):
        (root / folder).mkdir(parents=True)
    for name in ("hv-aaaaaa", "hv-bbbbbb", "hv-cccccc"):
        (root / "issues" / f"{name}.md").write_text(ISSUE.format(name))
    (root / "issues" / "archive" / "ab" / "hv-ababab.md").write_text(ISSUE.format("archived"))
    (root / "notes" / "hv-aaaaaa.jsonl").write_text("{}\n")
    (root / "context.md").write_text("context\n")
    return root


@pytest.fixture
def watcher() -> Iterator[live_folder.Watcher]:
    made = live_folder.Watcher()
    yield made
    made.close()


def _kept_is_the_scan(watcher: live_folder.Watcher, root: Path) -> None:
    watcher.catch_up()
    fresh = live_folder.scan(root, full=False)
    assert watcher.kept(root) == (fresh, live_folder.fingerprint(fresh))


def _same_size_save(root: Path, outside: Path) -> None:
    target = root / "issues" / "hv-aaaaaa.md"
    with open(target, "r+b") as handle:   # in place, as an editor set to keep the inode does
        handle.write(b"+++\ntitle = \"HV-AAAAAA\"")


def _saved_by_rename(root: Path, outside: Path) -> None:
    swap = root / "issues" / ".hv-bbbbbb.md.swp"
    swap.write_text(ISSUE.format("saved by rename"))
    swap.replace(root / "issues" / "hv-bbbbbb.md")


def _mtime_set_back(root: Path, outside: Path) -> None:
    target = root / "issues" / "hv-cccccc.md"
    before = target.stat().st_mtime_ns
    target.write_text(ISSUE.format("hv-cccccX"))
    os.utime(target, ns=(before, before))


def _exchanged(root: Path, outside: Path) -> None:
    from hive.state.checkout import _exchange   # how hive swaps in a file only if it is unchanged

    fresh = root / "issues" / ".hv-aaaaaa.md.new"
    fresh.write_text(ISSUE.format("exchanged"))
    assert _exchange(fresh, root / "issues" / "hv-aaaaaa.md")
    fresh.unlink()


CHANGES: dict[str, Callable[[Path, Path], object]] = {
    "saved in place at the same size": _same_size_save,
    "saved by rename over it": _saved_by_rename,
    "saved, its mtime set back": _mtime_set_back,
    "swapped in by hive (renameat2 exchange)": _exchanged,
    "truncated": lambda root, outside: (root / "issues" / "hv-aaaaaa.md").write_bytes(b""),
    "created": lambda root, outside: (root / "issues" / "hv-dddddd.md").write_text(ISSUE.format("new")),
    "deleted": lambda root, outside: (root / "issues" / "hv-bbbbbb.md").unlink(),
    "moved out": lambda root, outside: (root / "issues" / "hv-bbbbbb.md").rename(outside / "away.md"),
    "moved in": lambda root, outside: (outside / "in.md").write_text("x") or
    (outside / "in.md").rename(root / "issues" / "hv-eeeeee.md"),
    "a symlink put in": lambda root, outside: (root / "issues" / "hv-link00.md").symlink_to(outside / "any.md"),
    "a folder named as a record": lambda root, outside: (root / "issues" / "hv-folder.md").mkdir(),
    "a hidden file": lambda root, outside: (root / "issues" / ".hv-hidden.md").write_text("x"),
    "a file hive does not read": lambda root, outside: (root / "issues" / "notes.txt").write_text("x"),
    "an archived file changed": lambda root, outside: (root / "issues/archive/ab/hv-ababab.md").write_text("y"),
    "the context changed": lambda root, outside: (root / "context.md").write_text("more context\n"),
    "the context removed": lambda root, outside: (root / "context.md").unlink(),
    "the context a symlink": lambda root, outside: (root / "context.md").unlink() or
    (root / "context.md").symlink_to(outside / "context.md"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_after_any_change_the_kept_scan_is_the_scan(checkout: Path, watcher: live_folder.Watcher, tmp_path: Path,
                                                     change: str) -> None:
    assert watcher.watch(str(checkout)) == ""
    _kept_is_the_scan(watcher, checkout)
    CHANGES[change](checkout, tmp_path)
    _kept_is_the_scan(watcher, checkout)


def test_a_burst_of_changes_is_kept_in_step(checkout: Path, watcher: live_folder.Watcher, tmp_path: Path) -> None:
    assert watcher.watch(str(checkout)) == ""
    for round_ in range(3):
        for change in CHANGES.values():
            try:
                change(checkout, tmp_path)
            except (FileNotFoundError, FileExistsError):
                pass   # undone or done already by an earlier one
        for name in ("hv-aaaaaa", "hv-bbbbbb", "hv-cccccc"):
            (checkout / "issues" / f"{name}.md").write_text(ISSUE.format(f"{name} {round_}"))
        _kept_is_the_scan(watcher, checkout)


def test_names_of_any_bytes_are_kept_as_the_scan_finds_them(checkout: Path, watcher: live_folder.Watcher) -> None:
    """What the kernel reports is a name from `.hive/issues/`, whoever made the file: not UTF-8,
    a newline, a leading dash, 255 bytes — each is kept (or not) exactly as a scan takes it."""
    assert watcher.watch(str(checkout)) == ""
    folder = os.fsencode(str(checkout / "issues"))
    names = [b"hv-\xff\xfe.md", b"hv-line\nbreak.md", b"-rf.md", b"--help.jsonl", b"h" * 252 + b".md",
             b"hv-tab\there.md"]
    for name in names:
        with open(folder + b"/" + name, "wb") as made:
            made.write(b"odd\n")
    _kept_is_the_scan(watcher, checkout)
    kept = watcher.kept(checkout)
    assert kept is not None and {os.fsdecode(b"issues/" + name) for name in names} <= set(kept[0])
    for name in names:
        os.unlink(folder + b"/" + name)
    _kept_is_the_scan(watcher, checkout)


def test_a_file_with_a_second_name_is_looked_at_again(checkout: Path, watcher: live_folder.Watcher,
                                                      tmp_path: Path) -> None:
    """A change through another name notifies the other folder only: such a file is stat-ed
    again whenever its kept scan is taken."""
    os.link(checkout / "issues" / "hv-aaaaaa.md", tmp_path / "second-name.md")
    assert watcher.watch(str(checkout)) == ""
    with open(tmp_path / "second-name.md", "a") as through_it:
        through_it.write("appended through the other name\n")
    assert watcher.kept(checkout)[0] == live_folder.scan(checkout, full=False)


def test_what_no_event_tells_is_found_when_the_scans_are_made_anew(checkout: Path, watcher: live_folder.Watcher,
                                                                   tmp_path: Path) -> None:
    """A hard link made after the watch began: a write through it makes no event the watch sees
    (nor does a write through a shared memory mapping) — `verify`, run by the server when its
    commands pause, finds it."""
    assert watcher.watch(str(checkout)) == ""
    os.link(checkout / "issues" / "hv-aaaaaa.md", tmp_path / "second-name.md")
    with open(tmp_path / "second-name.md", "a") as through_it:
        through_it.write("appended through the other name\n")
    watcher.catch_up()
    assert watcher.kept(checkout)[0] != live_folder.scan(checkout, full=False)   # the limit, shown
    assert watcher.verify([]) == []                             # only the checkouts commands used
    assert watcher.verify([str(checkout)]) == [str(checkout)]
    _kept_is_the_scan(watcher, checkout)
    assert watcher.verify([str(checkout)]) == []


@pytest.mark.parametrize("replaced", ["issues/ by another folder", "issues/ by a symlink",
                                      "the checkout moved, another in its place", "the checkout removed"])
def test_a_replaced_folder_is_not_kept_for(checkout: Path, watcher: live_folder.Watcher, tmp_path: Path,
                                           replaced: str) -> None:
    assert watcher.watch(str(checkout)) == ""
    issues = checkout / "issues"
    if replaced == "issues/ by another folder":
        issues.rename(tmp_path / "old-issues")
        issues.mkdir()
        (issues / "hv-ffffff.md").write_text(ISSUE.format("in the new folder"))
    elif replaced == "issues/ by a symlink":
        issues.rename(tmp_path / "old-issues")
        issues.symlink_to(tmp_path / "old-issues")
    elif replaced == "the checkout moved, another in its place":
        checkout.rename(tmp_path / "moved")
        (checkout / "issues").mkdir(parents=True)
    else:
        import shutil

        shutil.rmtree(checkout)
    assert watcher.kept(checkout) is None        # before the events are read: by the folders' identity
    watcher.catch_up()
    assert watcher.kept(checkout) is None and watcher.watching() == []
    if (checkout / "issues").is_dir() and not (checkout / "issues").is_symlink():
        assert watcher.watch(str(checkout)) == ""   # named again by a command: kept anew
        _kept_is_the_scan(watcher, checkout)


def test_what_cannot_be_watched_is_refused_with_the_reason(checkout: Path, watcher: live_folder.Watcher,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "no absolute path" in watcher.watch("relative/hive")
    (tmp_path / "bare").mkdir()
    assert "No such file" in watcher.watch(str(tmp_path / "bare"))          # no issues/ folder
    (tmp_path / "link").symlink_to(checkout)
    assert watcher.watch(str(tmp_path / "link")) != ""                      # not through a symlink
    monkeypatch.setattr(live_folder, "LOCAL_FILE_SYSTEMS", {})
    assert "may change without this kernel's knowing" in watcher.watch(str(checkout))
    assert watcher.watching() == []


def test_a_served_command_takes_the_kept_scan_once_and_names_the_checkout_it_used(
        checkout: Path, watcher: live_folder.Watcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports, report_to = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    monkeypatch.setattr(live_folder, "_asked", set())
    monkeypatch.setattr(live_folder, "_server", None)
    assert live_folder.taken(checkout) is None                    # not served: nothing to take
    live_folder.served_by(watcher, report_to)
    assert live_folder.taken(checkout) is None                    # not kept yet: the server is told
    assert live_folder.taken(checkout) is None                    # once
    assert os.read(reports, 4096) == os.fsencode(str(checkout)) + b"\0"
    monkeypatch.setattr(live_folder, "_asked", set())
    assert watcher.watch(str(checkout)) == ""
    fresh = live_folder.scan(checkout, full=False)
    assert live_folder.taken(checkout) == (fresh, live_folder.fingerprint(fresh))
    assert os.read(reports, 4096) == os.fsencode(str(checkout)) + b"\0"   # used: made anew at the pause
    assert live_folder.taken(checkout) is None                    # a second look scans (after own writes)
    with pytest.raises(BlockingIOError):
        os.read(reports, 4096)                                    # and tells nothing more
    os.close(reports)
    os.close(report_to)
