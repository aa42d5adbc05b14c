"""The permission policy every backend's agents are held to (hive/agents/permissions.py)."""

from __future__ import annotations

import pytest

from hive.backends.base import PermissionRequest
from hive.agents.permissions import decide

ROOT = "/repo/.git/hive/worktrees/hv-abc123"


def ask(tool: str, role: str = "worker", plan_root: str = "", **input: object) -> bool:
    request = PermissionRequest("r1", tool, dict(input), command=str(input.get("command", "")))
    return decide(request, role=role, root=ROOT if role != "queen" else "/repo", plan_root=plan_root).allow


@pytest.mark.parametrize("path", ["src/app.py", f"{ROOT}/README.md", "./docs/x.md"])
def test_worker_may_write_inside_its_worktree(path: str) -> None:
    assert ask("Write", file_path=path)
    assert ask("Edit", file_path=path)


@pytest.mark.parametrize("path", ["/etc/passwd", "../hv-other1/x.py", "/repo/main.py", "~/.bashrc"])
def test_worker_may_not_write_outside_its_worktree(path: str) -> None:
    assert not ask("Write", file_path=path)


@pytest.mark.parametrize("command", ["python -m pytest -q", "git add -A && git commit -m 'x'",
                                     "ls src | grep py", "cat README.md"])
def test_worker_may_run_commands_in_its_worktree(command: str) -> None:
    assert ask("Bash", command=command)


@pytest.mark.parametrize("command", ["git push origin HEAD", "git update-ref refs/heads/main HEAD",
                                     "cd /repo && make", "rm -rf /repo/src", "cat ../hv-other1/secret",
                                     "git -C /repo commit -am x", "git checkout main"])
def test_worker_may_not_reach_outside_or_move_branches(command: str) -> None:
    assert not ask("Bash", command=command)


@pytest.mark.parametrize("request_", [("Write", {"file_path": ".claude/settings.local.json"}),
                                      ("Edit", {"file_path": f"{ROOT}/.codex/config.toml"}),
                                      ("Bash", {"command": "mkdir -p .claude && echo '{}' > .claude/settings.json"})])
def test_no_agent_may_rewrite_its_own_permission_settings(request_: tuple[str, dict]) -> None:
    tool, data = request_
    assert not ask(tool, **data)


def test_the_queen_explores_read_only_and_writes_only_plan_files() -> None:
    plan = "/repo/.git/hive/plans/add-x-1a2b"
    assert ask("Read", role="queen", plan_root=plan, file_path="/repo/src/app.py")
    assert ask("Bash", role="queen", plan_root=plan, command="git log --oneline -5")
    assert ask("Bash", role="queen", plan_root=plan, command="grep -rn TODO src")
    assert not ask("Bash", role="queen", plan_root=plan, command="python setup.py install")
    assert not ask("Write", role="queen", plan_root=plan, file_path="/repo/src/app.py")
    assert ask("Write", role="queen", plan_root=plan, file_path=f"{plan}/issues/hv-aaaaa1.md")
    assert ask("Edit", role="queen", plan_root=plan, file_path=f"{plan}/context.md")
    assert not ask("Write", role="queen", plan_root=plan, file_path=f"{plan}/notes/hv-aaaaa1.jsonl")


def test_unknown_tools_are_denied() -> None:
    assert not ask("SomethingNew", file_path="x")


def _in(cwd: str, command: str, role: str = "refinery", plan_root: str = "") -> bool:
    request = PermissionRequest("r1", "commandExecution", {"command": command}, command=command, cwd=cwd)
    return decide(request, role=role, root=ROOT if role != "queen" else "/repo", plan_root=plan_root).allow


@pytest.mark.parametrize("command", [f"cd {ROOT} && git rebase --continue", f"cd {ROOT}; git status",
                                     "cd hv-abc123 && git add -A && git commit -m x"])
def test_a_command_is_judged_by_the_folder_it_acts_in(command: str) -> None:
    """Codex reports the cwd a command starts in: `cd <worktree> && git ...` from outside acts in
    the worktree, and is allowed; the same command without the cd acts outside it, and is not."""
    assert _in("/repo/.git/hive/worktrees", command)
    assert _in(ROOT, "git status && python -m pytest -q")
    assert not _in("/repo/.git/hive/worktrees", "git status")
    assert not _in("/repo/.git/hive/worktrees", "rm -rf hv-other1")
    assert not _in(ROOT, "cd .. && rm -rf hv-other1")
    assert not _in(ROOT, f"cd {ROOT} && cd /repo && git status")


def test_the_queen_works_from_its_plan_directory() -> None:
    plan = "/repo/.git/hive/plans/p1"
    assert _in(plan, "ls issues && cat context.md", role="queen", plan_root=plan)
    assert _in("", "git log --oneline", role="queen", plan_root=plan)   # no cwd reported: the plan dir
    request = PermissionRequest("r1", "Write", {"file_path": "issues/hv-aaaaaa.md"})
    assert decide(request, role="queen", root="/repo", plan_root=plan).allow   # relative: from the plan dir
    assert not _in(plan, "rm -rf issues", role="queen", plan_root=plan)


@pytest.mark.parametrize("argv", [["bash", "-lc", "cd /repo && make"], ["/bin/sh", "-c", "rm -rf /etc/x"],
                                  ["zsh", "-l", "-c", "git push origin HEAD"],
                                  ["bash", "-c", "bash -c 'cat /repo/main.py'"]])
def test_a_shell_given_a_script_is_judged_by_its_script(argv: list[str]) -> None:
    """Codex sends every command as argv `bash -lc SCRIPT`: the script is what runs."""
    assert not ask("exec_command", command=argv)
    assert not ask("Bash", command=" ".join([*argv[:-1], repr(argv[-1])]))


def test_a_shell_script_inside_the_worktree_is_allowed() -> None:
    assert ask("exec_command", command=["bash", "-lc", "git add -A && git commit -m x && ls src"])
    assert ask("Bash", command="bash -c 'python -m pytest -q'")

