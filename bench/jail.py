"""What the OS jail adds to an agent's start.

An agent process is started the same way with and without its jail (`hive.jail.prepare`, then a
subprocess; what `hive.backends.agent_process.AgentProcess.start` does); the figure is the median
of (jailed start to first output) minus the median of (unjailed start to first output) of the
same `echo`, in a real worktree of a real repository: building the worker's jail spec (its
private object store included), the bwrap command line, the process bound, and bwrap setting up
its namespaces and mounts. Tearing the jail down happens after the agent has ended and is not
counted. A second row is a real agent's jail: the same with its provider relay (the socket
folder, hive's serving thread, and the jail's own end listening before the command runs;
`hive.jail.network`). An error row with the reason where no jail can be built.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from bench import Benchmark, Context, Result
from hive import git
from hive.jail import prepare, roles, support
from hive.jail.environment import jail_environment

TARGET = 0.020                       # the bound: ≤ 20 ms added to an agent's start


def _start(argv: list[str], cwd: str, jailed: bool, paths: git.RepoPaths, worktree: Path,
           endpoints: tuple[str, ...] = ()) -> float:
    """Seconds from deciding to start `argv` to its first output: the start, without the exit
    (tearing a jail's namespaces down happens after the agent, not before it)."""
    began = time.perf_counter()
    jail = roles.worktree_jail(paths, worktree).extended(endpoints=endpoints) if jailed else None
    launch = prepare(argv, cwd=cwd, env=jail_environment({"PATH": "/usr/bin:/bin"}), jail=jail)
    proc = subprocess.Popen(launch.argv, cwd=cwd, env=launch.env, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    took = time.perf_counter() - began
    proc.communicate()
    launch.release()                  # after the agent has ended: not part of its start
    if not first or proc.returncode != 0:
        raise RuntimeError(f"the {'jailed ' if jailed else ''}start failed (exit {proc.returncode})")
    return took


def jail_start(ctx: Context) -> list[Result]:
    found = support()
    if not found.ok:
        return [Result("jail: added to an agent's start", [], TARGET, error=f"no jail here: {found.reason}")]
    root = ctx.workspace.scratch("jail")
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(root), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=bench@example.com",
                    "commit", "-q", "-m", "initial"], check=True)
    worktree = root / ".git" / "hive" / "worktrees" / "hv-bench1"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "-q", "--detach", str(worktree)], check=True)
    paths = git.discover(root)
    echo = [shutil.which("echo") or "/bin/echo", "started"]
    reps = max(ctx.sizes.reps, 10)
    provider = socket.socket()
    provider.bind(("127.0.0.1", 0))
    provider.listen()
    endpoint = (f"http://127.0.0.1:{provider.getsockname()[1]}",)
    plain, jailed, relayed = [], [], []
    for _ in range(reps):                 # interleaved: the same machine load for all three
        plain.append(_start(echo, str(worktree), False, paths, worktree))
        jailed.append(_start(echo, str(worktree), True, paths, worktree))
        relayed.append(_start(echo, str(worktree), True, paths, worktree, endpoint))
    provider.close()
    plain.sort()
    base = plain[len(plain) // 2]
    note = f"unjailed start {base * 1000:.1f} ms; {found.describe()}"
    return [Result(f"jail: added to an agent's start (bubblewrap, {reps} starts of `echo`)",
                   [max(0.0, t - base) for t in jailed], TARGET, note=note),
            Result(f"jail with its provider relay (a real agent's): added to an agent's start ({reps} starts)",
                   [max(0.0, t - base) for t in relayed], TARGET, note=note)]


BENCHMARKS = [
    Benchmark("jail", jail_start, "what building and entering the OS jail adds to an agent's start"),
]
