"""Commands run by a warm process: `git hive` without paying its start-up at every command.

At 10,000 issues most of a command such as `update` is start-up, not work: the interpreter,
click, pygit2 and hive's own modules (docs/PERFORMANCE.md). As Mercurial's command server does,
the first command starts a server in the background (`hive.cli.command_server`) that imports all
of that once and waits on a unix socket. The commands after it connect and hand over their
stdin, stdout and stderr, arguments, directory, umask and environment; the server forks a child
that runs the command as `hive.cli.main` would, in that directory and environment, and sends its
exit status back. Ctrl-C (and TERM, HUP, QUIT) sent to the command is passed on to that child;
Ctrl-Z stops it with the command, and it goes on when the command does.

Which commands: the short ones that need no terminal of their own (`SERVED`). `run`, `watch`,
`plan`, `edit`, `demo`, `sync`... always run in their own process, as does everything when
`HIVE_COMMAND_SERVER=0` is set or the platform is not Linux.

Whose: the socket lives in a folder that only this user may enter (`$XDG_RUNTIME_DIR/git-hive`,
else `$TMPDIR/git-hive-<uid>`, `/tmp` by default); an agent's jail has its own empty /tmp and no
/run, and the server serves only a peer of its own user in its own mount namespace, so a jailed
process that reached the socket anyway is refused (and runs the command itself, jailed). The
socket's name is a hash of all that the server's imports could have read: the interpreter, where
hive's sources are and when each was last changed, the folders packages are installed in, and the
environment. Any change of them means another server; an unused one exits after
`IDLE_SECONDS`.

This is the client's side, loaded by every command: only what is built into the interpreter
(`_socket`, not socket.py, which takes ~10 ms to import).
"""

from __future__ import annotations

import marshal
import os
import signal
import stat
import sys
import time
from _socket import AF_UNIX, SCM_RIGHTS, SOCK_STREAM, SOL_SOCKET
from _socket import socket as unix_socket

from hive.errors import HiveError

# the commands a warm process may run: short, no terminal of their own, no agent started
SERVED = frozenset({"list", "show", "log", "create", "update", "dep", "cancel", "retry", "note", "notes",
                    "status", "cost", "review", "config"})
NOT_SERVED_OPTIONS = frozenset({"--watch"})      # `status --watch` runs until Ctrl-C: its own process
SWITCH = "HIVE_COMMAND_SERVER"                   # "0" (or off, false, no): no command server
IDLE_VARIABLE = "HIVE_COMMAND_SERVER_IDLE"       # seconds an unused server waits before it exits
IDLE_SECONDS = 600.0
# set by the shell for every command line, read by nothing hive imports: not part of the key
VOLATILE = frozenset({"PWD", "OLDPWD", "_", "SHLVL"})
# the server's start: the client's first import folder first, as the client had it (`-P` leaves
# out the server's own), so that both import the same hive
SERVER_MAIN = ("import sys; sys.path.insert(0, sys.argv[2]); "
               "from hive.cli.command_server import main; main(sys.argv[1])")
STARTING_SECONDS = 30.0                          # a start marker older than this is a failed start

# the wire: the client sends a 4-byte length, then marshal((argv0, args, cwd, umask, environ)),
# with its fds 0, 1, 2 attached to the first bytes; the server answers REFUSED and closes, or
# STARTED + the child's pid (8 bytes) and, when the command is over, EXITED + its status (4 bytes)
REFUSED, STARTED, EXITED = b"R", b"P", b"X"
FDS = (0, 1, 2)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP)


class ServerGone(HiveError):
    """The server's child ended without an exit status (killed): the command may have run."""


def wanted(args: list[str], environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether this command line may be run by a warm process."""
    if sys.platform != "linux" or environ.get(SWITCH, "").strip().lower() in ("0", "off", "false", "no"):
        return False
    rest = list(args)
    while rest[:1] == ["-C"] and len(rest) >= 2:
        rest = rest[2:]
    return bool(rest) and rest[0] in SERVED and not NOT_SERVED_OPTIONS & set(rest)


def private_folder(environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[str | None, str]:
    """The folder of this user's sockets, made if missing; (None, why) when it is not private."""
    uid = os.geteuid()
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        folder = os.path.join(runtime, "git-hive")
    else:
        temp = environ.get("TMPDIR", "")
        folder = os.path.join(temp if os.path.isabs(temp) else "/tmp", f"git-hive-{uid}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return None, f"cannot make {folder}: {exc.strerror or exc}"
    try:
        st = os.lstat(folder)
    except OSError as exc:
        return None, f"{folder}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        return None, (f"{folder} is not a folder of yours that only you may enter (owner, mode "
                      f"{stat.filemode(st.st_mode)}): remove it if it is yours, set XDG_RUNTIME_DIR to a "
                      f"private folder, or set {SWITCH}=0")
    return folder, ""


def key(hive_dir: str, environ: dict[str, str] | os._Environ[str], search_path: list[str]) -> str:
    """What a server must have been started with to serve this command: the interpreter, hive's
    sources (where, and each one's modification time), the package folders and the environment."""
    try:
        from _blake2 import blake2b
    except ImportError:   # an interpreter built without it
        from hashlib import blake2b
    digest = blake2b(digest_size=12)

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(str(part).encode("utf-8", "surrogateescape") + b"\0")

    add(sys.executable, sys.version, hive_dir)
    folders = [hive_dir]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as entries:
                found = sorted((entry.name, entry) for entry in entries)
        except OSError:
            continue
        for name, entry in found:
            if entry.is_dir(follow_symlinks=False):
                if name != "__pycache__":
                    folders.append(entry.path)
            elif name.endswith(".py"):
                add(entry.path, entry.stat(follow_symlinks=False).st_mtime_ns)
    for place in search_path:   # a package installed or removed changes its folder
        try:
            add(place, os.stat(place or ".").st_mtime_ns)
        except OSError:
            add(place)
    for name in sorted(environ):
        if name not in VOLATILE:
            add(name, environ[name])
    return digest.hexdigest()


def package_folders() -> list[str]:
    """Where imports are looked for, but for the first entry (the started script's folder, or
    the current one): the server puts the client's first there itself (`start`)."""
    return sys.path[1:]


def address(folder: str) -> str:
    import hive

    hive_dir = os.path.dirname(os.path.abspath(hive.__file__))
    return os.path.join(folder, key(hive_dir, os.environ, package_folders()) + ".sock")


def hand_over(args: list[str]) -> str:
    """Have this user's server run `args` and exit with its status. Where it cannot (no private
    folder: a warning; it refused this process), "" and the caller runs the command; where no
    server listens, the socket's path: the caller runs the command and then `start`s one."""
    folder, why = private_folder()
    if folder is None:
        print(f"warning: {why}; this command runs without the command server", file=sys.stderr)
        return ""
    path = address(folder)
    connection = connect(path)
    if connection is None:
        return path
    status = run(connection, args)
    if status is not None:
        sys.exit(status)
    return ""


def pid_in_log(text: str) -> int | None:
    """A server's pid from its log (`<key>.log` beside the socket, first line `pid N: serving
    PATH`): for what stops servers it started (the benchmarks, the tests)."""
    first = text.split("\n", 1)[0]
    return int(first.split()[1].rstrip(":")) if first.startswith("pid ") else None


def connect(path: str) -> unix_socket | None:
    """A connection to the server at `path`; None when none listens there (none yet, or a
    stale socket): the caller runs the command itself and starts one."""
    connection = unix_socket(AF_UNIX, SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        return None
    return connection


def run(connection: unix_socket, args: list[str]) -> int | None:
    """Have the server run `args`: its exit status, or None when it did not take the command
    (it refused this process, or fd 0-2 cannot be passed): nothing ran, the caller runs it."""
    # signals meant for the command wait until its process is known (then `_wait` forwards them):
    # a Ctrl-C between the hand-over and the answer must not end this process and leave it running
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        try:
            umask = os.umask(0o022)
            os.umask(umask)
            request = marshal.dumps((sys.argv[0], list(args), os.getcwd(), umask, dict(os.environ)))
            message = len(request).to_bytes(4, "big") + request
            fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in FDS)
            sent = connection.sendmsg([message], [(SOL_SOCKET, SCM_RIGHTS, fds)])
            if sent < len(message):
                # (never an empty send: once all was sent the command may be over and its child
                # gone, and a send to a closed socket fails — this process would run it again)
                connection.sendall(message[sent:])
            answer = receive(connection, 9)
        except OSError:
            return None
        if answer[:1] != STARTED:
            return None
        return _wait(connection, int.from_bytes(answer[1:], "big"), blocked)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        connection.close()


def _wait(connection: unix_socket, pid: int, blocked: set[int | signal.Signals]) -> int:
    """The exit status the child sends when its command is over; signals meant for the command
    go to it meanwhile."""
    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    def suspend(signum: int, frame: object) -> None:
        """Ctrl-Z: the command stops with this process (it reads the same terminal), and goes on
        when this one is continued. Both by SIGSTOP: a TSTP to this process can be discarded (an
        orphaned process group), which would leave the command stopped and this one waiting."""
        forward(signal.SIGSTOP, frame)
        os.kill(os.getpid(), signal.SIGSTOP)

    def resume(signum: int, frame: object) -> None:
        forward(signal.SIGCONT, frame)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    signal.signal(signal.SIGTSTP, suspend)
    signal.signal(signal.SIGCONT, resume)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)   # what came meanwhile goes to the command now
    try:
        answer = receive(connection, 5)
    except OSError:
        answer = b""
    if answer[:1] != EXITED:
        raise ServerGone(f"the command server's process {pid} ended without an exit status (killed?); "
                         f"`git hive status` shows what it did, {SWITCH}=0 runs commands without it")
    return int.from_bytes(answer[1:], "big", signed=True)


def receive(connection: unix_socket, size: int) -> bytes:
    """`size` bytes, or fewer when the other end closed first."""
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def start(path: str) -> None:
    """Start a server for `path` in the background (at most one start at a time), for the
    commands after this one; nothing is waited for."""
    marker = path + ".starting"
    try:
        descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        try:
            if time.time() - os.lstat(marker).st_mtime < STARTING_SECONDS:
                return       # another command is starting it
            os.unlink(marker)
        except OSError:
            pass
        return
    except OSError:
        return
    os.close(descriptor)
    log = path.removesuffix(".sock") + ".log"
    try:
        first = os.path.abspath(sys.path[0]) if sys.path else "/"
        os.posix_spawn(sys.executable, [sys.executable, "-P", "-c", SERVER_MAIN, path, first],
                       os.environ, setsid=True,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                                     (os.POSIX_SPAWN_DUP2, 1, 2)])
    except OSError:
        try:
            os.unlink(marker)
        except OSError:
            pass
