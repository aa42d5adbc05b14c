"""One agent CLI process speaking JSON lines on stdio, in its own process group.

What every backend needs of the processes it starts, written once: start in a new session (the
CLI may be a launcher with children; ending the group ends them all), write JSON lines, read
JSON-object lines (skipping over-long ones), keep the tail of stderr, notice the exit without
waiting for the pipes, and kill the group with a grace period.

`start` returns as soon as the process exists: its stdout and stderr are attached to the event
loop in the background, and stdin is a non-blocking pipe written directly, so a prompt sent right
after the start is in the pipe without waiting for the loop (asyncio's own subprocess start waits
for several loop turns, each of which a busy daemon's other work can hold up).

The exit is noticed by a pidfd and the process reaped here (not `wait()` on the pipes: a
grandchild in another session can hold stdout open). If stdout is still open `kill_grace` seconds
after the exit, the group is killed; if it is open even then, hive lets go of its ends of the
pipes, so reading ends as at end of file.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
from typing import Any, Awaitable, Callable

from hive.backends.processes import group_gone, killpg
from hive.jail import JailSpec, Launch, prepare

OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
OnOverlong = Callable[[bytes], Awaitable[None]]

READ_CHUNK = 65536
HEAD_KEPT = 64 * 1024            # of a skipped over-long line, this much is handed to `on_overlong`


class AgentProcess:
    """A started agent process; see the module docstring."""

    def __init__(self, popen: subprocess.Popen[bytes], *, line_limit: int, kill_grace: float,
                 stderr_limit: int, launch: Launch | None = None):
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._popen = popen
        self.launch = launch                  # how it was started (its jail's process bound)
        self.kill_grace = kill_grace
        self.stderr_limit = stderr_limit
        self.stderr_tail = b""
        self.discarded_lines = 0              # over-long, non-JSON or non-object stdout lines
        self.exited = asyncio.Event()         # set once the process has exited (and is reaped)
        self.stdout_done = asyncio.Event()    # set once reading stdout ended
        self._group_ended = False             # no live process was left in its group: none can come back
        self._loop = asyncio.get_running_loop()
        self._write_lock = asyncio.Lock()
        self._stdin: Any = popen.stdin        # unbuffered, non-blocking; None once closed
        os.set_blocking(popen.stdin.fileno(), False)
        self._stdin_waiter: asyncio.Future[None] | None = None
        self._stdout = asyncio.StreamReader(limit=line_limit)
        self._stderr = asyncio.StreamReader()
        self._read_transports: list[asyncio.BaseTransport] = []
        self._attaching = asyncio.create_task(self._attach_output(), name=f"agent-{popen.pid}-pipes")
        self._stderr_reader = asyncio.create_task(self._read_stderr(), name=f"agent-{popen.pid}-stderr")
        self._exit_watcher = asyncio.create_task(self._watch_exit(), name=f"agent-{popen.pid}-exit")

    @classmethod
    async def start(cls, argv: list[str], *, cwd: str, env: dict[str, str], line_limit: int,
                    kill_grace: float, stderr_limit: int, jail: JailSpec | None = None) -> AgentProcess:
        """Start `argv` in a new process group with piped stdio, inside `jail` when one is given
        (the one place agent processes start: every backend comes here). OSError when it cannot
        start; `hive.jail.NoJail` when the jail cannot be built."""
        launch = prepare(argv, cwd=cwd, env=env, jail=jail)
        try:
            popen = launch.popen(cwd=cwd, start_new_session=True, bufsize=0,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except BaseException:
            launch.release()
            raise
        return cls(popen, line_limit=line_limit, kill_grace=kill_grace, stderr_limit=stderr_limit, launch=launch)

    @property
    def pid(self) -> int:
        return self._popen.pid                # start_new_session: also the process group id

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def alive(self) -> bool:
        return self.returncode is None and not self.stdout_done.is_set()

    # -- stdin -------------------------------------------------------------------------------------
    async def write_json(self, obj: dict[str, Any]) -> None:
        """One JSON line on stdin; BrokenPipeError (or ConnectionResetError) once it is closed."""
        data = memoryview(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
        async with self._write_lock:
            while data:
                if self._stdin is None or self.returncode is not None:
                    raise BrokenPipeError("the agent's stdin is closed")
                written = self._stdin.write(data)     # None: the pipe is full
                if written is None:
                    await self._stdin_writable()
                else:
                    data = data[written:]

    async def _stdin_writable(self) -> None:
        fd = self._stdin.fileno()
        self._stdin_waiter = waiter = self._loop.create_future()
        self._loop.add_writer(fd, _settle, waiter)
        try:
            await waiter
        finally:
            self._stdin_waiter = None
            if self._stdin is not None:
                self._loop.remove_writer(fd)

    def close_stdin(self) -> None:
        stdin, self._stdin = self._stdin, None
        if stdin is None:
            return
        if self._stdin_waiter is not None:          # a write waiting for room: it ends now
            self._loop.remove_writer(stdin.fileno())
            if not self._stdin_waiter.done():
                self._stdin_waiter.set_result(None)
        stdin.close()

    # -- stdout / stderr ---------------------------------------------------------------------------
    async def read_json_lines(self, on_message: OnMessage, on_overlong: OnOverlong | None = None) -> None:
        """Hand every JSON-object line of stdout to `on_message`, in order, until stdout ends.

        A line longer than the start limit is skipped; `on_overlong` gets its first `HEAD_KEPT`
        bytes once it has been skipped whole (e.g. to answer a request it carried)."""
        stream = self._stdout
        head: bytes | None = None             # the start of an over-long line being skipped
        try:
            while True:
                try:
                    line = await stream.readuntil(b"\n")
                except asyncio.IncompleteReadError as e:      # end of file
                    if e.partial and head is None:
                        await self._hand_over(e.partial, on_message)
                    return
                except asyncio.LimitOverrunError as e:
                    chunk = await stream.readexactly(e.consumed)
                    if head is None:
                        head = chunk[:HEAD_KEPT]
                        self.discarded_lines += 1
                    continue
                except OSError:
                    return
                if head is not None:                          # the tail of an over-long line
                    if on_overlong is not None:
                        await on_overlong(head)
                    head = None
                    continue
                await self._hand_over(line, on_message)
        finally:
            self.stdout_done.set()

    async def _hand_over(self, raw: bytes, on_message: OnMessage) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self.discarded_lines += 1
            return
        await on_message(message)

    async def _attach_output(self) -> None:
        """stdout and stderr fed to their readers by the event loop."""
        for pipe, reader in ((self._popen.stdout, self._stdout), (self._popen.stderr, self._stderr)):
            try:
                transport, _ = await self._loop.connect_read_pipe(functools.partial(
                    asyncio.StreamReaderProtocol, reader), pipe)
            except (OSError, ValueError):        # cannot be watched: read as ended
                reader.feed_eof()
                continue
            self._read_transports.append(transport)

    def _let_go_of_output(self) -> None:
        """Reading stdout and stderr ends as at end of file, whoever still holds them open."""
        self._attaching.cancel()
        for transport in self._read_transports:
            transport.close()
        for reader in (self._stdout, self._stderr):
            reader.feed_eof()

    async def _read_stderr(self) -> None:
        stream = self._stderr
        try:
            while chunk := await stream.read(READ_CHUNK):
                self.stderr_tail = (self.stderr_tail + chunk)[-self.stderr_limit:]
        except OSError:
            pass

    async def wait_stderr(self, timeout: float) -> None:
        """Let the stderr reader catch up (the last words of a crash come just before the exit)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._stderr_reader), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass

    def last_stderr_line(self, limit: int = 300) -> str:
        lines = [ln.strip() for ln in self.stderr_tail.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines[-1][:limit] if lines else ""

    # -- the end -----------------------------------------------------------------------------------
    async def wait_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the process to exit; whether it did."""
        if self.returncode is not None:
            return True
        try:
            await asyncio.wait_for(self.exited.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.returncode is not None

    async def kill(self) -> None:
        """SIGTERM the process group, SIGKILL after the grace; then what is left in the group."""
        pgid = self.pid
        if self.returncode is None:
            killpg(pgid, signal.SIGTERM)
            killpg(pgid, signal.SIGCONT)      # a stopped process must run to see the TERM
            if not await self.wait_exit(self.kill_grace):
                killpg(pgid, signal.SIGKILL)
                await self.wait_exit(self.kill_grace)
        # children left in the group (they may ignore SIGTERM, or the leader exited by itself)
        if not self._group_ended and killpg(pgid, signal.SIGTERM) and not await self._group_gone():
            killpg(pgid, signal.SIGKILL)
            await self._group_gone()

    async def _group_gone(self) -> bool:
        """`group_gone`, remembered once true: its scan of /proc is asked for twice at every end
        (the exit's watch, then `kill`), and a group without a live process never gets one."""
        if not self._group_ended:
            self._group_ended = await group_gone(self.pid, self.kill_grace, self._members)
        return self._group_ended

    def _members(self) -> list[int] | None:
        """The processes that can still be in the group: its jail's cgroup lists them once the
        first process has exited (None: read every process's)."""
        if self.launch is None or self.returncode is None:
            return None
        return self.launch.members()

    def terminate_leftovers(self) -> None:
        """SIGTERM what the agent left running in its group (it exited by itself)."""
        killpg(self.pid, signal.SIGTERM)

    async def _watch_exit(self) -> None:
        await process_exit(self._popen)
        self.close_stdin()
        self.exited.set()
        try:
            for attempt in range(2):
                try:
                    await asyncio.wait_for(asyncio.shield(self.stdout_done.wait()), self.kill_grace)
                    return
                except asyncio.TimeoutError:
                    if attempt == 0:
                        killpg(self.pid, signal.SIGKILL)
            # something outside the group still holds stdout: let go of our ends of the pipes
            self._let_go_of_output()
        finally:
            if self.launch is not None:
                # a jail's PID namespace ends with its first process; its cgroup can go soon after
                if await self._group_gone():
                    self.launch.release()


async def process_exit(popen: subprocess.Popen[bytes]) -> None:
    """Return once the process has exited, reaped (its return code known).

    A pidfd (Linux) makes the exit an event; otherwise poll.
    """
    if popen.poll() is not None:
        return
    loop = asyncio.get_running_loop()
    fd = -1
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        pass
    if fd >= 0:
        readable = loop.create_future()
        try:
            loop.add_reader(fd, _settle, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
        except (RuntimeError, OSError, ValueError):  # a loop that cannot watch fds: polled below
            pass
        finally:
            os.close(fd)
    while popen.poll() is None:
        await asyncio.sleep(0.01 if fd >= 0 else 0.1)


def _settle(future: "asyncio.Future[None]") -> None:
    """A file descriptor is ready: wake its waiter (once)."""
    if not future.done():
        future.set_result(None)
