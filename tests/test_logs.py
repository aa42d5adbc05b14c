"""Seeing and steering the agents (issue 19, first half), with the scripted backend: session
transcripts and `git hive logs [ID] [-f] [--json]`, an agent's last message in `status`,
`git hive tell`, `show` for an issue that needs a person, the Queen streamed by `plan`.

The `logs` tests through the real claude and codex CLIs are in test_backend_claude.py and
test_backend_codex.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.backends import transcripts
from hive.backends.base import SessionSpec
from hive.backends.scripted import ScriptedBackend
from tests.daemon_helpers import RUN, hive_dir, jsonl, write_script
from tests.test_plan import terminal  # noqa: F401 - the fixture: `git hive plan` on a terminal

RUN_TIMEOUT = 90
HOSTILE = "look \x1b]0;pwned\x07 here"          # an OSC title change hidden in what an agent says


def run_until_idle(repo: Path, env: dict[str, str], expect: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*RUN, "--until-idle"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "HIVE_ANOMALY_FAILURE_THRESHOLD": "100", **env}, timeout=RUN_TIMEOUT)
    assert proc.returncode == expect, f"run exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def work(issue_steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*issue_steps,
            {"write": "work-{issue}.txt", "content": "work\n"},
            {"commit": "{issue}: work"},
            {"tokens": {"input": 1000, "output": 200, "cost_usd": 0.0125, "cache_read": 50}},
            {"result": "success", "summary": "worked"}]


def by_type(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["type"] == kind]


# -- transcripts and `logs` ----------------------------------------------------------------------------

def test_logs_shows_every_session_of_an_issue_in_order(repo: Path, tmp_path: Path, hive) -> None:
    """Attempt 1 fails and the issue goes to a fresh agent (max_retries 0): two sessions, two
    transcripts, in order; each with the prompt, what the agent said, every permission asked with
    hive's answer, and the turn's tokens and cost. Shown escaped; --json whole."""
    issue = hive("create", "Greet").stdout.strip()
    outside = tmp_path / "outside.txt"
    script = write_script(tmp_path, {"issues": {issue: work([
        {"say": HOSTILE},
        {"run": "echo hello from the shell", "ask": True},
        {"write": str(outside), "content": "x", "ask": True},
        {"fail_times": 1, "summary": "first try fails"},
    ])}})
    run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MERGE_MODE": "manual",
                          "HIVE_MAX_RETRIES": "0"})
    assert not outside.exists()
    sessions = json.loads(hive("logs", issue, "--json").stdout)
    assert len(sessions) == 2
    first, second = ([e for e in s["entries"]] for s in sessions)
    assert first[0]["type"] == "session" and first[0]["role"] == "worker" and first[0]["issue"] == issue
    assert first[0]["label"] != second[0]["label"] and second[0]["label"].startswith("worker-w-")
    assert first[0]["at"] <= second[0]["at"]
    for entries in (first, second):
        assert by_type(entries, "prompt")[0]["text"].startswith(f"# Issue {issue}: Greet")
        assert HOSTILE in [m["text"] for m in by_type(entries, "message")]
        allowed, denied = by_type(entries, "permission")
        assert allowed["tool"] == "Bash" and allowed["command"] == "echo hello from the shell" and allowed["allow"]
        assert denied["tool"] == "Write" and not denied["allow"] and "outside the worktree" in denied["reason"]
        assert any("hello from the shell" in m["text"] for m in by_type(entries, "message"))
    assert "previous attempt failed" in by_type(second, "prompt")[0]["text"].lower()
    turn = by_type(second, "turn")[0]
    assert turn["ok"] and turn["usage"]["input_tokens"] == 1000 and turn["usage"]["output_tokens"] == 200
    assert turn["usage"]["cache_read_tokens"] == 50 and turn["usage"]["cost_usd"] == pytest.approx(0.0125)
    assert by_type(second, "end")[0]["total"]["input_tokens"] == 1000

    shown = hive("logs", issue).stdout
    assert "\x1b" not in shown and "look \\x1b]0;pwned\\x07 here" in shown
    headers = [line for line in shown.splitlines() if line.startswith("── ")]
    assert [h.split(" · ")[0] for h in headers] == [f"── {first[0]['label']}", f"── {second[0]['label']}"]
    assert "DENIED   Write: " in shown and "allowed  Bash: echo hello from the shell" in shown
    assert "turn     ok · 1,000 in · 0 cache write · 50 cache read · 200 out · $0.0125" in shown


def test_logs_of_an_unknown_issue_and_of_an_issue_never_worked(repo: Path, hive) -> None:
    unknown = hive("logs", "hv-zzzzzz", check=False)
    assert unknown.returncode == 2 and unknown.stderr.strip() == "git hive: unknown issue hv-zzzzzz"
    issue = hive("create", "Not started").stdout.strip()
    assert "no session transcripts" in hive("logs", issue).stdout
    assert json.loads(hive("logs", issue, "--json").stdout) == []


def test_logs_without_an_id_is_the_daemons_own_log(repo: Path, tmp_path: Path, hive) -> None:
    assert "no daemon log yet" in hive("logs").stdout
    hive("create", "Anything")
    script = write_script(tmp_path, {"default": work([])})
    run = run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script)})
    logged = hive("logs").stdout
    assert "running: up to" in logged and "merged into main" in logged
    events, _, summary = run.stdout.partition("run summary:")   # the summary is run's own, at its end
    assert summary and logged.splitlines() == [line for line in events.splitlines() if line.strip()]
    assert json.loads(hive("logs", "--json").stdout) == logged.splitlines()


class Follower:
    """`git hive logs ID -f` in the background; its lines as they come."""

    def __init__(self, repo: Path, issue: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "hive", "logs", issue, "-f"], cwd=repo,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.seen = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.seen:
                self.lines.append(line.rstrip("\n"))
                self.seen.notify_all()

    def expect(self, text: str, timeout: float = 30) -> None:
        with self.seen:
            if not self.seen.wait_for(lambda: any(text in line for line in self.lines), timeout):
                raise AssertionError(f"logs -f never showed {text!r}:\n" + "\n".join(self.lines))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_logs_follow_shows_the_running_session_live_and_tell_reaches_it(repo: Path, tmp_path: Path, hive,
                                                                          wait_for) -> None:
    """The agent waits on a FIFO: while it waits, `logs -f` has shown what it said, `status`
    shows it as its last message, and `tell` reaches its session; once it goes on, `-f` shows the
    rest and ends by itself when the issue is finalized, whose transcripts then go."""
    issue = hive("create", "Wait for me").stdout.strip()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    script = write_script(tmp_path, {"issues": {issue: work([
        {"say": "waiting at the gate"}, {"run": f"cat {gate}"}, {"say": "through the gate"}])}})
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_SANDBOX": "off",   # the FIFO is outside
           "HIVE_ANOMALY_FAILURE_THRESHOLD": "100"}
    daemon = subprocess.Popen([*RUN, "--until-idle"], cwd=repo, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    follower = Follower(repo, issue)
    try:
        follower.expect("says     waiting at the gate")
        assert not any("through the gate" in line for line in follower.lines)
        agents = json.loads(hive("status", "--json").stdout)["agents"]
        assert [a["last_message"] for a in agents if a["issue"] == issue] == ["waiting at the gate"]
        assert "waiting at the gate" in hive("status").stdout
        told = hive("tell", issue, "Please also sign it.").stdout
        assert "its running agent gets the message now" in told
        follower.expect("prompt   FYI: a message from the person running hive")
        with open(gate, "w") as opened:
            opened.write("open\n")
        follower.expect("says     through the gate")
        assert follower.proc.wait(60) == 0            # ended by itself: the issue is finalized
        out, _ = daemon.communicate(timeout=RUN_TIMEOUT)
        assert daemon.returncode == 0, out
    finally:
        follower.close()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
    assert any(line.startswith("     0:") and "turn     ok" in line for line in follower.lines), follower.lines
    assert any("end      session total" in line for line in follower.lines)
    prompts = jsonl(hive_dir(repo) / "scripted" / f"{issue}.prompts.jsonl")
    assert [p["fyi"] for p in prompts if "Please also sign it." in p["text"]] == [True]
    assert transcripts.issue_transcripts(hive_dir(repo), issue)   # kept after the merge (prune ends them)


def test_a_message_told_while_no_agent_works_goes_in_the_next_prompt(repo: Path, tmp_path: Path, hive) -> None:
    issue = hive("create", "Later").stdout.strip()
    told = hive("tell", issue, "Use tabs, not spaces.").stdout
    assert "goes in its next attempt's prompt" in told
    script = write_script(tmp_path, {"default": work([])})
    run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MERGE_MODE": "manual"})
    prompts = jsonl(hive_dir(repo) / "scripted" / f"{issue}.prompts.jsonl")
    assert len(prompts) == 1 and "## Messages from the person running hive" in prompts[0]["text"]
    assert "Use tabs, not spaces." in prompts[0]["text"]
    finalized = hive("create", "Gone").stdout.strip()
    hive("cancel", finalized)
    refused = hive("tell", finalized, "hello", check=False)
    assert refused.returncode == 1 and "canceled: no agent will work it again" in refused.stderr
    assert hive("tell", "hv-zzzzzz", "hello", check=False).returncode == 2


def test_show_of_an_escalated_issue_gives_the_reason_the_worktree_and_the_next_step(repo: Path, tmp_path: Path,
                                                                                   hive) -> None:
    issue = hive("create", "Hopeless").stdout.strip()
    script = write_script(tmp_path, {"issues": {issue: [{"turn_error": "the compiler is on fire"}]}})
    run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0",
                          "HIVE_MAX_AGENT_SWITCHES": "0"}, expect=3)
    shown = hive("show", issue).stdout
    worktree = hive_dir(repo) / "worktrees" / issue
    assert "escalated: hive needs you. Why: " in shown and "the compiler is on fire" in shown
    assert f"the work is in {worktree}" in shown and f"`git hive retry {issue}`" in shown
    assert f"`git hive logs {issue}`" in shown
    needs = json.loads(hive("show", issue, "--json").stdout)["attention"]
    assert "the compiler is on fire" in needs["reason"] and needs["worktree"] == str(worktree)
    assert needs["next"][0] == f"git hive update {issue} --status done"
    assert by_type(json.loads(hive("logs", issue, "--json").stdout)[0]["entries"], "turn")[0]["error"] \
        == "the compiler is on fire"


# -- bounded --------------------------------------------------------------------------------------------

def test_a_transcript_stops_growing_at_its_limit_but_keeps_the_turn_ends(tmp_path: Path) -> None:
    big = "x" * 20_000                              # each cut to MAX_TEXT characters
    steps = [{"say": big} for _ in range(200)] + [{"tokens": {"input": 7, "output": 3}}, {"end_turn": True}]
    script = write_script(tmp_path, {"default": steps})
    path = Path(transcripts.new_transcript(tmp_path / "transcripts", "worker-w-abcdef"))

    async def session() -> None:
        backend = ScriptedBackend(script_path=str(script), hive_dir=str(tmp_path / "hive"))
        sid = await backend.create_session(SessionSpec(role="worker", cwd=str(tmp_path), transcript=str(path)))
        assert (await backend.run_turn(sid, "go")).ok
        await backend.delete_session(sid)

    asyncio.run(session())
    entries = [entry for _, entry in transcripts.read_entries(path)]
    assert path.stat().st_size < transcripts.MAX_BYTES + 2 * transcripts.MAX_TEXT
    assert [e["type"] for e in entries].count("truncated") == 1
    says = by_type(entries, "message")
    assert 0 < len(says) < 200 and all(len(m["text"]) < transcripts.MAX_TEXT + 100 for m in says)
    assert [e["type"] for e in entries[-3:]] == ["truncated", "turn", "end"]
    assert entries[-2]["usage"]["input_tokens"] == 7


# -- the Queen, visible ---------------------------------------------------------------------------------

def test_interactive_plan_streams_the_queen_with_elapsed_time_and_her_cost(repo: Path, tmp_path: Path,
                                                                          terminal: Callable[..., Any]) -> None:
    """The Queen waits on a FIFO after her first words: they are on the terminal while she works."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    script = tmp_path / "queen.json"
    script.write_text(json.dumps({"roles": {"queen": [
        {"say": "Reading the code " + HOSTILE},
        {"run": "ls", "ask": True},
        {"run": f"cat {gate}"},
        {"write": "{worktree}/issues/hv-obs001.md",
         "content": '+++\ntitle = "Observe"\nstatus = "open"\npriority = 2\ntype = "task"\n+++\n\nDo it.\n'},
        {"tokens": {"input": 4000, "output": 500, "cost_usd": 0.042}},
        {"result": "success", "summary": "plan written", "path": "{worktree}/.hive-result.jsonl"},
    ]}}), encoding="utf-8")
    term = terminal({"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_SANDBOX": "off"})   # the FIFO is outside
    term.expect(r"── queen · scripted")
    term.expect(r"\s+0:0\d  says     Reading the code look \\x1b\]0;pwned\\x07 here\n")
    term.expect(r"\s+0:0\d  allowed  Bash: ls\n")
    with open(gate, "w") as opened:             # she goes on only now
        opened.write("go\n")
    term.expect(r"turn     ok · 4,000 in · 0 cache write · 0 cache read · 500 out · \$0\.0420")
    term.expect(r"the Queen so far: 4,000 in · 0 cache write · 0 cache read · 500 out · \$0\.0420 in \d+:\d\d")
    term.expect(r"ID\s+STATUS\s+PRI")
    term.expect(r"\[a\]pprove")
    term.type("a")
    term.expect(r"the Queen: 4,000 in · 0 cache write · 0 cache read · 500 out · \$0\.0420 in \d+:\d\d")
    term.expect(r"start the agents now\? \[y/N\]: ")
    term.type("n")
    assert term.wait() == 0, term.buffer
    assert "\x1b]0;pwned" not in term.buffer
