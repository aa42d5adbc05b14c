"""Broken environments corpus: every command, run as a user runs it (a subprocess), where
something around hive is broken — a missing agent CLI or editor, a missing directory, garbage in
runtime.db, index.db or the `.hive/` git index, a demo directory that exists.

Each case checks the contract of DESIGN §5: exit 1 or 2, exactly one line on stderr naming the
cause, no traceback, and nothing lost (the issues are all still listed, no plan branch or worktree
left behind, hive/state unchanged where the command failed). The runtime database case also
proves `doctor` detects the damage and `doctor --fix` repairs it (issue 17).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

MISSING = "/nonexistent/hive-test/bin"


@dataclass
class Case:
    name: str
    args: tuple[str, ...]                      # {id} is the first issue's id, {repo} the repository
    cause: str                                 # a piece of the one stderr line
    env: dict[str, str] = field(default_factory=dict)
    breaks: Callable[[Path], None] | None = None
    codes: tuple[int, ...] = (1,)


def _garbage(relative: str) -> Callable[[Path], None]:
    def write(repo: Path) -> None:
        target = repo / relative
        for suffix in ("-wal", "-shm"):
            Path(str(target) + suffix).unlink(missing_ok=True)
        target.write_bytes(b"this is not what hive wrote\n" * 10)
    return write


def _runtime_garbage(repo: Path) -> None:
    _garbage(".git/hive/runtime.db")(repo)


CASES = [
    Case("plan-without-claude", ("plan", "build a calculator", "--headless", "--no-approve"),
         "queen backend claude: `/nonexistent/hive-test/bin/claude` not found",
         env={"HIVE_CLAUDE_COMMAND": f"{MISSING}/claude"}),
    Case("run-without-claude", ("run", "--until-idle"), "worker backend claude",
         env={"HIVE_CLAUDE_COMMAND": f"{MISSING}/claude"}),
    Case("run-without-codex", ("run", "--until-idle", "--backend", "codex"), "`/nonexistent/hive-test/bin/codex` not found",
         env={"HIVE_CODEX_COMMAND": f"{MISSING}/codex"}),
    Case("edit-without-editor", ("edit", "{id}"), "cannot start the editor", env={"EDITOR": f"{MISSING}/editor"}),
    Case("edit-unreadable-editor", ("edit", "{id}"), "cannot be read as a command", env={"EDITOR": '"vim'},
         codes=(2,)),
    Case("missing-directory", ("-C", "/nonexistent/hive-test", "list"), "-C /nonexistent/hive-test", codes=(2,)),
    Case("two-directories", ("-C", "{repo}", "-C", "{repo}", "list"), "-C is given more than once", codes=(2,)),
    Case("run-two-directories", ("run", "-C", "{repo}", "-C", "{repo}", "--backend", "scripted"),
         "-C is given more than once", codes=(2,)),
    Case("demo-keep-existing", ("demo", "--keep", "{repo}"), "it exists and is not empty", codes=(2,)),
    Case("status-garbage-runtime", ("status",), "runtime.db is not a usable database", breaks=_runtime_garbage),
    Case("run-garbage-runtime", ("run", "--until-idle", "--backend", "scripted"), "runtime.db is not a usable database",
         breaks=_runtime_garbage),
    Case("project-config-a-directory", ("config", "get", "backend"), ".hive.toml",
         breaks=lambda repo: (repo / ".hive.toml").mkdir(), codes=(2,)),
    Case("global-config-garbage", ("config", "get", "backend"), "home-global.toml: config file is not valid UTF-8",
         breaks=lambda repo: (repo.parent / "home-global.toml").write_bytes(b"\xff\xfe = ="),
         env={"HIVE_GLOBAL_CONFIG": "{repo}/../home-global.toml"}, codes=(2,)),
    Case("bad-env-value", ("run", "--until-idle"), "HIVE_MAX_AGENTS", env={"HIVE_MAX_AGENTS": "many"}, codes=(2,)),
]


@pytest.fixture
def setup(repo: Path, hive) -> tuple[Path, list[str]]:
    ids = [hive("create", title, cwd=repo).stdout.strip() for title in ("first", "second")]
    hive("status", cwd=repo)   # runtime.db exists from here on
    return repo, ids


def _fill(text: str, repo: Path, ids: list[str]) -> str:
    return text.replace("{id}", ids[0]).replace("{repo}", str(repo))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_broken_environment_is_one_line_and_loses_nothing(case: Case, setup, hive, git, list_json):
    repo, ids = setup
    if case.breaks:
        case.breaks(repo)
    before = git("rev-parse", "hive/state", cwd=repo).stdout
    env = {k: _fill(v, repo, ids) for k, v in case.env.items()}
    done = hive(*(_fill(a, repo, ids) for a in case.args), cwd=repo, env=env, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode in case.codes, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("git hive: ") and case.cause in lines[0], lines[0]
    assert git("rev-parse", "hive/state", cwd=repo).stdout == before
    assert git("for-each-ref", "refs/heads/hive/plan", "refs/heads/hive/work", cwd=repo).stdout == ""
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 2
    if not (repo / ".hive.toml").is_dir() and "runtime" not in case.name and "global" not in case.name:
        assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_doctor_detects_and_fix_repairs_a_damaged_runtime_database(setup, hive, list_json):
    repo, ids = setup
    _runtime_garbage(repo)
    checked = hive("doctor", cwd=repo, check=False)
    assert checked.returncode == 1 and "runtime.db is not a usable database" in checked.stdout
    fixed = hive("doctor", "--fix", cwd=repo, check=False)
    assert "runtime database: the damaged one is kept as runtime.db.damaged-" in fixed.stdout
    assert list((repo / ".git" / "hive").glob("runtime.db.damaged-*"))
    assert hive("status", cwd=repo, check=False).returncode == 0
    assert "runtime database" in hive("doctor", cwd=repo, check=False).stdout.split("!!")[0]
    assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_a_garbage_index_db_is_rebuilt(setup, hive, list_json):
    repo, ids = setup
    _garbage(".git/hive/index.db")(repo)
    done = hive("list", cwd=repo, check=False)
    assert done.returncode == 0 and done.stderr == ""
    assert sorted(i["id"] for i in list_json(cwd=repo)) == sorted(ids)


def test_a_damaged_checkout_index_is_reported_and_repaired(setup, hive, git, list_json):
    repo, ids = setup
    archived = hive("create", "finished", cwd=repo).stdout.strip()
    hive("cancel", archived, cwd=repo)   # in the archive, which .hive/ does not check out
    admin = (repo / ".hive" / ".git").read_text().split("gitdir:", 1)[1].strip()
    _garbage(str(Path(admin, "index").relative_to(repo)))(repo)
    created = hive("create", "third", cwd=repo, check=False)
    assert created.returncode == 0 and "doctor --fix" in created.stderr and "Traceback" not in created.stderr
    checked = hive("doctor", cwd=repo, check=False)
    assert checked.returncode == 1 and "git index" in checked.stdout and "is damaged" in checked.stdout
    fixed = hive("doctor", "--fix", cwd=repo, check=False)
    assert "rebuilt the damaged git index of .hive/" in fixed.stdout and "Traceback" not in fixed.stderr
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""   # the archive marked skip-worktree again
    assert not (repo / ".hive" / "issues" / "archive").exists()
    assert len(list_json(cwd=repo)) == 4
    assert (repo / ".hive" / "issues" / f"{created.stdout.strip()}.md").is_file()
