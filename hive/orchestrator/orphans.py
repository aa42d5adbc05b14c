"""Which machine holds a claim, and the issues left in progress by a daemon of this machine that
is gone. Light on purpose: `git hive status` asks it whenever no daemon runs."""

from __future__ import annotations

import socket

from hive import git
from hive.project import Project
from hive.state.issue_file import Issue

ORPHANED = ("held by an agent of a hive daemon that is gone: the next `git hive run` (or "
            "`git hive doctor --fix`) puts it back in the queue and ends any agent left behind")


def machine_name(paths: git.RepoPaths) -> str:
    """How a claim names the machine holding it: the host and the clone's folder name."""
    return f"{socket.gethostname()}:{paths.main_worktree.name}"


def claimed_on(issue: Issue, machine: str) -> bool:
    """Whether the issue's claim (the one it is in progress under, or the one its `done` came from)
    names `machine`; a claim that names none (a queue not shared, or shared before claims named
    machines) counts as every machine's."""
    return str(issue.extra.get("machine", "") or machine) == machine


def orphaned_issues(project: Project) -> list[Issue]:
    """The issues in progress for this machine's agents (a local claim, or a shared one naming this
    machine): while no daemon runs here, nothing moves them on until a recovery."""
    here = machine_name(project.paths)
    return [i for i in project.index.list(["in_progress"]) if claimed_on(i, here)]
