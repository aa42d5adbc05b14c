"""A big queue that arrives by plain git (a pull, a fresh clone's init): the next command takes
it in with both cores — the index is made by a forked child (`Index.adopt`) while `.hive/` is
written here — and nothing changes in what it takes in: the same files, rows and problems as a
catch-up in one process, a person's edit in `.hive/` committed on top. And what `.hive/` follows
when another process writes meanwhile: never a tip older than the one it was brought to."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from hive.state import halves, index as index_module

QUEUE = 12
INVALID = ["issues/hv-new005.md", "issues/hv-new006.md"]   # broken; blocked by the broken one


@pytest.fixture
def arrived(repo: Path, project: Any, git, issue_text, monkeypatch) -> dict[str, Any]:
    """`hive/state` moved by `update-ref` from a state of one issue to one of QUEUE more (a
    chain, one invalid), `.hive/` still at the first; taking in 2 files or more goes beside."""
    monkeypatch.setattr(halves, "MIN_ITEMS", 10**9)          # one process for the parse itself
    monkeypatch.setattr(index_module, "ASIDE_FILES", 2)
    issues = repo / ".hive" / "issues"
    (issues / "hv-old001.md").write_text(issue_text("Here before"), encoding="utf-8")
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", "one issue", cwd=repo / ".hive")
    before = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    ids = [f"hv-new{k:03d}" for k in range(QUEUE)]
    for k, issue_id in enumerate(ids):
        text = issue_text(f"Arrived {k}", depends_on=ids[k - 1:k])
        (issues / f"{issue_id}.md").write_text(text if k != 5 else "+++\ntitle = \"broken\n+++\n", encoding="utf-8")
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", "a big queue", cwd=repo / ".hive")
    after = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    files = {p.name: p.read_bytes() for p in issues.glob("*.md")}
    project.sync(warn=False)                                   # the checkout follows it ...
    git("update-ref", "refs/heads/hive/state", before, cwd=repo)   # ... back, then forward again
    project.sync(warn=False)
    assert sorted(p.name for p in issues.glob("*.md")) == ["hv-old001.md"]
    git("update-ref", "refs/heads/hive/state", after, cwd=repo)
    return {"ids": ids, "files": files, "tip": after}


def children() -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def taken_in(project: Any, repo: Path, git) -> tuple:
    rows = sorted(map(tuple, project.index.db.execute("SELECT id, title, status, blob FROM issues")))
    files = {p.name: p.read_bytes() for p in (repo / ".hive" / "issues").glob("*.md")}
    status = git("status", "--porcelain", cwd=repo / ".hive").stdout
    return rows, files, status, [i.id for i in project.index.ready()]


def test_the_index_is_made_in_a_child_while_hive_is_written_here(repo, project, git, arrived, monkeypatch, tmp_path):
    seen = tmp_path / "seen"
    last = repo / ".hive" / "issues" / f"{arrived['ids'][-1]}.md"
    real = index_module.Index._catch_up_in_child

    def in_child(self, tip, checked):
        # waits for the parent to write `.hive/`: only a refresh made meanwhile lets it go on
        deadline = time.monotonic() + 20
        while not last.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.write_text(f"{os.getpid()} {last.exists()}")
        return real(self, tip, checked)

    monkeypatch.setattr(index_module.Index, "_catch_up_in_child", in_child)
    problems = project.sync(warn=False)
    pid, overlapped = seen.read_text().split()
    assert int(pid) != os.getpid() and overlapped == "True", "the index was not made beside the refresh"
    assert not children()
    assert [p.path for p in problems] == INVALID                        # reported once
    rows, files, status, ready = taken_in(project, repo, git)
    assert files == arrived["files"] and status == ""
    assert {r[0] for r in rows} == {"hv-old001", *arrived["ids"]} - {"hv-new005"}
    assert set(ready) == {"hv-old001", "hv-new000"}                   # the rest wait on the chain
    assert project.index.indexed_commit == arrived["tip"]


def test_a_child_that_dies_costs_only_time(repo, project, git, arrived, monkeypatch):
    parent = os.getpid()
    real = index_module.Index.catch_up

    def dies_in_child(self, *args, **kwargs):
        if os.getpid() != parent:
            os._exit(9)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(index_module.Index, "catch_up", dies_in_child)
    problems = project.sync(warn=False)
    assert [p.path for p in problems] == INVALID
    rows, files, status, _ = taken_in(project, repo, git)
    assert files == arrived["files"] and status == "" and len(rows) == QUEUE
    assert project.index.indexed_commit == arrived["tip"] and not children()


def test_the_same_is_taken_in_as_by_one_process(repo, project, git, arrived, monkeypatch):
    beside = (project.sync(warn=False), taken_in(project, repo, git))
    project.checkout.reset_records()
    git("update-ref", "refs/heads/hive/state", arrived["tip"] + "^", cwd=repo)
    project.sync(warn=False)
    git("update-ref", "refs/heads/hive/state", arrived["tip"], cwd=repo)
    monkeypatch.setattr(halves, "may_fork", lambda: False)
    here = (project.sync(warn=False), taken_in(project, repo, git))
    assert here == beside


def test_new_files_are_created_without_a_look_and_names_already_taken_stay_as_they_are(
        repo, project, git, arrived, monkeypatch, tmp_path):
    """A file new on the branch is created at once (O_EXCL): only a name where something already
    is gets looked at, and then what is there stays — a person's file, a symlink (never
    followed), a folder."""
    from hive.state import checkout as checkout_module

    issues = repo / ".hive" / "issues"
    own, linked, folder = (issues / f"{arrived['ids'][k]}.md" for k in (1, 2, 3))
    own.write_bytes(b"the person's own notes\n")
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"not hive's\n")
    linked.symlink_to(outside)
    folder.mkdir()
    looked: list[str] = []
    real_read = checkout_module._read_regular

    def read_regular(where: str) -> bytes | None:
        looked.append(Path(where).name)
        return real_read(where)

    monkeypatch.setattr(checkout_module, "_read_regular", read_regular)
    project.sync(warn=False)
    assert sorted(looked) == sorted(path.name for path in (own, linked, folder))
    assert own.read_bytes() == b"the person's own notes\n"
    assert linked.is_symlink() and outside.read_bytes() == b"not hive's\n" and folder.is_dir()
    taken = {own.name, linked.name, folder.name}
    files = {p.name: p.read_bytes() for p in issues.glob("*.md") if p.name not in taken}
    assert files == {name: data for name, data in arrived["files"].items() if name not in taken}
    assert project.index.indexed_commit == arrived["tip"]


def test_a_persons_edit_in_hive_is_committed_on_top_of_the_queue(repo, project, git, arrived, issue_text):
    (repo / ".hive" / "issues" / "hv-old001.md").write_text(issue_text("Edited meanwhile"), encoding="utf-8")
    project.sync(warn=False)
    assert project.index.get("hv-old001").title == "Edited meanwhile"
    assert git("rev-parse", "hive/state^", cwd=repo).stdout.strip() == arrived["tip"]
    rows, files, status, _ = taken_in(project, repo, git)
    assert len(rows) == QUEUE and status == ""
    assert {name: data for name, data in files.items() if name != "hv-old001.md"} == \
        {name: data for name, data in arrived["files"].items() if name != "hv-old001.md"}


def test_hive_never_goes_back_to_a_tip_another_writer_moved_past(repo, project, git, new_issue, monkeypatch):
    """The tip checked at a sync's start is what `.hive/` follows only while the branch still
    points at it: another writer's newer commit (and its refresh of `.hive/`) made meanwhile is
    never undone by this sync's refresh."""
    from hive import issues
    from hive.project import Project
    from hive.state.checkout import Checkout

    issue_id = new_issue("Watched")
    path = repo / ".hive" / "issues" / f"{issue_id}.md"
    path.write_text(path.read_text(encoding="utf-8").replace("Watched", "Committed by plain git"), encoding="utf-8")
    git("commit", "-qam", "a person's plain commit", cwd=repo / ".hive")     # moved from outside
    other = Project.open(repo)
    real_absorb = Checkout.absorb

    def absorb_while_another_writes(self, *args, **kwargs):
        if project._adopting is not None:   # between this sync's check and its refresh
            issues.update(other, issue_id, {"title": "Written by another process"})
        return real_absorb(self, *args, **kwargs)

    monkeypatch.setattr(Checkout, "absorb", absorb_while_another_writes)
    project.sync(warn=False)
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    assert project.checkout.commit == tip
    assert path.read_bytes() == git("show", f"hive/state:issues/{issue_id}.md", cwd=repo).stdout.encode()
    assert 'title = "Written by another process"' in path.read_text(encoding="utf-8")
    assert project.index.get(issue_id).title == "Written by another process"
    other.close()


def test_a_refresh_that_waited_for_the_lock_reads_again_what_to_follow(repo, project, git, new_issue, monkeypatch):
    """Between reading the tip to follow and taking the checkout's lock, another process may
    commit and bring `.hive/` to its newer tip: the refresh then follows what is adopted now."""
    from hive import issues
    from hive.project import Project

    issue_id = new_issue("Watched")
    path = repo / ".hive" / "issues" / f"{issue_id}.md"
    path.write_text(path.read_text(encoding="utf-8").replace("Watched", "Committed by plain git"), encoding="utf-8")
    git("commit", "-qam", "a person's plain commit", cwd=repo / ".hive")
    project.index.ensure_current()
    other = Project.open(repo)
    real_locked = project.checkout.locked
    writes = []

    def locked():
        if not writes:   # the other process gets the lock first
            writes.append(issues.update(other, issue_id, {"title": "Written by another process"}))
        return real_locked()

    monkeypatch.setattr(project.checkout, "locked", locked)
    project.checkout.refresh()
    assert writes and project.checkout.commit == git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    assert 'title = "Written by another process"' in path.read_text(encoding="utf-8")
    other.close()


def arrives_by_git(repo: Path, git, before: str, message: str) -> str:
    """What was written into `.hive/` since `before`, committed there and then undone: the tip a
    plain git move of `hive/state` (a pull) brings, `.hive/` still at `before`."""
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", message, cwd=repo / ".hive")
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    git("reset", "-q", "--hard", before, cwd=repo / ".hive")
    git("update-ref", "refs/heads/hive/state", tip, cwd=repo)
    return tip


def test_a_hostile_big_queue_is_refused_before_a_child_or_hive_sees_it(repo, project, git, issue_text, monkeypatch):
    """The tip is trust-checked before anything is forked or written: a queue big enough to be
    indexed beside, with a symlink among its files, is refused and taken back as any other."""
    monkeypatch.setattr(index_module, "ASIDE_FILES", 2)
    forks: list[int] = []
    monkeypatch.setattr(halves.Beside, "_fork", lambda self: forks.append(1))
    issues = repo / ".hive" / "issues"
    before = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    for k in range(QUEUE):
        (issues / f"hv-bad{k:03d}.md").write_text(issue_text(f"Hostile {k}"), encoding="utf-8")
    os.symlink("/etc/passwd", issues / "hv-evil01.md")
    arrives_by_git(repo, git, before, "a hostile queue")
    problems = project.sync(warn=False)
    assert [p.path for p in problems] == [index_module.REFUSED] and forks == []
    assert git("rev-parse", "hive/state", cwd=repo).stdout.strip() == before
    assert project.checkout.commit == before and not list(issues.glob("hv-bad*.md"))
    assert not (issues / "hv-evil01.md").is_symlink() and project.index.list() == []


@pytest.mark.parametrize("name", ["--force-remove.md", "-q.md", "a,b.md", "--index-info.md"])
def test_a_fetched_state_with_names_git_could_take_for_options_reaches_no_git(repo, project, git, issue_text,
                                                                              monkeypatch, name):
    """A refresh hands the paths it stages to `git update-index` when the checkout's index is big:
    a fetched tip naming files like options or with a comma is refused whole by the trust check,
    before anything is staged (and the stager takes any path as a path: test_state_store)."""
    from hive import git as hgit
    from hive.state import checkout as checkout_module

    monkeypatch.setattr(checkout_module, "GIT_INDEX_BYTES", 0)   # every refresh through git's CLI
    staged: list[str] = []
    stage = hgit.update_worktree_index
    monkeypatch.setattr(hgit, "update_worktree_index",
                        lambda worktree, blobs, left_out: staged.extend(blobs) or stage(worktree, blobs, left_out))
    issues = repo / ".hive" / "issues"
    before = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    (issues / "hv-fine01.md").write_text(issue_text("Fine"), encoding="utf-8")
    (issues / name).write_text(issue_text("Named like an option"), encoding="utf-8")
    arrives_by_git(repo, git, before, "a hostile name")
    problems = project.sync(warn=False)
    assert [p.path for p in problems] == [index_module.REFUSED] and staged == []
    assert git("rev-parse", "hive/state", cwd=repo).stdout.strip() == before
    assert not (issues / name).exists() and not (issues / "hv-fine01.md").exists()
    assert git("ls-files", "--", f"issues/{name}", cwd=repo / ".hive").stdout == ""
    (issues / "hv-fine01.md").write_text(issue_text("Fine"), encoding="utf-8")   # the same, without it
    arrives_by_git(repo, git, before, "fine")
    assert project.sync(warn=False) == [] and staged == ["issues/hv-fine01.md"]   # through git, as a name


def test_a_queue_the_child_splits_once_hive_waits_is_taken_in_as_by_one_process(repo, project, git, arrived,
                                                                                 monkeypatch, tmp_path):
    """The queue (a broken file and one blocked by it among what arrived) is parsed by the child
    in two processes once this process has written `.hive/` and waits (`halves.free_cores`): the
    same rows, files and problems as one process makes of it."""
    monkeypatch.setattr(halves, "MIN_ITEMS", 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})   # two cores, whatever the machine has
    parsed_by = tmp_path / "parsed-by"
    real_parse, real_child = index_module._parse_one, index_module.Index._catch_up_in_child

    def parse(item):
        with open(parsed_by, "a") as out:
            out.write(f"{os.getpid()}\n")
        return real_parse(item)

    def once_hive_waits(self, tip, checked):
        deadline = time.monotonic() + 20
        while halves.free_cores() < 2 and time.monotonic() < deadline:
            pass                                       # this process is about to wait: a moment
        return real_child(self, tip, checked)

    monkeypatch.setattr(index_module, "_parse_one", parse)
    monkeypatch.setattr(index_module.Index, "_catch_up_in_child", once_hive_waits)
    beside = (project.sync(warn=False), taken_in(project, repo, git))
    parsers = set(parsed_by.read_text().split())
    assert str(os.getpid()) not in parsers and len(parsers) == 2, "the child did not split its parse"
    assert [p.path for p in beside[0]] == INVALID and not children()
    project.checkout.reset_records()
    git("update-ref", "refs/heads/hive/state", arrived["tip"] + "^", cwd=repo)
    project.sync(warn=False)
    git("update-ref", "refs/heads/hive/state", arrived["tip"], cwd=repo)
    monkeypatch.setattr(halves, "may_fork", lambda: False)
    assert (project.sync(warn=False), taken_in(project, repo, git)) == beside
