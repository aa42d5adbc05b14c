"""Taking in a big queue that arrived by plain git: the next `git-hive list --json`.

Each run is a fresh clone of the generated repository (local: its objects hard-linked) whose
`hive/state` starts at a skeleton state (`.gitattributes`, `context.md`, the `.gitkeep`s), where
`git-hive init` runs; then `git update-ref` moves the branch to the full generated state (what a
`git pull` of a large shared queue, or `init` in a fresh clone, does to it) and the next real
`git-hive list --json` is timed: the trust check of the new tree, the index caught up (every
issue parsed) and the `.hive/` checkout brought to it (every file written but the archive's,
which `.hive/` does not check out), the two side by side, then the listing.

No file is deleted until every run of both sizes is over: on a file system without a journal
(ext4 as this machine's), a file created within minutes of many deletions in its block group
costs up to ~1 ms, the kernel stepping over each recently deleted inode (`recently_deleted` in
ext4's inode allocator), which a reset by deleting the 10,000 files of the run before would add
to every run after the first. Beside each figure, in the note: the run's system CPU (mostly the
file creations) and the time this file system takes to create the same number of files in one
new folder, measured after the runs (the floor of any checkout).
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import subprocess
import time

import pygit2

from bench import Benchmark, Context, Result, fmt, measure
from bench.commands import _run
from bench.fixtures import BuiltRepo, environment
from hive import git


def _skeleton(repo: pygit2.Repository, full: pygit2.Commit) -> str:
    """A commit holding only what `init` writes, made from the full state's own entries."""
    tree = full.tree
    root = repo.TreeBuilder()
    for name in (".gitattributes", "context.md"):
        root.insert(name, tree[name].id, pygit2.GIT_FILEMODE_BLOB)
    for folder in ("issues", "notes"):
        sub = repo.TreeBuilder()
        sub.insert(".gitkeep", tree[f"{folder}/.gitkeep"].id, pygit2.GIT_FILEMODE_BLOB)
        root.insert(folder, sub.write(), pygit2.GIT_FILEMODE_TREE)
    sig = pygit2.Signature("Bench Person", "bench@example.com")
    return str(repo.create_commit(None, sig, sig, "hive: skeleton\n", root.write(), []))


FLOOR_FILES = 10_000


def _create_floor(ctx: Context, count: int, name: str) -> float:
    """Seconds to create `count` small files in one new folder here: at most FLOOR_FILES are
    created, the time scaled to `count`."""
    created = min(count, FLOOR_FILES)
    return ctx.workspace.file_creation(f"floor-{name}", created) * count / created


def _fresh_clone(ctx: Context, built: BuiltRepo, skeleton: str, name: str) -> BuiltRepo:
    """A clone of `built` with `hive/state` at `skeleton`, `git-hive init` run in it."""
    root = ctx.workspace.scratch(name)
    subprocess.run(["git", "clone", "-q", str(built.root), str(root)], check=True)
    subprocess.run(["git", "update-ref", git.STATE_REF, skeleton], cwd=root, check=True)
    clone = dataclasses.replace(built, name=name, root=root, taken=set())
    _run(clone, "init")
    return clone


def _git_checkout(ctx: Context, clone: BuiltRepo, commit: str, name: str) -> float:
    """Seconds git itself takes to write every file of `commit` (the archive too: the same files
    hive takes in) into a new folder, with an index of its own: the yardstick of an intake."""
    folder = ctx.workspace.scratch(name)
    env = {**environment(), "GIT_INDEX_FILE": str(folder.with_name(name + ".index"))}
    start = time.perf_counter()
    subprocess.run(["git", f"--work-tree={folder}", "checkout", commit, "--", "."],
                   cwd=clone.root, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def _intake(ctx: Context, built: BuiltRepo, reps: int, target: float,
            floors: list[tuple[Result, int]]) -> list[Result]:
    from bench.state import _label

    repo = pygit2.Repository(str(built.root))
    full = str(repo.references[git.STATE_REF].peel(pygit2.Commit).id)
    skeleton = _skeleton(repo, repo.get(full))
    samples: list[float] = []
    cpu: list[float] = []
    system: list[float] = []
    checkout: list[float] = []
    after: list[float] = []
    last: BuiltRepo | None = None
    for k in range(reps):
        clone = last = _fresh_clone(ctx, built, skeleton, f"intake-{built.name}-{k}")
        subprocess.run(["git", "update-ref", git.STATE_REF, full], cwd=clone.root, check=True)
        checkout.append(_git_checkout(ctx, clone, full, f"git-{built.name}-{k}"))   # A B A B: the same load
        before_system = resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
        taken = measure(lambda: _run(clone, "list", "--json"), 1, warmup=0, cpu=cpu)
        samples.extend(taken)
        system.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime - before_system)
        after.extend(measure(lambda: _run(clone, "list", "--json"), 1, warmup=0))   # the next command
    assert last is not None
    files = sum(1 for path in built.generated.files if not path.startswith("issues/archive/"))   # not checked out
    listed = _run(last, "list", "--json").stdout.count(b'"id":')
    error = "" if listed == len(built.generated.issues) else f"listed {listed} issues, expected {len(built.generated.issues)}"
    git_median = statistics.median(checkout)
    load = f"load average {os.getloadavg()[0]:.1f}"
    terminal = sum(1 for i in built.generated.issues if i.status in ("finalized", "canceled"))
    size = (f"{len(built.generated.issues):,} issues ({terminal:,} finalized or canceled, still in `issues/`)"
            if "finalized" in built.name else _label(built))
    # issue 33: at most 3 x git's own checkout of the same files (measured beside it), and `target`
    result = Result(f"taking in {size} that arrived by plain git (`update-ref`) in a fresh clone: the next "
                    f"`git-hive list --json` (trust check, index catch-up beside the `.hive/` checkout, listing)",
                    samples, min(target, 3 * git_median), cpu=cpu, error=error,
                    note=f"git's own checkout of the same {len(built.generated.files):,} files into a new folder "
                         f"(`git checkout <state> -- .`, an index of its own), run before each: median {fmt(git_median)} "
                         f"(hive {statistics.median(samples) / git_median:.1f} ×; target the lower of 3 × that and "
                         f"{fmt(target)}); system CPU median {fmt(statistics.median(system))}; {load}")
    floors.append((result, files))
    return [result, Result(f"the command after taking in {size} (`git-hive list --json`)", after, 0.300,
                           note=f"{files:,} files written into `.hive/` by the intake; {load}")]


def intake(ctx: Context) -> list[Result]:
    reps = 2 if ctx.quick else 3
    medium = ctx.workspace.repo(ctx.sizes.medium)
    # issue 33's case: a queue imported from another tool, 90 % finalized but still in `issues/`
    flat = ctx.workspace.repo(ctx.sizes.medium, archived=ctx.sizes.archived, flat=True)
    archived = ctx.workspace.repo(ctx.sizes.medium, archived=ctx.sizes.archived)
    large = ctx.workspace.repo(ctx.sizes.large, archived=ctx.sizes.archived)
    floors: list[tuple[Result, int]] = []
    results = [*_intake(ctx, medium, reps, 2.0, floors), *_intake(ctx, flat, reps, 2.0, floors),
               *_intake(ctx, archived, reps, 2.0, floors), *_intake(ctx, large, 1, 15.0, floors)]
    for k, (result, files) in enumerate(floors):   # after every run: these files are not deleted before the end either
        result.note += (f"; creating that many files in one new folder takes {fmt(_create_floor(ctx, files, str(k)))} "
                        f"on this file system after the runs (at most 10,000 created, the time scaled)")
    return results


BENCHMARKS = [
    Benchmark("intake", intake, "a big queue taken in after plain git moved hive/state (10k: live, 90 % finalized "
                                "in issues/, 90 % archived; 100k, 90 % archived), beside git's own checkout"),
]
