"""Seeing what the agents do: `git hive status` (and `--watch`), `git hive run`'s progress and summary.

Real daemons with scripted agents that wait, mid-turn, for a file the test writes into their
worktree: while they wait, status and cost are read from outside. `--watch` is proven to redraw
on events (hive/runtime/watch.py with no timeout at all); `run` on a terminal through a real pty.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

from tests.daemon_helpers import RUN, hive_dir, start_daemon, stop_daemon, write_script

RUN_TIMEOUT = 120
FAILING_TEST = "test ! -e code.txt || ! grep -q BAD code.txt"


def wait_in_worktree(name: str) -> dict:
    """A step that blocks until the test creates `name` in the agent's worktree (then removes it)."""
    return {"run": f"while [ ! -e {name} ]; do sleep 0.02; done; rm {name}", "must_succeed": True}


def status_json(hive, repo: Path) -> dict:
    return json.loads(hive("status", "--json", cwd=repo).stdout)


def worktree(repo: Path, issue_id: str) -> Path:
    return hive_dir(repo) / "worktrees" / issue_id


def test_status_shows_each_agent_its_cost_the_run_and_why_issues_need_a_person(
        repo, tmp_path, new_issue, hive, wait_for):
    slow = new_issue("Work slowly", labels=["slow"])
    hopeless = new_issue("Never works", labels=["hopeless"])
    script = write_script(tmp_path, {"labels": {
        "slow": [{"tokens": {"input": 500, "cache_read": 4000, "output": 50, "cost_usd": 0.05}},
                 wait_in_worktree("go"),
                 {"write": "slow.txt", "content": "done\n"}, {"commit": "slow work"}, {"result": "success"}],
        "hopeless": [{"fail_times": 1000, "summary": "the tests cannot pass on this machine"}]}})
    env = {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0"}
    log = tmp_path / "daemon.log"
    daemon = start_daemon(repo, env, "--until-idle", "--max-agents", "2", log=log)
    try:
        # the escalation is committed before the hopeless issue's agent has ended: wait for both
        data = wait_for(lambda: (d := status_json(hive, repo)) and len(d["agents"]) == 1 and d["agents"][0]["tokens"]
                        and any(a["issue"] == hopeless for a in d["needs_attention"]) and d,
                        "the slow agent to spend, the hopeless issue to escalate and its agent to end", timeout=60)
        [agent] = data["agents"]
        assert (agent["issue"], agent["title"], agent["role"]) == (slow, "Work slowly", "worker")
        assert agent["tokens"] == 550 and agent["cost_usd"] == 0.05 and agent["age_seconds"] >= 0
        assert data["run"]["busy"] == 1 and data["run"]["total"] == 2 and data["run"]["finalized"] == 0
        [why] = [a for a in data["needs_attention"] if a["issue"] == hopeless]
        assert why["status"] == "escalated" and "the tests cannot pass on this machine" in why["reason"]
        text = hive("status", cwd=repo).stdout
        assert re.search(rf"{slow}\s+w-\w+\s+worker\s+\d+s\s+550 tokens\s+\$0\.0500\s+Work slowly", text), text
        assert f"{hopeless}  escalated  Never works — " in text and "cannot pass" in text
        assert "run: 0 of 2 finalized · 1 busy" in text

        running = json.loads(hive("cost", "--json", cwd=repo).stdout)
        [row] = [r for r in running["rows"] if r["issue"] == slow]
        assert row["running"] is True and row["input_tokens"] == 500 and row["cache_read_tokens"] == 4000

        (worktree(repo, slow) / "go").touch()
        assert daemon.wait(RUN_TIMEOUT) == 3, log.read_text()   # one issue it ran needs a person
    finally:
        stop_daemon(daemon)
    out = log.read_text()
    events = out.split("run summary:")[0].splitlines()
    assert events and all(re.match(r"\d\d:\d\d:\d\d \S", line) for line in events), out   # the event lines as ever
    assert "\x1b" not in out and "\r" not in out                                     # no live line off a terminal
    summary = out.split("run summary:")[1]
    assert summary.startswith(" 1 finalized · 0 failed · 1 escalated · ")
    assert "spent: " in summary and "$0.05" in summary
    assert f"escalated {hopeless} Never works: " in summary and "cannot pass on this machine" in summary
    after = status_json(hive, repo)
    assert after["agents"] == [] and after["run"] is None


def test_the_refinery_is_listed_while_it_works_and_gone_when_idle(repo, tmp_path, new_issue, hive, wait_for):
    worker = [{"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
              {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2, 3]},
              {"commit": "code"}, {"result": "success"}]
    refinery = [{"cd": "{worktree}"}, {"tokens": {"input": 3000, "output": 300, "cost_usd": 0.5}},
                wait_in_worktree("go-refinery"),
                {"result": {"status": "rejected", "summary": "code.txt must never say BAD"}}]
    script = write_script(tmp_path, {"roles": {"worker": worker, "refinery": refinery}})
    issue = new_issue("Write the code")
    log = tmp_path / "daemon.log"
    daemon = start_daemon(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": FAILING_TEST},
                          log=log)
    try:
        data = wait_for(lambda: (d := status_json(hive, repo)) and
                        [a for a in d["agents"] if a["role"] == "refinery" and a["tokens"]] and d,
                        "the refinery to work", timeout=60)
        [refinery_row] = [a for a in data["agents"] if a["role"] == "refinery"]
        assert refinery_row["issue"] == issue and refinery_row["title"] == "Write the code"
        assert refinery_row["tokens"] == 3300 and refinery_row["cost_usd"] == 0.5
        assert re.search(rf"{issue}\s+refinery-\S+\s+refinery\s+\d+s\s+3300 tokens\s+\$0\.5000",
                         hive("status", cwd=repo).stdout)

        (worktree(repo, issue) / "go-refinery").touch()
        wait_for(lambda: status_json(hive, repo)["counts"]["finalized"] == 1, "the second attempt to merge",
                 timeout=60)
        idle = status_json(hive, repo)
        assert idle["daemon"]["running"] and idle["agents"] == [], idle["agents"]   # its session waits, unlisted
        assert idle["run"]["finalized"] == 1 and idle["run"]["cost_usd"] >= 0.5      # the refinery counts
    finally:
        stop_daemon(daemon)


def test_status_watch_redraws_on_events(repo, hive, git_env, new_issue):
    """No timeout at all: every wake-up of `changes` is an event — a state commit or a runtime.db
    write by another process. And `status --watch` itself redraws when an issue is created."""
    from hive import git as hive_git
    from hive.runtime.watch import changes

    paths = hive_git.discover(repo)
    hive("status", cwd=repo)                 # runtime.db exists
    woken: queue.Queue[bool] = queue.Queue()
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [woken.put(w) for w in changes(paths, stop=stop)], daemon=True)
    thread.start()
    watcher = subprocess.Popen([sys.executable, "-m", "hive", "status", "--watch"], cwd=repo, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert _line_with(watcher, "issues: none")
        hive("create", "appears at once", cwd=repo)
        assert _line_with(watcher, "issues: open 1")
        assert woken.get(timeout=30) is True
        while not woken.empty():
            woken.get()
        subprocess.run([sys.executable, "-c", "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                        "db.execute(\"INSERT OR REPLACE INTO kv VALUES ('x', 'y')\"); db.commit()",
                        str(paths.hive_dir / "runtime.db")], check=True)
        assert woken.get(timeout=30) is True
    finally:
        stop.set()
        watcher.terminate()
        watcher.wait(10)
        thread.join(10)


def _line_with(proc: subprocess.Popen, text: str) -> str:
    for line in proc.stdout:
        if text in line:
            return line
    raise AssertionError(f"status --watch ended without printing {text!r}")


def test_run_on_a_terminal_redraws_one_status_line_and_ends_with_a_summary(repo, tmp_path, new_issue):
    ids = [new_issue(f"issue {n}") for n in range(3)]
    script = write_script(tmp_path, {"default": [
        {"write": "hive-work/{issue}.txt", "content": "{issue}\n"}, {"commit": "{issue}"},
        {"tokens": {"input": 1000, "output": 100, "cost_usd": 0.01}}, {"result": "success"}]})
    master, slave = pty.openpty()
    proc = subprocess.Popen([*RUN, "--until-idle"], cwd=repo, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=subprocess.PIPE, env={**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script)})
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:        # EIO: the other side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(RUN_TIMEOUT) == 0, proc.stderr.read()
    text = out.decode()
    assert "\r\x1b[K" in text                                          # the line redrawn in place
    assert re.search(r"\d of 3 finalized · \d agent\(s\) busy · [\d,]+ tokens · \$0\.\d{4}", text)
    assert "3 of 3 finalized" in text
    assert all(f"{i} claimed by" in text for i in ids)               # the event lines scroll above it
    tail = text.split("run summary:")[1]
    assert tail.startswith(" 3 finalized · 0 failed · 0 escalated · ")
    assert "3,300 tokens" in tail and "$0.0300" in tail
