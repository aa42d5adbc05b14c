"""The state store and its index, measured in-process: rebuild, catch-up, ready query, writes."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import Benchmark, Context, Result, cpu_now, fmt, measure, timed
from bench.fixtures import BuiltRepo
from hive.state import issue_file
from hive.state.index import Index
from hive.state.trees import walk_changes
from hive.state.store import Change, Snapshot, StateStore


def _large(ctx: Context) -> BuiltRepo:
    return ctx.workspace.repo(ctx.sizes.large, archived=ctx.sizes.archived)


def _medium(ctx: Context) -> BuiltRepo:
    return ctx.workspace.repo(ctx.sizes.medium)


def _label(repo: BuiltRepo, edges: bool = False) -> str:
    n = len(repo.generated.issues)
    archived = sum(1 for p in repo.generated.paths.values() if p.startswith("issues/archive/"))
    text = f"{n:,} issues" + (f" ({archived:,} archived)" if archived else " (all live)")
    return text + (f", {repo.generated.edges:,} edges" if edges else "")


def _edit_title(store: StateStore, issue_id: str, title: str) -> None:
    """Another writer's CAS commit: one issue's title changed."""

    def build(snap: Snapshot) -> Change:
        found = snap.read_issue(issue_id)
        assert found is not None, issue_id
        path, data = found
        text = issue_file.update_text(data.decode(), {"title": title}, path)
        return Change({path: text.encode()}, summary=f"retitle {issue_id}", event="updated", issue=issue_id)

    assert store.commit(build) is not None


# -- index rebuild ----------------------------------------------------------------------------

def _rebuild_split(repo: BuiltRepo) -> str:
    """Where a full rebuild's time goes: reading the blobs, parsing them, the rest."""
    import pygit2

    git_repo = pygit2.Repository(str(repo.paths.common_dir))
    tree = git_repo.revparse_single("refs/heads/hive/state").peel(pygit2.Commit).tree
    start = time.perf_counter()
    blobs = [(path, git_repo[new].data) for path, _, new in walk_changes(git_repo, None, tree)
             if path.startswith("issues/") and path.endswith(".md")]
    read = time.perf_counter() - start
    start = time.perf_counter()
    for path, data in blobs:
        issue_file.parse(data, path.rsplit("/", 1)[-1][:-3], path)
    parse = time.perf_counter() - start
    return (f"one pass split: walk + read blobs {fmt(read)}, parse (the fast front-matter reader, tomllib for "
            f"anything else, + checks) {fmt(parse)}; the rest: the trust check of the whole tree, SQLite, "
            f"the ranks of the ready queue")


def rebuild(ctx: Context) -> list[Result]:
    results = []
    for repo, reps, target in ((_medium(ctx), 3 if ctx.quick else 5, 3.0),
                               (_large(ctx), ctx.sizes.slow_reps, 12.0)):   # issue 20: 12 s at 100k
        index = Index(repo.paths)
        problems: list[Any] = []
        cpu: list[float] = []
        samples = measure(lambda: problems.extend(index.rebuild()), reps, warmup=0, cpu=cpu)
        count = index.db.execute("SELECT COUNT(*) FROM issues").fetchone()[0]
        edges = index.db.execute("SELECT COUNT(*) FROM deps").fetchone()[0]
        index.close()
        error = ""
        if count != len(repo.generated.issues) or edges != repo.generated.edges:
            error = f"indexed {count} issues / {edges} edges, expected {len(repo.generated.issues)} / {repo.generated.edges}"
        elif problems:
            error = f"{len(problems)} problems reported, e.g. {problems[0]}"
        note = _rebuild_split(repo) if repo is _large(ctx) else ""
        results.append(Result(f"index full rebuild (`Index.rebuild()`), {_label(repo)}", samples,
                              target, note=note, error=error, cpu=cpu))
    return results


# -- index catch-up ---------------------------------------------------------------------------

def catchup(ctx: Context) -> list[Result]:
    repo = _large(ctx)
    index = Index(repo.paths)
    index.ensure_current()
    writer = StateStore(repo.paths)          # another writer, as another process would be
    reps = ctx.sizes.reps
    samples, cpu, errors = [], [], []
    for k, issue_id in enumerate(repo.take(reps + 2, statuses=("open", "in_progress", "done"))):
        title = f"Retitled by the catch-up benchmark {k}"
        _edit_title(writer, issue_id, title)
        cpu_start = cpu_now()
        start = time.perf_counter()
        problems = index.ensure_current()
        elapsed = time.perf_counter() - start
        cpu_used = cpu_now() - cpu_start
        got = index.get(issue_id)
        if got is None or got.title != title or problems:
            errors.append(f"{issue_id}: indexed title {got.title if got else None!r}, problems {problems}")
        if k >= 2:
            samples.append(elapsed)
            cpu.append(cpu_used)
    results = [Result(f"index catch-up after one changed issue (`Index.ensure_current()`), {_label(repo)}",
                      samples, 0.050, error="; ".join(errors[:2]), cpu=cpu)]

    # A dependency change is the one edit that must be walked for cycles (all its blockers).
    dep_samples, dep_cpu = [], []
    blockers = [i.id for i in repo.generated.issues if i.status == "finalized"][-200:]
    for k, issue_id in enumerate(repo.take(6, statuses=("open",))):

        def build(snap: Snapshot, issue_id: str = issue_id, blocker: str = blockers[k]) -> Change:
            path, data = snap.read_issue(issue_id)  # type: ignore[misc]
            current = issue_file.parse(data, issue_id, path)
            text = issue_file.update_text(data.decode(), {"depends_on": [*current.depends_on, blocker]}, path)
            return Change({path: text.encode()}, summary="dep", event="dep-added", issue=issue_id)

        writer.commit(build)
        cpu_start = cpu_now()
        start = time.perf_counter()
        index.ensure_current()
        if k >= 1:
            dep_samples.append(time.perf_counter() - start)
            dep_cpu.append(cpu_now() - cpu_start)
    index.close()
    results.append(Result(f"index catch-up after one added dependency (walks its blockers for cycles), "
                          f"{_label(repo)}", dep_samples, cpu=dep_cpu))
    return results


# -- ready query ------------------------------------------------------------------------------

def ready(ctx: Context) -> list[Result]:
    repo = _large(ctx)
    index = Index(repo.paths)
    index.ensure_current()
    edges = index.db.execute("SELECT COUNT(*) FROM deps").fetchone()[0]
    issues = index.db.execute("SELECT COUNT(*) FROM issues").fetchone()[0]
    found = len(index.ready())
    cpu_limited: list[float] = []
    cpu_unlimited: list[float] = []
    limited = measure(lambda: index.ready(limit=50), max(50, ctx.sizes.reps), warmup=3, cpu=cpu_limited)
    unlimited = measure(lambda: index.ready(), max(10, ctx.sizes.reps // 2), warmup=1, cpu=cpu_unlimited)
    index.close()
    size = f"{issues:,} issues / {edges:,} edges"
    return [
        Result(f"ready query `Index.ready(limit=50)`, {size}", limited, 0.005, cpu=cpu_limited),
        Result(f"ready query `Index.ready()` unlimited ({found:,} ready), {size}", unlimited, cpu=cpu_unlimited),
    ]


# -- writes -----------------------------------------------------------------------------------

def _claims(ctx: Context, repo: BuiltRepo, *, deferred: bool) -> Result:
    """`hive.lifecycle.claim` on ready issues: CAS commit re-checking the issue and its blockers at the
    tip, then the `.hive/` refresh (unless `deferred`: the daemon refreshes once per wake-up) and
    the index catch-up."""
    from hive import lifecycle
    from hive.project import Project

    reps = ctx.sizes.reps
    project = Project.open(repo.root)
    project.sync(warn=False)
    if deferred:
        project.defer_checkout = lambda: None   # the daemon's loop refreshes, batched
    ready_ids = [i.id for i in project.index.ready()]
    claim_ids = iter(repo.take(reps + 2, among=ready_ids))
    parts: dict[str, list[float]] = {}
    timed(project.store, "commit", parts)
    timed(project.checkout, "refresh", parts)
    timed(project.index, "ensure_current", parts)
    failures = []

    def claim() -> None:
        issue_id = next(claim_ids)
        if not lifecycle.claim(project, issue_id, "w-bench"):
            failures.append(issue_id)

    cpu: list[float] = []
    samples = measure(claim, reps, warmup=2, cpu=cpu)
    if deferred:
        project.checkout.refresh()
    project.close()
    split = ", ".join(f"{what} {fmt(statistics.median(times[2:]))}" for what, times in (
        ("CAS commit", parts.get("commit", [])), (".hive/ refresh", parts.get("refresh", [])),
        ("index catch-up", parts.get("ensure_current", []))) if len(times) > 2)
    if deferred:
        return Result(f"one claim as the daemon makes it (`defer_checkout`: commit + index; `.hive/` refreshed "
                      f"once per wake-up), {_label(repo)}", samples, 0.020, note=f"median split (wall): {split}",
                      cpu=cpu, error=f"claims refused: {failures}" if failures else "")
    # The CLI's claim also brings the `.hive/` checkout's git index up to date: libgit2 reads and
    # writes that whole file, one entry per checked-out file (103k at the large size, the archive
    # included). That is the checkout's upkeep, not the state write: for information.
    return Result(f"one claim, `hive.lifecycle.claim` as the CLI makes it (commit + .hive/ refresh + index), "
                  f"{_label(repo)}", samples, None, cpu=cpu, error=f"claims refused: {failures}" if failures else "",
                  note=f"median split (wall): {split}; the `.hive/` refresh rewrites the checkout's git index "
                       f"(one entry per checked-out file, the archive included)")


def writes(ctx: Context) -> list[Result]:
    results = []
    for repo in (_medium(ctx), _large(ctx)):
        label = _label(repo)
        reps = ctx.sizes.reps

        # The raw store write: one CAS commit changing one issue's front matter (tomlkit).
        store = StateStore(repo.paths)
        targets = iter(repo.take(2 * (reps + 2), statuses=("open", "in_progress", "done")))

        def raw() -> None:
            issue_id = next(targets)

            def build(snap: Snapshot) -> Change:
                path, data = snap.read_issue(issue_id)  # type: ignore[misc]
                text = issue_file.update_text(data.decode(), {
                    "labels": ["bench"], "updated": issue_file.format_time(issue_file.now())}, path)
                return Change({path: text.encode()}, summary=f"label {issue_id}", event="updated",
                              issue=issue_id)

            assert store.commit(build) is not None

        cpu: list[float] = []
        results.append(Result(f"one CAS write, raw `StateStore.commit` (one issue's front matter), {label}",
                              measure(raw, reps, warmup=2, cpu=cpu), 0.020, cpu=cpu,
                              note="a long-lived store (the daemon): the folders it wrote last are kept"))

        def cold() -> None:
            nonlocal store
            store = StateStore(repo.paths)   # nothing kept: the folders are read and parsed first
            raw()

        cpu = []
        results.append(Result(f"one CAS write by a new `StateStore` (a CLI command's one write), {label}",
                              measure(cold, reps, warmup=2, cpu=cpu), 0.020, cpu=cpu))

        results.append(_claims(ctx, repo, deferred=False))
        results.append(_claims(ctx, repo, deferred=True))
    return results


BENCHMARKS = [
    Benchmark("rebuild", rebuild, "index full rebuild at the medium and large sizes"),
    Benchmark("ready", ready, "ready query on the large repository"),
    Benchmark("catchup", catchup, "index catch-up after one write by another StateStore"),
    Benchmark("write", writes, "raw CAS store write and full claim at the medium and large sizes"),
]


ANALYSIS = """## Where the time goes (state store, `list`, `watch`)

Measured with cProfile and CPU time on the generated repositories; re-check after changes.

- **`list --json`** pays the interpreter and imports first (see the `python -c pass` and
  `--version` rows: in this sandbox a `.pth` file imports certifi at every interpreter start).
  At 10k issues the rest is the `.hive/` edit scan (`stat` of every live file, ~30 ms; loading
  and comparing every checkout record, ~14 ms more, only when the last look is not remembered
  clean: after a command's own write the next look is foretold, `Checkout._predicted_scan`) and
  the listing, which SQLite builds as JSON text (`Index.list_json`: `json_object` per row; ~50 ms
  at 10k, ~450 ms at 100k, most of it the sort and the JSON) — made once per change of the rows:
  the whole listing is kept (`hive/state/kept_listing.py`) and handed out again while the index's
  listing generation is the same. Building an `Issue` and a dict per issue in Python cost ~150 ms
  more.
- **One command at 10k issues** (`update`, `create`, `list --ready`) was mostly start-up: the
  interpreter (~22 ms with an editable install's import hook, ~11 ms without), click (~20 ms),
  pygit2 (~55 ms: its C library, `ssl`, its enums), hive's own modules (~25 ms), against ~35 ms
  of `.hive/` scan and ~35 ms of write and refresh. A Python write path without pygit2 and a
  dispatch without click were the other ways to 150 ms; instead a command after the first is
  run by the command server (`hive/cli/served.py`: a fork of a process that imported all that),
  so what is left is the interpreter's start, ~2 ms of hand-over (the socket's key hashes hive's
  sources' times and the environment) and the command's own work. Of that work, the `.hive/`
  scan (10k `stat`s, 35-55 ms; no faster way from Python: threads contend, `scandir` is slower)
  is gone too: the server keeps each checkout's live scan by inotify (`hive/state/live_folder.py`)
  and reads the events before it forks the command, which takes the kept scan and its digest
  (~50 ms → 0 at 10k). The rows "in its own process" are the same commands with
  `HIVE_COMMAND_SERVER=0`: what the first command pays.
- **Full rebuild and taking in a big queue** were parse-bound: tomllib on every front matter was
  ~75 % of a rebuild. Now `hive/state/front_matter.py` reads the shapes hive writes itself
  (anything else goes to tomllib, and a corpus test holds the two equal): the layout `render`
  writes is matched by one regex, any other front matter of those shapes is checked whole by one
  regex and read by one `findall`; times are parsed with their offset (`replace(tzinfo=...)`
  cost 2 µs each) and written back by `isoformat`; `split` finds the closing `+++` without
  splitting the body into lines; `from_meta` makes no closures per call. Each issue blob is read
  once: the trust check (which reads every one for the TOML depth, counting brackets in the
  bytes before any decoding) hands the bytes to the index. Rows go to SQLite as tuples, and into
  an empty issues table (a rebuild, a queue taken into a state without issues) in key order
  with the other indexes made afterwards. At 100k the rest is about: trust check ~3.6 s (of
  which reading the blobs ~2 s, inflating them from the pack), parse ~4-5 s, SQLite ~2.5 s, the
  cycle walk and unknown-blocker query ~1.4 s, ranks ~0.5 s, the two tree walks ~1.3 s (CPU,
  measured on a loaded machine). Parsing in 2 processes would roughly halve the parse on a
  quiet 2-core machine; not done.
- **Taking in 10k/100k issues that arrived by git** writes every file into `.hive/`. The refresh
  used a temporary file, a link and an unlink per file, and had libgit2 read, hash and stat each
  file again for the checkout's git index (`add_bypath`, ~0.4 ms a file); now a new file is
  created in place (`O_EXCL`: one that appeared meanwhile is a person's and is left alone) and a
  refresh of more than `BULK_PATHS` paths stages blob ids without stat (`git status` in `.hive/`
  compares those by content once). What is left is mostly the file system: the note of each
  intake row gives the time this machine takes just to create that many files, which on this
  shared machine swung from ~0.1 to ~1.3 ms a file within minutes. Deleting many files was
  quadratic (every pruned folder was listed whole): now `rmdir` is simply tried. Per new file
  the refresh no longer goes through pathlib, checks for symlinks with `lstat` and reads the blob
  with `odb.read`, and records all files in one statement. The kernel's side dominates: 10,000
  files created by `open(O_CREAT|O_EXCL)` in `.hive/issues` right after the staging deleted as
  many took 5–8 s of system time, the same files in a fresh folder 1.2–1.5 s (this root file
  system is ext4 without a journal); hive's own CPU in a 10k refresh is ~1.2 s (110 µs a file:
  the blob read, the checks, the git index entry).
- **Ready queue order** (`READY_SQL`): priority, then the ranks of `hive/state/ranks.py` (the
  longest chain of waiting dependents, then their number), then age, all in the partial index
  `issues_ready`, so `LIMIT` still stops early. The ranks are stored in the index and recomputed
  for the whole waiting graph (one bitset union per edge) only when that graph changes — an
  issue added, removed, finished or reopened, its blockers edited — never for a claim.
- **Writes with 10k live issues** rewrite the flat `issues/` tree (10k entries, ~400 KB). libgit2
  spent ~9 ms of a write in zlib (level 1) on that tree, ~5 ms reading it back on the next write
  and ~2 ms loading it into a TreeBuilder; `walk_changes` then compared the old and new trees in
  Python twice (index catch-up, `.hive/` refresh). Now (`hive/state/trees.py`) a long-lived
  process keeps each folder it wrote as its serialized entries and changes them in place, the
  tree is stored with zlib level 0 (object ids do not compress), and the commit's own list of
  changed paths (`Written`) feeds the index and the refresh. A new process (a CLI command) pays
  once to read and parse the folder: the "new `StateStore`" rows.
- **A command's refresh at 100k** changes one or two entries of the checkout's git index, which
  holds every file of `hive/state` — 103k entries, ~10 MB, the archive's with the skip-worktree
  bit. libgit2 reads all of it (84 ms: its entry map ~35 %, SHA-1DC over the file ~25 %) and
  writes all of it (42 ms) each time; `git update-index` makes the same change in ~50 ms (git
  checks no checksum when it reads, and builds no name map). So a refresh of a few paths in an
  index of 512 KB and more runs git (`Checkout._stage_all`); below that (~6k entries) starting
  git costs more than libgit2's whole read and write (at 100 entries 0.5 ms against ~1.7 ms).
  The daemon defers its refresh to once per wake-up (`Project.defer_checkout`). Left: git's own
  write hashes the 10 MB (~30 ms); a sparse index (one entry for `issues/archive/`) is what git
  offers against that, but libgit2 cannot read one.
- **`watch` at 10k** looks only at the files the watcher reported (`Checkout.absorb(only=...)`),
  then commits, catches the index up and refreshes as above.
- **Catch-up after an added dependency** walks every transitive blocker for cycles (one SQL
  query per node; most of the graph at 100k). Only dependency changes pay it now.
"""
