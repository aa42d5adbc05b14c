"""The command server (hive/cli/served.py, hive/cli/command_server.py): a short command after
the first is run by a warm process, exactly as it would run in its own — the same output, exit
status, stdin, directory, Ctrl-C — and only for this user, from this mount namespace."""

from __future__ import annotations

import marshal
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from hive.cli import served
from tests.test_live_folder import skip_unless_watchable

HIVE = [sys.executable, "-m", "hive"]


@pytest.fixture
def runtime(git_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The command server on, its sockets in a folder of this test's own (short: a socket's path
    has at most 107 bytes); every server started in it is killed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="hive-run-", dir="/tmp"))
    os.chmod(base, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.delenv("HIVE_COMMAND_SERVER")
    yield base / "git-hive"
    for pid in _servers(base, with_children=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(base, ignore_errors=True)


def _servers(base: Path, with_children: bool = False) -> list[int]:
    """The processes serving sockets under `base` (their command line names the socket), not
    counting their children (a served command, which may still be ending) unless asked to."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if b"command_server" in cmdline and str(base).encode() in cmdline:
                found[int(entry.name)] = parent
    return sorted(pid for pid, parent in found.items() if with_children or parent not in found)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _cwd(pid: int) -> Path | None:
    try:
        return Path(f"/proc/{pid}/cwd").resolve(strict=True)
    except OSError:
        return None


def _serving(folder: Path, wait_for: Callable[..., Any]) -> tuple[Path, int]:
    """The socket of the server the last command started, once it listens, and its pid."""
    # a server imports all that commands need before it listens: seconds on a loaded machine
    socket = wait_for(lambda: next(folder.glob("*.sock"), None), "the command server's socket", timeout=60)
    log = socket.with_suffix(".log")
    return socket, wait_for(lambda: log.exists() and served.pid_in_log(log.read_text()), "the command server's log",
                            timeout=60)


@pytest.fixture
def create_reading_stdin(wait_for: Callable[..., Any]) -> Iterator[Callable[..., tuple[subprocess.Popen[str], int]]]:
    """`(cwd, title, server)`: `git hive create TITLE -d -` started, served: it and the server's
    child that runs it, which waits for the description on the command's stdin — once that child
    has taken the command over (it goes to the client's directory after telling the client it
    started: a child ended before that leaves the client to run the command itself). Whatever a
    failed test left of them is killed (the processes of later tests count their children)."""
    started: list[subprocess.Popen[str]] = []

    def start(cwd: Path, title: str, server: int, **popen: Any) -> tuple[subprocess.Popen[str], int]:
        command = subprocess.Popen([*HIVE, "create", title, "-d", "-"], cwd=cwd, text=True, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
        started.append(command)
        child = wait_for(lambda: _children(server), "the server's child running the command", timeout=60)[0]
        wait_for(lambda: _cwd(child) == cwd.resolve(), "the server's child to take the command over", timeout=60)
        return command, child

    yield start
    for command in started:
        if command.poll() is None:
            command.kill()
            command.wait()


def test_a_command_after_the_first_is_run_by_the_warm_server_in_its_directory_with_its_stdin(
        repo: Path, runtime: Path, hive, wait_for, create_reading_stdin) -> None:
    hive("list")                                   # no server yet: runs itself, starts one
    socket, server = _serving(runtime, wait_for)
    assert socket.parent == runtime and (runtime.stat().st_mode & 0o777) == 0o700
    assert (socket.stat().st_mode & 0o777) == 0o600
    (repo / "sub").mkdir()
    command, child = create_reading_stdin(repo / "sub", "Served", server)   # in the client's directory
    out, err = command.communicate("Read from the command's own stdin.\n", timeout=60)
    assert command.returncode == 0, err
    issue_id = out.strip()
    shown = hive("show", issue_id).stdout
    assert "Served" in shown and "Read from the command's own stdin." in shown
    assert _servers(runtime.parent) == [server]     # still the one server


def test_a_served_command_ends_as_it_would_in_its_own_process(repo: Path, runtime: Path, hive,
                                                                wait_for) -> None:
    hive("list")
    _serving(runtime, wait_for)
    served_run = hive("show", "hv-nothere", check=False)
    own = hive("show", "hv-nothere", check=False, env={"HIVE_COMMAND_SERVER": "0"})
    assert (served_run.returncode, served_run.stdout, served_run.stderr) == (own.returncode, own.stdout, own.stderr)
    assert own.returncode == 2 and own.stderr == "git hive: unknown issue hv-nothere\n"
    bad = hive("update", "--no-such-option", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("git hive: No such option")


def test_a_served_command_finds_every_save_made_right_before_it(repo: Path, runtime: Path, hive,
                                                                  wait_for) -> None:
    """The server keeps the checkout's live scan by inotify (hive/state/live_folder.py): a save in
    `.hive/` the moment before a served command — in place at the same size, or by rename — is
    absorbed by that very command."""
    skip_unless_watchable(repo)
    issue_id = hive("create", "Title 0").stdout.strip()
    socket, _ = _serving(runtime, wait_for)
    log = socket.with_suffix(".log")
    hive("list")                           # served: names its checkout, which the server keeps
    checkout = (repo / ".hive").resolve()
    wait_for(lambda: f"watching {checkout}" in log.read_text(), "the server to keep the checkout", timeout=60)
    issue = repo / ".hive" / "issues" / f"{issue_id}.md"
    for n in range(1, 7):
        text = issue.read_text().replace(f'title = "Title {n - 1}"', f'title = "Title {n}"')
        if n % 2:
            with open(issue, "r+") as in_place:
                in_place.write(text)
        else:
            swap = issue.with_name(f".{issue.name}.swp")
            swap.write_text(text)
            swap.replace(issue)
        assert f"Title {n}" in hive("show", issue_id).stdout
    assert f"Title 6" in subprocess.run(["git", "show", f"hive/state:issues/{issue_id}.md"], cwd=repo,
                                        capture_output=True, text=True, check=True).stdout
    assert "missed a change" not in log.read_text()


def test_a_change_no_event_told_is_found_once_the_commands_pause(repo: Path, runtime: Path, hive, wait_for,
                                                                  tmp_path: Path) -> None:
    """A write through a hard link made after the server began watching makes no event: the
    server makes the scans its commands used anew once they pause, and the next command finds it."""
    skip_unless_watchable(repo)
    issue_id = hive("create", "Linked").stdout.strip()
    socket, _ = _serving(runtime, wait_for)
    log = socket.with_suffix(".log")
    hive("list")
    wait_for(lambda: "watching" in log.read_text(), "the server to keep the checkout", timeout=60)
    elsewhere = tmp_path / "second-name.md"
    os.link(repo / ".hive" / "issues" / f"{issue_id}.md", elsewhere)
    with open(elsewhere, "r+") as through_it:
        text = through_it.read()
        through_it.seek(0)
        through_it.write(text.replace('title = "Linked"', 'title = "LINKED"'))
    hive("list")                                   # a command: the pause after it makes the scans anew
    wait_for(lambda: "had missed a change" in log.read_text(), "the server to find the change", timeout=60)
    assert "LINKED" in hive("show", issue_id).stdout


def test_ctrl_c_reaches_the_served_command_and_the_server_goes_on(repo: Path, runtime: Path, hive,
                                                                    wait_for, create_reading_stdin) -> None:
    hive("list")
    _, server = _serving(runtime, wait_for)
    command, _ = create_reading_stdin(repo, "Interrupted", server)
    command.send_signal(signal.SIGINT)
    out, err = command.communicate(timeout=60)
    # as in its own process: click's Abort once the command runs, or, when the signal came in the
    # moment before click took over (the child is in the client's directory then), an exit with
    # nothing said: 130 from `hive.cli.main`, 1 from the child's own catch before it
    assert (command.returncode, err.strip()) in {(1, "git hive: aborted"), (130, ""), (1, "")}, \
        (command.returncode, err)
    assert "Interrupted" not in hive("list").stdout
    assert _servers(runtime.parent) == [server]


def test_a_served_command_killed_midway_is_one_line_naming_what_to_do(repo: Path, runtime: Path, hive,
                                                                       wait_for, create_reading_stdin) -> None:
    hive("list")
    _, server = _serving(runtime, wait_for)
    command, child = create_reading_stdin(repo, "Killed", server)
    os.kill(child, signal.SIGKILL)
    out, err = command.communicate(timeout=60)
    assert command.returncode == 1 and out == ""
    assert err == (f"git hive: the command server's process {child} ended without an exit status (killed?); "
                   "`git hive status` shows what it did, HIVE_COMMAND_SERVER=0 runs commands without it\n")
    assert _servers(runtime.parent) == [server] and "Killed" not in hive("list").stdout


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_ctrl_z_stops_the_served_command_with_its_client_and_both_go_on(repo: Path, runtime: Path, hive,
                                                                         wait_for, create_reading_stdin) -> None:
    hive("list")
    _, server = _serving(runtime, wait_for)
    # a session of its own: an orphaned process group, where the kernel discards a stop by TSTP
    command, child = create_reading_stdin(repo, "Suspended", server, start_new_session=True)
    command.send_signal(signal.SIGTSTP)
    wait_for(lambda: _state(command.pid) == "T" and _state(child) == "T", "both to be stopped")
    command.send_signal(signal.SIGCONT)
    wait_for(lambda: _state(command.pid) != "T" and _state(child) != "T", "both to go on")
    out, err = command.communicate("Typed after fg.\n", timeout=60)
    assert command.returncode == 0, err
    assert "Typed after fg." in hive("show", out.strip()).stdout


def test_a_process_in_another_mount_namespace_is_refused_and_runs_the_command_itself(
        repo: Path, runtime: Path, hive, wait_for) -> None:
    unshare = shutil.which("unshare")
    argv = [unshare, "--mount"] if os.geteuid() == 0 else [unshare, "--user", "--map-root-user", "--mount"]
    if unshare is None or subprocess.run([*argv, "true"], capture_output=True).returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("`unshare --mount` is needed to show that a jail's process is refused")
        pytest.skip("no `unshare` that can make a mount namespace here")
    created = hive("create", "Made outside").stdout.strip()
    socket, server = _serving(runtime, wait_for)
    inside = subprocess.run([*argv, *HIVE, "show", created], cwd=repo, capture_output=True, text=True,
                            timeout=60)
    assert inside.returncode == 0 and "Made outside" in inside.stdout, inside.stderr
    log = socket.with_suffix(".log").read_text()
    assert "refused a command" in log and ("another mnt namespace" in log or "another user namespace" in log)
    assert _servers(runtime.parent) == [server]     # and it started none of its own in the namespace


def test_a_process_under_no_new_privileges_is_refused(repo: Path, runtime: Path, hive, wait_for) -> None:
    """What a Landlock or seccomp sandbox without a mount namespace of its own sets: no server
    may run its commands with more than it has."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or "NoNewPrivs:\t1" in Path("/proc/self/status").read_text():
        pytest.skip("no setpriv (util-linux) here, or this test runs under no new privileges already")
    created = hive("create", "Made outside").stdout.strip()
    socket, server = _serving(runtime, wait_for)
    confined = subprocess.run([setpriv, "--no-new-privs", *HIVE, "show", created], cwd=repo,
                              capture_output=True, text=True, timeout=60)
    assert confined.returncode == 0 and "Made outside" in confined.stdout, confined.stderr
    assert "is confined (NoNewPrivs 1) where this server is not" in socket.with_suffix(".log").read_text()
    assert _servers(runtime.parent) == [server]


def test_a_socket_folder_others_may_enter_is_not_used_until_the_advice_is_followed(
        repo: Path, runtime: Path, hive, wait_for) -> None:
    runtime.mkdir(mode=0o755)
    os.chmod(runtime, 0o755)
    done = hive("list")
    assert "is not a folder of yours that only you may enter" in done.stderr
    assert "remove it if it is yours" in done.stderr and "HIVE_COMMAND_SERVER=0" in done.stderr
    assert list(runtime.iterdir()) == [] and _servers(runtime.parent) == []
    assert "warning" not in hive("list", env={"HIVE_COMMAND_SERVER": "0"}).stderr
    runtime.rmdir()                                 # the advice: it is ours, remove it
    assert hive("list").stderr == ""
    _serving(runtime, wait_for)
    assert runtime.stat().st_mode & 0o777 == 0o700


def test_a_killed_server_is_replaced_and_nothing_waits_for_it(repo: Path, runtime: Path, hive,
                                                              wait_for) -> None:
    hive("list")
    socket, server = _serving(runtime, wait_for)
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: server not in _servers(runtime.parent), "the server to be gone")
    assert socket.exists()                          # stale: nobody listens
    first = hive("create", "After the kill").stdout.strip()
    wait_for(lambda: any(p != server for p in _servers(runtime.parent)), "a new server", timeout=60)
    _, replacement = _serving(runtime, wait_for)
    assert replacement != server
    assert first in hive("list").stdout


def test_an_unused_server_exits_and_removes_its_socket(repo: Path, runtime: Path, hive, wait_for,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(served.IDLE_VARIABLE, "0.2")
    hive("list")
    socket, server = _serving(runtime, wait_for)
    wait_for(lambda: server not in _servers(runtime.parent), "the idle server to exit")
    assert not socket.exists() and "exiting: unused" in socket.with_suffix(".log").read_text()


def test_an_unused_server_exits_while_a_checkout_it_watches_keeps_changing(repo: Path, runtime: Path, hive,
                                                                             wait_for, monkeypatch) -> None:
    """Events of a watched `.hive/` (a `git hive run` refreshing it all day) are no command: the
    server still exits once no command came for the idle time."""
    import threading

    monkeypatch.setenv(served.IDLE_VARIABLE, "1.5")
    skip_unless_watchable(repo)
    issue_id = hive("create", "Touched all the time").stdout.strip()
    socket, server = _serving(runtime, wait_for)
    hive("list")
    wait_for(lambda: "watching" in socket.with_suffix(".log").read_text(), "the server to keep the checkout")
    issue, done = repo / ".hive" / "issues" / f"{issue_id}.md", threading.Event()

    def touch_until_done() -> None:
        while not done.wait(0.05):
            os.utime(issue)

    toucher = threading.Thread(target=touch_until_done)
    toucher.start()
    try:
        wait_for(lambda: server not in _servers(runtime.parent), "the idle server to exit", timeout=60)
    finally:
        done.set()
        toucher.join()
    assert "exiting: unused" in socket.with_suffix(".log").read_text()


def test_the_servers_key_follows_the_sources_the_packages_and_the_environment(tmp_path: Path) -> None:
    package = tmp_path / "hive"
    (package / "cli").mkdir(parents=True)
    module = package / "cli" / "thing.py"
    module.write_text("x = 1\n")
    site = tmp_path / "site"
    site.mkdir()
    env = {"HOME": "/h", "PWD": "/a", "SHLVL": "1"}
    first = served.key(str(package), env, [str(site)])
    assert served.key(str(package), {**env, "PWD": "/b", "SHLVL": "2", "OLDPWD": "/a"}, [str(site)]) == first
    assert served.key(str(package), {**env, "HOME": "/other"}, [str(site)]) != first
    os.utime(module, ns=(1, 1))
    changed_source = served.key(str(package), env, [str(site)])
    assert changed_source != first
    (site / "newly-installed").mkdir()
    os.utime(site, ns=(2, 2))
    assert served.key(str(package), env, [str(site)]) != changed_source


@pytest.mark.parametrize("args, wanted", [
    (["list"], True), (["-C", "elsewhere", "update", "hv-1", "-p", "1"], True), (["status"], True),
    (["status", "--watch"], False), (["run"], False), (["watch"], False), (["edit", "hv-1"], False),
    (["plan", "spec.md"], False), (["-C", "x"], False), ([], False), (["demo"], False),
])
def test_only_short_commands_without_a_terminal_of_their_own_are_served(args: list[str], wanted: bool) -> None:
    assert served.wanted(args, {}) is (wanted and sys.platform == "linux")
    assert served.wanted(args, {"HIVE_COMMAND_SERVER": "0"}) is False


def test_a_command_over_before_its_client_looks_again_is_not_run_a_second_time() -> None:
    """The server's child may run a short command to its end and close the connection while its
    client, descheduled, has not gone on since it sent the request: the client takes the exit
    status the child sent, and never runs the command itself as well (a `create` made twice)."""
    import _socket
    import socket as sockets
    import threading

    server_end, client_end = sockets.socketpair(sockets.AF_UNIX, sockets.SOCK_STREAM)
    over = threading.Event()
    stand_in = subprocess.Popen(["sleep", "60"])   # the pid the child reports (signals go to it)

    def child() -> None:
        """What command_server's child does for a command that is over at once."""
        with server_end:
            first, fds, _, _ = sockets.recv_fds(server_end, 1 << 16, len(served.FDS))
            for fd in fds:
                os.close(fd)
            size = int.from_bytes(first[:4], "big")
            request = first[4:] + served.receive(server_end, size - len(first) + 4)
            assert marshal.loads(request)[1] == ["create", "Once"]
            server_end.sendall(served.STARTED + stand_in.pid.to_bytes(8, "big"))
            server_end.sendall(served.EXITED + (3).to_bytes(4, "big", signed=True))
        over.set()

    class Descheduled(_socket.socket):
        def sendmsg(self, *args: Any) -> int:
            sent = super().sendmsg(*args)
            over.wait(30)   # the client goes on only once the child is gone
            return sent

    handlers = {signum: signal.getsignal(signum) for signum in (*served.FORWARDED, signal.SIGCONT)}
    thread = threading.Thread(target=child)
    thread.start()
    try:
        connection = Descheduled(sockets.AF_UNIX, sockets.SOCK_STREAM, 0, client_end.detach())
        assert served.run(connection, ["create", "Once"]) == 3
    finally:
        thread.join(30)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        stand_in.kill()
        stand_in.wait()


def _raw_request(socket_path: Path, payload: bytes, with_fds: bool) -> bytes:
    """What the server answers a hand-made request (its first bytes, then whatever follows)."""
    import socket as sockets

    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as connection:
        connection.settimeout(30)
        connection.connect(str(socket_path))
        if with_fds:
            fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2))
            connection.sendmsg([payload], [(sockets.SOL_SOCKET, sockets.SCM_RIGHTS, fds)])
        else:
            connection.sendall(payload)
        connection.shutdown(sockets.SHUT_WR)
        answer = b""
        while chunk := connection.recv(4096):
            answer += chunk
        return answer


def test_a_malformed_request_runs_nothing_and_the_server_goes_on(repo: Path, runtime: Path, hive,
                                                                 wait_for) -> None:
    """Hostile input from a peer that passed the checks: no fds, an oversized or short request,
    bytes that are no request, fields of the wrong types — the child ends without running
    anything (no STARTED), and the next command is served as usual."""
    hive("list")
    socket_path, server = _serving(runtime, wait_for)
    wrong_types = marshal.dumps(("git-hive", ["create", 7], str(repo), 0o22, {}))
    cases = {
        "no fds": (len(wrong_types).to_bytes(4, "big") + wrong_types, False),
        "oversized": ((64 << 20).to_bytes(4, "big") + b"x" * 100, True),
        "short": ((10_000).to_bytes(4, "big") + b"x" * 100, True),
        "not marshal": ((5).to_bytes(4, "big") + b"\xff\x00abc", True),
        "wrong types": (len(wrong_types).to_bytes(4, "big") + wrong_types, True),
        "longer than said": ((2).to_bytes(4, "big") + wrong_types, True),
    }
    for name, (payload, with_fds) in cases.items():
        assert not _raw_request(socket_path, payload, with_fds).startswith(served.STARTED), name
    assert _servers(runtime.parent) == [server]
    created = hive("create", "After the garbage").stdout.strip()
    assert [line.split()[0] for line in hive("list").stdout.splitlines()[1:]] == [created]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_a_burst_of_writes_in_a_kept_checkout_is_read_in_batches_and_fingerprinted_once_it_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command writing thousands of files into a checkout the server keeps (a queue taken in)
    had the server wake for every few of their events and fingerprint the whole scan each time,
    on the CPU the command needed (~0.3 s of it at 10,000 files). The events are read in
    batches at least `BATCH_SECONDS` apart, the fingerprint made once they stop, and the kept
    scan is still the scan."""
    import select

    from hive.cli import command_server
    from hive.state import live_folder

    skip_unless_watchable(tmp_path)
    root = tmp_path / "hive"
    (root / "issues").mkdir(parents=True)
    (root / "context.md").write_text("context\n")
    kept = command_server._KeptScans()
    watcher = kept._watcher
    assert watcher is not None and watcher.watch(str(root)) == ""
    calls = {"catch_up": 0, "prepare": 0}
    for name in calls:
        def counted(real=getattr(watcher, name), name=name) -> None:
            calls[name] += 1
            real()
        monkeypatch.setattr(watcher, name, counted)

    files = 3000
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sys\n"
        f"for k in range({files}):\n"
        f"    open(sys.argv[1] + f'/issues/hv-{{k:06d}}.md', 'w').write('+++\\ntitle = \"x\"\\n+++\\n')\n"),
        str(root)])
    began = time.monotonic()
    ended = None   # then the server's loop runs on a while: what is queued is read, the scan fingerprinted
    while ended is None or time.monotonic() - ended < 20 * command_server.BATCH_SECONDS:
        readable, _, _ = select.select(kept.fds(), [], [], kept.timeout(0.05))
        kept.wake(readable)
        if ended is None and writer.poll() is not None:
            ended = time.monotonic()
        assert time.monotonic() - began < 60, "the burst never ended"
    elapsed = time.monotonic() - began
    assert writer.returncode == 0
    assert calls["catch_up"] <= 2 + elapsed / command_server.BATCH_SECONDS, (calls, elapsed)
    assert 1 <= calls["prepare"] <= calls["catch_up"]
    fresh = live_folder.scan(root, full=False)
    assert len(fresh) == files + 1
    assert watcher.kept(root) == (fresh, live_folder.fingerprint(fresh))
    watcher.close()
