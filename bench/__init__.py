"""git-hive benchmarks: `python -m bench` (from the repository root).

Runs every benchmark against generated repositories (see `bench/fixtures.py`), prints a table of
figure, target, measured (median and p95 of repeated runs) and pass/fail, and writes the same to
`docs/PERFORMANCE.md` with the machine it ran on. `python -m bench --help` for the options.

Each subject has a module (`bench/state.py`: the state store and its index; `bench/commands.py`:
real `git-hive` subprocesses; `bench/pipeline.py`: `git hive run` with scripted agents and the merge
pipeline) whose `BENCHMARKS` list names its benchmarks; a benchmark is a function
`run(ctx) -> list[Result]`.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.fixtures import Workspace


@dataclass
class Sizes:
    """Repository sizes; `--quick` shrinks them (its figures are a smoke test, not the targets)."""

    small: int = 100
    medium: int = 10_000
    large: int = 100_000
    archived: float = 0.9          # share of the large repository that is finalized and archived
    reps: int = 20                 # repetitions of fast operations
    slow_reps: int = 3             # repetitions of full rebuilds at the large size

    @classmethod
    def quick(cls) -> "Sizes":
        return cls(small=100, medium=2_000, large=10_000, reps=8, slow_reps=2)


@dataclass
class Context:
    workspace: Workspace
    sizes: Sizes
    quick: bool
    log: Callable[[str], None] = print


@dataclass
class Result:
    figure: str                        # what was measured, with the sizes
    samples: list[float]               # seconds
    target: float | None = None        # seconds; None: for information
    stat: str = "median"               # which statistic the target applies to: median | p95
    note: str = ""                     # how it splits, or why it misses
    error: str = ""                    # the benchmark could not run
    cpu: list[float] = field(default_factory=list)   # CPU seconds of the same runs, when known
    unit: str = "s"                    # of samples and target: "s" (seconds) or another unit, e.g. "MB"

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu) if self.cpu else math.nan

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def p95(self) -> float:
        return percentile(self.samples, 95)

    @property
    def measured(self) -> float:
        return self.p95 if self.stat == "p95" else self.median

    @property
    def verdict(self) -> str:
        if self.error:
            return "ERROR"
        if self.target is None:
            return "info"
        return "pass" if self.measured <= self.target else "FAIL"

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "—"
        return f"{self.stat} ≤ {fmt(self.target, self.unit)}"


@dataclass
class Benchmark:
    name: str                          # what `--only` matches
    run: Callable[[Context], list[Result]]
    about: str = ""
    needs: list[str] = field(default_factory=list)


def percentile(samples: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def cpu_now() -> float:
    """CPU seconds (user + sys) used so far by this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(obj: Any, name: str, into: dict[str, list[float]], *, key: str = "",
          clock: Callable[[], float] = time.perf_counter) -> Any:
    """Wrap `obj.name` so that each call's time by `clock` (wall time; `time.thread_time` for the
    calling thread's CPU) is appended to `into[key or name]`; returns the original."""
    original = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return original(*args, **kwargs)
        finally:
            into.setdefault(key or name, []).append(clock() - start)

    setattr(obj, name, wrapper)
    return original


def measure(fn: Callable[[], object], reps: int, warmup: int = 1,
            cpu: list[float] | None = None, setup: Callable[[], object] | None = None) -> list[float]:
    """Wall times of `reps` calls of `fn` after `warmup` untimed ones.

    With `cpu`, each timed call's CPU time (this process and the subprocesses it waited for) is
    appended to it: on a loaded machine wall time swings, CPU time much less. `setup` runs,
    untimed, before each call.
    """
    samples = []
    for i in range(warmup + reps):
        if setup is not None:
            setup()
        cpu_start = cpu_now()
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            samples.append(elapsed)
            if cpu is not None:
                cpu.append(cpu_now() - cpu_start)
    return samples


def fmt(seconds: float, unit: str = "s") -> str:
    if seconds != seconds:  # NaN
        return "—"
    if unit != "s":
        return f"{seconds:,.1f} {unit}" if abs(seconds) < 10 else f"{seconds:,.0f} {unit}"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1000:.0f} ms"
    if seconds >= 0.001:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds * 1000:.2f} ms"
