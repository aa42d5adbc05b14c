"""What `git hive status` shows, as data: the issues by status, the ready queue, the daemon and
its run, the agents, the claims, the merge queue, what waits for a person, the state's problems,
and the target's landings a remote lacks. `Hive.status()` returns it; `status --json` prints it.
"""

from __future__ import annotations

import time

from hive import cost, git
from hive.orchestrator import orphans
from hive.orchestrator.progress import PROGRESS_KEY, RunProgress
from hive.project import Project
from hive.remote import Remote
from hive.runtime import DaemonLock, Runtime
from hive.state import history
from hive.state.issue_file import STATUSES


def collect(project: Project, runtime: Runtime | None = None) -> dict:
    """Everything `status` shows, as data. `runtime`: a handle to keep open between calls
    (`--watch`: see hive/runtime/watch.py); else one is opened and closed here."""
    problems = project.sync(warn=False)
    own = runtime is None
    runtime = runtime or Runtime(project.paths)
    try:
        daemon = daemon_section(project, runtime)
        queue = merge_queue_section(runtime)
        data = {
            "daemon": daemon,
            "agents": agents_section(project, runtime) if daemon["running"] else [],
            "run": run_section(runtime) if daemon["running"] else None,
            "merge_queue": queue,
        }
    finally:
        if own:
            runtime.close()
    counts = project.index.counts()
    return {
        **data,
        "claims": claims_section(project),
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "total": sum(counts.values()),
        "ready": [i.id for i in project.index.ready()],
        "needs_attention": attention_section(project, queue, daemon_running=data["daemon"]["running"]),
        "problems": [str(p) for p in problems] + [str(p) for p in project.index.problems()
                                                   if str(p) not in {str(q) for q in problems}],
        "state_commit": project.index.indexed_commit,
        "target_unpushed": target_unpushed(project),
    }


def target_unpushed(project: Project) -> dict | None:
    """The commits of the target branch the sync remote lacked when last fetched (hive merges
    into the target here; `sync` shares hive/state, not the target)."""
    name, target = project.config.sync_remote or "origin", project.config.target_branch
    if git.read_ref(project.paths.common_dir, f"refs/remotes/{name}/{target}") is None:
        return None
    missing = Remote(project, name).unpushed(target)
    return {"remote": name, "branch": target, "commits": missing} if missing else None


def daemon_section(project: Project, runtime: Runtime) -> dict:
    daemon_pid = DaemonLock(project.paths).holder()
    degraded = runtime.get("degraded")
    remote_state = runtime.get("remote_state") if daemon_pid else ""
    return {"running": bool(daemon_pid), "pid": daemon_pid or None,
            "degraded": degraded or None, "remote": remote_state or None}


def agents_section(project: Project, runtime: Runtime) -> list[dict]:
    """The running agents; the refinery only while it works on an issue."""
    now = time.time()
    agents = []
    for a in runtime.agents():
        if a["role"] == "refinery" and a["state"] != "busy":
            continue
        issue = project.index.get(a["issue_id"]) if a["issue_id"] else None
        agents.append({"issue": a["issue_id"], "agent": a["id"], "role": a["role"], "state": a["state"],
                       "age_seconds": round(now - (a["started_at"] or now)), "tokens": a["tokens"] or 0,
                       "title": issue.title if issue is not None else "",
                       "cost_usd": round(_agent_cost(runtime, a), 4),
                       "last_message": a.get("last_message") or ""})
    return agents


def _agent_cost(runtime: Runtime, agent: dict) -> float:
    """A worker: its issue's budget (what the tokens column counts too); the refinery: its session."""
    if agent["role"] == "worker" and agent["issue_id"]:
        return runtime.budget(agent["issue_id"]).cost_usd
    if agent["role"] == "refinery" and agent["session_id"]:
        return cost.stored_usage(runtime.get(f"session_usage:{agent['session_id']}")).cost_usd
    return 0.0


def claims_section(project: Project) -> list[dict]:
    """Who holds what: in shared mode a claim names its machine and its lease (any machine's)."""
    return [{"issue": i.id, "agent": i.assignee, "machine": str(i.extra.get("machine", ""))[:80],
             "lease_expires": str(i.extra.get("lease_expires", ""))[:40]}
            for i in project.index.list(["in_progress"])]


def run_section(runtime: Runtime) -> dict | None:
    """The daemon's run so far, as it publishes it."""
    progress = RunProgress.from_json(runtime.get(PROGRESS_KEY))
    return progress.to_json() if progress is not None else None


def merge_queue_section(runtime: Runtime) -> list[dict]:
    return [{"issue": entry.issue_id, "state": entry.state, "detail": entry.detail}
            for entry in runtime.merge_queue.entries()]


def attention_section(project: Project, queue: list[dict], daemon_running: bool = True) -> list[dict]:
    """Every issue waiting for a person, with why: escalated and failed ones (the reason their
    last such commit recorded), merges that wait (what they wait for), and — while no daemon
    runs here — issues still in_progress for this machine's agents (a run that ended without
    releasing them: a SIGKILL, a crash)."""
    stuck = project.index.list(["escalated", "failed"])
    reasons = history.reasons(project.paths, [i.id for i in stuck])
    attention = [{"issue": i.id, "status": i.status, "title": i.title, "reason": reasons.get(i.id, "")}
                 for i in stuck]
    if not daemon_running:
        attention += [{"issue": i.id, "status": "in_progress", "title": i.title, "reason": orphans.ORPHANED}
                      for i in orphans.orphaned_issues(project)]
    for entry in queue:
        if entry["state"] == "waiting":
            attention.append({"issue": entry["issue"], "status": "merge waiting", "title": entry["detail"],
                              "reason": entry["detail"]})
    return attention
