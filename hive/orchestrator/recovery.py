"""Recovery at start-up: make the state consistent after any kind of previous ending, SIGKILL
included — agent processes left behind are killed, their issues go back to the queue (counting a
failure against their budget) and leftover worktrees are removed."""

from __future__ import annotations

import os
import signal
from typing import Callable, Collection

from hive import lifecycle
from hive.agents.ids import is_agent_id
from hive.config import Config
from hive.lifecycle import TransitionRefused
from hive.project import Project
from hive.runtime import Runtime, is_alive
from hive.workspace import worktrees


def kill_lost_agents(runtime: Runtime) -> set[str]:
    """Kill the agent processes a previous daemon left running; the ids they worked as."""
    previous = set()
    for agent in runtime.agents():
        previous.add(agent["id"])
        pid = agent.get("pid") or 0
        if pid and is_alive(pid, agent.get("pid_start") or ""):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        runtime.remove_agent(agent["id"])
    return previous


def requeue_lost_issues(project: Project, runtime: Runtime, config: Config, previous_agents: set[str], *,
                        shared: bool, log: Callable[[str], None]) -> None:
    """Issues in progress under an agent that is gone: a failed attempt, back to open (or escalated)."""
    project.update_index()
    for issue in project.index.list(["in_progress"]):
        if shared and issue.assignee not in previous_agents:
            continue  # another machine's claim: its lease says when it may be taken over
        if issue.assignee not in previous_agents and not is_agent_id(issue.assignee):
            continue  # a person took it (`update --status in_progress --assignee me`)
        error = f"agent {issue.assignee or '?'} was lost when the daemon stopped"
        decision = lifecycle.count_failure(runtime, config, issue.id, error)
        try:
            lifecycle.recover(project, issue.id, issue.assignee, error, decision)
        except TransitionRefused:
            pass   # changed meanwhile
        log(f"{issue.id} recovered → {lifecycle.status_after(decision)} ({decision.reason})")


def clean_leftovers(project: Project, running: Collection[str]) -> None:
    """Remove worktrees no issue needs any more (a done issue's branch is kept for its merge)."""
    keep = {issue.id for issue in project.index.list(["done", "escalated", "failed"])}
    for issue_id in worktrees.leftover_worktrees(project.paths):
        if issue_id in running:
            continue
        issue = project.index.get(issue_id)
        if issue_id in keep:
            if issue is not None and issue.status == "done":
                worktrees.remove(project.paths, issue_id, delete_branch=False)
            continue
        worktrees.remove(project.paths, issue_id)
