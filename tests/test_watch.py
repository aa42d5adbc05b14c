"""`git hive watch`: edits saved in `.hive/` by any process are committed, or reported.

The watcher runs as a real subprocess; the edits are made by this (other) process. Every wait
polls for the expected state with a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest


class Watcher:
    """A running `git hive watch`, its output collected line by line."""

    def __init__(self, repo: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "hive", "watch"], cwd=repo, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._collect, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _collect(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def said(self, text: str, stream: str = "out") -> bool:
        return any(text in line for line in (self.out if stream == "out" else self.err))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=5)
        return self.proc.returncode


@pytest.fixture
def watcher(repo, wait_for):
    """`git hive watch` running in `repo`, ready (it has said it is watching)."""
    running = Watcher(repo)
    try:
        wait_for(lambda: running.said("watching") or running.proc.poll() is not None, "the watcher to start")
        assert running.proc.poll() is None, "\n".join(running.err)
        yield running
    finally:
        running.stop()


def on_branch(git, repo, path: str) -> str | None:
    proc = git("show", f"hive/state:{path}", cwd=repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


def save(path: Path, text: str) -> None:
    """Save the way an editor in another process does: write a temp file, rename it over."""
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_text(text)
    tmp.replace(path)


def test_valid_edits_are_committed_as_the_person(repo, git, new_issue, watcher, wait_for, hive, state_log,
                                                issue_text):
    git("config", "user.name", "Pat Person", cwd=repo)
    git("config", "user.email", "pat@example.com", cwd=repo)
    issue = new_issue("typo in titel")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    save(path, path.read_text().replace("typo in titel", "typo in title").replace("priority = 2", "priority = 1"))
    wait_for(lambda: "typo in title" in (on_branch(git, repo, f"issues/{issue}.md") or ""),
             "the watcher to commit the edit")
    last = state_log()[-1]
    assert (last.author, last.event, last.issue) == ("Pat Person", "edited", issue)
    # the committed file has `updated` bumped (a hand edit is a change): the checkout shows it
    wait_for(lambda: on_branch(git, repo, f"issues/{issue}.md") == path.read_text(),
             "the checkout to show the committed file")
    wait_for(lambda: watcher.said(f"committed .hive/issues/{issue}.md"), "the watcher to report the commit")
    listed = {i["id"]: i for i in json.loads(hive("list", "--json").stdout)}
    assert (listed[issue]["title"], listed[issue]["priority"]) == ("typo in title", 1)

    # a new file, edited in place (no rename)
    (repo / ".hive" / "issues" / "hv-fffff1.md").write_text(issue_text("written by hand", priority=0))
    wait_for(lambda: on_branch(git, repo, "issues/hv-fffff1.md"), "the new file on hive/state")
    assert state_log()[-1].author == "Pat Person"
    assert [i["id"] for i in json.loads(hive("list", "--ready", "--json").stdout)] == ["hv-fffff1", issue]
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""

    # other writers move the branch: the watcher keeps the checkout in step
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    git("update-ref", "refs/heads/hive/state", f"{tip}~1", cwd=repo)  # a plain git writer
    new_file = repo / ".hive" / "issues" / "hv-fffff1.md"
    wait_for(lambda: not new_file.exists(), "the checkout to follow the branch back")
    git("update-ref", "refs/heads/hive/state", tip, cwd=repo)
    # the refresh writes the files, then the checkout's git index: both, to be in step
    wait_for(lambda: new_file.exists() and git("status", "--porcelain", cwd=repo / ".hive").stdout == "",
             "the checkout to follow the branch forward")

    # Ctrl-C stops it cleanly
    assert watcher.stop() == 0
    assert watcher.said("stopped")


def test_an_invalid_edit_is_reported_and_not_committed(repo, git, new_issue, watcher, wait_for, hive):
    issue = new_issue("stays good")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    tip = git("rev-parse", "hive/state", cwd=repo).stdout
    bad = path.read_text().replace('priority = 2', 'priority = "high"')
    save(path, bad)
    wait_for(lambda: watcher.said(f".hive/issues/{issue}.md:4", "err"), "the watcher to report file:line")
    report = next(line for line in watcher.err if f"issues/{issue}.md:4" in line)
    assert "priority" in report and "not committed" in report
    assert git("rev-parse", "hive/state", cwd=repo).stdout == tip
    assert path.read_text() == bad  # left exactly as the person wrote it
    proc = hive("list", "--json")
    assert [(i["id"], i["priority"]) for i in json.loads(proc.stdout)] == [(issue, 2)]  # last good version
    assert f"issues/{issue}.md:4" in proc.stderr
    # fixing it is enough: the watcher commits the fixed version
    save(path, bad.replace('priority = "high"', "priority = 0"))
    wait_for(lambda: "priority = 0" in (on_branch(git, repo, f"issues/{issue}.md") or ""),
             "the fixed edit to be committed")


def test_absorb_looks_only_at_the_paths_a_watcher_reported(repo, project, git, new_issue):
    """The daemon and `git hive watch` pass the changed paths: only those are read (a 10k-issue
    checkout is not stat'ed on every wake-up); the whole folder is looked at without them."""
    first, second, gone = new_issue("first"), new_issue("second"), new_issue("gone")
    project.sync(warn=False)
    checkout = repo / ".hive"
    for issue_id, title in ((first, "first, edited"), (second, "second, edited")):
        path = checkout / "issues" / f"{issue_id}.md"
        save(path, path.read_text().replace(f'title = "{title.split(",")[0]}"', f'title = "{title}"'))
    (checkout / "issues" / f"{gone}.md").unlink()
    (checkout / "stray.txt").write_text("not an issue\n")

    result = project.absorb(only={f"issues/{first}.md", "stray.txt", "issues/nothing.md"})
    assert result.committed == [f"issues/{first}.md"] and result.problems == []
    assert "first, edited" in on_branch(git, repo, f"issues/{first}.md")
    assert "second, edited" not in on_branch(git, repo, f"issues/{second}.md")
    assert on_branch(git, repo, f"issues/{gone}.md") is not None

    result = project.absorb(only={f"issues/{gone}.md"})   # a deletion it was told about
    assert result.problems == [] and on_branch(git, repo, f"issues/{gone}.md") is None
    assert project.absorb(only=set()).committed == []
    assert project.absorb().committed == [f"issues/{second}.md"]   # the whole live folder


def test_ref_events_are_news_unless_this_process_wrote_them(tmp_path):
    """A daemon is not woken by its own state commits (it knows of them), but by any other
    process's and by every line of the reference-transaction hook."""
    import os

    from hive.state.watch import RefEvents

    path = tmp_path / "ref-events"
    path.write_text("1.000 1\n")               # from before the watcher started: not news
    events = RefEvents(path)
    assert not events.news()

    def append(text: str) -> None:
        with open(path, "a") as out:
            out.write(text)

    append(f"2.000 {os.getpid()}\n")
    assert not events.news()
    append(f"3.000 {os.getpid() + 1}\n")       # another hive process
    assert events.news()
    append("0000 1111 refs/heads/main\n")      # the hook: a person's git
    assert events.news()
    append(f"4.000 {os.getpid() + 1}")         # a line still being written: next time
    assert not events.news()
    append("\n")
    assert events.news()
    path.write_text(f"5.000 {os.getpid()}\n")  # emptied by a person, then one of ours
    assert not events.news()
    path.unlink()
    assert events.news()                       # gone: look at the state rather than miss a move


def test_the_watch_leaves_out_worktrees_and_refs(repo, project):
    """Agents, checkouts and tests write thousands of files under `<git-dir>/hive/worktrees`, and
    hive moves a work branch for every issue: none of that is watched."""
    from hive.state.watch import watched_paths

    paths = project.paths
    assert watched_paths(project) == [paths.state_checkout, paths.ref_events]
    assert paths.ref_events.is_file()           # made, so that it can be watched
