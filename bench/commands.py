"""Real `git-hive` subprocesses: `list --json` wall time, and edit-to-visible latency under `watch`."""

from __future__ import annotations

import json
import os
import queue as queues
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from bench import Benchmark, Context, Result, fmt, measure
from bench.fixtures import BuiltRepo, environment, git_hive_executable


OWN_PROCESS = "in its own process (`HIVE_COMMAND_SERVER=0`)"


def _run(repo: BuiltRepo, *args: str, own_process: bool = False) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run([git_hive_executable(), *args], cwd=repo.root, capture_output=True,
                          env=environment(own_process=own_process))
    if proc.returncode != 0:
        raise RuntimeError(f"git-hive {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-300:]}")
    return proc


def list_json(ctx: Context) -> list[Result]:
    # The floors every command stands on, on this machine, measured first: the listing's own part
    # is what it takes over the interpreter's start (site-packages' .pth files included).
    repo = ctx.workspace.repo(ctx.sizes.small)
    floors = []
    for figure, argv in (("`python -c pass` wall (the interpreter alone)", [sys.executable, "-c", "pass"]),
                         ("`python -S -c pass` wall (the interpreter without site-packages)",
                          [sys.executable, "-S", "-c", "pass"]),
                         ("`git-hive --version` wall (interpreter + click: the floor of a command run "
                          "through click; `list --json` is dispatched without it)",
                          [git_hive_executable(), "--version"])):
        cpu: list[float] = []
        samples = measure(lambda: subprocess.run(argv, cwd=repo.root, capture_output=True, check=True),
                          ctx.sizes.reps, warmup=1, cpu=cpu)
        floors.append(Result(figure, samples, cpu=cpu))
    interpreter = floors[0].median
    results = []
    for n, target in ((ctx.sizes.small, 0.060), (ctx.sizes.medium, 0.200)):   # issue 33's targets
        repo = ctx.workspace.repo(n)
        shown = len(json.loads(_run(repo, "list", "--json").stdout))  # also builds the index
        ctx.workspace.wait_for_command_server()
        error = "" if shown == n else f"listed {shown} issues, expected {n}"
        for own_process in (False, True):
            cpu = []
            samples = measure(lambda: _run(repo, "list", "--json", own_process=own_process), ctx.sizes.reps,
                              warmup=2, cpu=cpu)
            over = f"over `python -c pass` ({fmt(interpreter)}): {fmt(statistics.median(samples) - interpreter)}"
            if own_process:
                results.append(Result(f"`git-hive list --json` wall, {n:,} issues, {OWN_PROCESS}", samples,
                                      error=error, cpu=cpu, note=f"{over}; the same rows as the last listing"))
            else:
                results.append(Result(f"`git-hive list --json` wall, {n:,} issues", samples, target, error=error,
                                      cpu=cpu, note=f"run by the command server (the CPU is the client's); "
                                                    f"{over}; the same rows as the last listing: the kept listing"))
        results.append(_listing_after_a_change(ctx, repo, n))
    return results + floors


def _listing_after_a_change(ctx: Context, repo: BuiltRepo, n: int) -> Result:
    """`list --json` right after an `update` (untimed): the listing made by SQLite and kept."""
    issue_id = repo.take(1)[0]
    generated = subprocess.run(["git", "rev-parse", "refs/heads/hive/state"], cwd=repo.root, check=True,
                               capture_output=True, text=True).stdout.strip()
    runs = iter(range(1_000_000))
    cpu: list[float] = []
    samples = measure(lambda: _run(repo, "list", "--json"), ctx.sizes.reps, warmup=1, cpu=cpu,
                      setup=lambda: _run(repo, "update", issue_id, "--priority", str(1 + next(runs) % 2)))
    subprocess.run(["git", "update-ref", "refs/heads/hive/state", generated], cwd=repo.root, check=True)
    _run(repo, "list", "--json")   # back to the generated state (the other benchmarks count its issues)
    return Result(f"`git-hive list --json` wall right after a change, {n:,} issues", samples, cpu=cpu,
                  note="the listing made by SQLite, and kept for the commands after it")


def _one_command(ctx: Context, repo: BuiltRepo, what: str, args: Callable[[int], list[str]],
                 target: float) -> list[Result]:
    """A real `git-hive` command timed as a person runs it, after `list --json` made the index
    current: run by the command server (as by default), and in its own process."""
    from bench.state import _label

    _run(repo, "list", "--json")
    ctx.workspace.wait_for_command_server()
    runs = iter(range(1_000_000))
    results = []
    for own_process in (False, True):
        cpu: list[float] = []
        samples = measure(lambda: _run(repo, *args(next(runs)), own_process=own_process), ctx.sizes.reps,
                          warmup=2, cpu=cpu)
        load = f"load average {os.getloadavg()[0]:.1f}"
        if own_process:
            results.append(Result(f"`git-hive {what}`, {_label(repo)}, {OWN_PROCESS}", samples, cpu=cpu, note=load))
        else:
            results.append(Result(f"`git-hive {what}`, {_label(repo)}", samples, target, cpu=cpu,
                                  note=f"run by the command server (the CPU is the client's); {load}"))
    return results


def commands(ctx: Context) -> list[Result]:
    """One `update`, `create` and `list --ready` at the medium and large sizes (issue 33: a big
    queue feels instant): each a whole command, the `.hive/` scan and the index catch-up included."""
    results = []
    for repo, target in ((ctx.workspace.repo(ctx.sizes.medium), 0.150),
                         (ctx.workspace.repo(ctx.sizes.large, archived=ctx.sizes.archived), 0.250)):
        issue_id = repo.take(1)[0]
        generated = subprocess.run(["git", "rev-parse", "refs/heads/hive/state"], cwd=repo.root, check=True,
                                   capture_output=True, text=True).stdout.strip()
        results += _one_command(ctx, repo, "update ID --priority N", lambda k: [
            "update", issue_id, "--priority", str(1 + k % 2)], target)
        results += _one_command(ctx, repo, "create TITLE", lambda k: ["create", f"Benchmarked {k}"], target)
        results += _one_command(ctx, repo, "list --ready", lambda k: ["list", "--ready"], target)
        # back to the generated state (the other benchmarks count its issues): the index and
        # `.hive/` follow it by the next command
        subprocess.run(["git", "update-ref", "refs/heads/hive/state", generated], cwd=repo.root, check=True)
        _run(repo, "list", "--json")
    return results


# -- watch ------------------------------------------------------------------------------------

TITLE_LINE = re.compile(r'^title = ".*"$', re.M)


class Watcher:
    """A running `git-hive watch` whose output is collected by a thread."""

    def __init__(self, repo: BuiltRepo):
        self.proc = subprocess.Popen([git_hive_executable(), "watch"], cwd=repo.root, env=environment(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queues.Queue[str] = queues.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queues.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.output.append(line)
            if text in line:
                return
        raise RuntimeError(f"git-hive watch did not say {text!r}: {self.output[-5:]}")

    def drain(self) -> list[str]:
        while True:
            try:
                self.output.append(self.lines.get_nowait())
            except queues.Empty:
                return self.output

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _watch_latency(ctx: Context, repo: BuiltRepo, samples_wanted: int) -> Result:
    paths = repo.paths
    ids = repo.take(samples_wanted + 2, statuses=("open", "in_progress", "done"))
    _run(repo, "list", "--json")                     # the index is current before watching
    watcher = Watcher(repo)
    samples: list[float] = []
    errors: list[str] = []
    try:
        watcher.wait_for("watching", timeout=120)
        time.sleep(0.5)
        db = sqlite3.connect(f"file:{paths.index_db}?mode=ro", uri=True, isolation_level=None)
        rng = random.Random(3)
        for k, issue_id in enumerate(ids):
            path: Path = repo.root / ".hive" / repo.generated.paths[issue_id]
            title = f"Edited while watching {k}"
            text = TITLE_LINE.sub(f'title = "{title}"', path.read_text(encoding="utf-8"), count=1)
            time.sleep(rng.uniform(0.2, 0.35))   # let the previous edit's commit settle
            start = time.perf_counter()
            path.write_text(text, encoding="utf-8")  # saved in place, as many editors do
            while True:
                row = db.execute("SELECT title FROM issues WHERE id = ?", (issue_id,)).fetchone()
                elapsed = time.perf_counter() - start
                if row is not None and row[0] == title:
                    break
                if elapsed > 5:
                    errors.append(f"{issue_id}: not visible after 5 s")
                    break
                time.sleep(0.002)
            if k >= 2:
                samples.append(elapsed)
        db.close()
        # What a person sees: the last edit in `git hive list --json`.
        listed = {i["id"]: i["title"] for i in json.loads(_run(repo, "list", "--json").stdout)}
        if listed.get(ids[-1]) != title:
            errors.append(f"git hive list shows {listed.get(ids[-1])!r} for {ids[-1]}")
    finally:
        watcher.stop()
    complaints = [line for line in watcher.drain() if "not committed" in line or "Traceback" in line]
    errors.extend(complaints[:2])
    return Result(f"edit in `.hive/` → in the index while `git-hive watch` runs, {len(repo.generated.issues):,} issues",
                  samples, 0.250, stat="p95", error="; ".join(errors[:3]),
                  note="wall time from the write until the index shows the new title (polled every 2 ms)")


def watch(ctx: Context) -> list[Result]:
    wanted = 10 if ctx.quick else 25
    return [_watch_latency(ctx, ctx.workspace.repo(n), wanted) for n in (ctx.sizes.small, ctx.sizes.medium)]


BENCHMARKS = [
    Benchmark("list", list_json, "`git-hive list --json` wall time at the small and medium sizes"),
    Benchmark("commands", commands, "one `update`, `create`, `list --ready` at the medium and large sizes"),
    Benchmark("watch", watch, "edit in .hive/ to visible in the index while `git-hive watch` runs"),
]
