"""`python -m bench.compare REV_A REV_B [--rounds N] [--only NAME ...]`: two commits, same machine.

Absolute figures only compare within one run: this machine's speed changes from one hour (and one
host) to the next. This checks each revision out into a temporary worktree, runs
`python -m bench --only ...` of each in turn, A B then B A ..., so both see the same load and
neither always runs right after the other (a run's deleted files slow the next one's file
creation on a journal-less ext4: see docs/PERFORMANCE.md), and prints
per figure the median over the rounds of each one's median, and B / A: of those medians, and of
each round (their spread tells a change from noise).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import fmt

ROOT = Path(__file__).resolve().parent.parent
_SECONDS = {"µs": 1e-6, "ms": 1e-3, "s": 1.0}
_VALUE = re.compile(r"^(-?[0-9][0-9.,]*)\s*(\S+)$")   # "12 ms", "1.4 ×", "-18 %", "0.0 /100", "521 tokens"
# what a figure's name may say of its target, "(target ≤ 2×)" or "(0.60 s = 100/min)": left out
# when names are matched, so that a commit that moved a target still compares with one before it
_TARGET_NOTE = re.compile(r"\s*\((?:target [^)]*|[^)]* = [^)]*)\)")


def _value(cell: str) -> tuple[float, str] | None:
    """A table cell as (seconds, "s"), or (the number, its own unit)."""
    match = _VALUE.match(cell.strip())
    if not match:
        return None
    number, unit = float(match.group(1).replace(",", "")), match.group(2)
    return (number * _SECONDS[unit], "s") if unit in _SECONDS else (number, unit)


def medians(report: str) -> dict[str, tuple[float, str]]:
    """figure -> (its median, unit), from the table of a `python -m bench` report."""
    found: dict[str, tuple[float, str]] = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] not in ("figure", "---"):
            value = _value(cells[2])
            if value is not None:   # a figure's name without what it measured ("— 333 finalized/min")
                found[_TARGET_NOTE.sub("", cells[0].split(" — ")[0])] = value
    return found


def _run(worktree: Path, only: list[str], output: Path) -> dict[str, tuple[float, str]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(worktree)
    argv = [sys.executable, "-m", "bench", "--output", str(output)]
    for name in only:
        argv += ["--only", name]
    proc = subprocess.run(argv, cwd=worktree, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not output.exists():
        raise SystemExit(f"bench of {worktree.name} exited {proc.returncode}: {proc.stderr[-500:]}")
    return medians(output.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    # a SIGTERM (`timeout`) unwinds like Ctrl-C, so the worktrees below are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="hive-bench-compare-") as scratch:
        trees = {}
        for label, rev in (("A", args.a), ("B", args.b)):
            trees[label] = Path(scratch) / label
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(trees[label]), rev], cwd=ROOT,
                           check=True)
        runs: dict[str, list[dict[str, tuple[float, str]]]] = {"A": [], "B": []}
        try:
            for round_ in range(args.rounds):
                for label, tree in (trees.items() if round_ % 2 == 0 else reversed(trees.items())):
                    runs[label].append(_run(tree, args.only, Path(scratch) / f"{label}-{round_}.md"))
                    print(f"round {round_ + 1}/{args.rounds}: {label} done", file=sys.stderr)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    print(f"| figure | A = {args.a} | B = {args.b} | B / A | B / A per round |\n|---|---:|---:|---:|---|")
    for figure, (_, unit) in runs["A"][0].items():
        pairs = [(a[figure][0], b[figure][0]) for a, b in zip(runs["A"], runs["B"]) if figure in a and figure in b]
        if not pairs:
            continue
        a, b = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        # each round's own ratio: the spread says whether a median's ratio is more than noise
        rounds = ", ".join(f"{pb / pa:.2f}" if pa else "—" for pa, pb in pairs)
        print(f"| {figure} | {fmt(a, unit)} | {fmt(b, unit)} | {f'{b / a:.2f}' if a else '—'} | {rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
