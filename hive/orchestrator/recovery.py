"""Recovery at start-up: make the state consistent after any kind of previous ending, SIGKILL
included. A crash is not the agents' fault: the processes a dead daemon left behind (agents, the
refinery, merge tests) are ended, each whole process group, before anything runs in their
worktrees; an agent that had finished (commits beyond its base and a success result) is taken as
done; the others' issues go back to the queue without spending any budget; leftover worktrees are
removed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Collection

from hive import cost, lifecycle
from hive.agents import protocol
from hive.agents.ids import is_agent_id
from hive.backends.processes import group_alive, killpg
from hive.config import Config
from hive.jail import sweep_gates
from hive.lifecycle import TransitionRefused
from hive.project import Project
from hive.orchestrator.orphans import claimed_on, machine_name, orphaned_issues
from hive.runtime import DaemonLock, Runtime, handover, is_alive
from hive.workspace import retention, spares, worktrees

KILL_WAIT_SECONDS = 10.0
NOT_COUNTED = lifecycle.Decision(lifecycle.RETRY, "lost with the daemon: no budget spent")


def recover_now(project: Project, config: Config, log: Callable[[str], None]) -> int:
    """What a daemon's start does, without the daemon (`git hive doctor --fix`): end the agents a
    dead daemon left, put its issues back, clean the leftovers; how many issues were orphaned.
    Holds the daemon lock meanwhile; -1 if a daemon runs."""
    lock = DaemonLock(project.paths)
    if not lock.acquire():
        return -1
    runtime = Runtime(project.paths)
    try:
        orphans = orphaned_issues(project)
        previous = kill_lost_agents(runtime)
        requeue_lost_issues(project, runtime, config, previous,
                            shared=any(i.extra.get("machine") for i in orphans), log=log)
        clean_leftovers(project, set(), runtime)
        return len(orphans)
    finally:
        runtime.close()
        lock.release()


def kill_lost_agents(runtime: Runtime) -> dict[str, dict[str, Any]]:
    """End the process groups (agents, merge tests) a previous daemon left running, and wait
    until they are gone; their rows by id (what each worked on)."""
    previous, groups = {}, []
    for agent in runtime.agents():
        previous[agent["id"]] = agent
        pid = agent.get("pid") or 0
        if pid and is_alive(pid, agent.get("pid_start") or "") and killpg(pid, 9):
            groups.append(pid)
        runtime.remove_agent(agent["id"])
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while any(group_alive(pgid) for pgid in groups) and time.monotonic() < deadline:
        time.sleep(0.02)    # not our children: their deaths are no event we can wait on
    return previous


def requeue_lost_issues(project: Project, runtime: Runtime, config: Config,
                        previous_agents: dict[str, dict[str, Any]], *,
                        shared: bool, log: Callable[[str], None]) -> None:
    """Issues in progress under an agent that is gone: done if it had finished, else back to open."""
    project.update_index()
    for issue in project.index.list(["in_progress"]):
        if shared and issue.assignee not in previous_agents:
            continue  # another machine's claim: its lease says when it may be taken over
        if issue.assignee not in previous_agents and not is_agent_id(issue.assignee):
            continue  # a person took it (`update --status in_progress --assignee me`)
        try:
            if _finish_if_finished(project, runtime, issue.id, previous_agents.get(issue.assignee) or {}, log):
                continue
            error = f"agent {issue.assignee or '?'} was lost when the daemon stopped"
            lifecycle.recover(project, issue.id, issue.assignee, error, NOT_COUNTED)
        except TransitionRefused:
            continue   # changed meanwhile
        log(f"{issue.id} recovered → open ({NOT_COUNTED.reason})")


def _finish_if_finished(project: Project, runtime: Runtime, issue_id: str, agent: dict[str, Any],
                        log: Callable[[str], None]) -> bool:
    """An agent that committed beyond its base and wrote a success result before its daemon
    died has done its work: the issue is done (or escalated, over its budget), as if the daemon
    had lived to see it."""
    worktree, base = agent.get("worktree") or "", agent.get("base_commit") or ""
    if agent.get("role") != "worker" or not worktree or not base or not (Path(worktree) / ".git").is_file():
        return False
    result = protocol.read_result(Path(worktree))
    if not result.ok:
        return False
    worktrees.adopt_head(project.paths, issue_id)   # the jailed agent committed on a detached HEAD
    if not worktrees.has_new_commits(project.paths, issue_id, base):
        return False
    budget = runtime.budget(issue_id)
    backend = agent.get("backend") or ""
    over = lifecycle.over_budget(budget, project.config)
    if over:
        lifecycle.escalate(project, issue_id, agent["id"], over, "its agent finished over the budget",
                           cost.worker_trailers(budget, backend=backend))
        log(f"{issue_id} escalated: {over}")
        return True
    head = worktrees.head_of(project.paths, issue_id) or ""
    trailers = lifecycle.done_trailers(base, head, result.test_command, cost.worker_trailers(budget, backend=backend))
    lifecycle.hand_off(project, runtime, issue_id, agent["id"], result.summary, trailers, result.test_command)
    log(f"{issue_id} done: its agent had finished before the daemon stopped")
    return True


def clean_leftovers(project: Project, running: Collection[str], runtime: Runtime) -> None:
    """Remove worktrees no issue needs any more (a done issue's branch is kept for its merge; the
    heads of the others under refs/hive/attempts), and the transcripts past their retention. The
    copy of an issue another machine's agent finished (it took the issue over) is stale here.
    Also the jails' network folders a killed daemon of this user's left in the temporary folder."""
    spares.clear(project.paths)   # a killed run's: what they held was kept before they were made
    sweep_gates()
    here = machine_name(project.paths)
    keep = {issue.id for issue in project.index.list(["done", "escalated", "failed"]) if claimed_on(issue, here)}
    target = project.config.target_branch
    for issue_id in worktrees.leftover_worktrees(project.paths):
        if issue_id in running:
            continue
        issue = project.index.get(issue_id)
        handed = handover.peek(runtime, issue_id)
        resumes = handed is not None and handed.same_agent and issue is not None and issue.status == "open"
        if issue_id in keep or resumes:   # its agent goes on there
            if issue is not None and issue.status == "done":
                worktrees.remove(project.paths, issue_id, delete_branch=False, target=target)
            continue
        worktrees.remove(project.paths, issue_id, target=target)
    config = project.config
    busy = {*running, *(issue.id for issue in project.index.list(["in_progress"]))}
    retention.prune_transcripts(project.paths.hive_dir, config.transcript_retention_days,
                                config.transcript_max_mb * retention.MB, busy)
