"""Taking in a big queue that arrived by plain git: the next `git-hive list --json`.

`hive/state` is moved by `git update-ref` (what a `git pull` of a large shared queue, or `init` in
a fresh clone, does to it) from a skeleton state (`.gitattributes`, `context.md`, the `.gitkeep`s)
to the generated repository's full state; the figure is the wall time of the next real
`git-hive list --json`: the trust check of the new tree, the `.hive/` checkout brought to it (every
file written but the archive's, which `.hive/` does not check out), the index caught up (every
issue parsed), the listing. Between runs the ref goes
back to the skeleton and a `list` (untimed) empties the checkout and the index again. The repository is
the one the other benchmarks use, left at its full state afterwards. Beside it, in the note: the
time this machine's file system takes to create the same number of files in one folder (the floor
of any checkout).
"""

from __future__ import annotations

import os
import subprocess
import time

import pygit2

from bench import Benchmark, Context, Result, fmt, measure
from bench.commands import _run
from bench.fixtures import BuiltRepo
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


def _move_state(built: BuiltRepo, commit: str) -> None:
    subprocess.run(["git", "update-ref", git.STATE_REF, commit], cwd=built.root, check=True)


FLOOR_FILES = 10_000


def _create_floor(ctx: Context, count: int) -> float:
    """Seconds to create `count` small files in one new folder here (written and closed): at most
    FLOOR_FILES are created, the time scaled to `count`."""
    folder = ctx.workspace.scratch(f"floor-{count}")
    created = min(count, FLOOR_FILES)
    start = time.perf_counter()
    for k in range(created):
        fd = os.open(folder / f"f{k}.md", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.write(fd, b"+++\n" * 200)
        os.close(fd)
    took = time.perf_counter() - start
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    return took * count / created


def _intake(ctx: Context, built: BuiltRepo, reps: int, target: float) -> Result:
    repo = pygit2.Repository(str(built.root))
    full = repo.references[git.STATE_REF].peel(pygit2.Commit)
    skeleton = _skeleton(repo, full)
    _run(built, "list", "--json")        # the index current at the full state

    def back_to_skeleton() -> None:
        _move_state(built, skeleton)
        _run(built, "list", "--json")
        _move_state(built, str(full.id))

    shown: list[int] = []
    cpu: list[float] = []
    samples = measure(lambda: shown.append(len(_run(built, "list", "--json").stdout)), reps, warmup=0,
                      cpu=cpu, setup=back_to_skeleton)
    files = sum(1 for path in built.generated.files if not path.startswith("issues/archive/"))   # not checked out
    listed = _run(built, "list", "--json").stdout.count(b'"id":')
    error = "" if listed == len(built.generated.issues) else f"listed {listed} issues, expected {len(built.generated.issues)}"
    archived = sum(1 for p in built.generated.paths.values() if p.startswith("issues/archive/"))
    size = f"{len(built.generated.issues):,} issues" + (f" ({archived:,} archived)" if archived else " (all live)")
    floor = _create_floor(ctx, files)
    return Result(f"taking in {size} that arrived by plain git (`update-ref`): the next `git-hive list --json` "
                  f"(trust check, `.hive/` checkout, index catch-up, listing)", samples, target, cpu=cpu, error=error,
                  note=f"{files:,} files written into `.hive/`; creating that many files in one folder takes "
                       f"{fmt(floor)} on this file system right after the run (at most 10,000 created, the time scaled); load average {os.getloadavg()[0]:.1f}")


def intake(ctx: Context) -> list[Result]:
    medium = ctx.workspace.repo(ctx.sizes.medium)
    large = ctx.workspace.repo(ctx.sizes.large, archived=ctx.sizes.archived)
    return [_intake(ctx, medium, 2 if ctx.quick else 3, 2.0), _intake(ctx, large, 1, 15.0)]


BENCHMARKS = [
    Benchmark("intake", intake, "a big queue taken in after plain git moved hive/state (10k live; 100k, 90 % archived)"),
]
