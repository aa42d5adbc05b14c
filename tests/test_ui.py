"""`git hive ui`: Datasette on the index, the runtime and a snapshot of hive/state, on 127.0.0.1.

The real command starts the real Datasette on a free port; the canned queries are read over HTTP
as JSON; the server is stopped with Ctrl-C (SIGINT to its process group). Without Datasette the
command says how to install it, in one line, and exits 1.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("datasette", reason="the `ui` extra (in `dev` too): pip install -e '.[dev]'")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(port: int, path: str, token: str = ""):
    if token:
        path += ("&" if "?" in path else "?") + f"token={token}"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, ConnectionError):
        return None


def status_of(port: int, path: str, host: str = "", cookie: str = "") -> int:
    """The HTTP status of GET `path`, with that Host header and cookie."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        headers = {"Host": host or f"127.0.0.1:{port}", **({"Cookie": cookie} if cookie else {})}
        connection.request("GET", path, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def printed_token(log: Path) -> str:
    found = re.search(r"git hive ui: http://127\.0\.0\.1:\d+/\?token=([A-Za-z0-9_-]+) ", log.read_text())
    return found.group(1) if found else ""


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as in /proc/net/tcp{,6}) that listen on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def record(git, repo: Path, issue: str, event: str, **trailers: str) -> None:
    lines = [f"Hive-Event: {event}", f"Hive-Issue: {issue}", *(f"{k}: {v}" for k, v in trailers.items())]
    git("commit", "-q", "--allow-empty", "-m", f"{event} {issue}\n\n" + "\n".join(lines), cwd=repo / ".hive")


def test_ui_serves_the_canned_queries_on_localhost(repo, git, git_env, new_issue, wait_for, tmp_path):
    first = new_issue("asks a person", priority=0, status="escalated")
    second = new_issue("second in the queue", priority=3)
    blocked = new_issue("waits for the second", depends_on=[second])
    spent = {"Hive-Input-Tokens": "1200", "Hive-Cache-Write-Tokens": "10", "Hive-Cache-Read-Tokens": "500",
             "Hive-Output-Tokens": "300", "Hive-Cost-USD": "0.2500"}
    record(git, repo, first, "done", **spent, **{"Hive-Role": "worker", "Hive-Model": "claude-sonnet-4-6"})
    record(git, repo, first, "escalated", **{"Hive-Reason": "the refinery asks for a person: which API?",
                                            **spent, "Hive-Input-Tokens": "1300", "Hive-Cost-USD": "0.3000",
                                            "Hive-Role": "worker", "Hive-Model": "claude-sonnet-4-6"})
    record(git, repo, second, "rejected", **spent, **{"Hive-Role": "refinery", "Hive-Model": "claude-opus-4-6"})
    subprocess.run([sys.executable, "-m", "hive", "tell", second, "the staging password is hunter2"], cwd=repo,
                   check=True, capture_output=True)
    port = free_port()
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hive", "ui", "--port", str(port)], cwd=repo,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        token = wait_for(lambda: printed_token(log), "the URL with its token", timeout=60)
        costs = wait_for(lambda: get_json(port, "/history/cost_by_model_and_role.json?_shape=array", token),
                         f"Datasette to answer on port {port}", timeout=60)
        assert costs == [
            {"model": "claude-sonnet-4-6", "role": "worker", "input_tokens": 1300, "cache_write_tokens": 10,
             "cache_read_tokens": 500, "output_tokens": 300, "cost_usd": 0.3},
            {"model": "claude-opus-4-6", "role": "refinery", "input_tokens": 1200, "cache_write_tokens": 10,
             "cache_read_tokens": 500, "output_tokens": 300, "cost_usd": 0.25}]
        ready = get_json(port, "/index/ready_queue.json?_shape=array", token)
        assert [row["id"] for row in ready] == [second]
        [waiting] = get_json(port, "/index/blocked_issues.json?_shape=array", token)
        assert waiting["id"] == blocked and second in waiting["blocked_by"]
        [escalation] = get_json(port, "/history/escalations.json?_shape=array", token)
        assert escalation["issue"] == first and "which API?" in escalation["reason"]
        assert get_json(port, "/history/merge_history.json?_shape=array", token) == []
        assert get_json(port, "/runtime/merge_queue.json?_shape=array", token) == []
        # no token, another Host (a page that rebound its DNS to 127.0.0.1), a wrong cookie: nothing
        assert status_of(port, "/index/issues.json") == 403
        assert status_of(port, f"/index/issues.json?token={token}", host=f"evil.example:{port}") == 403
        assert status_of(port, "/index/issues.json", cookie="hive_ui_token=guess") == 403
        assert status_of(port, "/index/issues.json", cookie=f"hive_ui_token={token}") == 200
        assert status_of(port, "/index/issues.json", host=f"localhost:{port}", cookie=f"hive_ui_token={token}") == 200
        # a person's tells never reach a browser (an agent may run one), nor the key/values
        assert status_of(port, "/runtime/tells.json", cookie=f"hive_ui_token={token}") == 404
        assert status_of(port, "/runtime/kv.json", cookie=f"hive_ui_token={token}") == 404
        assert "the staging password" not in json.dumps(get_json(port, "/runtime.json", token))
        assert listening_addresses(port) <= {"0100007F", "0000000000000000FFFF00000100007F"}, "not 127.0.0.1 only"
    finally:
        os.killpg(proc.pid, signal.SIGINT)    # Ctrl-C in its terminal
        code = proc.wait(30)
    assert code == 0, log.read_text()
    assert get_json(port, "/-/versions.json") is None


def test_ui_without_datasette_says_how_to_install_it(repo, git_env):
    blocked = "import sys; sys.modules['datasette'] = None; from hive.cli import main; main(['ui'])"
    proc = subprocess.run([sys.executable, "-c", blocked], cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "git hive: Datasette is not installed (git hive ui needs it): " \
                                  "pip install 'git-hive[ui]'"
    assert proc.stdout == ""
