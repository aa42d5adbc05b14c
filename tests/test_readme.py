"""The README's command blocks, run as a newcomer would run them (so they cannot drift from what
hive does): in a fresh repository with a remote, on the scripted agents (no API key). Where a
block cannot run unchanged in a test, `ADAPTED` says how and why; every other line runs as written.
The two quick-start blocks (install, demo, the suite) are what `.ci/run` and the demo test run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.test_backend_claude import CLAUDE, REQUIRE_CLIS, WHY_NOT, offline_env

README = Path(__file__).resolve().parent.parent / "README.md"
# (pattern, replacement, why)
ADAPTED = [
    (r"^cd your-repo$", 'cd "$REPO"', "the test's repository"),
    (r"^git hive run(\s+#.*)?$", "git hive run --until-idle", "a run that ends when the queue is done"),
    (r"git hive status --watch", "git hive status", "one picture instead of a live one"),
    (r"^git hive watch(\s+#.*)?$", "timeout 3 git hive watch || [ $? = 124 ]", "the watcher runs until stopped"),
    (r"^git hive plan (\"[^\"]*\")(\s+#.*)?$", r"echo a | git hive plan \1", "the review prompt answered: approve"),
    (r"^(git hive [a-z ]+)PLAN\b", r'PLAN=${PLAN:-$(proposed_plan)}; \1"$PLAN"',
     "the plan `plans` lists (the one left for review)"),
]


PRELUDE = """proposed_plan() {
    git hive plans --json | python3 -c 'import json, sys
print([p["name"] for p in json.load(sys.stdin) if p["status"] == "proposed"][0])'
}
"""


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def adapted(block: str) -> str:
    lines = []
    for line in block.splitlines():
        for pattern, replacement, _ in ADAPTED:
            line = re.sub(pattern, replacement, line)
        lines.append(line)
    return PRELUDE + "\n".join(lines)


def using_blocks() -> list[str]:
    """The blocks of "Using it" and the sections up to "Real agents" (which needs a real CLI)."""
    text = README.read_text()
    start, end = text.index("## Using it"), text.index("## Real agents")
    return bash_blocks(text[start:end])


def test_every_block_of_using_it_runs_as_written(repo: Path, git, tmp_path: Path) -> None:
    remote = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    (repo / "spec.md").write_text("Add a health endpoint\n\nGET /health answers 200.\n")
    env = {**os.environ, "REPO": str(repo), "HIVE_BACKEND": "scripted",
           "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    blocks = using_blocks()
    assert len(blocks) >= 4
    for block in blocks:
        script = adapted(block)
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{script}\n---\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stdout + done.stderr, script
    listed = subprocess.run(["git", "hive", "list", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    titles = {i["title"]: i["status"] for i in __import__("json").loads(listed.stdout)}
    assert titles["Add JWT login"] == "finalized" and titles["Tests for JWT"] == "finalized", titles
    assert "Add JWT login with refresh tokens and tests" in titles and "Add a health endpoint" in titles, titles
    remote_state = git("ls-remote", str(remote), "refs/heads/hive/state", cwd=repo).stdout
    assert remote_state.strip(), "`git hive sync` pushed hive/state"


@pytest.mark.parametrize("pattern,replacement,why", ADAPTED, ids=[a[2] for a in ADAPTED])
def test_each_adaptation_still_matches_a_readme_line(pattern: str, replacement: str, why: str) -> None:
    lines = [line for block in using_blocks() for line in block.splitlines()]
    assert any(re.search(pattern, line) for line in lines), f"no README line needs: {why}"


def test_the_real_agents_block_runs_with_the_real_claude_cli(repo: Path, tmp_path: Path) -> None:
    """The "Real agents" block with the real `claude` CLI against the fake Anthropic API (the
    queue empty: what an agent does there is tests/test_backend_claude.py's)."""
    if not CLAUDE:
        if REQUIRE_CLIS:
            pytest.fail(WHY_NOT)
        pytest.skip(WHY_NOT)
    text = README.read_text()
    start = text.index("## Real agents")
    block = bash_blocks(text[start:])[0]
    with FakeAnthropic() as api:
        env = {**os.environ, **offline_env(api, tmp_path / "claude-config"), "HIVE_CLAUDE_COMMAND": CLAUDE,
               "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", adapted(block)], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{block}\n---\n{done.stdout}\n{done.stderr}"
    assert "claude" in done.stdout and "Traceback" not in done.stdout + done.stderr
