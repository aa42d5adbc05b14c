"""Realistic hive repositories, generated fast.

A generated repository is what a long-lived project would look like: a main branch with one
commit, and a `hive/state` branch holding N issue files (varied titles, one to three paragraphs
of body, labels, epics with children, 0-3 dependencies on earlier issues so the graph is a DAG,
about two edges per issue on average), a few notes files and `context.md`. Issues are created in
order; with `archived > 0` the oldest ones are terminal (finalized or canceled) and live under
`issues/archive/<xx>/` as `hive.state.layout` prescribes, the newest ones stay live in `issues/`.

Speed matters (a full run builds a 100,000-issue repository):

* Issue files are produced by `hive.state.issue_file.render`, once per *shape* (has a parent,
  number of dependencies, number of labels) with placeholder values, then filled in with
  `str.format`. `render` through tomlkit costs ~0.5 ms a file (50 s for 100k); the templates
  cost ~5 µs. The first few hundred files are checked byte for byte against a real `render`.
* Blobs go into one pack through `git fast-import`, repacked the way `git gc` does (100k loose
  objects would take ~15 s to write and are not what an aged repository holds); trees are built
  with pygit2, one `TreeBuilder` per folder, and one commit is made; then `hive/state` is pointed at it and the real
  `git-hive init` adds the `.hive/` checkout, hooks and the rest (init adopts an existing branch).

Everything lives in one temporary directory that `Workspace` deletes on exit.
"""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import random
import shutil
import signal
import sys
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pygit2

from hive import git
from hive.backends import scripted
from hive.state import issue_file, layout
from hive.state.issue_file import ID_ALPHABET, Issue

# -- vocabulary -------------------------------------------------------------------------------

VERBS = ["Add", "Fix", "Refactor", "Remove", "Document", "Speed up", "Test", "Rename", "Split",
         "Migrate", "Validate", "Cache", "Log", "Retry", "Harden", "Simplify", "Support", "Expose"]
OBJECTS = ["JWT login", "the billing webhook", "CSV export", "rate limiting", "the search index",
           "password reset", "the settings page", "audit logging", "the upload handler",
           "session expiry", "the payments client", "dark mode", "the onboarding flow",
           "database migrations", "the metrics endpoint", "email templates", "the CLI parser",
           "feature flags", "the retry queue", "SSO with Okta", "image thumbnails", "pagination",
           "the admin dashboard", "websocket reconnects", "the config loader", "i18n strings"]
QUALIFIERS = ["", "", "", " for mobile clients", " in the API gateway", " behind a flag",
              " for large accounts", " on Postgres 16", " under load", " in the worker pool",
              " for the EU region", " without downtime", " (follow-up)", " in CI"]
SUBJECTS = ["The handler", "This module", "The current code", "Our test suite", "The client",
            "The scheduler", "A user", "The background job", "The migration", "The cache layer"]
PREDICATES = ["times out when the payload is larger than a few megabytes",
              "retries forever instead of giving up after the configured budget",
              "reads the whole table into memory before filtering it",
              "does not handle an expired token and returns a 500",
              "logs secrets at debug level", "needs a clear error message for bad input",
              "should be covered by an integration test against a real database",
              "duplicates the validation that the schema already does",
              "is called twice per request because of the middleware order",
              "must keep working for clients on the previous API version",
              "blocks the event loop while it hashes the file",
              "ignores the locale that the user picked in their profile"]
DETAILS = ["See the stack trace in the linked report.", "Keep the public interface unchanged.",
           "A feature flag is fine for the first rollout.", "Measure before and after.",
           "The fix should be small; avoid a rewrite.", "Update the docs and the changelog.",
           "Coordinate with the mobile team before merging.", "Add a regression test first."]
LABELS = ["auth", "api", "backend", "frontend", "perf", "security", "docs", "tests", "infra",
          "billing", "ux", "tech-debt", "mobile", "data"]
CRITERIA = ["- [ ] the new behaviour has a test", "- [ ] no new warnings in CI",
            "- [ ] documented in the README", "- [ ] p95 latency does not regress",
            "- [ ] works with the previous client version"]
NOTE_CATEGORIES = ["discovery", "gotcha", "pattern", "dependency", "context"]

LIVE_STATUSES = ["open", "done", "in_progress", "failed", "escalated"]
LIVE_WEIGHTS = [60, 25, 8, 3, 4]
DEP_COUNTS = [0, 1, 2, 3]
DEP_WEIGHTS = [10, 20, 30, 40]          # 2.0 dependencies per issue on average
EPIC_SHARE = 0.02
DEP_WINDOW = 3000                       # dependencies point at recent earlier issues


def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(PREDICATES)}. {rng.choice(DETAILS)}"


def _body(rng: random.Random, title: str) -> str:
    paragraphs = []
    for _ in range(rng.randint(1, 3)):
        paragraphs.append(" ".join(_sentence(rng) for _ in range(rng.randint(1, 3))))
    if rng.random() < 0.5:
        paragraphs.append("## Acceptance criteria\n\n" + "\n".join(rng.sample(CRITERIA, rng.randint(1, 3))))
    if rng.random() < 0.2:
        paragraphs.insert(0, f"Context: {title.lower()} came up in the last review.")
    return "\n\n".join(paragraphs) + "\n"


# -- rendering --------------------------------------------------------------------------------

_T0 = "1901-01-01T00:00:01Z"
_T1 = "1901-01-01T00:00:02Z"


class FastRenderer:
    """`issue_file.render` output at template speed: one real render per shape, then format()."""

    def __init__(self) -> None:
        self._templates: dict[tuple[bool, int, int], str] = {}

    def _template(self, has_parent: bool, deps: int, labels: int) -> str:
        key = (has_parent, deps, labels)
        if key not in self._templates:
            probe = Issue(id="hv-000000", title="@TITLE@", status="@STATUS@", priority=9, type="@TYPE@",
                          parent="hv-@PARENT@" if has_parent else "",
                          depends_on=[f"hv-@DEP{i}@" for i in range(deps)],
                          labels=[f"@LABEL{i}@" for i in range(labels)], assignee="@ASSIGNEE@",
                          created=_T0, updated=_T1, body="")
            text = issue_file.render(probe).replace("{", "{{").replace("}", "}}")
            text = (text.replace('"@TITLE@"', '"{title}"').replace('"@STATUS@"', '"{status}"')
                    .replace("priority = 9\n", "priority = {priority}\n").replace('"@TYPE@"', '"{type}"')
                    .replace('"hv-@PARENT@"', '"{parent}"').replace('"@ASSIGNEE@"', '"{assignee}"')
                    .replace(_T0, "{created}").replace(_T1, "{updated}"))
            for i in range(deps):
                text = text.replace(f'"hv-@DEP{i}@"', f'"{{d{i}}}"')
            for i in range(labels):
                text = text.replace(f'"@LABEL{i}@"', f'"{{l{i}}}"')
            assert "@" not in text, text
            self._templates[key] = text
        return self._templates[key]

    def render(self, issue: Issue) -> str:
        template = self._template(bool(issue.parent), len(issue.depends_on), len(issue.labels))
        values = {f"d{i}": d for i, d in enumerate(issue.depends_on)}
        values.update({f"l{i}": label for i, label in enumerate(issue.labels)})
        head = template.format(title=issue.title, status=issue.status, priority=issue.priority,
                               type=issue.type, parent=issue.parent, assignee=issue.assignee,
                               created=issue.created, updated=issue.updated, **values)
        body = issue.body if issue.body.endswith("\n") or not issue.body else issue.body + "\n"
        return head + body


# -- generating issues ------------------------------------------------------------------------

@dataclass
class Generated:
    issues: list[Issue]
    files: dict[str, bytes]                       # path on hive/state -> content
    paths: dict[str, str] = field(default_factory=dict)   # issue id -> path

    @property
    def edges(self) -> int:
        return sum(len(i.depends_on) for i in self.issues)


def _new_ids(n: int, rng: random.Random) -> list[str]:
    seen: set[str] = set()
    ids = []
    while len(ids) < n:
        candidate = "hv-" + "".join(rng.choice(ID_ALPHABET) for _ in range(6))
        if candidate not in seen:
            seen.add(candidate)
            ids.append(candidate)
    return ids


def generate(n: int, *, archived: float = 0.0, flat: bool = False, seed: int = 7, verify: int = 300) -> Generated:
    """`n` issues in creation order; the oldest `archived` share is terminal and archived (left in
    `issues/` when `flat`, as a queue imported from another tool would be)."""
    rng = random.Random(seed)
    ids = _new_ids(n, rng)
    n_archived = int(n * archived)
    renderer = FastRenderer()
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    clock = start
    epics: list[str] = []
    issues: list[Issue] = []
    files: dict[str, bytes] = {}
    paths: dict[str, str] = {}
    for k, issue_id in enumerate(ids):
        clock += timedelta(seconds=rng.randint(30, 900))
        terminal = k < n_archived
        kind = "epic" if rng.random() < EPIC_SHARE else rng.choice(["task", "task", "task", "bug", "feature", "chore"])
        if terminal:
            status = "finalized" if rng.random() < 0.92 else "canceled"
        else:
            status = rng.choices(LIVE_STATUSES, LIVE_WEIGHTS)[0]
        window = ids[max(0, k - DEP_WINDOW):k]
        n_deps = min(rng.choices(DEP_COUNTS, DEP_WEIGHTS)[0], len(window))
        title = f"{rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(QUALIFIERS)}"
        issue = Issue(
            id=issue_id, title=title, status=status, priority=rng.choices(range(5), [5, 20, 45, 20, 10])[0],
            type=kind,
            parent=rng.choice(epics[-50:]) if epics and kind != "epic" and rng.random() < 0.6 else "",
            depends_on=rng.sample(window, n_deps) if n_deps else [],
            labels=rng.sample(LABELS, rng.choices([0, 1, 2, 3], [20, 45, 25, 10])[0]),
            assignee=f"w-{rng.getrandbits(24):06x}" if status == "in_progress" else "",
            created=issue_file.format_time(clock),
            updated=issue_file.format_time(clock + timedelta(seconds=rng.randint(0, 86400 * 3))),
            body=_body(rng, title),
        )
        if kind == "epic":
            epics.append(issue_id)
        text = renderer.render(issue)
        if k < verify:
            assert text == issue_file.render(issue), f"template render differs for {issue_id}"
        path = f"{layout.ISSUES_DIR}/{issue_id}.md" if flat else layout.path_for(issue_id, status)
        files[path] = text.encode()
        paths[issue_id] = path
        issues.append(issue)
    # Notes harvested from a few workers, and the project context.
    for issue in rng.sample(issues, max(1, n // 30)):
        lines = [json.dumps({"category": rng.choice(NOTE_CATEGORIES), "content": _sentence(rng),
                             "issue": issue.id, "agent": f"w-{rng.getrandbits(24):06x}",
                             "at": issue.updated}) for _ in range(rng.randint(1, 4))]
        files[layout.notes_path(issue.id)] = ("\n".join(lines) + "\n").encode()
    files[layout.CONTEXT_FILE] = (layout.CONTEXT_TEMPLATE + "\n" + "\n".join(
        f"- {_sentence(rng)}" for _ in range(20)) + "\n").encode()
    files[layout.ATTRIBUTES_FILE] = layout.ATTRIBUTES.encode()
    files[f"{layout.ISSUES_DIR}/.gitkeep"] = b""
    files[f"{layout.NOTES_DIR}/.gitkeep"] = b""
    return Generated(issues, files, paths)


# -- building repositories --------------------------------------------------------------------

def blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _import_blobs(root: Path, files: dict[str, bytes]) -> dict[str, str]:
    """Write every file's content as a blob into one pack; return path -> blob id."""
    chunks = []
    for data in files.values():
        chunks.append(b"blob\ndata %d\n" % len(data))
        chunks.append(data)
        chunks.append(b"\n")
    chunks.append(b"done\n")
    subprocess.run(["git", "fast-import", "--quiet", "--done"], cwd=root, input=b"".join(chunks),
                   check=True, capture_output=True)
    return {path: blob_oid(data) for path, data in files.items()}


def _build_tree(repo: pygit2.Repository, entries: dict[str, str]) -> pygit2.Oid:
    """A tree from path -> blob id, one TreeBuilder per folder."""
    direct: dict[str, str] = {}
    nested: dict[str, dict[str, str]] = {}
    for path, oid in entries.items():
        head, _, rest = path.partition("/")
        if rest:
            nested.setdefault(head, {})[rest] = oid
        else:
            direct[head] = oid
    builder = repo.TreeBuilder()
    for name, oid in direct.items():
        builder.insert(name, pygit2.Oid(hex=oid), pygit2.GIT_FILEMODE_BLOB)
    for name, sub in nested.items():
        builder.insert(name, _build_tree(repo, sub), pygit2.GIT_FILEMODE_TREE)
    return builder.write()


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@dataclass
class BuiltRepo:
    name: str
    root: Path
    generated: Generated
    seconds_generate: float
    seconds_build: float
    seconds_init: float

    taken: set[str] = field(default_factory=set)

    @property
    def paths(self) -> git.RepoPaths:
        return git.discover(self.root)

    def take(self, n: int, *, statuses: tuple[str, ...] = ("open",), exclude_epics: bool = True,
             among: list[str] | None = None) -> list[str]:
        """`n` live issues no other benchmark has touched yet (newest first), now marked taken."""
        by_id = {i.id: i for i in self.generated.issues}
        pool = among if among is not None else [i.id for i in reversed(self.generated.issues)]
        found = []
        for issue_id in pool:
            issue = by_id[issue_id]
            if issue_id in self.taken or issue.status not in statuses or (exclude_epics and issue.type == "epic"):
                continue
            found.append(issue_id)
            self.taken.add(issue_id)
            if len(found) == n:
                return found
        raise RuntimeError(f"{self.name}: fewer than {n} untouched issues left")

    @property
    def live_open(self) -> list[Issue]:
        return [i for i in self.generated.issues if i.status == "open" and i.type != "epic"]

    @property
    def counts(self) -> str:
        n = len(self.generated.issues)
        archived = sum(1 for p in self.generated.paths.values() if p.startswith(layout.ARCHIVE_DIR))
        return f"{n:,} issues ({n - archived:,} live, {archived:,} archived), {self.generated.edges:,} edges"


def build_repo(root: Path, name: str, n: int, *, archived: float = 0.0, flat: bool = False,
               init: bool = True) -> BuiltRepo:
    t0 = time.perf_counter()
    generated = generate(n, archived=archived, flat=flat)
    t1 = time.perf_counter()
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "Bench Person")
    _git(root, "config", "user.email", "bench@example.com")
    (root / "README.md").write_text(f"# {name}\n\nA generated project for git-hive benchmarks.\n")
    _git(root, "add", "README.md")
    _git(root, "commit", "-q", "-m", "initial commit")
    blobs = _import_blobs(root, generated.files)
    repo = pygit2.Repository(str(root))
    tree = _build_tree(repo, blobs)
    sig = pygit2.Signature("Bench Person", "bench@example.com")
    commit = repo.create_commit(None, sig, sig, f"hive: {n} generated issues\n\nHive-Event: imported\n", tree, [])
    repo.references.create(git.STATE_REF, commit)
    # fast-import deltifies each blob against the previous one, in chains of up to 50 that random
    # reads must replay (~0.3 ms a blob at 100k). Repack as `git gc` would (now that the blobs
    # are reachable), so reads cost what they cost in an aged repository.
    _git(root, "repack", "-a", "-d", "-f", "-q")
    t2 = time.perf_counter()
    if init:
        subprocess.run(["git-hive", "init"], cwd=root, check=True, capture_output=True)
    t3 = time.perf_counter()
    return BuiltRepo(name, root, generated, t1 - t0, t2 - t1, t3 - t2)


MEMORY_FOLDER = "/dev/shm"


def _is_tmpfs(folder: str) -> bool:
    """Whether `folder` is the mount point of a tmpfs (per /proc/self/mounts)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            return any(fields[1] == folder and fields[2] == "tmpfs"
                       for fields in (line.split() for line in mounts) if len(fields) > 2)
    except OSError:
        return False


class Workspace:
    """A temporary directory of generated repositories, built on first use, deleted on exit."""

    def __init__(self, keep: bool = False, log=print):
        self.dir = Path(tempfile.mkdtemp(prefix="hive-bench-"))
        # Commands start from bytecode, as in any installed copy: compiled once into the
        # workspace (a sandbox's PYTHONDONTWRITEBYTECODE made every command compile hive's
        # sources again, ~0.2 s), nothing written beside the sources but the scripted agent's
        # bytecode: its processes run with `-I`, which ignores the prefix, and an installed copy
        # has that file (hive/backends/scripted.py).
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(self.dir / "pycache")
        py_compile.compile(scripted.AGENT_PATH, cfile=scripted.AGENT_BYTECODE, doraise=True)
        # the command servers the benchmarks start (hive/cli/served.py) listen in here, and are
        # stopped when the workspace closes
        self.runtime = self.dir / "run"
        self.runtime.mkdir(mode=0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(self.runtime)
        self.keep = keep
        self.log = log
        self._repos: dict[str, BuiltRepo] = {}
        self._memory: Path | None = None

    def repo(self, n: int, *, archived: float = 0.0, flat: bool = False) -> BuiltRepo:
        name = f"{n}" + (f"-{'finalized' if flat else 'archived'}{int(archived * 100)}" if archived else "")
        if name not in self._repos:
            self.log(f"  generating a repository of {n:,} issues"
                     + (f" ({archived:.0%} {'finalized in issues/' if flat else 'archived'})" if archived else "")
                     + " ...")
            shutil.rmtree(self.dir / name, ignore_errors=True)  # what a failed attempt left
            built = build_repo(self.dir / name, name, n, archived=archived, flat=flat)
            self.log(f"    {built.counts}: generate {built.seconds_generate:.1f} s, "
                     f"build {built.seconds_build:.1f} s, git hive init {built.seconds_init:.1f} s")
            self._repos[name] = built
        return self._repos[name]

    def scratch(self, name: str) -> Path:
        path = self.dir / "scratch" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def memory_scratch(self, name: str) -> Path | None:
        """A new folder `name` on a file system in memory (the tmpfs at MEMORY_FOLDER), where a
        file costs next to nothing to make or delete; None where there is none to write in."""
        if self._memory is None:
            if not _is_tmpfs(MEMORY_FOLDER) or not os.access(MEMORY_FOLDER, os.W_OK):
                return None
            self._memory = Path(tempfile.mkdtemp(prefix="hive-bench-", dir=MEMORY_FOLDER))
        path = self._memory / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def file_creation(self, name: str, count: int) -> float:
        """Seconds to create `count` small files in one new folder here (each written and closed):
        the floor of any checkout, and on a file system without a journal (this machine's) a
        measure of how many files were deleted there in the last half minute. The files stay
        until the workspace goes: deleting them would slow what is measured next."""
        folder = self.scratch(name)
        start = time.perf_counter()
        for k in range(count):
            fd = os.open(folder / f"f{k}.md", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            os.write(fd, b"+++\n" * 200)
            os.close(fd)
        return time.perf_counter() - start

    def command_servers(self) -> list[int]:
        """The pids of the command servers started for this workspace's commands, listening now."""
        from hive.cli import served

        pids = []
        for log in (self.runtime / "git-hive").glob("*.log"):
            pid = served.pid_in_log(log.read_text(errors="replace"))
            if pid is not None and log.with_suffix(".sock").exists():
                pids.append(pid)
        return pids

    def wait_for_command_server(self, timeout: float = 60.0) -> None:
        """Until a command server listens for the benchmarks' commands (the first one started it)."""
        deadline = time.monotonic() + timeout
        while not self.command_servers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no command server started within {timeout:.0f} s "
                                   f"(its log: {sorted((self.runtime / 'git-hive').glob('*.log'))})")
            time.sleep(0.02)

    def close(self) -> None:
        for pid in self.command_servers():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self._memory is not None:    # in memory: never kept
            shutil.rmtree(self._memory, ignore_errors=True)
        if self.keep:
            self.log(f"kept the generated repositories in {self.dir}")
            return
        for _ in range(5):  # a process that is still exiting may write in it once more
            shutil.rmtree(self.dir, ignore_errors=True)
            if not self.dir.exists():
                return
            time.sleep(1)
        self.log(f"warning: could not delete {self.dir} (a process still writes in it?)")

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def git_hive_executable() -> str:
    """This interpreter's own `git-hive` script; the one on PATH only if it has none (a version
    manager's shim there, such as pyenv's, adds its own start-up to every figure)."""
    beside = Path(sys.executable).with_name("git-hive")
    if beside.is_file():
        return str(beside)
    exe = shutil.which("git-hive")
    if exe is None:
        raise SystemExit("git-hive is not on PATH: run `pip install -e '.[dev]'` first")
    return exe


def environment(*, own_process: bool = False) -> dict[str, str]:
    """The environment subprocesses run with (no pager, no colour, no global hooks); a short
    command is run by the command server unless `own_process` (as with `HIVE_COMMAND_SERVER=0`)."""
    env = dict(os.environ)
    env.update({"GIT_PAGER": "cat", "NO_COLOR": "1", "HIVE_COMMAND_SERVER": "0" if own_process else "1"})
    return env
