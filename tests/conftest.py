"""Shared fixtures: isolated git identity, real repositories in temp dirs, the real CLI.

Everything runs against real git repositories in temp dirs, with git and hive cut off from the
machine's own configuration. `hive` runs the real CLI in a subprocess, so a test sees what a user
sees; `cli`, `repo`, `project` and `new_issue` run the same code in this process, for fast set-up.
Test files that need something else define it locally (a local fixture of the same name overrides
one from here). Every fixture is function-scoped and lives under tmp_path: safe with pytest -n.

    git_env     the isolated environment (HOME, global git config, no system config, HIVE_*)
    git         run the git CLI: git("log", "--oneline", cwd=path) -> CompletedProcess
    hive        run the CLI: hive("list", "--json", cwd=path, check=True) -> CompletedProcess
    cli         the CLI in this process: cli("sync", cwd=path) -> CliResult (returncode, stdout, stderr)
    make_repo   a factory: make_repo("name") -> a repository with one commit (no hive yet)
    repo        a repository with one commit where `git hive init` has run; the current dir
    project     that repository's hive opened in this process (hive.project.Project)
    new_issue   new_issue("title", priority=1, status="done") -> id, created in-process (fast)
    clones      clones("A", "B") -> (a bare remote, [clone A, clone B]), hive initialised in each
    state_log   state_log(cwd=None) -> the commits of hive/state, oldest first, with trailers
    wait_for    wait_for(predicate, what) -> poll until truthy or fail after a deadline
    list_json   list_json("--ready") -> `git hive list --json --ready`, parsed
    issue_text  issue_text("title", status="done", ...) -> the text of an issue file, for writing
                straight into `.hive/issues/` or committing by hand
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

USER_NAME = "Hive Tester"
USER_EMAIL = "tester@example.com"
CLI_TIMEOUT = 60


HOST_VARIABLE_PREFIXES = ("HIVE_", "GIT_")
HOST_VARIABLES = ("EDITOR", "VISUAL", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "PRE_COMMIT_HOME")


@pytest.fixture(autouse=True)
def _no_host_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without the runner's HIVE_*, GIT_* (an identity in GIT_AUTHOR_*, say),
    EDITOR or VISUAL: a test that needs one sets it itself."""
    for name in list(os.environ):
        if name.startswith(HOST_VARIABLE_PREFIXES) or name in HOST_VARIABLES:
            monkeypatch.delenv(name)
    # every test's environment would be a command server of its own, left running after it:
    # the commands a test runs run in their own process (tests/test_command_server.py turns it on)
    monkeypatch.setenv("HIVE_COMMAND_SERVER", "0")


@pytest.fixture
def git_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Cut git and hive off from the machine's own setup; return the temp HOME.

    HOME is a fresh dir; `GIT_CONFIG_GLOBAL` is a file in it holding only the test identity;
    system config is off; `HIVE_GLOBAL_CONFIG` points into it. Any HIVE_*, GIT_*, EDITOR or VISUAL
    variable of the host is removed. Subprocesses inherit all of this. In this process, libgit2
    (pygit2) is pointed at the same global config, so in-process writes use the same identity.
    """
    home = tmp_path_factory.mktemp("home")
    gitconfig = home / ".gitconfig"
    gitconfig.write_text(f"[user]\n\tname = {USER_NAME}\n\temail = {USER_EMAIL}\n"
                         "[init]\n\tdefaultBranch = main\n", encoding="utf-8")
    for name in list(os.environ):
        if name.startswith(HOST_VARIABLE_PREFIXES) or name in HOST_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HIVE_COMMAND_SERVER", "0")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HIVE_GLOBAL_CONFIG", str(home / "hive-global.toml"))
    import pygit2

    levels = (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG, pygit2.enums.ConfigLevel.SYSTEM)
    search_path = pygit2.settings.search_path
    saved = [search_path[level] for level in levels]
    for level in levels:
        search_path[level] = str(home)
    yield home
    for level, value in zip(levels, saved):
        search_path[level] = value


def _run(argv: list[str], cwd: Path | str | None, check: bool, input: str | None,
         env: dict[str, str] | None, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, input=input, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL if input is None else None,
                          env={**os.environ, **env} if env else None, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode} in {cwd or os.getcwd()}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


@pytest.fixture
def git(git_env: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`git(*args, cwd=None, check=True, input=None, env=None)`: the git CLI, output captured.

    `check` fails the test (showing stderr) on a non-zero exit. `cwd=None` is the current dir.
    """

    def run(*args: str, cwd: Path | str | None = None, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return _run(["git", *args], cwd, check, input, env, CLI_TIMEOUT)

    return run


@pytest.fixture
def hive(git_env: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`hive(*args, cwd=None, check=True, input=None, env=None)`: `git hive ...` in a subprocess.

    Runs `python -m hive` with this interpreter. `check=True` fails the test unless the exit code
    is 0; pass `check=False` to look at `returncode` and `stderr` yourself.
    """

    def run(*args: str, cwd: Path | str | None = None, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return _run([sys.executable, "-m", "hive", *args], cwd, check, input, env, CLI_TIMEOUT)

    return run


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(git_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """`cli(*args, cwd=CLONE, check=True, env=None)`: `git hive ARGS` run in this process.

    The same code as the `git hive` command (`hive.cli.main`), without an interpreter start-up per
    call; output and exit code captured. `hive(...)` (a subprocess) is used where a separate
    process matters.
    """
    from hive.cli import main

    def run(*args: str, cwd: Path, check: bool = True, env: dict[str, str] | None = None) -> CliResult:
        with monkeypatch.context() as patch:
            patch.chdir(cwd)
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            capsys.readouterr()
            code = 0
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            out, err = capsys.readouterr()
        if check and code != 0:
            raise AssertionError(f"git hive {' '.join(args)} exited {code} in {cwd}\n{out}\n{err}")
        return CliResult(code, out, err)

    return run


@pytest.fixture
def make_repo(tmp_path: Path, git: Callable[..., Any]) -> Callable[..., Path]:
    """`make_repo(name="repo", commit=True)`: `git init` a repository under tmp_path on `main`.

    With `commit` it has one commit (a README); hive is not initialised.
    """

    def make(name: str = "repo", commit: bool = True) -> Path:
        path = tmp_path / name
        path.mkdir(parents=True)
        git("init", "-q", "-b", "main", cwd=path)
        if commit:
            (path / "README.md").write_text("hello\n", encoding="utf-8")
            git("add", "README.md", cwd=path)
            git("commit", "-q", "-m", "first commit", cwd=path)
        return path

    return make


@pytest.fixture
def repo(make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> Path:
    """A repository with one commit where `git hive init` has run. The current dir is its root.

    The init runs the real command in this process (`hive.cli.main(["init"])`): it is the same
    code, without the interpreter start-up a subprocess costs. tests/test_init.py runs init as
    a subprocess, the way a user does.
    """
    from hive.cli import main

    path = make_repo("repo")
    monkeypatch.chdir(path)
    main(["init"])
    capsys.readouterr()
    return path


@pytest.fixture
def project(repo: Path) -> Iterator[Any]:
    """`repo`'s hive opened in this process (`hive.project.Project`): fast setup and API calls.

    After a CLI command changed the state, call `project.sync(warn=False)` before reading its
    index.
    """
    from hive.project import Project

    opened = Project.open(repo)
    opened.sync(warn=False)
    yield opened
    opened.close()


@pytest.fixture
def new_issue(project: Any) -> Callable[..., str]:
    """`new_issue(title, status=None, **fields)`: create an issue in `repo` in-process; its id.

    Fields are those of `hive.issues.create` (priority, type, parent, depends_on, labels,
    description). With `status`, a second commit moves it there. Use the CLI (`hive("create",
    ...)`) where the create command itself is under test.
    """
    from hive import issues
    from tests.state_helpers import set_status

    def create(title: str, status: str | None = None, **fields: Any) -> str:
        project.sync(warn=False)
        issue = issues.create(project, title, **fields)
        if status is not None:
            set_status(project, issue.id, status)
        return issue.id

    return create


@pytest.fixture
def clones(tmp_path: Path, git: Callable[..., Any], cli: Callable[..., CliResult]) -> Callable[..., Any]:
    """`clones(*names)`: a bare remote (`tmp_path/remote.git`, main with one commit) and clones.

    The first clone runs `git hive init` and pushes hive/state with `git hive sync`; the others are
    cloned afterwards and adopt origin's hive/state at init. Returns (remote, [clone paths]).
    """

    def make(*names: str) -> tuple[Path, list[Path]]:
        remote = tmp_path / "remote.git"
        git("init", "-q", "--bare", "-b", "main", str(remote))
        seed = tmp_path / "seed"
        git("clone", "-q", str(remote), str(seed))
        (seed / "README.md").write_text("hello\n", encoding="utf-8")
        git("add", "README.md", cwd=seed)
        git("commit", "-q", "-m", "first commit", cwd=seed)
        git("push", "-q", "origin", "main", cwd=seed)
        paths = []
        for n, name in enumerate(names):
            clone = tmp_path / name
            git("clone", "-q", str(remote), str(clone))
            cli("init", cwd=clone)
            if n == 0:
                cli("sync", cwd=clone)
            paths.append(clone)
        return remote, paths

    return make


@dataclass
class StateCommit:
    oid: str
    author: str
    subject: str
    trailers: dict[str, str] = field(default_factory=dict)
    parents: list[str] = field(default_factory=list)

    @property
    def event(self) -> str:
        return self.trailers.get("Hive-Event", "")

    @property
    def issue(self) -> str:
        return self.trailers.get("Hive-Issue", "")


@pytest.fixture
def state_log(git: Callable[..., subprocess.CompletedProcess[str]]) -> Callable[..., list[StateCommit]]:
    """`state_log(cwd=None, ref="hive/state")`: that branch's commits, oldest first, with trailers."""

    def read(cwd: Path | str | None = None, ref: str = "hive/state") -> list[StateCommit]:
        fmt = "%H%x1f%an%x1f%P%x1f%s%x1f%(trailers:only,unfold)%x1e"
        out = git("log", "--reverse", f"--format={fmt}", ref, cwd=cwd).stdout
        commits = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            oid, author, parents, subject, trailer_text = record.split("\x1f")
            trailers = {}
            for line in trailer_text.splitlines():
                key, sep, value = line.partition(": ")
                if sep:
                    trailers[key] = value
            commits.append(StateCommit(oid, author, subject, trailers, parents.split()))
        return commits

    return read


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """`wait_for(predicate, what, timeout=15.0, explain=None)`: poll `predicate()` until truthy;
    return its value.

    Fails the test naming `what` when the deadline passes, with what `explain()` tells then (a
    daemon's log, say). Polls every 20 ms: it waits for a state, never for a fixed time.
    """

    def wait(predicate: Callable[[], Any], what: str, timeout: float = 15.0,
             explain: Callable[[], str] | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                told = f"\n{explain()}" if explain is not None else ""
                raise AssertionError(f"timed out after {timeout}s waiting for {what}{told}")
            time.sleep(0.02)

    return wait


@pytest.fixture
def list_json(hive: Callable[..., subprocess.CompletedProcess[str]]) -> Callable[..., list[dict[str, Any]]]:
    """`list_json(*args, cwd=None)`: `git hive list --json ARGS`, parsed (a list of issue dicts)."""

    def run(*args: str, cwd: Path | str | None = None) -> list[dict[str, Any]]:
        return json.loads(hive("list", "--json", *args, cwd=cwd).stdout)

    return run


def _issue_text(title: str, *, status: str = "open", priority: int = 2, type: str = "task",
                depends_on: tuple[str, ...] | list[str] = (), labels: tuple[str, ...] | list[str] = (),
                assignee: str = "", parent: str = "", created: str = "2026-01-01T00:00:00Z",
                body: str = "Some description.\n") -> str:
    lines = [
        "+++",
        f"title = {json.dumps(title)}",
        f"status = {json.dumps(status)}",
        f"priority = {priority}",
        f"type = {json.dumps(type)}",
        *([f"parent = {json.dumps(parent)}"] if parent else []),
        f"depends_on = {json.dumps(list(depends_on))}",
        f"labels = {json.dumps(list(labels))}",
        f"assignee = {json.dumps(assignee)}",
        f"created = {created}",
        f"updated = {created}",
        "+++",
        "",
        body,
    ]
    return "\n".join(lines)


@pytest.fixture
def issue_text() -> Callable[..., str]:
    """`issue_text(title, status=, priority=, type=, depends_on=, labels=, assignee=, parent=,
    created="2026-01-01T00:00:00Z", body=)`: a valid issue file, laid out as DESIGN §2 shows."""
    return _issue_text
