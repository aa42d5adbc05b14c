"""`git hive demo`: the whole pipeline on a throwaway repository, with scripted agents.

A small calculator project gets an epic of eight issues with dependencies. Scripted agents (real
processes, no API key) write code and tests, commit, leave notes; one fails its first attempt and
is retried; two edit the same line of the README, so the second merge conflicts and the scripted
refinery resolves it. The merge pipeline replays, tests (`python -m unittest`) and merges each
branch. At the end: the issues, the target branch's history and the notes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from hive import git
from hive.orchestrator.assemble import build_daemon
from hive.project import Project

README = """# calc

A tiny calculator library, built by git-hive's demo agents.

Operations: none yet.
"""

OPERATIONS = {
    "add": ("a + b", "(2, 3), 5"),
    "subtract": ("a - b", "(5, 3), 2"),
    "multiply": ("a * b", "(4, 3), 12"),
    "divide": ("a / b", "(8, 2), 4"),
    "power": ("a ** b", "(2, 5), 32"),
}


def _module(op: str) -> str:
    expr, _ = OPERATIONS[op]
    return f'def {op}(a, b):\n    """{op.capitalize()} two numbers."""\n    return {expr}\n'


def _test(op: str) -> str:
    _, case = OPERATIONS[op]
    args, expected = case.rsplit(", ", 1)
    return (f"import unittest\n\nfrom calc.{op} import {op}\n\n\n"
            f"class Test{op.capitalize()}(unittest.TestCase):\n"
            f"    def test_{op}(self):\n        self.assertEqual({op}{args}, {expected})\n")


def _worker_steps(op: str, *, note: dict | None = None, fail_first: bool = False) -> list[dict]:
    steps: list[dict] = [{"say": f"Implementing {op} for {{issue}}"}]
    if fail_first:
        steps.append({"fail_times": 1, "summary": f"first try at {op}: forgot the tests"})
    steps += [
        {"write": f"calc/{op}.py", "content": _module(op)},
        {"write": f"tests/test_{op}.py", "content": _test(op)},
        {"run": f"python -m unittest -q tests.test_{op}", "must_succeed": True},
        {"commit": f"calc: {op}"},
        {"tokens": {"input": 2400, "output": 600}},
    ]
    if note:
        steps.append(note)
    steps.append({"result": "success", "summary": f"calc.{op} with a unit test",
                  "test_command": f"python -m unittest -q tests.test_{op}"})
    return steps


def _readme_steps(op: str) -> list[dict]:
    return [
        {"edit": "README.md", "find": "Operations: none yet.", "replace": f"Operations: {op}."},
        {"commit": f"README: document {op}"},
        {"tokens": {"input": 900, "output": 120}},
        {"result": "success", "summary": f"README lists {op}"},
    ]


# The scripted refinery: rebase, and resolve the README's "Operations:" line by taking the union.
RESOLVE = r'''
import re, pathlib
p = pathlib.Path("README.md")
text = p.read_text()
def union(m):
    ops = []
    for line in m.group(0).splitlines():
        if line.startswith("Operations:"):
            ops += [o.strip(" .") for o in line[len("Operations:"):].split(",") if o.strip(" .") and "none yet" not in o]
    return "Operations: " + ", ".join(dict.fromkeys(ops)) + "."
p.write_text(re.sub(r"<<<<<<<[^\n]*\n(.*?)\n=======\n(.*?)\n>>>>>>>[^\n]*", union, text, flags=re.S))
'''

def refinery_steps() -> list[dict]:
    return [
        {"cd": "{worktree}"},
        {"say": "Refinery: rebasing {issue} onto {target}"},
        {"run": "git -c core.editor=true rebase {target}"},
        # the resolver inline: the refinery's jail shows it nothing outside the worktree
        {"run": f"{shlex.quote(sys.executable)} -c {shlex.quote(RESOLVE)} && git add README.md && "
                "git -c core.editor=true rebase --continue", "must_succeed": True},
        {"tokens": {"input": 3000, "output": 400}},
        {"result": {"status": "merged", "summary": "merged both README changes"}},
    ]


def build_script() -> dict:
    return {
        "labels": {
            "add": _worker_steps("add", note={"note": "run tests with `python -m unittest -q` from the repo root",
                                              "category": "gotcha"}),
            "subtract": _worker_steps("subtract"),
            "multiply": _worker_steps("multiply", fail_first=True),
            "divide": _worker_steps("divide", note={"note": "divide returns a float: 8 / 2 == 4.0",
                                                    "category": "discovery"}),
            "power": _worker_steps("power"),
            "readme-add": _readme_steps("add"),
            "readme-subtract": _readme_steps("subtract"),
        },
        "roles": {"refinery": refinery_steps()},
    }


def _git(args: list[str], cwd: Path) -> str:
    return git.run(args, cwd).stdout


def _hive(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "hive", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git hive {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def make_repo(root: Path, script_path: Path) -> Path:
    repo = root / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text('"""calc: a tiny calculator."""\n')
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "README.md").write_text(README)
    # as in any Python project: the agents' test runs write bytecode, which is no one's work
    (repo / ".gitignore").write_text("__pycache__/\n")
    (repo / ".hive.toml").write_text(
        "# git-hive settings for the demo\n"
        'backend = "scripted"\n'
        f'scripted_script = "{script_path}"\n'
        "max_agents = 3\n"
        'test_command = "python -m unittest -q"\n')
    _git(["init", "-q", "-b", "main"], repo)
    _git(["config", "user.name", "Demo Person"], repo)
    _git(["config", "user.email", "demo@example.invalid"], repo)
    _git(["add", "-A"], repo)
    _git(["commit", "-q", "-m", "calc: an empty calculator"], repo)
    return repo


def plan(repo: Path) -> dict[str, str]:
    """The epic and its issues, created through the real CLI."""
    ids: dict[str, str] = {}

    def create(key: str, title: str, *extra: str) -> None:
        ids[key] = _hive(["create", title, *extra], repo)

    create("epic", "Calculator library", "-t", "epic", "-p", "1",
           "-d", "Five operations, each with a unit test, and a README that lists them.")
    create("add", "Add `add`", "--parent", ids["epic"], "-l", "add", "-p", "1")
    create("subtract", "Add `subtract`", "--parent", ids["epic"], "-l", "subtract", "-p", "1")
    create("multiply", "Add `multiply`", "--parent", ids["epic"], "-l", "multiply",
           "--depends-on", ids["add"])
    create("divide", "Add `divide`", "--parent", ids["epic"], "-l", "divide", "--depends-on", ids["multiply"])
    create("power", "Add `power`", "--parent", ids["epic"], "-l", "power", "--depends-on", ids["multiply"])
    create("readme-add", "Document add in the README", "--parent", ids["epic"], "-l", "readme-add",
           "--depends-on", ids["add"])
    create("readme-subtract", "Document subtract in the README", "--parent", ids["epic"],
           "-l", "readme-subtract", "--depends-on", ids["subtract"])
    return ids


@contextmanager
def _no_repository_from_the_environment() -> Iterator[None]:
    """The repository a person's environment names (a hook's GIT_DIR and GIT_INDEX_FILE, an
    exported GIT_WORK_TREE) left out of this process while the demo runs, for git and hive alike:
    the demo's commits and its queue go into its own repository, never into theirs."""
    kept = {name: os.environ.pop(name) for name in git.LOCATION_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(kept)


def run_demo(keep: Path | None = None, out: Callable[[str], None] = print) -> int:
    with _no_repository_from_the_environment():
        return _run_demo(keep, out)


def _run_demo(keep: Path | None, out: Callable[[str], None]) -> int:
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="hive-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    script_path = root / "agents.json"
    script_path.write_text(json.dumps(build_script(), indent=2))
    started = time.perf_counter()
    repo = make_repo(root, script_path)
    out(f"demo repository: {repo}")
    out(_hive(["init"], repo).splitlines()[-1])
    ids = plan(repo)
    out(f"planned {len(ids)} issues (an epic and {len(ids) - 1} tasks with dependencies):\n")
    out(_hive(["list"], repo))
    out("\nrunning the agents (scripted backend, 3 at a time):\n")

    project = Project.open(repo)
    project.sync(warn=False)
    daemon = build_daemon(project, backend=None, max_agents=None, until_idle=True, log=out)
    asyncio.run(daemon.run())
    took = time.perf_counter() - started

    out("\n== issues ==")
    out(_hive(["list"], repo))
    out(f"\n== {git.STATE_BRANCH}: what the queue did ==")
    events = _git(["log", "--format=%(trailers:key=Hive-Event,valueonly,separator=)", git.STATE_REF], repo).split()
    counts: dict[str, int] = {}
    for event in events:
        counts[event] = counts.get(event, 0) + 1
    out(", ".join(f"{n} {e}" for e, n in sorted(counts.items(), key=lambda kv: -kv[1])))
    out("\n== main ==")
    out(_git(["log", "--oneline", "main"], repo).rstrip())
    out("\n== notes the agents left ==")
    out(_hive(["notes"], repo))
    tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=repo, capture_output=True, text=True)
    statuses = json.loads(_hive(["list", "--json"], repo))
    finalized = sum(1 for i in statuses if i["status"] == "finalized")
    out(f"\n{finalized}/{len(statuses)} issues finalized in {took:.1f}s; "
        f"tests on main: {'pass' if tests.returncode == 0 else 'FAIL'}")
    if keep:
        out(f"the repository is kept at {repo}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if finalized == len(statuses) and tests.returncode == 0 else 1
