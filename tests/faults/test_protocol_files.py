"""The worker protocol files are the agent's: it can make them anything (docs/SECURITY.md,
"Agents"). `mkfifo .hive-notes.jsonl` blocked the daemon's event loop in `open()` for good (every
agent and merge frozen, `git hive stop` timed out, SIGTERM ignored), a FIFO `.hive-result.jsonl`
hung every restart in recovery. Now each is opened without blocking or following a link
(`hive.lines.open_regular`), off the event loop, and anything but a regular file of bounded
size is a failed attempt with a reason.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from hive import git as hive_git, lines
from hive.agents import protocol
from hive.state import layout, trust

from .helpers import daemon_env, tail, wait_until, work_steps, write_json

FIRST = [1]


def test_every_kind_of_file_but_a_regular_one_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / protocol.RESULT_FILE)
    os.mkfifo(tmp_path / protocol.NOTES_FILE)
    assert "a FIFO, not a regular file" in protocol.read_result(tmp_path).problem
    assert "a FIFO, not a regular file" in protocol.read_new_notes(tmp_path, 0).refused
    for name in (protocol.RESULT_FILE, protocol.NOTES_FILE):
        (tmp_path / name).unlink()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / protocol.RESULT_FILE))
    (tmp_path / protocol.NOTES_FILE).symlink_to("/dev/zero")
    try:
        assert "a socket" in protocol.read_result(tmp_path).problem
        assert "a symbolic link" in protocol.read_new_notes(tmp_path, 0).refused
    finally:
        sock.close()
    (tmp_path / protocol.RESULT_FILE).unlink()
    (tmp_path / protocol.RESULT_FILE).mkdir()
    assert "a folder" in protocol.read_result(tmp_path).problem
    big = tmp_path / "big"
    big.mkdir()
    (big / protocol.RESULT_FILE).write_bytes(b" " * (protocol.MAX_RESULT_BYTES + 1))
    assert "more than" in protocol.read_result(big).problem
    with open(big / protocol.NOTES_FILE, "wb") as handle:
        handle.truncate(protocol.MAX_NOTES_BYTES + 1)      # sparse: no disk spent
    assert "more than" in protocol.read_new_notes(big, 0).refused
    with pytest.raises(lines.NotAFile):
        list(lines.iter_lines(tmp_path / protocol.NOTES_FILE))


def test_a_notes_file_removed_or_cut_short_since_the_last_read_is_read_from_its_start(tmp_path: Path) -> None:
    notes = tmp_path / protocol.NOTES_FILE
    with open(notes, "wb") as handle:
        handle.truncate(protocol.MAX_NOTES_BYTES + 1)
    too_big = protocol.read_new_notes(tmp_path, 0)
    assert "more than" in too_big.refused and too_big.offset >= protocol.MAX_NOTES_BYTES
    notes.unlink()
    gone = protocol.read_new_notes(tmp_path, too_big.offset)
    assert (gone.refused, gone.offset, gone.notes) == ("", 0, [])
    notes.write_text('{"content": "written anew"}\n')
    anew = protocol.read_new_notes(tmp_path, too_big.offset)
    assert (anew.refused, [n["content"] for n in anew.notes]) == ("", ["written anew"])
    with open(notes, "ab") as handle:
        handle.write(b'{"content": "appended"}\n')
    assert [n["content"] for n in protocol.read_new_notes(tmp_path, anew.offset).notes] == ["appended"]
    notes.write_text('{"content": "cut short"}\n')
    assert [n["content"] for n in protocol.read_new_notes(tmp_path, too_big.offset).notes] == ["cut short"]


@pytest.mark.timeout(180)
def test_a_retry_after_an_oversized_notes_file_goes_on_once_the_agent_removed_it(
        repo: Path, tmp_path: Path, new_issue, state_log, daemons) -> None:
    """The retry resumes in the worktree whose notes file was refused as too big; the agent
    removes it and notes again: the attempt is not refused for what it no longer holds."""
    issue_id = new_issue("agent overfills its notes, then starts them again", labels=["big"])
    steps = [{"run": f"truncate -s {protocol.MAX_NOTES_BYTES + 1} {protocol.NOTES_FILE}", "on_attempts": FIRST},
             {"hang": True, "on_attempts": FIRST},
             {"run": f"rm {protocol.NOTES_FILE}", "on_attempts": [2]},
             {"note": "the second attempt's note", "category": "discovery", "on_attempts": [2]}]
    script = write_json(tmp_path / "agents.json", {"labels": {"big": work_steps(steps)}})
    env = daemon_env(script, max_retries=1, max_agent_switches=0, test_command="true")
    code = daemons.run_until_idle(repo, env, max_agents=1, timeout=120, log=tmp_path / "daemon.log")
    assert code == 0, tail(tmp_path / "daemon.log")
    log = state_log(repo)
    events = [c.event for c in log if c.issue == issue_id and c.event != "created"]
    assert events == ["claimed", "retry", "noted", "done", "finalized"], (events, tail(tmp_path / "daemon.log"))
    reason = next(c.trailers.get("Hive-Reason", "") for c in log if c.issue == issue_id and c.event == "retry")
    assert "more than" in reason, reason


@pytest.mark.timeout(180)
def test_fifos_for_protocol_files_fail_the_attempt_and_the_run_goes_on(repo: Path, tmp_path: Path, new_issue,
                                                                       state_log, daemons) -> None:
    behaviours = {
        "fifo-notes": work_steps([{"run": f"rm -f {protocol.NOTES_FILE}"},
                                  {"run": f"mkfifo {protocol.NOTES_FILE}", "on_attempts": FIRST},
                                  {"sleep": 2, "on_attempts": FIRST}]),
        "fifo-result": [*work_steps()[:2],
                        {"run": f"rm -f {protocol.RESULT_FILE} && mkfifo {protocol.RESULT_FILE}",
                         "on_attempts": FIRST},
                        {"end_turn": True, "on_attempts": FIRST},
                        *work_steps()[2:]],
    }
    ids = {name: new_issue(f"agent makes a {name}", labels=[name]) for name in behaviours}
    script = write_json(tmp_path / "agents.json", {"labels": behaviours})
    env = daemon_env(script, max_retries=1, max_agent_switches=0, test_command="true")
    code = daemons.run_until_idle(repo, env, max_agents=2, timeout=120, log=tmp_path / "daemon.log")
    assert code == 0, tail(tmp_path / "daemon.log")
    log = state_log(repo)
    for name, issue_id in ids.items():
        events = [c.event for c in log if c.issue == issue_id and c.event not in ("created", "noted")]
        assert events == ["claimed", "retry", "done", "finalized"], (name, events, tail(tmp_path / "daemon.log"))
        reason = next(c.trailers.get("Hive-Reason", "") for c in log if c.issue == issue_id and c.event == "retry")
        assert "a FIFO, not a regular file" in reason, (name, reason)


@pytest.mark.timeout(120)
def test_sigterm_ends_a_daemon_whose_agent_made_a_fifo(repo: Path, tmp_path: Path, new_issue, daemons) -> None:
    new_issue("agent makes a FIFO and hangs", labels=["fifo"])
    script = write_json(tmp_path / "agents.json", {"labels": {"fifo": [
        {"run": f"mkfifo {protocol.NOTES_FILE}"}, {"write": "started", "content": "x\n"}, {"hang": True}]}})
    log = tmp_path / "daemon.log"
    proc = daemons.start(repo, daemon_env(script, max_retries=0, max_agent_switches=0), log=log)
    started = lambda: list((repo / ".git" / "hive" / "worktrees").glob("*/started"))  # noqa: E731
    assert wait_until(started, 60), tail(log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) is not None, tail(log)


@pytest.mark.timeout(180)
def test_a_restart_after_an_agent_left_a_fifo_result_recovers(repo: Path, tmp_path: Path, new_issue, cli,
                                                              daemons) -> None:
    """The daemon dies while its agent's `.hive-result.jsonl` is a FIFO: recovery reads it
    (`recovery._finish_if_finished`) without hanging, and the issue is worked again."""
    issue_id = new_issue("agent leaves a FIFO result", labels=["fifo"])
    first = write_json(tmp_path / "first.json", {"labels": {"fifo": [
        *work_steps()[:2], {"run": f"mkfifo {protocol.RESULT_FILE}"}, {"write": "started", "content": "x\n"},
        {"hang": True}]}})
    log = tmp_path / "daemon.log"
    proc = daemons.start(repo, daemon_env(first), log=log)
    assert wait_until(lambda: list((repo / ".git" / "hive" / "worktrees").glob("*/started")), 60), tail(log)
    proc.kill()
    proc.wait(10)
    again = write_json(tmp_path / "again.json", {"default": work_steps([{"run": f"rm -f {protocol.RESULT_FILE}"}])})
    code = daemons.run_until_idle(repo, daemon_env(again, test_command="true"), max_agents=1, timeout=120, log=log)
    assert code == 0, tail(log)
    assert {i["id"]: i["status"] for i in json.loads(cli("list", "--json", cwd=repo).stdout)}[
        issue_id] == "finalized", tail(log)


@pytest.mark.timeout(180)
def test_an_oversized_notes_file_grown_where_no_watcher_sees_is_refused_at_the_safety_tick(
        repo: Path, tmp_path: Path, new_issue, state_log, daemons) -> None:
    """The safety tick reads a notes file that grew through another name of it (a hard link in a
    subfolder the worktree's watcher does not see) as the watcher's harvest does: bounded, and
    past `MAX_NOTES_BYTES` the attempt fails with the reason (it does not hang on for good)."""
    grow = [            {"run": f"mkdir aside && : > aside/n && ln aside/n {protocol.NOTES_FILE}", "on_attempts": FIRST},
            {"sleep": 1, "on_attempts": FIRST},    # the link's creation, which the watcher sees, harvested first
            {"run": f"truncate -s {protocol.MAX_NOTES_BYTES + 1} aside/n", "on_attempts": FIRST},
            {"hang": True, "on_attempts": FIRST}]
    issue_id = new_issue("agent grows its notes aside", labels=["aside"])
    script = write_json(tmp_path / "agents.json", {"labels": {"aside": [*grow, *work_steps()]}})
    env = daemon_env(script, max_retries=0, max_agent_switches=1, test_command="true")   # a clean start
    code = daemons.run_until_idle(repo, env, max_agents=1, timeout=120, log=tmp_path / "daemon.log")
    assert code == 0, tail(tmp_path / "daemon.log")
    log = state_log(repo)
    events = [c.event for c in log if c.issue == issue_id and c.event not in ("created", "noted")]
    assert events == ["claimed", "switched", "done", "finalized"], (events, tail(tmp_path / "daemon.log"))
    reason = next(c.trailers.get("Hive-Reason", "") for c in log if c.issue == issue_id and c.event == "switched")
    assert "more than" in reason, reason


FLOOD = """import json
for n in range(COUNT):
    print(json.dumps({"content": "%05d " % n + "x" * 1994, "category": "discovery"}))
"""


@pytest.mark.timeout(180)
def test_an_agent_flooding_its_notes_leaves_a_state_every_machine_takes_in(
        repo: Path, tmp_path: Path, new_issue, state_log, daemons) -> None:
    """Valid notes, more than a notes file on `hive/state` may hold (`trust.MAX_NOTES_BYTES`, what
    another machine takes in): those that fit are kept, the rest are said to be left out, the
    issue goes on, and the state passes the trust check a fresh clone runs."""
    issue_id = new_issue("floods its notes with valid ones", labels=["flood"])
    count = trust.MAX_NOTES_BYTES // 2000 + 500
    steps = [{"write": "flood.py", "content": FLOOD.replace("COUNT", str(count))},
             {"run": f'"{sys.executable}" flood.py >> {protocol.NOTES_FILE} && rm flood.py', "must_succeed": True}]
    script = write_json(tmp_path / "agents.json", {"labels": {"flood": work_steps(steps)}})
    code = daemons.run_until_idle(repo, daemon_env(script, test_command="true"), max_agents=1, timeout=150,
                                  log=tmp_path / "daemon.log")
    assert code == 0, tail(tmp_path / "daemon.log")
    assert "of them left out: the notes on hive/state are full" in (tmp_path / "daemon.log").read_text()
    events = [c.event for c in state_log(repo) if c.issue == issue_id]
    assert events[:2] == ["created", "claimed"] and events[-2:] == ["done", "finalized"] and "noted" in events, events
    store = hive_git.repository(repo / ".git")
    tree = store.revparse_single("refs/heads/hive/state").tree
    notes = tree[layout.notes_path(issue_id)]
    assert 0 < len(notes.data.splitlines()) < count and notes.size <= trust.MAX_NOTES_BYTES
    trust.check_tree(store, str(tree.id))
