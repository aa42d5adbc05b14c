"""How a run ends: the signals that stop it, its exit code, its workers ended and their issues
left where the next `run` continues from."""

from __future__ import annotations

import asyncio
import signal
from functools import partial
from typing import Iterable

from hive import lifecycle
from hive.config import Config
from hive.errors import HiveError
from hive.orchestrator.worker import Worker
from hive.project import Project
from hive.runtime import Runtime
from hive.workspace import worktrees

# every way a person or a wrapper ends a run: Ctrl-C (to the process group, through `| tee` or
# `bash -c`), `kill`, a closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
OUTPUT_GONE = int(signal.SIGPIPE)   # stdout closed (EPIPE): exit 141, as a shell reports SIGPIPE


def stop_cause(why: int) -> str:
    """The signal (or OUTPUT_GONE) that stopped a run, in words ("" for none)."""
    if why == OUTPUT_GONE:
        return "its output was closed"
    try:
        return signal.Signals(why).name
    except ValueError:
        return f"signal {why}" if why else ""


async def end_workers(project: Project, runtime: Runtime, config: Config, running: Iterable[Worker]) -> None:
    """End every agent; the issue of each that had not finished goes back to open, its worktree
    removed (a worker that already finished keeps its branch)."""
    workers = list(running)
    for worker in workers:
        await worker.abort("the daemon is stopping")
    for worker in workers:
        if worker.task is not None:
            await asyncio.gather(worker.task, return_exceptions=True)
        try:
            released = lifecycle.release(project, worker.issue_id, worker.agent_id, "the daemon stopped")
        except HiveError:   # TransitionRefused included: it finished, or changed hands
            released = None
        if released is not None:
            await asyncio.to_thread(partial(worktrees.remove, project.paths, worker.issue_id,
                                            target=config.target_branch))
        runtime.remove_agent(worker.agent_id)
