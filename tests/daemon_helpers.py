"""Plain helpers for tests that run real daemons (`python -m hive run --backend scripted`).

Shared by tests/test_orchestrator.py, tests/test_shared_daemon.py and tests/faults/helpers.py;
fixtures stay in conftest.py. Import as `from tests.daemon_helpers import ...` (pytest runs from
the repository root: `python -m pytest`).

    RUN             the daemon's command line, without its options
    start_daemon    start_daemon(repo, env, *args, log=path) -> a daemon in the background
    stop_daemon     stop_daemon(proc): SIGTERM a daemon still running, SIGKILL it after 15 s
    alive           alive(pid): a process that exists and is not a zombie
    hive_dir        hive_dir(repo) -> `<repo>/.git/hive`
    jsonl           jsonl(path) -> the rows of a JSON-lines file ([] when it does not exist)
    all_agent_pids  all_agent_pids(repo) -> the pids of every scripted agent session in repo
    write_script    write_script(tmp_path, data, name="script.json") -> a scripted agents' script
    recorded_process recorded_process(repo, issue_id, role) -> hive's record (runtime.db) of the
                    process (pid, start time) of `role` (worker, test, ...) working an issue, or None
    still_running   still_running((pid, start)) -> that very process is alive (a reused pid is not it)
    NewProcesses    with NewProcesses(repo, issue_id, role, old) as seen: ... -> seen.alive: for each
                    new `role` process hive recorded meanwhile, whether `old` still ran then
    budget_spent    budget_spent(repo, issue_id) -> (retries, switches, failure times) of its budget
    issue_events    issue_events(state_log(repo), issue_id) -> its Hive-Event trailers but `created`
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

RUN = [sys.executable, "-m", "hive", "run", "--backend", "scripted"]


def start_daemon(repo: Path, env: dict[str, str], *args: str, log: Path) -> subprocess.Popen:
    """`git hive run --backend scripted ARGS` in `repo` with `env` added; its output appended to `log`."""
    with open(log, "ab") as handle:
        return subprocess.Popen([*RUN, *args], cwd=repo, env={**os.environ, **env},
                                stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT)


def stop_daemon(proc: subprocess.Popen) -> None:
    """SIGTERM a daemon that still runs; SIGKILL it if it has not ended within 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (orphans may be reaped late, or never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def hive_dir(repo: Path) -> Path:
    return repo / ".git" / "hive"


def jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def all_agent_pids(repo: Path) -> set[int]:
    """The pids of every scripted agent session started in `repo` (each a process-group leader)."""
    pids: set[int] = set()
    for sessions in (hive_dir(repo) / "scripted").glob("*.sessions.jsonl"):
        pids.update(row["pid"] for row in jsonl(sessions))
    return pids


def write_script(tmp_path: Path, data: dict, name: str = "script.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def recorded_process(repo: Path, issue_id: str, role: str) -> tuple[int, str] | None:
    try:
        with sqlite3.connect(f"file:{hive_dir(repo) / 'runtime.db'}?mode=ro", uri=True, timeout=1) as db:
            row = db.execute("SELECT pid, pid_start FROM agents WHERE issue_id = ? AND role = ? AND pid > 0",
                             (issue_id, role)).fetchone()
    except sqlite3.Error:
        return None
    return (int(row[0]), str(row[1] or "")) if row else None


def still_running(process: tuple[int, str]) -> bool:
    """Whether the process hive recorded (pid and kernel start time) still runs: on a busy machine
    a pid is soon reused, by a process that is not it."""
    pid, start = process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] not in ("Z", "X") and (not start or fields[19] == start)


def budget_spent(repo: Path, issue_id: str) -> tuple[int, int, list[float]]:
    with sqlite3.connect(hive_dir(repo) / "runtime.db", timeout=5) as db:
        row = db.execute("SELECT retries, switches, failures FROM budgets WHERE issue_id = ?", (issue_id,)).fetchone()
    return (int(row[0]), int(row[1]), json.loads(row[2] or "[]")) if row else (0, 0, [])


def issue_events(commits: list[Any], issue_id: str) -> list[str]:
    return [c.trailers.get("Hive-Event", "") for c in commits
            if c.trailers.get("Hive-Issue") == issue_id and c.trailers.get("Hive-Event") != "created"]


class NewProcesses:
    """Watches, from a thread, hive's record of the `role` processes of an issue: for each new one,
    whether the process `old` (a killed daemon's) still ran when it appeared."""

    def __init__(self, repo: Path, issue_id: str, role: str, old: tuple[int, str]):
        self.repo, self.issue_id, self.role, self.old = repo, issue_id, role, old
        self.seen: list[tuple[int, str]] = []
        self.alive: list[bool] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            found = recorded_process(self.repo, self.issue_id, self.role)
            if found and found != self.old and found not in self.seen:
                self.seen.append(found)
                self.alive.append(still_running(self.old))
            self._stop.wait(0.005)

    def __enter__(self) -> "NewProcesses":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)
