"""hive's permission policy: what an agent may do, by role (answered for every backend).

Workers may edit files and run commands inside their own worktree, nothing outside it. The Queen
explores (reads, searches, read-only commands) but edits nothing but its plan files. The refinery
works like a worker, in the worktree of the branch it is merging.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from hive.backends import registry
from hive.backends.base import PermissionRequest

READ_TOOLS = {"Read", "Glob", "Grep", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite",
              "Task", "ExitPlanMode", "view_image"}
EDIT_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit", "fileChange", "apply_patch"}
SHELL_TOOLS = {"Bash", "commandExecution", "exec_command", "shell", "run"}
# Commands that change nothing, for the Queen.
READ_ONLY_COMMANDS = {"ls", "cat", "head", "tail", "grep", "rg", "find", "wc", "git", "tree", "pwd",
                      "echo", "sed", "awk", "sort", "uniq", "file", "stat", "du"}
READ_ONLY_GIT = {"log", "show", "diff", "status", "ls-files", "grep", "blame", "rev-parse", "branch"}
# Reaching outside the worktree through these is refused for every role.
FORBIDDEN_GIT = {"push", "update-ref", "worktree", "checkout", "switch", "reset", "rebase", "merge",
                 "branch", "tag", "fetch", "pull", "remote", "config", "filter-branch", "replace"}
# The refinery's job is to rebase and merge inside the worktree it is given.
REFINERY_GIT = {"checkout", "switch", "reset", "rebase", "merge", "branch", "cherry-pick"}


# Agent CLIs read permission rules from these folders inside the working tree: an agent that could
# write them would grant itself what hive's policy refuses.
AGENT_SETTINGS_DIRS = registry.settings_dirs()
SETTINGS_REFUSAL = f"agent settings ({', '.join(d + '/' for d in AGENT_SETTINGS_DIRS)}) are not the agent's to change"


def _touches_agent_settings(text: str) -> bool:
    return any(f"{name}/" in text or text.rstrip("/").endswith(name) for name in AGENT_SETTINGS_DIRS)


@dataclass
class Verdict:
    allow: bool
    reason: str = ""


def _inside(path: str, root: str, base: str = "") -> bool:
    """Whether `path` (relative ones taken from `base`, else `root`) is `root` or below it."""
    try:
        full = os.path.realpath(os.path.join(base or root, os.path.expanduser(path)))
    except OSError:                   # a link it may not follow (/proc/1/root): not the worktree
        return False
    root = os.path.realpath(root)
    return full == root or full.startswith(root + os.sep)


def _git_subcommand(words: list[str]) -> str:
    rest = words[1:]
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] in ("-C", "-c") else rest[1:]
    return rest[0] if rest else ""


def _command_words(command: str) -> list[list[str]]:
    """The simple commands of a shell line, split on ; && || | (best effort)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return [command.split()]
    commands: list[list[str]] = []
    current: list[str] = []
    for token in tokens:
        if token and set(token) <= set(";&|"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish"}


def _shell_script(program: str, words: list[str]) -> str | None:
    """The script of `<shell> [-l…] -c SCRIPT`, or None for any other command."""
    if program not in SHELLS:
        return None
    for index, word in enumerate(words[1:], 1):
        if not word.startswith("-") or word == "--":
            return None
        if "c" in word[1:] and not word.startswith("--"):
            return words[index + 1] if index + 1 < len(words) else ""
    return None


def _check_shell(command: str, roots: tuple[str, ...], role: str, cwd: str) -> Verdict:
    """Judge each simple command by the folder it acts in: the reported `cwd` (else the first
    root), moved by every `cd` on the way; that folder and the paths named must be in a root."""
    root, folder = roots[0], cwd or roots[0]

    def inside(path: str) -> bool:
        return any(_inside(path, r, folder) for r in roots)

    if _touches_agent_settings(command):
        return Verdict(False, SETTINGS_REFUSAL)
    for words in _command_words(command):
        words = [w for w in words if "=" not in w.split("/")[0] or w.startswith(("/", "."))] or words
        program = os.path.basename(words[0]) if words else ""
        if program == "cd":
            target = words[1] if len(words) > 1 else "~"
            if not inside(target):
                return Verdict(False, f"cd {target} leaves the worktree")
            folder = os.path.realpath(os.path.join(folder, os.path.expanduser(target)))
            continue
        if not inside(folder):
            return Verdict(False, f"`{program}` would run in {folder}, outside the worktree {root}")
        script = _shell_script(program, words)
        if script is not None:      # `bash -lc "cd / && …"`, as codex sends every command: judge the script
            verdict = _check_shell(script, roots, role, folder)
            if not verdict.allow:
                return verdict
            continue
        if program == "git":
            sub = _git_subcommand(words)
            allowed = REFINERY_GIT if role == "refinery" else {"branch"} if len(words) <= 2 else set()
            if sub in FORBIDDEN_GIT and sub not in allowed:
                return Verdict(False, f"`git {sub}` is hive's job, not the agent's")
            if "-C" in words:
                target = words[words.index("-C") + 1] if words.index("-C") + 1 < len(words) else ""
                if not inside(target):
                    return Verdict(False, f"git -C {target} is outside the worktree")
            if role == "queen" and sub not in READ_ONLY_GIT:
                return Verdict(False, "the Queen explores read-only")
        elif role == "queen" and program not in READ_ONLY_COMMANDS:
            return Verdict(False, f"the Queen explores read-only (`{program}` is not allowed)")
        for word in words[1:]:
            if word.startswith("/") and not word.startswith(("/dev/null", "/tmp/", "/usr/", "/bin/")) \
                    and not inside(word):
                return Verdict(False, f"{word} is outside the worktree")
            if word.startswith("..") and not inside(word):
                return Verdict(False, f"{word} is outside the worktree")
    return Verdict(True)


def decide(request: PermissionRequest, *, role: str, root: str, plan_root: str = "") -> Verdict:
    """Allow or deny one permission request of an agent working in `root`.

    For the Queen, `root` is the repository it explores and `plan_root` the plan directory, the
    folder its session starts in and the only place it may write (issue files, context.md,
    PLAN.md). Relative paths are taken from the folder the request acts in (`request.cwd`, else
    the session's folder).
    """
    tool = request.tool
    base = request.cwd or plan_root or root
    paths = [os.path.join(base, os.path.expanduser(p)) for p in request.paths]
    for key in ("file_path", "path", "notebook_path"):
        value = request.input.get(key)
        if isinstance(value, str):
            paths.append(os.path.join(base, os.path.expanduser(value)))
    for path in paths:
        if not _inside(path, root):
            if tool in READ_TOOLS and role == "queen":
                continue
            return Verdict(False, f"{path} is outside the worktree {root}")
    if tool in READ_TOOLS:
        return Verdict(True)
    if tool in EDIT_TOOLS and any(_touches_agent_settings(p) for p in paths):
        return Verdict(False, SETTINGS_REFUSAL)
    if tool in EDIT_TOOLS:
        if role == "queen":
            def plan_file(p: str) -> bool:
                full = os.path.realpath(os.path.join(root, p))
                rel = os.path.relpath(full, os.path.realpath(plan_root)) if plan_root else ""
                return bool(plan_root) and _inside(full, plan_root) and (
                    rel in ("context.md", "PLAN.md") or (rel.startswith("issues/") and rel.endswith(".md")))
            ok = bool(paths) and all(plan_file(p) for p in paths)
            return Verdict(ok, "" if ok else "the Queen writes only issue files, context.md and PLAN.md "
                                             "in its plan directory")
        return Verdict(True)
    if tool in SHELL_TOOLS:
        command = request.command or str(request.input.get("command") or request.input.get("cmd") or "")
        if isinstance(request.input.get("command"), list):
            command = shlex.join(request.input["command"])
        roots = (root, plan_root) if role == "queen" and plan_root else (root,)
        return _check_shell(command, roots, role, request.cwd or (plan_root if role == "queen" else ""))
    return Verdict(False, f"tool {tool} is not allowed for a {role}")
