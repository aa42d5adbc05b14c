"""The command server: what `hive.cli.served` connects to (its docstring says why and whose).

Started by `served.start` (`SERVER_MAIN`): import what the served commands need, listen on
PATH, and fork one child per command. The child takes the client's fds 0-2, directory, umask,
environment and arguments, runs `hive.cli.main` and sends back the exit status. The server
itself opens no repository and no database: every command starts from freshly imported modules,
as it would in its own process. What it keeps are the live scans of the `.hive/` checkouts its
commands used, current by inotify (state/live_folder.py): a command names the checkout it
scanned on a pipe, and the next one takes the kept scan instead of a `stat` per file.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import marshal
import os
import pkgutil
import select
import signal
import socket
import struct
import sys
import time

from hive.cli import served
from hive.state import live_folder

# imported before the first command: the served commands' modules (and click), every module of
# the API under them (and all of hive they import, pygit2 with it); what a command still needs
# besides, it imports when it runs
WARM_PACKAGES = ("hive.api", "hive.state")
WARM_MODULES = ("pygit2", "tomlkit", "ctypes", "dulwich.repo", "dulwich.trailers")
MAX_REQUEST = 4 << 20
VERIFY_AFTER = 1.0   # seconds without a command before the kept scans are made anew
BATCH_SECONDS = 0.01   # events are read this far apart (a command writing 10k files makes a burst)


def main(path: str) -> None:
    """Serve `path` until unused for the idle time or replaced. When this cannot start (another
    hive, a broken install), the start marker stays: no command tries again for a while."""
    os.chdir("/")
    if served.address(os.path.dirname(path)) != path:
        print(f"not serving {path}: this interpreter's hive, packages or environment differ "
              "from the command's", flush=True)
        return
    _warm()
    # what the imports made is never collected in a child: no collection there walks it (and
    # copies its pages, which the children share with this process)
    gc.collect()
    gc.freeze()
    listener = _listen(path)
    _remove(path + ".starting")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
    idle = _idle_seconds()
    inode = os.stat(path).st_ino
    last = time.monotonic()
    kept = _KeptScans()
    print(f"pid {os.getpid()}: serving {path}", flush=True)
    while True:
        readable, _, _ = select.select([listener.fileno(), *kept.fds()], [], [], kept.timeout(min(idle, 60.0)))
        kept.wake(readable)
        if listener.fileno() not in readable:
            # what wakes the server besides a command (a watched checkout's events) is no use
            if time.monotonic() - last >= idle or not _still_ours(path, inode):
                break
            continue
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            continue
        connection.setblocking(True)
        last = time.monotonic()
        why = _refusal(connection)
        if why:
            print(f"refused a command: {why}", flush=True)
            _send(connection, served.REFUSED)
            connection.close()
            continue
        kept.before_fork()
        try:
            child = os.fork()
        except OSError as exc:     # no memory, too many processes: the command runs itself
            print(f"could not fork: {exc.strerror or exc}", flush=True)
            _send(connection, served.REFUSED)
            child = -1
        if child == 0:
            listener.close()
            kept.in_child()
            _serve(connection)      # never returns
        connection.close()
        kept.after_fork()
        if not _still_ours(path, inode):
            break
    if _still_ours(path, inode):
        _remove(path)
    print("exiting: unused for the idle time, or another server took the socket", flush=True)


class _KeptScans:
    """The live scans of the checkouts this server's commands used, kept for the commands to
    come (state/live_folder.py): the inotify watcher, the pipe on which each command names the
    checkout it used, and the scans made anew once the commands pause."""

    def __init__(self) -> None:
        try:
            self._watcher: live_folder.Watcher | None = live_folder.Watcher()
        except OSError as exc:   # inotify's instances used up (fs.inotify.max_user_instances)
            print(f"no inotify ({exc.strerror or exc}): every command scans its checkout", flush=True)
            self._watcher = None
        self._reports, self._report_to = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._not_kept: set[str] = set()   # checkouts the watcher would not keep, said once in the log
        self._used: set[str] = set()       # checkouts used since the scans were last made anew
        self._verify_at: float | None = None
        self._read_at: float | None = None      # events are queued: read them all then
        self._prepare_at: float | None = None   # read, and none came since: fingerprints then

    def fds(self) -> list[int]:
        if self._watcher is None or self._read_at is not None:   # events queued are read when due
            return [self._reports]
        return [self._reports, self._watcher.fileno()]

    def timeout(self, otherwise: float) -> float:
        due = [at for at in (self._verify_at, self._read_at, self._prepare_at) if at is not None]
        return otherwise if not due else max(0.0, min(due) - time.monotonic())

    def wake(self, readable: list[int]) -> None:
        """The events read, the checkouts commands named kept, and the scans they used made anew
        when the pause has come. Events are read in batches `BATCH_SECONDS` apart, and the
        fingerprints made once none came for as long: a command writing 10,000 files into a
        kept checkout (a queue taken in) had this process wake for every few events and
        fingerprint the whole scan each time, on the CPU the command needed. (Before a fork
        every event is read anyway.)"""
        now = time.monotonic()
        if self._watcher and self._watcher.fileno() in readable:
            self._read_at, self._prepare_at = now + BATCH_SECONDS, None
        elif self._watcher and self._read_at is not None and now >= self._read_at:
            self._read_at, self._prepare_at = None, now + BATCH_SECONDS
            self._watcher.catch_up()
        elif self._watcher and self._prepare_at is not None and now >= self._prepare_at:
            self._prepare_at = None
            self._watcher.prepare()
        if self._reports in readable:
            self._keep_reported()
        if self._verify_at is not None and time.monotonic() >= self._verify_at:
            self._verify_at = None
            for root in self._watcher.verify(self._used) if self._watcher else []:
                print(f"the kept scan of {root} had missed a change (no event for it)", flush=True)
            self._used.clear()

    def before_fork(self) -> None:
        if self._watcher:
            self._watcher.catch_up()   # every change made before the command asked (live_folder.py)
            self._watcher.prepare()    # here, not in the child: kept for the commands after it

    def in_child(self) -> None:
        os.close(self._reports)
        if self._watcher:
            live_folder.served_by(self._watcher, self._report_to)

    def after_fork(self) -> None:
        self._verify_at = time.monotonic() + VERIFY_AFTER

    def _keep_reported(self) -> None:
        """The checkouts the commands named (NUL-terminated paths; a write of one is atomic)."""
        try:
            data = os.read(self._reports, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        named = {os.fsdecode(name) for name in data.split(b"\0")[:-1]}
        self._used |= named
        for root in named:
            if self._watcher is None or root in self._watcher.watching():
                continue
            why = self._watcher.watch(root)
            if not why:
                print(f"watching {root}", flush=True)
            elif root not in self._not_kept:
                self._not_kept.add(root)
                print(f"not watching: {why}", flush=True)


def _warm() -> None:
    from hive.cli import group

    for name in sorted({group.COMMANDS[command][0] for command in served.SERVED}):
        importlib.import_module(f"hive.cli.{name}")
    for package in WARM_PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, f"{package}."):
            importlib.import_module(info.name)
    for name in WARM_MODULES:
        importlib.import_module(name)


def _listen(path: str) -> socket.socket:
    """Bound under a name of its own, then renamed over `path`: a stale socket is replaced whole,
    and a command never connects to one that does not listen yet."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fresh = f"{path}.{os.getpid()}"
    _remove(fresh)
    old_umask = os.umask(0o177)
    try:
        listener.bind(fresh)
    finally:
        os.umask(old_umask)
    listener.listen(64)
    listener.setblocking(False)   # accepted when select says so; a client gone meanwhile blocks nothing
    os.rename(fresh, path)
    return listener


def _idle_seconds() -> float:
    try:
        return max(0.1, float(os.environ.get(served.IDLE_VARIABLE, served.IDLE_SECONDS)))
    except ValueError:
        return served.IDLE_SECONDS


def _still_ours(path: str, inode: int) -> bool:
    """Another server may have renamed its socket over ours (two commands started one each)."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _refusal(connection: socket.socket) -> str:
    """Why the peer may not have a command run here ("" when it may): another user, another mount
    or user namespace (a jail, a container), or a confinement this server is not under (no new
    privileges, a seccomp filter: what a Landlock or seccomp sandbox sets)."""
    try:
        pid, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
    except OSError as exc:
        return f"no peer credentials ({exc})"
    if uid != os.geteuid():
        return f"uid {uid} is not this server's"
    if pid <= 0:
        return "the peer's process is not visible from here"
    for namespace in ("mnt", "user"):
        try:
            if os.readlink(f"/proc/{pid}/ns/{namespace}") != os.readlink(f"/proc/self/ns/{namespace}"):
                return f"process {pid} is in another {namespace} namespace"
        except OSError as exc:
            return f"process {pid}'s {namespace} namespace cannot be read ({exc.strerror or exc})"
    peer, own = _confinement(f"/proc/{pid}/status"), _confinement("/proc/self/status")
    if peer is None or own is None:
        return f"process {pid}'s status cannot be read"
    for field, (theirs, ours) in zip(("NoNewPrivs", "Seccomp"), zip(peer, own)):
        if theirs > ours:
            return f"process {pid} is confined ({field} {theirs}) where this server is not"
    return ""


def _confinement(status_file: str) -> tuple[int, int] | None:
    """(NoNewPrivs, Seccomp) of a process's status file; None when it cannot be read."""
    try:
        with open(status_file, encoding="ascii", errors="replace") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        return int(fields.get("NoNewPrivs", "0")), int(fields.get("Seccomp", "0"))
    except (OSError, ValueError):
        return None


def _serve(connection: socket.socket) -> None:
    """In the forked child: take the command over, run it, report how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # the command waits for its own children
    status = 1
    try:
        request = _request(connection)
        if request is None:
            os._exit(1)
        argv0, args, cwd, umask, environ = request
        os.umask(umask)
        os.environ.clear()
        os.environ.update(environ)
        sys.argv = [argv0, *args]
        _send(connection, served.STARTED + os.getpid().to_bytes(8, "big"))
        try:
            os.chdir(cwd)
        except OSError as exc:
            print(f"git hive: {cwd}: {exc.strerror or exc}", file=sys.stderr)
            status = 1
        else:
            status = _run(args)
        _flush()
        atexit._run_exitfuncs()
        _flush()
    except BaseException:      # anything left is the command's to have reported
        _flush()
    finally:
        try:
            _send(connection, served.EXITED + status.to_bytes(4, "big", signed=True))
        finally:
            os._exit(status & 0xFF)


def _request(connection: socket.socket) -> tuple[str, list[str], str, int, dict[str, str]] | None:
    """The client's request, its fds made this process's 0, 1 and 2; None when it is malformed."""
    first, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(len(served.FDS) * 4))
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, len(data) - 3, 4)]
    if len(fds) != len(served.FDS) or len(first) < 4:
        return None
    for target, fd in zip(served.FDS, fds):
        os.dup2(fd, target)
        os.close(fd)
    size = int.from_bytes(first[:4], "big")
    if size > MAX_REQUEST:
        return None
    data = first[4:] + served.receive(connection, size - len(first) + 4)
    if len(data) != size:
        return None
    try:
        argv0, args, cwd, umask, environ = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    if not (isinstance(argv0, str) and isinstance(args, list) and all(isinstance(a, str) for a in args)
            and isinstance(cwd, str) and isinstance(umask, int) and isinstance(environ, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items())):
        return None
    _reopen_standard_streams()
    return argv0, args, cwd, umask, environ


def _reopen_standard_streams() -> None:
    """sys.stdin/stdout/stderr over the client's fds, buffered as the interpreter would have
    buffered them had it started with those fds (line by line at a terminal)."""
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=encoding, errors=errors)
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=encoding, errors=errors,
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=encoding,
                                  errors="backslashreplace", line_buffering=True)
    # what `shutil.get_terminal_size` and click fall back on
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr   # type: ignore[misc]


def _run(args: list[str]) -> int:
    """`hive.cli.main(args)` as the `git-hive` script runs it: its value as `sys.exit` reads it."""
    from hive.cli import main

    try:
        value = main(args)
    except SystemExit as exc:
        value = exc.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _send(connection: socket.socket, data: bytes) -> None:
    try:
        connection.sendall(data)
    except OSError:
        pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

