"""The jail's end of its network: started inside the jail before the agent, standard library only.

    python -I -S relay.py [?]HOST:PORT=SOCKET [...] -- COMMAND...

(hive imports it as a top-level module with `python -I -S -c`: `hive.module_process`).

A jail has a network namespace of its own, in which nothing but its loopback exists: no route
out, no host service, no abstract socket of the host. For each `HOST:PORT=SOCKET` this script
listens on HOST:PORT there (`?`: where it can) and carries every connection to the UNIX socket SOCKET, which hive
listens on outside the jail and which leads only where hive allows (network.py); then it execs
COMMAND. It binds everything before the command starts, so the agent never finds a port not yet
listening, and serves from a grandchild that ends with the jail's PID namespace. It is plumbing,
not a guard: an agent that kills it or talks to SOCKET itself reaches nothing more, since hive's
end decides where a connection may go.

It runs before every real agent starts, so it imports only the interpreter's own modules
(`_socket`, `_thread`, `posix`: `socket`, `threading` and `os` would double its start-up).
"""

import _socket
import _thread
import posix
import select
import sys

CHUNK = 65536
SHUT_WR = 1


def pump(one: _socket.socket, other: _socket.socket) -> None:
    """Copy bytes both ways until both sides have finished sending; then close both."""
    open_ends = {one: other, other: one}
    try:
        while open_ends:
            ready, _, _ = select.select(list(open_ends), [], [])
            for source in ready:
                data = source.recv(CHUNK)
                sink = open_ends[source]
                if data:
                    sink.sendall(data)
                    continue
                del open_ends[source]
                try:
                    sink.shutdown(SHUT_WR)
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        one.close()
        other.close()


def _listen(spec: str) -> tuple[_socket.socket, str] | None:
    """`[?]HOST:PORT=SOCKET` listened on (None: an optional one, `?`, that cannot be)."""
    optional = spec.startswith("?")
    address, _, target = spec.lstrip("?").partition("=")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    listener = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind((host, int(port)))
        listener.listen(64)
    except OSError:
        listener.close()
        if optional:
            return None
        raise
    return listener, target


def _carry(client: _socket.socket, target: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError:
        client.close()
        upstream.close()
        return
    pump(client, upstream)


def _serve(listeners: list[tuple[_socket.socket, str]]) -> None:
    """Accept on every listener, forever; each connection carried by a thread of its own."""
    targets = {listener: target for listener, target in listeners}
    while True:
        ready, _, _ = select.select(list(targets), [], [])
        for listener in ready:
            try:
                fd, _ = listener._accept()     # type: ignore[attr-defined]  # _socket's own accept
            except OSError:
                continue
            client = _socket.socket(listener.family, _socket.SOCK_STREAM, 0, fd)
            _thread.start_new_thread(_carry, (client, targets[listener]))


def _detach_and_serve(listeners: list[tuple[_socket.socket, str]]) -> None:
    """In the grandchild: stdio to /dev/null, then serve until the jail ends."""
    null = posix.open("/dev/null", posix.O_RDWR)
    for fd in (0, 1, 2):
        posix.dup2(null, fd)
    try:
        _serve(listeners)
    finally:
        posix._exit(0)


def _exec(command: list[str]) -> None:
    """`os.execvp`: the command named by path, else found on PATH; returns only by raising."""
    if "/" in command[0]:
        posix.execv(command[0], command)
    path = posix.environ.get(b"PATH", b"/usr/bin:/bin").decode("utf-8", "surrogateescape")
    error: OSError = FileNotFoundError(2, "No such file or directory")
    for folder in path.split(":"):
        try:
            posix.execv(f"{folder or '.'}/{command[0]}", command)
        except OSError as e:
            if not isinstance(error, PermissionError):   # as execvp: a found but refused file is said
                error = e
    raise error


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: relay.py [?]HOST:PORT=SOCKET [...] -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    try:
        listeners = [found for found in map(_listen, argv[:split]) if found is not None]
    except (OSError, ValueError) as e:
        print(f"hive jail: cannot open the jail's network ({e})", file=sys.stderr)
        return 126
    child = posix.fork()
    if child == 0:
        if posix.fork() == 0:          # the grandchild: reparented to the jail's first process
            _detach_and_serve(listeners)
        posix._exit(0)
    posix.waitpid(child, 0)
    for listener, _ in listeners:
        listener.close()
    command = argv[split + 1:]
    try:
        _exec(command)
    except OSError as e:
        print(f"hive jail: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
