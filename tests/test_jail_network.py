"""hive's end of a jail's network (hive/jail/network.py), driven from outside a jail: the
sockets of a gate lead only where the backend's endpoints say, and through the user's proxy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hive.jail.network import SWEEP_AFTER_SECONDS, NoNetwork, endpoint_of, open_gate, sweep_gates
from tests.daemon_helpers import start_daemon


class FakeProxy:
    """An HTTP proxy on 127.0.0.1 that accepts every CONNECT, then echoes; records the requests."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(1024)
            self.requests.append(head)
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
            conn.sendall(conn.recv(1024))
            conn.close()


def _ask(path: str, request: bytes) -> bytes:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(path)
    client.sendall(request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = client.recv(1024)
        if not chunk:
            break
        answer += chunk
    if answer.startswith(b"HTTP/1.1 200"):
        client.sendall(b"ping")
        answer += client.recv(1024)
    client.close()
    return answer


def test_the_proxy_tunnels_to_allowed_hosts_through_the_users_own_proxy() -> None:
    upstream = FakeProxy()
    env = {"HTTPS_PROXY": f"http://user:pa%40ss@127.0.0.1:{upstream.port}"}
    gate = open_gate(("https://api.provider.example", "http://127.0.0.1:9999"), env)
    try:
        proxy = os.path.join(gate.folder, "proxy.sock")
        answer = _ask(proxy, b"CONNECT api.provider.example:443 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 Connection established") and answer.endswith(b"ping"), answer
        assert upstream.requests[0].startswith(b"CONNECT api.provider.example:443 HTTP/1.1\r\n")
        assert b"Proxy-Authorization: Basic dXNlcjpwYUBzcw==" in upstream.requests[0]   # user:pa@ss
        for refused in (b"CONNECT api.provider.example:22 HTTP/1.1\r\n\r\n", b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
                        b"GET http://api.provider.example/ HTTP/1.1\r\n\r\n", b"\r\n\r\n"):
            assert _ask(proxy, refused).startswith(b"HTTP/1.1 403 Forbidden"), refused
        assert len(upstream.requests) == 1
        assert gate.env["HTTPS_PROXY"].startswith("http://127.0.0.1:") and "127.0.0.1" in gate.env["NO_PROXY"]
        assert any(spec.startswith("[127.0.0.1]:9999=") for spec in gate.relay)
    finally:
        gate.close()
        upstream.sock.close()
    assert not os.path.exists(gate.folder)


@pytest.mark.parametrize("url,why", [
    ("http://api.provider.example/v1", "only https reaches a host beyond this machine"),
    ("http://127.0.0.1:80", "below 1024"),
    ("ftp://x", "not an http(s) URL"),
    ("https://host:99999", "a bad port"),
])
def test_an_endpoint_the_jail_cannot_relay_is_refused_naming_why(url: str, why: str) -> None:
    with pytest.raises(NoNetwork, match=why.replace("(", r"\(").replace(")", r"\)")):
        endpoint_of(url)


def test_a_relay_folder_that_cannot_be_made_or_bound_is_refused_naming_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    (tmp_path / "a-file").touch()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a-file" / "tmp"))
    with pytest.raises(NoNetwork, match="cannot make the jail's network relay folder in .*a-file/tmp: Not a directory .set TMPDIR"):
        open_gate(("http://127.0.0.1:9999",), {})
    deep = tmp_path / ("d" * 100)           # a socket path past the 108 bytes AF_UNIX takes
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(NoNetwork, match="cannot open the jail's network relay in .*: AF_UNIX path too long .set TMPDIR to a shorter"):
        open_gate(("http://127.0.0.1:9999",), {})
    assert os.listdir(deep) == []            # nothing left behind


def test_local_endpoints_are_mapped_at_their_own_port() -> None:
    assert endpoint_of("http://localhost:8080/v1").local and endpoint_of("http://[::1]:8080").local
    assert not endpoint_of("https://api.anthropic.com").local
    assert endpoint_of("https://api.anthropic.com").port == 443


# A gate in a process of its own: it prints its folder, then is killed at once ("die") or serves
# until its stdin closes.
GATE_HOLDER = """
import os, signal, sys
from hive.jail.network import open_gate
gate = open_gate(("http://127.0.0.1:9999",), {})
print(gate.folder, flush=True)
if sys.argv[1] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()
gate.close()
"""


def _gate_in_process(tmp: Path, how: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", GATE_HOLDER, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.stdout is not None
    folder = proc.stdout.readline().strip()
    assert folder.startswith(str(tmp)), folder
    if how == "die":
        assert proc.wait(10) == -9
    return proc, folder


def _age(*paths: str | Path) -> None:
    then = time.time() - 2 * SWEEP_AFTER_SECONDS
    for path in paths:
        os.utime(path, (then, then), follow_symlinks=False)


def test_the_folder_of_a_killed_processs_gate_is_swept_and_nothing_else(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    _, killed = _gate_in_process(tmp, "die")
    _, just_killed = _gate_in_process(tmp, "die")        # as young as a gate whose lock is being taken
    live, serving = _gate_in_process(tmp, "serve")
    older_hive = tmp / "hive-net-older"                     # no gate.lock: an older hive's, maybe serving
    older_hive.mkdir()
    elsewhere = tmp_path / "elsewhere"                      # reached only through a link
    elsewhere.mkdir()
    (elsewhere / "gate.lock").touch()
    (tmp / "hive-net-link").symlink_to(elsewhere)
    kept: list[Path | str] = [just_killed, serving, older_hive, tmp / "hive-net-link", elsewhere / "gate.lock"]
    if os.getuid() == 0:                                   # another user's gate, dead
        theirs = tmp / "hive-net-theirs"
        theirs.mkdir()
        (theirs / "gate.lock").touch()
        os.chown(theirs, 65534, 65534)
        _age(theirs)
        kept.append(theirs)
    _age(killed, serving, older_hive, elsewhere, tmp / "hive-net-link")
    try:
        assert sweep_gates(str(tmp)) == [killed]
        assert not os.path.lexists(killed)
        assert all(os.path.lexists(path) for path in kept), [p for p in kept if not os.path.lexists(p)]
        client = socket.socket(socket.AF_UNIX)               # the live gate still listens
        client.connect(os.path.join(serving, "0.sock"))
        client.close()
    finally:
        assert live.stdin is not None
        live.stdin.close()
        live.wait(10)
    assert not os.path.lexists(serving)


@pytest.mark.timeout(120)
def test_a_daemons_start_sweeps_the_gates_a_killed_daemon_left(repo: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    _, killed = _gate_in_process(tmp, "die")
    _age(killed)
    log = tmp_path / "daemon.log"
    proc = start_daemon(repo, {"TMPDIR": str(tmp)}, "--until-idle", log=log)
    assert proc.wait(60) == 0, log.read_text(errors="replace")
    assert not os.path.lexists(killed), os.listdir(tmp)
