"""hive's end of a jail's network (hive/jail/network.py), driven from outside a jail: the
sockets of a gate lead only where the backend's endpoints say, and through the user's proxy."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from hive.jail.network import NoNetwork, endpoint_of, open_gate


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


def test_local_endpoints_are_mapped_at_their_own_port() -> None:
    assert endpoint_of("http://localhost:8080/v1").local and endpoint_of("http://[::1]:8080").local
    assert not endpoint_of("https://api.anthropic.com").local
    assert endpoint_of("https://api.anthropic.com").port == 443
