"""Bad input corpus: malformed issue files, config files, agents' result and notes files, hook input.

Each case is one parametrized test, fast (the CLI runs in-process), and checks the contract of
DESIGN §5: a one-line report that names the file and line (or the field, or the env variable) —
exit code 2 for a command, a `warning: <file>:<line>: ...` line where the command goes on — and
nothing else harmed: the valid issues around it are listed exactly as before, nothing invalid is
committed. One daemon test proves the daemon keeps running through bad input that arrives while it
works (a corrupted file in `.hive/`, garbage result and notes files from agents).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from .helpers import daemon_env, tail, work_steps, write_json

HUGE = 20 * 1024 * 1024


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`git hive ARGS` in this process: (exit code, stdout, stderr)."""
    from hive.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


# -- issue files ---------------------------------------------------------------------------------

FIELDS = ("title", "status", "priority", "type", "depends_on", "labels", "assignee", "created", "updated")
DEFAULTS = {"title": '"a title"', "status": '"open"', "priority": "2", "type": '"task"',
            "depends_on": "[]", "labels": "[]", "assignee": '""', "created": "2026-01-01T00:00:00Z",
            "updated": "2026-01-01T00:00:00Z"}
LINE = {name: n for n, name in enumerate(FIELDS, start=2)}     # the front matter starts on line 2
EXTRA_LINE = len(FIELDS) + 2                                   # the first extra line


def issue_bytes(extra: tuple[str, ...] = (), drop: tuple[str, ...] = (), body: str = "Body.\n",
                **values: str) -> bytes:
    """An issue file with raw TOML values (so that wrong types can be written)."""
    lines = ["+++"] + [f"{k} = {values.get(k, DEFAULTS[k])}" for k in FIELDS if k not in drop]
    return ("\n".join([*lines, *extra, "+++", "", body])).encode()


@dataclass
class IssueCase:
    name: str
    data: bytes | Callable[[str], bytes]     # a function gets the file's id (self-references)
    line: int
    reason: str
    file: str = "hv-bad001.md"


SELF = "{self}"


def _self(data: bytes) -> Callable[[str], bytes]:
    return lambda issue_id: data.replace(SELF.encode(), issue_id.encode())


ISSUE_CASES = [
    IssueCase("toml-unterminated-string", issue_bytes(title='"no end'), LINE["title"], "broken TOML"),
    IssueCase("toml-no-equals", issue_bytes(extra=("just words",)), EXTRA_LINE, "broken TOML"),
    IssueCase("toml-duplicate-key", issue_bytes(extra=('title = "again"',)), EXTRA_LINE, "broken TOML"),
    IssueCase("toml-bad-table", issue_bytes(extra=("[[",)), EXTRA_LINE, "broken TOML"),
    IssueCase("no-front-matter", b"Just some notes.\n", 1, "missing front matter"),
    IssueCase("front-matter-not-closed", b'+++\ntitle = "x"\n', 1, "not closed"),
    IssueCase("empty-file", b"", 1, "missing front matter"),
    IssueCase("missing-title", issue_bytes(drop=("title",)), 2, "missing field 'title'"),
    IssueCase("empty-title", issue_bytes(title='"   "'), LINE["title"], "'title' is empty"),
    IssueCase("title-two-lines", issue_bytes(title='"one\\ntwo"'), LINE["title"], "'title' must be one line"),
    IssueCase("title-integer", issue_bytes(title="42"), LINE["title"], "'title' must be a string"),
    IssueCase("title-table", issue_bytes(title="{ a = 1 }"), LINE["title"], "'title' must be a string"),
    IssueCase("status-unknown", issue_bytes(status='"sleeping"'), LINE["status"], "bad status 'sleeping'"),
    IssueCase("status-integer", issue_bytes(status="3"), LINE["status"], "'status' must be a string"),
    IssueCase("priority-too-big", issue_bytes(priority="9"), LINE["priority"], "bad priority 9"),
    IssueCase("priority-negative", issue_bytes(priority="-1"), LINE["priority"], "bad priority -1"),
    IssueCase("priority-string", issue_bytes(priority='"high"'), LINE["priority"], "bad priority 'high'"),
    IssueCase("priority-boolean", issue_bytes(priority="true"), LINE["priority"], "bad priority True"),
    IssueCase("priority-float", issue_bytes(priority="1.5"), LINE["priority"], "bad priority 1.5"),
    IssueCase("type-unknown", issue_bytes(type='"story"'), LINE["type"], "bad type 'story'"),
    IssueCase("depends-on-string", issue_bytes(depends_on='"hv-aaaaaa"'), LINE["depends_on"],
              "'depends_on' must be a list of strings"),
    IssueCase("depends-on-integers", issue_bytes(depends_on="[1, 2]"), LINE["depends_on"],
              "'depends_on' must be a list of strings"),
    IssueCase("depends-on-dotdot", issue_bytes(depends_on='["../../etc/passwd"]'), LINE["depends_on"],
              "invalid issue id: '../../etc/passwd'"),
    IssueCase("depends-on-space", issue_bytes(depends_on='["hv aaaaaa"]'), LINE["depends_on"],
              "invalid issue id: 'hv aaaaaa'"),
    IssueCase("depends-on-newline", issue_bytes(depends_on='["hv-aaaaaa\\n"]'), LINE["depends_on"],
              "invalid issue id"),
    IssueCase("depends-on-itself", _self(issue_bytes(depends_on=f'["{SELF}"]')), LINE["depends_on"],
              "depends on itself"),
    IssueCase("depends-on-unknown", issue_bytes(depends_on='["hv-zzzzzz"]'), LINE["depends_on"],
              "unknown issue hv-zzzzzz"),
    IssueCase("labels-string", issue_bytes(labels='"urgent"'), LINE["labels"], "'labels' must be a list"),
    IssueCase("labels-nested", issue_bytes(labels='[["a"]]'), LINE["labels"], "'labels' must be a list"),
    IssueCase("assignee-array", issue_bytes(assignee='["w-1"]'), LINE["assignee"], "'assignee' must be a string"),
    IssueCase("created-not-a-date", issue_bytes(created='"yesterday"'), LINE["created"], "not a date-time"),
    IssueCase("created-integer", issue_bytes(created="5"), LINE["created"], "must be a date-time"),
    IssueCase("parent-dotdot", issue_bytes(extra=('parent = "../x"',)), EXTRA_LINE, "parent is not a valid issue id"),
    IssueCase("parent-itself", _self(issue_bytes(extra=(f'parent = "{SELF}"',))), EXTRA_LINE, "its own parent"),
    IssueCase("parent-unknown", issue_bytes(extra=('parent = "hv-zzzzzz"',)), EXTRA_LINE, "unknown issue hv-zzzzzz"),
    IssueCase("binary", b"+++\n\x00\x01\x02\xff" * 64, 1, "binary content"),
    IssueCase("invalid-utf8", issue_bytes(title='"caf__"').replace(b"__", b"\xe9"), LINE["title"],
              "invalid UTF-8"),
    IssueCase("huge-20mb", issue_bytes(body="x" * HUGE), 1, "an issue file may hold at most"),
    IssueCase("name-with-space", issue_bytes(), 1, "file name is not a valid issue id", file="hv aaaaaa.md"),
    IssueCase("name-upper-case", issue_bytes(), 1, "file name is not a valid issue id", file="HV-AAAAAA.md"),
    IssueCase("name-not-an-id", issue_bytes(), 1, "file name is not a valid issue id", file="my-notes.md"),
    IssueCase("name-shell-metachars", issue_bytes(), 1, "file name is not a valid issue id",
              file="hv-aaaaaa.md;rm -rf ~.md"),
    IssueCase("name-newline", issue_bytes(), 1, "file name is not a valid issue id", file="hv-aaaaaa\n.md"),
    IssueCase("name-escape-sequence", issue_bytes(), 1, "file name is not a valid issue id",
              file="hv-\x1b[31maaaaaa.md"),
    IssueCase("name-very-long", issue_bytes(), 1, "file name is not a valid issue id", file="hv-" + "a" * 240 + ".md"),
]


@pytest.fixture
def two_good(repo: Path, new_issue, capsys) -> dict[str, dict]:
    """Two valid issues (one depending on the other), as `list --json` shows them."""
    first = new_issue("good one", labels=["keep"])
    new_issue("good two", depends_on=[first], priority=1)
    code, out, _ = cli(capsys, "list", "--json")
    assert code == 0
    return {i["id"]: i for i in json.loads(out)}


def state_tip(repo: Path) -> str:
    from hive import git as hive_git

    return hive_git.read_ref(repo / ".git", hive_git.STATE_REF) or ""


def displayed(name: str) -> str:
    from hive.errors import printable

    return printable(name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ISSUE_CASES, ids=[c.name for c in ISSUE_CASES])
def test_bad_issue_file_saved_in_the_checkout(case: IssueCase, repo: Path, two_good, capsys):
    issue_id = case.file[:-3]
    data = case.data(issue_id) if callable(case.data) else case.data
    (repo / ".hive" / "issues" / case.file).write_bytes(data)
    before = state_tip(repo)

    code, out, err = cli(capsys, "list", "--json")

    assert code == 0, err
    where = f".hive/issues/{displayed(case.file)}:{case.line}: "
    reports = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(err.splitlines()) == len(reports) == 1, err
    assert reports[0].startswith(f"warning: {where}") and case.reason in reports[0], (where, case.reason, err)
    assert {i["id"]: i for i in json.loads(out)} == two_good        # the others intact
    assert state_tip(repo) == before                               # nothing invalid committed


def test_a_sparse_gigabyte_issue_file_is_refused_without_reading_it(repo: Path, two_good, capsys):
    path = repo / ".hive" / "issues" / "hv-bad002.md"
    with open(path, "wb") as handle:
        handle.write(issue_bytes())
        handle.truncate(1 << 30)          # 1 GiB, sparse: costs no disk, only a read would hurt
    code, out, err = cli(capsys, "list", "--json")
    assert code == 0
    assert err.startswith("warning: .hive/issues/hv-bad002.md:1: ") and "at most" in err
    assert len(err.splitlines()) == 1
    assert {i["id"]: i for i in json.loads(out)} == two_good


def test_a_cycle_saved_in_the_checkout(repo: Path, two_good, capsys):
    first, second = sorted(two_good, key=lambda i: two_good[i]["title"])
    path = repo / ".hive" / "issues" / f"{first}.md"
    path.write_text(path.read_text().replace("depends_on = []", f'depends_on = ["{second}"]'))
    before = state_tip(repo)
    code, out, err = cli(capsys, "list", "--json")
    assert code == 0
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("depends_on"))
    assert err.strip() == f"warning: .hive/issues/{first}.md:{line}: dependency cycle: {first} -> {second} -> {first}"
    assert {i["id"]: i for i in json.loads(out)} == two_good
    assert state_tip(repo) == before


# -- the same, arriving on hive/state itself (a pull, a merged PR, a plain commit in .hive/) ----------

BRANCH_CASES = [c for c in ISSUE_CASES if c.name in (
    "toml-unterminated-string", "no-front-matter", "status-unknown", "priority-string", "depends-on-dotdot",
    "depends-on-unknown", "depends-on-itself", "binary", "invalid-utf8")]
# on the branch, these break a trust rule (docs/SECURITY.md): the commit is refused whole
REFUSED_CASES = [(c, rule) for c in ISSUE_CASES for name, rule in (
    ("huge-20mb", "over the limit of"), ("name-not-an-id", "a file the hive/state layout does not define"))
    if c.name == name]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", BRANCH_CASES, ids=[c.name for c in BRANCH_CASES])
def test_bad_issue_file_committed_on_the_state_branch(case: IssueCase, repo: Path, two_good, git, capsys):
    issue_id = case.file[:-3]
    data = case.data(issue_id) if callable(case.data) else case.data
    (repo / ".hive" / "issues" / case.file).write_bytes(data)
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "a bad file, committed by hand", cwd=repo / ".hive")

    code, out, err = cli(capsys, "list", "--json")

    assert code == 0, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"warning: issues/{case.file}:{case.line}: ") and case.reason in err, err
    listed = {i["id"]: i for i in json.loads(out)}
    assert {i: listed.get(i) for i in two_good} == two_good       # the others intact


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case,rule", REFUSED_CASES, ids=[c.name for c, _ in REFUSED_CASES])
def test_unsafe_issue_file_committed_on_the_state_branch_is_refused(case: IssueCase, rule: str, repo: Path,
                                                                     two_good, git, capsys):
    issue_id = case.file[:-3]
    data = case.data(issue_id) if callable(case.data) else case.data
    before = state_tip(repo)
    (repo / ".hive" / "issues" / case.file).write_bytes(data)
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "a bad file, committed by hand", cwd=repo / ".hive")
    refused = state_tip(repo)

    code, out, err = cli(capsys, "list", "--json")

    assert code == 0, err
    first = err.splitlines()[0]
    assert first.startswith(f"warning: hive/state: refused hive/state at {refused[:12]}: issues/{case.file}: ")
    assert rule in first, err
    assert state_tip(repo) == before                               # taken back to the last adopted
    assert {i["id"]: i for i in json.loads(out)} == two_good        # the others intact


def test_bad_notes_line_committed_on_the_state_branch(repo: Path, two_good, git, capsys):
    first = next(iter(two_good))
    notes = repo / ".hive" / "notes" / f"{first}.jsonl"
    notes.parent.mkdir(exist_ok=True)
    notes.write_bytes(b'{"category": "gotcha", "content": "fine"}\n{"content": \n\xff\xfe\n')
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "bad notes", cwd=repo / ".hive")
    code, out, err = cli(capsys, "notes", "--json")
    assert code == 0
    assert err.startswith(f"warning: notes/{first}.jsonl:2: bad note line") and len(err.splitlines()) == 1, err
    assert [n["content"] for n in json.loads(out)] == ["fine"]


# -- configuration --------------------------------------------------------------------------------

CONFIG_CASES = [  # (name, .hive.toml bytes, env, location in the message, reason)
    ("project-broken-toml", b"max_agents = \n", {}, ".hive.toml:1", "invalid TOML"),
    ("project-wrong-type", b'# settings\nmax_agents = "three"\n', {}, ".hive.toml:2", "max_agents must be an integer"),
    ("project-unknown-key", b"max_agent = 3\n", {}, ".hive.toml:1", "did you mean 'max_agents'"),
    ("project-below-minimum", b"max_agents = 0\n", {}, ".hive.toml:1", "max_agents must be at least 1"),
    ("project-bad-choice", b'backend = "gpt"\n', {}, ".hive.toml:1", "backend must be one of"),
    ("project-bad-branch", b'target_branch = "../main"\n', {}, ".hive.toml:1", "not a valid branch name"),
    ("project-hive-branch", b'target_branch = "hive/state"\n', {}, ".hive.toml:1", "one of hive's own branches"),
    ("project-codex-not-table", b"codex = 3\n", {}, ".hive.toml:1", "codex must be a table"),
    ("project-duplicate-key", b"max_agents = 2\nmax_agents = 3\n", {}, ".hive.toml:2", "invalid TOML"),
    ("project-not-utf8", b'worker_model = "caf\xe9"\n', {}, ".hive.toml", "not valid UTF-8"),
    ("project-binary", b"\x00\x01\x02", {}, ".hive.toml:1", "invalid TOML"),
    ("project-id-prefix-newline", b'id_prefix = "hv\\n"\n', {}, ".hive.toml:1", "id_prefix"),
    ("global-broken-toml", None, {"global": b"[[\n"}, "hive-global.toml:1", "invalid TOML"),
    ("env-not-an-integer", None, {"HIVE_MAX_AGENTS": "lots"}, "HIVE_MAX_AGENTS", "must be an integer"),
    ("env-negative", None, {"HIVE_MAX_AGENTS": "-4"}, "HIVE_MAX_AGENTS", "at least 1"),
    ("env-bad-choice", None, {"HIVE_BACKEND": "gpt"}, "HIVE_BACKEND", "backend must be one of"),
    ("env-bad-branch", None, {"HIVE_TARGET_BRANCH": "a..b"}, "HIVE_TARGET_BRANCH", "not a valid branch name"),
    ("env-codex-not-a-table", None, {"HIVE_CODEX": "model = o3"}, "HIVE_CODEX", "TOML inline table"),
    ("env-timeout-float", None, {"HIVE_TEST_TIMEOUT_SECONDS": "1.5"}, "HIVE_TEST_TIMEOUT_SECONDS", "integer"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,project_file,env,where,reason", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_bad_configuration(name, project_file, env, where, reason, repo: Path, git_env: Path, two_good,
                           monkeypatch, capsys):
    if project_file is not None:
        (repo / ".hive.toml").write_bytes(project_file)
    for key, value in env.items():
        if key == "global":
            Path(os.environ["HIVE_GLOBAL_CONFIG"]).write_bytes(value)
        else:
            monkeypatch.setenv(key, value)
    from hive import config

    config._BLOB_CACHE.clear()
    code, _, err = cli(capsys, "config", "get", "max_agents")
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert where in err and reason in err, err
    # the issues are untouched, and listing them needs no configuration
    code, out, _ = cli(capsys, "list", "--json")
    assert code == 0 and {i["id"]: i for i in json.loads(out)} == two_good


def test_project_config_that_is_a_symlink_is_refused(repo: Path, tmp_path: Path, capsys):
    outside = tmp_path / "elsewhere.toml"
    outside.write_text('test_command = "touch /tmp/never"\n')
    (repo / ".hive.toml").symlink_to(outside)
    code, _, err = cli(capsys, "config", "get", "test_command")
    assert code == 2 and len(err.splitlines()) == 1 and "symlink" in err, err


# -- what agents write: result and notes files ------------------------------------------------------

def _sparse(size: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.write(b'{"status": "success", "summary": "')
            handle.truncate(size)
    return make


def _long_line(size: int, prefix: bytes = b'{"status": "success", "summary": "') -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.write(prefix)
            chunk = b"x" * (1 << 20)
            for _ in range(size >> 20):
                handle.write(chunk)
            handle.write(b'"}\n')
    return make


RESULT_CASES = [  # (name, content or writer, expected start of the problem)
    ("truncated-json", b'{"status": "succ', ".hive-result.jsonl:1: not JSON"),
    ("array", b"[1, 2, 3]\n", ".hive-result.jsonl:1: 'status' must be one of"),
    ("string", b'"success"\n', ".hive-result.jsonl:1: 'status' must be one of"),
    ("status-unknown", b'{"status": "done"}\n', ".hive-result.jsonl:1: 'status' must be one of"),
    ("status-missing", b'{"summary": "all good"}\n', ".hive-result.jsonl:1: 'status' must be one of"),
    ("summary-integer", b'{"status": "success", "summary": 3}\n', ".hive-result.jsonl:1: 'summary' and 'test_command'"),
    ("test-command-array", b'{"status": "success", "test_command": ["rm", "-rf", "/"]}\n',
     ".hive-result.jsonl:1: 'summary' and 'test_command'"),
    ("not-utf8", b'{"status": "success", "summary": "\xff\xfe"}\n', ".hive-result.jsonl:1: not JSON"),
    ("second-line-bad", b'\n{"status": "success"\n', ".hive-result.jsonl:2: not JSON"),
    ("empty", b"", ".hive-result.jsonl: empty"),
    ("blank-lines", b"\n\n  \n", ".hive-result.jsonl: empty"),
    ("line-of-100mb", _long_line(100 << 20), ".hive-result.jsonl: 104857"),
    ("sparse-2gb", _sparse(2 << 30), ".hive-result.jsonl: 2147483648 bytes"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,content,problem", RESULT_CASES, ids=[c[0] for c in RESULT_CASES])
def test_bad_result_file(name, content, problem, tmp_path: Path):
    from hive.agents import protocol

    path = tmp_path / protocol.RESULT_FILE
    if callable(content):
        content(path)
    else:
        path.write_bytes(content)
    result = protocol.read_result(tmp_path)
    assert result.status == "garbage" and not result.ok
    assert result.problem.startswith(problem) and "\n" not in result.problem, result.problem


NOTES_CASES = [  # (name, bad content before a good note, expected problem)
    ("truncated-json", b'{"content": "half\n', "line at byte 0: "),
    ("array", b"[1, 2]\n", "line at byte 0: a note needs a non-empty string 'content'"),
    ("content-integer", b'{"content": 7}\n', "line at byte 0: a note needs a non-empty string 'content'"),
    ("content-empty", b'{"content": "   "}\n', "line at byte 0: a note needs a non-empty string 'content'"),
    ("not-utf8", b'{"content": "\xff\xfe"}\n', "line at byte 0: "),
    ("line-of-100mb", None, "a line longer than 65536 bytes was skipped"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,bad,problem", NOTES_CASES, ids=[c[0] for c in NOTES_CASES])
def test_bad_notes_lines_are_skipped_and_the_good_ones_kept(name, bad, problem, tmp_path: Path):
    from hive.agents import protocol

    path = tmp_path / protocol.NOTES_FILE
    good = b'{"category": "gotcha", "content": "the good note"}\n'
    if bad is None:
        _long_line(100 << 20, b'{"content": "')(path)
        with open(path, "ab") as handle:
            handle.write(good)
    else:
        path.write_bytes(bad + good)
    batch = protocol.read_new_notes(tmp_path, 0)
    assert [n["content"] for n in batch.notes] == ["the good note"]
    assert batch.offset == path.stat().st_size
    assert len(batch.problems) == 1
    assert batch.problems[0].startswith(f"{protocol.NOTES_FILE}: ") and problem in batch.problems[0]
    assert "\n" not in batch.problems[0]


# -- hook input -------------------------------------------------------------------------------------

HOOK_INPUTS = {
    "random-bytes": bytes(range(256)) * 64,
    "too-few-fields": b"abc\n\n  \nx y\n",
    "too-many-fields": b"1 2 refs/heads/feature extra words here\n",
    "shell-metachars": b"$(touch PWNED) `touch PWNED` refs/heads/$(touch PWNED)\n;touch PWNED;\n",
    "no-trailing-newline": b"0000 1111 refs/heads/feature",
    "huge": b"0 1 refs/heads/x\n" * 300_000,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("state", ["prepared", "committed", "aborted", "", "--garbage"])
@pytest.mark.parametrize("kind", sorted(HOOK_INPUTS))
def test_garbage_on_the_reference_transaction_hook(kind: str, state: str, repo: Path):
    hook = repo / ".git" / "hooks" / "reference-transaction"
    events = repo / ".git" / "hive" / "ref-events"
    before = events.read_bytes() if events.exists() else b""
    proc = subprocess.run([str(hook), *([state] if state else [])], cwd=repo, input=HOOK_INPUTS[kind],
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    assert not list(repo.rglob("PWNED")) and not (repo.parent / "PWNED").exists()
    added = (events.read_bytes() if events.exists() else b"")[len(before):]
    if state != "committed":
        assert added == b""
    else:   # only lines about branches are reported, verbatim, never run
        assert all(line.split(b" ")[2].startswith(b"refs/heads/") for line in added.splitlines())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(HOOK_INPUTS))
def test_garbage_on_the_hook_from_a_worker_worktree(kind: str, repo: Path, git):
    """In a worker's worktree the guard reads the input: garbage is no reason to refuse, a line
    naming the target branch is (one line on stderr, exit 1)."""
    worker = repo / ".git" / "hive" / "worktrees" / "hv-hook01"
    git("worktree", "add", "-q", "-b", "hive/work/hv-hook01", str(worker), "main", cwd=repo)
    hook = repo / ".git" / "hooks" / "reference-transaction"
    proc = subprocess.run([str(hook), "prepared"], cwd=worker, input=HOOK_INPUTS[kind], capture_output=True,
                          timeout=30)
    assert (proc.returncode, proc.stderr) == (0, b"")
    guarded = HOOK_INPUTS[kind] + b"\n0 1 refs/heads/main\n"
    proc = subprocess.run([str(hook), "prepared"], cwd=worker, input=guarded, capture_output=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        "git-hive: refused: a worker worktree may not update refs/heads/main; hive merges finished work"]
    assert not list(repo.rglob("PWNED"))


HOSTILE_NAME = "$(touch PWNED) `touch PWNED`;touch PWNED"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["commondir", "GIT_COMMON_DIR", "gitdir"])
def test_hostile_dirs_the_hook_is_told_run_nothing(where: str, repo: Path, tmp_path: Path):
    """The hook takes the common dir from GIT_COMMON_DIR or from the `commondir` file of the
    GIT_DIR git names, and a receive-pack's worktree from `$PWD/gitdir`: an agent may set or
    write each. Shell in them stays text; the hook neither fails nor writes anywhere but the
    `hive/ref-events` of the folder it was told (git itself would use that folder)."""
    hook = repo / ".git" / "hooks" / "reference-transaction"
    told = tmp_path / HOSTILE_NAME
    (told / "hive").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_COMMON_DIR", "HIVE_AGENT_ID")}
    line = b"0 1 refs/heads/feature\n"
    if where == "gitdir":   # a git dir that says it is a worker's: the guard reads the input
        fake = tmp_path / "fake-git-dir"
        fake.mkdir()
        (fake / "gitdir").write_text(f"/x/hive/worktrees/{HOSTILE_NAME}\n")
        (fake / "commondir").write_text(f"{HOSTILE_NAME}\n")
        proc = subprocess.run([str(hook), "prepared"], cwd=fake, input=line + b"0 1 refs/heads/hive/state\n",
                              capture_output=True, timeout=30, env=env)
        assert proc.returncode == 1
        assert proc.stderr.decode().splitlines() == [
            "git-hive: refused: a worker worktree may not update refs/heads/hive/state; hive merges finished work"]
    else:
        if where == "commondir":
            git_dir = tmp_path / "worker-git-dir"
            git_dir.mkdir()
            (git_dir / "commondir").write_text(f"../{HOSTILE_NAME}\n")
            env["GIT_DIR"] = str(git_dir)
        else:
            env["GIT_COMMON_DIR"] = str(told)
        proc = subprocess.run([str(hook), "committed"], cwd=repo, input=line, capture_output=True, timeout=30,
                              env=env)
        assert (proc.returncode, proc.stderr) == (0, b"")
        assert (told / "hive" / "ref-events").read_bytes() == line
    assert not list(tmp_path.rglob("PWNED")) and not list(repo.rglob("PWNED"))


# -- the daemon keeps running -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_daemon_reports_bad_input_and_finishes_the_other_issues(repo: Path, project, tmp_path: Path,
                                                                     new_issue, git, daemons, state_log):
    """While the daemon works: a broken new file and a corrupted existing issue in `.hive/`; agents
    that flood their notes file with a 100 MB line and garbage, or write a truncated result first."""
    from .helpers import wait_until

    slow = [new_issue(f"slow {n}", labels=["slow"]) for n in range(2)]
    victim = new_issue("its file gets corrupted while it waits", depends_on=[slow[0]])
    noisy = new_issue("floods its notes", labels=["noisy"])
    garbage = new_issue("writes a broken result first", labels=["garbage"])
    script = write_json(tmp_path / "agents.json", {"labels": {
        "slow": work_steps([{"sleep": 2.0}]),
        "noisy": work_steps([{"run": f'"{sys.executable}" -c "import sys; sys.stdout.write(\'x\' * (100 << 20))"'
                                     " >> .hive-notes.jsonl && echo >> .hive-notes.jsonl"},
                             {"append": ".hive-notes.jsonl", "content": "{not json\n[1]\n\\xff\n"},
                             {"note": "a good note after the garbage", "category": "discovery"}]),
        "garbage": work_steps([{"result_raw": '{"status": "succ', "on_attempts": [1]},
                               {"end_turn": True, "on_attempts": [1]}]),
    }})
    log = tmp_path / "daemon.log"
    proc = daemons.start(repo, daemon_env(script, max_retries=2, stall_seconds=60),
                         "--until-idle", "--max-agents", "3", log=log)
    assert wait_until(lambda: "claimed by" in log.read_text(errors="replace"), 30), tail(log)
    broken = repo / ".hive" / "issues" / "hv-brkn01.md"
    broken.write_bytes(b"+++\ntitle = \"never closed\n+++\n")
    victim_file = repo / ".hive" / "issues" / f"{victim}.md"
    victim_file.write_text(victim_file.read_text().replace("priority = 2", "priority = 11"))
    assert proc.wait(150) == 0, tail(log)

    text = log.read_text(errors="replace")
    assert "warning: .hive/issues/hv-brkn01.md:2: broken TOML" in text, text
    assert f"warning: .hive/issues/{victim}.md:4: bad priority 11" in text, text
    assert ".hive-notes.jsonl: a line longer than 65536 bytes was skipped" in text
    project.sync(warn=False)
    # every issue finished — the corrupted one from its last good version on the branch
    assert {i: project.index.get(i).status for i in [*slow, victim, noisy, garbage]} == dict.fromkeys(
        [*slow, victim, noisy, garbage], "finalized")
    assert [n["content"] for n in project.index.notes(issue=noisy)] == ["a good note after the garbage"]
    retry = [c for c in state_log(repo) if c.issue == garbage and c.event == "retry"]
    assert len(retry) == 1 and retry[0].trailers["Hive-Reason"].startswith(".hive-result.jsonl:1: not JSON")
    # the person's broken files are left exactly as written, never committed
    assert broken.read_bytes() == b"+++\ntitle = \"never closed\n+++\n"
    assert "priority = 11" in victim_file.read_text()
    assert git("cat-file", "-e", "hive/state:issues/hv-brkn01.md", cwd=repo, check=False).returncode != 0
