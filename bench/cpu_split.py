"""`python -m bench.cpu_split`: where the daemon's own CPU goes in the pipeline benchmark's run.

The pipeline figure says how much CPU the daemon spends per issue; this says on what. It runs the
same daemon child as `bench.pipeline` (a fresh DAG of `--chains` × `--length` issues, 8 scripted
agents, test `true`) with each function named by `--function module:Qualified.name` (or every
function of each `--module`) wrapped to add up the CPU time of the thread that calls it
(`time.thread_time`), and, with `--tasks`, each step of the event loop charged to the asyncio
task (or callback) it ran. It prints, per issue: how many calls, and their CPU.

Why not cProfile: it charges its own cost to every Python call, so it makes Python-heavy code look
~3 × dearer than code that waits in C (libgit2, the file system) — it once put 10 % of the event
loop in a function that cost 2 %. A wrapper costs ~1 µs a call: wrap what is called a few times
an issue, not a helper called hundreds of times.

A function is patched where it is defined (its module's or its class's attribute) and wherever a
hive module imported it by name. Nested wrapped functions count in both. One run is one sitting
of this machine's file system: compare functions within a run, not runs with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import Context, Sizes
from bench.fixtures import Workspace, environment
from bench.pipeline import ROOT, create_chains, new_repo

Stats = dict[str, list[float]]   # name -> [calls, CPU seconds]
_ADDING = threading.Lock()        # the daemon's threads call the same functions at once


def functions_of(module_name: str) -> list[str]:
    """`module:name` of each function defined in the module, and of each method of its classes."""
    module = importlib.import_module(module_name)
    found = []
    for name, value in vars(module).items():
        if inspect.isfunction(value) and value.__module__ == module_name:
            found.append(f"{module_name}:{name}")
        elif inspect.isclass(value) and value.__module__ == module_name:
            found += [f"{module_name}:{name}.{method}" for method, member in vars(value).items()
                      if inspect.isfunction(member) and not method.startswith("__")]
    return found


def wrap(target: str, stats: Stats) -> bool:
    """Add up the calls of `target` (`module:Qualified.name`, a plain function or method) and
    their thread CPU into `stats[target]`; False for a coroutine function (its time is its
    task's: `--tasks`) or a name that is not a function."""
    module_name, _, qualified = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *outer, name = qualified.split(".")
    for part in outer:
        owner = getattr(owner, part)
    member = vars(owner).get(name)
    kind = type(member) if isinstance(member, (staticmethod, classmethod)) else None
    original = member.__func__ if kind is not None else member
    if not inspect.isfunction(original) or inspect.iscoroutinefunction(original):
        return False
    tally = stats.setdefault(target, [0, 0.0])

    def counted(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent = time.thread_time() - start
            with _ADDING:
                tally[0] += 1
                tally[1] += spent

    setattr(owner, name, kind(counted) if kind is not None else counted)
    for module in list(sys.modules.values()):   # `from x import f` took the original
        if getattr(module, "__name__", "").startswith("hive.") and vars(module).get(name) is original:
            setattr(module, name, counted)
    return True


def charge_tasks(stats: Stats) -> None:
    """Charge each event-loop step's thread CPU to its task's coroutine (or its callback)."""
    step = asyncio.events.Handle._run

    def run(handle: asyncio.events.Handle) -> None:
        callback: Any = handle._callback   # type: ignore[attr-defined]
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            key = "task " + getattr(task.get_coro(), "__qualname__", "?")
        else:
            key = getattr(callback, "__qualname__", type(callback).__name__)
        start = time.thread_time()
        try:
            step(handle)
        finally:
            tally = stats.setdefault(key, [0, 0.0])
            tally[0] += 1
            tally[1] += time.thread_time() - start

    asyncio.events.Handle._run = run   # type: ignore[method-assign, assignment]


def _child(argv: list[str]) -> int:
    """`python -m bench.cpu_split child REPO OUT TARGETS_JSON TASKS`: the pipeline's daemon child, wrapped."""
    from bench import pipeline

    root, out, targets, tasks = argv[0], Path(argv[1]), json.loads(argv[2]), argv[3] == "1"
    # what the daemon runs, loaded first: each module that imports a wrapped function by name is
    # then there for `wrap` to patch
    import hive.orchestrator.assemble   # noqa: F401

    functions: Stats = {}
    skipped = [target for target in targets if not wrap(target, functions)]
    steps: Stats = {}
    if tasks:
        charge_tasks(steps)
    daemon_out = out.with_suffix(".daemon.json")
    code = pipeline._child([root, "--max-agents", "8", "--timeout", "300", "--out", str(daemon_out)])
    run = json.loads(daemon_out.read_text())
    out.write_text(json.dumps({"run": run, "functions": functions, "steps": steps, "skipped": skipped}))
    return code


def table(title: str, stats: Stats, issues: int, rows: int) -> list[str]:
    ordered = sorted(stats.items(), key=lambda item: -item[1][1])[:rows]
    return [title, *(f"  {cpu * 1000 / issues:7.2f} ms  {calls / issues:6.1f} calls  {name}"
                     for name, (calls, cpu) in ordered)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split", description=__doc__.split("\n\n")[0])
    parser.add_argument("--function", action="append", default=[], metavar="MODULE:NAME",
                        help="a function or method to measure, e.g. hive.workspace.worktrees:create")
    parser.add_argument("--module", action="append", default=[],
                        help="measure every function and method this module defines")
    parser.add_argument("--tasks", action="store_true", help="charge the event loop's CPU to its asyncio tasks")
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--length", type=int, default=5)
    parser.add_argument("--rows", type=int, default=40, help="at most this many rows a table")
    args = parser.parse_args(argv)
    targets = [*args.function, *(t for module in args.module for t in functions_of(module))]
    with Workspace() as workspace, tempfile.TemporaryDirectory(prefix="hive-cpu-split-") as scratch:
        root = new_repo(Context(workspace, Sizes(), quick=False), "cpu-split")
        issues = args.chains * args.length
        create_chains(root, args.chains, args.length)
        out = Path(scratch) / "split.json"
        env = environment()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.run([sys.executable, "-m", "bench.cpu_split", "child", str(root), str(out),
                               json.dumps(targets), "1" if args.tasks else "0"],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not out.exists():
            print(f"the daemon child exited {proc.returncode}: {(proc.stderr or proc.stdout)[-800:]}", file=sys.stderr)
            return 1
        data = json.loads(out.read_text())
    run = data["run"]
    lines = [f"{issues} issues ({args.chains} chains of {args.length}), 8 scripted agents: wall "
             f"{run['wall'] * 1000 / issues:.1f} ms, daemon CPU {run['cpu_self'] * 1000 / issues:.1f} ms "
             f"(event loop thread {run['cpu_main'] * 1000 / issues:.1f} ms) per issue"]
    if data["functions"]:
        lines += table("functions (thread CPU per issue):", data["functions"], issues, args.rows)
    if data["steps"]:
        lines += table("event loop, by task (CPU per issue):", data["steps"], issues, args.rows)
    if data["skipped"]:
        lines.append(f"not wrapped (coroutines: see --tasks; or not functions): {', '.join(data['skipped'])}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        sys.exit(_child(sys.argv[2:]))
    sys.exit(main())
