"""Hive's end of a jail's network: the only ways out, each to one allowed place.

A jail's network namespace has nothing but its own loopback (bubblewrap.py). For the endpoints its
backend names (`JailSpec.endpoints`: the provider's base URL), `open_gate` makes a folder of UNIX
sockets that hive itself listens on, shown read-only inside the jail, and the command line of the
jail's own end (relay.py), which listens inside on loopback and carries each connection to one of
them:

- an endpoint on this machine's loopback (`http://127.0.0.1:PORT`, a local gateway or a fake API
  in tests) is listened for inside at the same address and port and carried to exactly that port;
- every other endpoint is reached through an HTTP CONNECT proxy inside (`HTTPS_PROXY`), which
  tunnels only to the allowed host:port pairs (through the user's own proxy when their
  environment names one) and answers 403 to anything else.

What hive listens on decides where a connection goes; nothing the jail sends can widen it. So a
jailed agent reaches its provider and nothing else: no service on the host's 127.0.0.1, no
link-local metadata address, no abstract socket of the host (those belong to the host's network
namespace).

A gate's folder lives in the temporary folder, where its sockets' paths stay short. A daemon
killed without closing its gates (SIGKILL, a power cut) leaves their folders behind; the next
daemon's start removes them (`sweep_gates`): a live gate holds an flock on its folder's
`gate.lock` for as long as it serves, and the kernel lets go of it when its process ends.
"""

from __future__ import annotations

import base64
import fcntl
import ipaddress
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from hive import lines, module_process
from hive.errors import HiveError
from hive.jail.relay import pump

RELAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay.py")
PROXY_PORTS = range(18080, 18180)         # where the CONNECT proxy listens inside the jail
HEAD_LIMIT = 16384                        # bytes of a CONNECT request (or a proxy's answer) read
CONNECT_TIMEOUT = 30.0
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY = "localhost,127.0.0.1,::1"
GATE_PREFIX = "hive-net-"                 # a gate's folder in the temporary folder
GATE_LOCK = "gate.lock"                   # held (flock) by the gate's process while it serves
SWEEP_AFTER_SECONDS = 60                  # a folder younger than this may be one whose lock is still being taken


class NoNetwork(HiveError):
    """An endpoint the jail cannot relay (the message names it and why)."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def local(self) -> bool:
        """On this machine's loopback: listened for inside at the same address."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def endpoint_of(url: str) -> Endpoint:
    """The host and port a URL reaches; NoNetwork when the jail cannot relay it."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoNetwork(f"cannot give the jail a way to {url!r}: not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise NoNetwork(f"cannot give the jail a way to {url!r}: a bad port") from None
    found = Endpoint(parts.hostname.lower(), port)
    if found.local and port < 1024:
        raise NoNetwork(f"cannot give the jail a way to {url!r}: a local port below 1024 cannot be "
                        "listened on inside the jail (use a port of 1024 or above)")
    if not found.local and parts.scheme != "https":
        raise NoNetwork(f"cannot give the jail a way to {url!r}: only https reaches a host beyond "
                        "this machine from the jail")
    return found


@dataclass
class Gate:
    """One jail's ways out: the socket folder (shown inside), the relay command line, the
    environment its agent gets, and the thread serving them until `close`."""

    folder: str
    relay: list[str]
    env: dict[str, str]
    _listeners: list[tuple[socket.socket, Endpoint | None]] = field(default_factory=list, repr=False)
    _allowed: frozenset[tuple[str, int]] = frozenset()
    _upstream: str = ""
    _selector: selectors.BaseSelector | None = field(default=None, repr=False)
    _wake: tuple[int, int] | None = field(default=None, repr=False)
    _held: int = field(default=-1, repr=False)     # the flock on the folder's GATE_LOCK
    _closed: bool = False

    def start(self) -> None:
        """Serve the listeners from a thread of hive's until `close`."""
        self._selector = selectors.DefaultSelector()
        self._wake = os.pipe()
        self._selector.register(self._wake[0], selectors.EVENT_READ, "wake")
        for listener, endpoint in self._listeners:
            self._selector.register(listener, selectors.EVENT_READ, (listener, endpoint))
        threading.Thread(target=self._serve, daemon=True, name="hive-jail-gate").start()

    def close(self) -> None:
        """Stop listening and remove the socket folder (connections open keep going until they end)."""
        if self._closed:
            return
        self._closed = True
        if self._wake is not None:
            os.write(self._wake[1], b"x")
        shutil.rmtree(self.folder, ignore_errors=True)
        _let_go(self._held)

    def _serve(self) -> None:
        assert self._selector is not None and self._wake is not None
        try:
            while not self._closed:
                for key, _ in self._selector.select():
                    if key.data == "wake":
                        continue
                    listener, endpoint = key.data
                    try:
                        client, _ = listener.accept()
                    except OSError:
                        continue
                    threading.Thread(target=self._carry, args=(client, endpoint), daemon=True,
                                     name="hive-jail-relay").start()
        finally:
            for listener, _ in self._listeners:
                listener.close()
            self._selector.close()
            for fd in self._wake:
                os.close(fd)

    def _carry(self, client: socket.socket, endpoint: Endpoint | None) -> None:
        upstream: socket.socket | None
        try:
            if endpoint is not None:
                upstream = socket.create_connection((endpoint.host, endpoint.port), timeout=CONNECT_TIMEOUT)
            else:
                upstream = self._tunnel(client)
        except OSError:
            client.close()
            return
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        pump(client, upstream)

    def _tunnel(self, client: socket.socket) -> socket.socket | None:
        """Answer one CONNECT: the tunnel to an allowed host:port, else a refusal (None)."""
        client.settimeout(CONNECT_TIMEOUT)
        head, rest = _read_head(client)
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        target = _connect_target(line)
        if target is None or target not in self._allowed:
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None
        try:
            upstream = _open_tunnel(target, self._upstream)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        return upstream


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < HEAD_LIMIT:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _connect_target(line: list[str]) -> tuple[str, int] | None:
    if len(line) != 3 or line[0].upper() != "CONNECT" or not line[2].startswith("HTTP/1."):
        return None
    host, _, port = line[1].rpartition(":")
    if not port.isdigit():
        return None
    return host.strip("[]").lower(), int(port)


def _open_tunnel(target: tuple[str, int], upstream: str) -> socket.socket:
    """A connection to `target`: direct, or a CONNECT through the user's own proxy."""
    if not upstream:
        return socket.create_connection(target, timeout=CONNECT_TIMEOUT)
    proxy = urllib.parse.urlsplit(upstream)
    sock = socket.create_connection((proxy.hostname or "", proxy.port or 8080), timeout=CONNECT_TIMEOUT)
    host, port = target
    request = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    if proxy.username:
        secret = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        request += f"Proxy-Authorization: Basic {base64.b64encode(secret.encode()).decode()}\r\n"
    sock.sendall((request + "\r\n").encode("latin-1"))
    head, _ = _read_head(sock)
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        sock.close()
        raise OSError(f"the proxy {proxy.hostname} refused the tunnel")
    return sock


def _upstream_proxy(env: dict[str, str], hosts: list[str]) -> str:
    """The user's own proxy for the remote endpoints ("" for none, or when NO_PROXY names them)."""
    proxy = next((env[name] for name in PROXY_VARIABLES if env.get(name)), "")
    if not proxy or not proxy.startswith("http://"):
        return ""
    excluded = [h.strip().lstrip(".").lower() for h in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(",")]
    if "*" in excluded or all(any(h == e or h.endswith("." + e) for e in excluded if e) for h in hosts):
        return ""
    return proxy


def open_gate(urls: tuple[str, ...], env: dict[str, str]) -> Gate:
    """The ways out to `urls` for one jail, served from now until `close` (NoNetwork when one of
    them cannot be relayed). `env`: the environment hive was given (the user's own proxy)."""
    endpoints = list(dict.fromkeys(endpoint_of(url) for url in urls))
    local = [e for e in endpoints if e.local]
    remote = [e for e in endpoints if not e.local]
    try:
        folder = tempfile.mkdtemp(prefix=GATE_PREFIX)
    except OSError as e:
        raise NoNetwork(f"cannot make the jail's network relay folder in {tempfile.gettempdir()}: "
                        f"{e.strerror or e} (set TMPDIR to a folder you can write)") from None
    listeners: list[tuple[socket.socket, Endpoint | None]] = []
    specs: list[str] = []
    held = -1
    try:
        held = _hold(folder)
        for n, endpoint in enumerate(local):
            path = os.path.join(folder, f"{n}.sock")
            listeners.append((_unix_listener(path), endpoint))
            if endpoint.host == "localhost":    # whichever of the two the agent's resolver picks
                specs += [f"127.0.0.1:{endpoint.port}={path}", f"?[::1]:{endpoint.port}={path}"]
            else:
                specs.append(f"[{endpoint.host}]:{endpoint.port}={path}")
        proxy_env: dict[str, str] = {}
        if remote:
            path = os.path.join(folder, "proxy.sock")
            listeners.append((_unix_listener(path), None))
            taken = {e.port for e in local}
            port = next(p for p in PROXY_PORTS if p not in taken)
            specs.append(f"127.0.0.1:{port}={path}")
            proxy_env = {name: f"http://127.0.0.1:{port}" for name in PROXY_VARIABLES}
            proxy_env.update(NO_PROXY=NO_PROXY, no_proxy=NO_PROXY)
    except OSError as e:
        for listener, _ in listeners:
            listener.close()
        shutil.rmtree(folder, ignore_errors=True)
        _let_go(held)
        fix = ""
        if "path too long" in str(e):
            fix = " (set TMPDIR to a shorter folder: a socket's path holds at most 107 bytes)"
        raise NoNetwork(f"cannot open the jail's network relay in {folder}: {e.strerror or e}{fix}") from None
    relay = [*module_process.argv(RELAY), *specs, "--"]
    gate = Gate(folder, relay, proxy_env, listeners, frozenset((e.host, e.port) for e in remote),
                _upstream_proxy(env, [e.host for e in remote]), _held=held)
    gate.start()
    return gate


def _hold(folder: str) -> int:
    """The gate's lock in `folder`, taken: its descriptor (never inherited by the jail)."""
    fd = os.open(os.path.join(folder, GATE_LOCK), os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o400)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _let_go(held: int) -> None:
    if held >= 0:
        os.close(held)


def sweep_gates(base: str | None = None) -> list[str]:
    """Remove the gate folders a killed daemon left (in `base`, the temporary folder by default):
    this user's `hive-net-*` folders whose `gate.lock` no process holds, older than
    `SWEEP_AFTER_SECONDS`. A folder without that lock (made by an older hive, whose gate may still
    be serving) or anything else of that name (a link, another user's) is left alone. The paths
    removed."""
    base = base or tempfile.gettempdir()
    try:
        names = [name for name in os.listdir(base) if name.startswith(GATE_PREFIX)]
    except OSError:
        return []
    return [path for path in (os.path.join(base, name) for name in names) if _sweep_if_left(path)]


def _sweep_if_left(path: str) -> bool:
    """Remove `path` if it is a gate folder of this user's that no live gate holds."""
    try:
        folder = os.open(path, lines.FOLDER_FLAGS)
    except OSError:
        return False                    # gone, a link, not a folder
    try:
        info = os.fstat(folder)
        if info.st_uid != os.getuid() or time.time() - info.st_mtime < SWEEP_AFTER_SECONDS:
            return False
        lock = os.open(GATE_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False                # a live gate's
        finally:
            os.close(lock)
        shutil.rmtree(path, ignore_errors=True)
        return True
    except OSError:
        return False                    # no lock in it: not a gate of this hive's
    finally:
        os.close(folder)


def _unix_listener(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.setblocking(False)
    return listener

