"""Writes on `hive/state`: CAS commits with trailers, the archive layout, `.hive/` kept in step.

DESIGN §2: every state change is one commit with trailers, made without a checkout and
published by compare-and-swap; concurrent writers never lose each other's changes; a person's
formatting survives; `.hive/` follows the branch and never loses a person's edit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tests.state_helpers import set_status

from hive import git as hgit
from hive import issues
from hive.errors import HiveError
from hive.state import layout
from hive.state.checkout import Committed
from hive.state.store import Change, Refused, cas_update


def tip(git, repo) -> str:
    return git("rev-parse", "hive/state", cwd=repo).stdout.strip()


def on_branch(git, repo, path: str) -> str | None:
    proc = git("show", f"hive/state:{path}", cwd=repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


# -- compare-and-swap -----------------------------------------------------------------------------

def test_cas_update_moves_the_ref_only_from_the_expected_tip(repo, project, git):
    store = project.store
    start = store.tip()
    other = git("rev-parse", "HEAD", cwd=repo).stdout.strip()  # any commit will do
    assert not cas_update(store.repo, hgit.STATE_REF, "0" * 40, other, "stale")
    assert not cas_update(store.repo, hgit.STATE_REF, None, other, "must not exist")
    assert store.tip() == start
    assert cas_update(store.repo, hgit.STATE_REF, start, other, "fresh")
    assert store.tip() == other


def test_commit_is_rebuilt_on_a_tip_that_moved_meanwhile(repo, project, git, state_log):
    store = project.store
    calls: list[str | None] = []

    def build(snap):
        calls.append(snap.oid)
        if len(calls) == 1:
            # another writer gets in between our read and our ref update
            assert store.commit(lambda s: Change({"notes/other.jsonl": b'{"content": "theirs"}\n'},
                                                 summary="theirs", event="noted")) is not None
        return Change({"notes/mine.jsonl": b'{"content": "mine"}\n'}, summary="mine", event="noted")

    new = store.commit(build)
    assert len(calls) == 2 and calls[0] != calls[1]
    assert on_branch(git, repo, "notes/other.jsonl") and on_branch(git, repo, "notes/mine.jsonl")
    history = state_log()
    assert [c.subject for c in history[-2:]] == ["theirs", "mine"]
    assert history[-1].oid == new and history[-1].parents == [history[-2].oid]


def test_a_refused_change_makes_no_commit(repo, project, git):
    before = tip(git, repo)

    def build(snap):
        raise Refused("no longer applies")

    with pytest.raises(Refused):
        project.store.commit(build)
    assert project.store.commit(lambda snap: None) is None  # nothing to do: no commit either
    assert tip(git, repo) == before


def test_writes_need_no_checkout_and_leave_the_project_alone(repo, hive, git, new_issue):
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    (repo / "work.txt").write_text("a person's uncommitted work\n")
    new_issue("one")
    hive("create", "two")
    assert git("rev-parse", "HEAD", cwd=repo).stdout.strip() == head
    assert git("symbolic-ref", "HEAD", cwd=repo).stdout.strip() == "refs/heads/main"
    assert git("status", "--porcelain", cwd=repo).stdout == "?? work.txt\n"


def test_concurrent_writers_in_separate_processes_lose_nothing(repo, git, state_log):
    script = textwrap.dedent("""
        import sys
        from hive.project import Project
        from hive import issues
        project = Project.open(sys.argv[1])
        for n in range(8):
            issues.create(project, f"{sys.argv[2]} {n}", agent=sys.argv[2])
        issues.add_notes(project, [issues.note_line(f"from {sys.argv[2]}", "context")], file_id="project")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(repo), f"w-{i}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    created = [c for c in state_log() if c.event == "created"]
    assert len(created) == 32 and len({c.issue for c in created}) == 32
    assert {c.trailers["Hive-Agent"] for c in created} == {"w-0", "w-1", "w-2", "w-3"}
    files = git("ls-tree", "--name-only", "hive/state", "issues/", cwd=repo).stdout.split()
    assert len([f for f in files if f.endswith(".md")]) == 32
    notes = on_branch(git, repo, "notes/project.jsonl").splitlines()
    assert sorted(json.loads(n)["content"] for n in notes) == [f"from w-{i}" for i in range(4)]
    # one linear history: every commit has exactly one parent but the first
    assert all(len(c.parents) == 1 for c in state_log()[1:])


# -- one commit per change, with trailers ---------------------------------------------------------

def test_every_change_is_one_commit_with_trailers(repo, project, hive, git, state_log):
    from hive import lifecycle

    start = len(state_log())
    issue = hive("create", "traced").stdout.strip()
    hive("update", issue, "-p", "0")
    assert lifecycle.claim(project, issue, "w-42")
    hive("note", "found it", "--issue", issue)
    set_status(project, issue, "done", agent="w-42")
    commits = state_log()[start:]
    assert [c.event for c in commits] == ["created", "updated", "claimed", "noted", "done"]
    assert all(c.issue == issue for c in commits)
    assert commits[2].trailers["Hive-Agent"] == "w-42" and commits[4].trailers["Hive-Agent"] == "w-42"
    assert "Hive-Agent" not in commits[0].trailers
    raw = git("log", "-1", "--format=%B", commits[2].oid, cwd=repo).stdout
    summary, blank, *trailers = raw.rstrip("\n").split("\n")
    assert summary and blank == ""
    assert trailers == ["Hive-Event: claimed", f"Hive-Issue: {issue}", "Hive-Agent: w-42"]
    assert all(c.author == "Hive Tester" for c in commits)


# -- archive layout -------------------------------------------------------------------------------

def test_terminal_issues_move_to_the_archive_and_back(repo, project, git, new_issue):
    issue = new_issue("will be finalized", status="done")
    assert on_branch(git, repo, f"issues/{issue}.md")
    set_status(project, issue, "finalized")
    shard = issue.split("-", 1)[1][:2]
    archived = f"issues/archive/{shard}/{issue}.md"
    assert layout.archive_path(issue) == archived
    assert on_branch(git, repo, f"issues/{issue}.md") is None
    assert 'status = "finalized"' in on_branch(git, repo, archived)
    # not checked out: no file in .hive/, the live one gone; git knows (skip-worktree), status clean
    assert not (repo / ".hive" / archived).exists() and not (repo / ".hive" / "issues" / f"{issue}.md").exists()
    assert not (repo / ".hive" / layout.ARCHIVE_DIR).exists()
    assert git("ls-files", "-v", archived, cwd=repo / ".hive").stdout == f"S {archived}\n"
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    project.sync(warn=False)
    assert project.index.get(issue).status == "finalized" and project.index.path_of(issue) == archived
    # the archived file is edited where it is, and moves back when the issue is live again
    issues.update(project, issue, {"title": "renamed while archived"})
    assert "renamed while archived" in on_branch(git, repo, archived)
    assert not (repo / ".hive" / archived).exists()
    assert git("ls-files", "-v", archived, cwd=repo / ".hive").stdout == f"S {archived}\n"
    set_status(project, issue, "open")
    assert on_branch(git, repo, archived) is None and on_branch(git, repo, f"issues/{issue}.md")
    assert (repo / ".hive" / "issues" / f"{issue}.md").read_text() == on_branch(git, repo, f"issues/{issue}.md")
    assert git("ls-files", archived, cwd=repo / ".hive").stdout == ""
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""


def test_any_valid_issue_file_under_issues_is_read_whatever_its_status(repo, git, list_json, issue_text):
    checkout = repo / ".hive"
    (checkout / "issues" / "archive" / "zz").mkdir(parents=True)
    (checkout / "issues" / "hv-ccccc1.md").write_text(issue_text("canceled but live", status="canceled"))
    (checkout / "issues" / "archive" / "zz" / "hv-zzzzz1.md").write_text(issue_text("open but archived"))
    git("add", "-A", cwd=checkout)
    git("commit", "-q", "-m", "by hand", cwd=checkout)
    found = {i["id"]: i["status"] for i in list_json()}
    assert found == {"hv-ccccc1": "canceled", "hv-zzzzz1": "open"}
    assert [i["id"] for i in list_json("--ready")] == ["hv-zzzzz1"]


# -- a person's formatting ------------------------------------------------------------------------

COMMENTED = """+++
# Owner: the auth team.  Keep this comment!
title   = "Login with JWT"     # aligned, as a person likes it
priority = 2  # bump when the release is near
status = "open"

type = "feature"
custom_key = { reviewer = "ana", points = 3 }
depends_on = [
    # nothing yet
]
labels = ["auth"]
assignee = ""
created = 2026-01-01T00:00:00Z
updated = 2026-01-01T00:00:00Z
+++

## Acceptance

- tokens expire
"""


def test_field_edits_keep_a_persons_comments_and_layout(repo, hive, git, state_log):
    path = repo / ".hive" / "issues" / "hv-ddddd1.md"
    path.write_text(COMMENTED)
    hive("list")  # picks the hand-written file up
    assert on_branch(git, repo, "issues/hv-ddddd1.md") == COMMENTED
    hive("update", "hv-ddddd1", "-p", "0", "--status", "in_progress", "--assignee", "w-1")
    after = on_branch(git, repo, "issues/hv-ddddd1.md")
    changed = [(old, new) for old, new in zip(COMMENTED.splitlines(), after.splitlines()) if old != new]
    assert len(after.splitlines()) == len(COMMENTED.splitlines())
    assert changed == [
        ('priority = 2  # bump when the release is near', 'priority = 0  # bump when the release is near'),
        ('status = "open"', 'status = "in_progress"'),
        ('assignee = ""', 'assignee = "w-1"'),
        ("updated = 2026-01-01T00:00:00Z", changed[-1][1]),
    ]
    assert changed[-1][1].startswith("updated = 20")
    assert path.read_text() == after
    shown = json.loads(hive("show", "hv-ddddd1", "--json").stdout)
    assert shown["custom_key"] == {"reviewer": "ana", "points": 3}


# -- the .hive/ checkout --------------------------------------------------------------------------

def test_after_a_write_the_checkout_shows_the_new_state(repo, hive, git, new_issue):
    issue = new_issue("visible")
    hive("update", issue, "--title", "renamed")
    assert (repo / ".hive" / "issues" / f"{issue}.md").read_text() == on_branch(git, repo, f"issues/{issue}.md")
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    assert git("rev-parse", "HEAD", cwd=repo / ".hive").stdout == git("rev-parse", "hive/state", cwd=repo).stdout


def test_what_a_person_staged_in_the_checkout_survives_hives_refreshes(repo, project, git, new_issue):
    """A process keeps the checkout's repository open between refreshes: it must read the git
    index again when a person changed it (`git add` in `.hive/`), not write back its stale copy."""
    new_issue("first")          # the checkout's index is now open in this process
    (repo / ".hive" / "mine.txt").write_text("my own file\n")
    git("add", "mine.txt", cwd=repo / ".hive")
    second = new_issue("second")
    staged = git("diff", "--cached", "--name-only", cwd=repo / ".hive").stdout.split()
    assert staged == ["mine.txt"]
    assert (repo / ".hive" / "issues" / f"{second}.md").read_text() == on_branch(git, repo, f"issues/{second}.md")


def test_a_save_in_the_same_clock_tick_as_hives_write_is_not_missed(repo, project, git, new_issue):
    """File times are coarse: a person's save right after hive wrote a file can get the very
    stamp hive's write got, at the same size. Hive's record holds a nanosecond before that stamp
    (`racy.backdate`): the stat tells, with no window to wait out."""
    import os

    project.checkout._racy_ns = 3600 * 10**9     # any file is "just now" however loaded the machine
    issue = new_issue("twelve chars")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    hive_wrote = os.stat(path)                   # hive's refresh wrote it just now and recorded it
    stamp = hive_wrote.st_mtime_ns + 1           # what its write was stamped, before the backdating
    path.write_text(path.read_text().replace("twelve chars", "twelve CHARS"))
    os.utime(path, ns=(hive_wrote.st_atime_ns, stamp))
    assert (os.stat(path).st_ino, os.stat(path).st_size) == (hive_wrote.st_ino, hive_wrote.st_size)

    assert project.absorb(only={f"issues/{issue}.md"}).committed == [f"issues/{issue}.md"]
    assert 'title = "twelve CHARS"' in on_branch(git, repo, f"issues/{issue}.md")


def test_a_clean_scan_is_remembered_until_a_file_or_a_record_changes(repo, project, git, new_issue, monkeypatch):
    """A look that found every file as recorded is remembered by the files' stats, so the next
    `git hive list` reads no record; any change of a file, or of a record (another process's
    write), makes the next look compare file by file again — a racy save included."""
    import os
    import sqlite3

    issue = new_issue("twelve chars")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    hive_wrote = os.stat(path)
    checkout = project.checkout
    assert project.absorb().committed == []      # hive's own file: its record exact however young
    assert checkout._meta("clean_scan") != ""
    path.write_text(path.read_text().replace("twelve chars", "twelve CHARS"))   # saved in the same tick
    os.utime(path, ns=(hive_wrote.st_atime_ns, hive_wrote.st_mtime_ns + 1))   # as hive's write was stamped
    assert project.absorb().committed == [f"issues/{issue}.md"]
    assert 'title = "twelve CHARS"' in on_branch(git, repo, f"issues/{issue}.md")

    old = hive_wrote.st_mtime_ns - 10_000_000_000      # files older than a tick: recorded as they are
    for file in [*(repo / ".hive" / "issues").glob("*.md"), repo / ".hive" / "context.md"]:
        os.utime(file, ns=(old, old))
    project.absorb()
    assert project.absorb().committed == [] and checkout._meta("clean_scan") != ""
    monkeypatch.setattr(type(checkout), "_records", lambda self, only=None: pytest.fail("records read"))
    assert checkout.find_edits() == []
    monkeypatch.undo()

    with sqlite3.connect(project.paths.hive_dir / "checkout.db") as other_process:
        other_process.execute("UPDATE files SET mtime_ns = mtime_ns + 1 WHERE path = ?", (f"issues/{issue}.md",))
    assert checkout._meta("clean_scan") == ""     # a record changed: the next look compares again
    path.write_text(path.read_text().replace("twelve CHARS", "twelve chaRS"))
    assert project.absorb().committed == [f"issues/{issue}.md"]
    assert 'title = "twelve chaRS"' in on_branch(git, repo, f"issues/{issue}.md")



def _a_remembered_clean_look(repo, project) -> None:
    """Every file older than a tick and recorded as it is, and a look that found no edit: what a
    command that found the checkout clean holds (`predict_next_scan`: one command, then it ends)."""
    import os

    old = os.stat(repo / ".hive" / "context.md").st_mtime_ns - 10_000_000_000
    for file in [*(repo / ".hive" / "issues").glob("*.md"), repo / ".hive" / "context.md"]:
        os.utime(file, ns=(old, old))
    project.absorb()
    project.checkout.predict_next_scan = True
    assert project.absorb().committed == [] and project.checkout._meta("clean_scan") != ""


def test_a_command_leaves_the_next_the_clean_scan_it_will_find_after_its_own_write(repo, project, new_issue,
                                                                                   monkeypatch):
    """A command whose look found no edit, and whose own write's files end with exact records
    (backdated: `racy.backdate`), tells the next command the scan it will find: that one reads no
    record. Two or more writes of one command chain (each refresh starts from the last)."""
    from hive.project import Project
    from hive.state.checkout import Checkout

    first, second = new_issue("one"), new_issue("two")
    _a_remembered_clean_look(repo, project)
    issues.update(project, first, {"priority": 1})
    issues.update(project, second, {"status": "canceled"})    # its file leaves the live folder
    issues.create(project, "three")                           # its file's place: the folder's
    assert project.checkout._meta("clean_scan") != ""
    next_command = Project.open(repo)
    monkeypatch.setattr(Checkout, "_records", lambda self, only=None: pytest.fail("records read"))
    assert next_command.checkout.find_edits() == []


@pytest.mark.parametrize("meanwhile", ["another file saved", "saved over hive's write", "another file created",
                                       "another file deleted"])
def test_a_change_the_command_did_not_make_is_found_by_the_next_look(repo, project, git, new_issue, monkeypatch,
                                                                     issue_text, meanwhile):
    """What the command foretells is its own look plus its own writes: a person's save of another
    file after that look, a save over hive's own write before the foretelling, a file they
    created or deleted while the command created one — the next look compares, and finds it."""
    from hive.project import Project
    from hive.state.checkout import Checkout

    first, second = new_issue("one"), new_issue("two")
    _a_remembered_clean_look(repo, project)
    issues_dir = repo / ".hive" / "issues"
    predicted_scan = Checkout._predicted_scan

    def a_person_saves_first(self, changed):
        if meanwhile == "another file created":
            (issues_dir / "hv-theirs1.md").write_text(issue_text("theirs"), encoding="utf-8")
            return predicted_scan(self, changed)
        if meanwhile == "another file deleted":
            (issues_dir / f"{second}.md").unlink()
            return predicted_scan(self, changed)
        if meanwhile == "another file saved":
            target, old, new = issues_dir / f"{second}.md", 'title = "two"', 'title = "TWO"'
        else:
            target, old, new = issues_dir / f"{first}.md", "priority = 1", "priority = 3"
        saved = target.with_name(f".{target.name}.swp")
        saved.write_text(target.read_text().replace(old, new))
        saved.replace(target)
        return predicted_scan(self, changed)

    monkeypatch.setattr(Checkout, "_predicted_scan", a_person_saves_first)
    if meanwhile in ("another file created", "another file deleted"):
        issues.create(project, "three")
    else:
        issues.update(project, first, {"priority": 1})
    monkeypatch.undo()
    found_in = {"another file saved": second, "another file created": "hv-theirs1", "another file deleted": second}
    expected = [f"issues/{found_in.get(meanwhile, first)}.md"]
    # foretold (the next look finds a folder unlike it), or not at all: a save over hive's write
    # leaves a stat its record is not of
    assert (project.checkout._meta("clean_scan") == "") == (meanwhile == "saved over hive's write")
    next_command = Project.open(repo)
    compared = []
    records = Checkout._records
    monkeypatch.setattr(Checkout, "_records", lambda self, only=None: compared.append(only) or records(self, only))
    assert [edit.path for edit in next_command.checkout.find_edits()] == expected
    assert compared


@pytest.mark.parametrize("index_bytes", [0, None], ids=["git update-index", "libgit2"])
def test_a_save_between_hives_write_and_its_index_update_is_not_taken_for_staged(repo, project, git, new_issue,
                                                                                 monkeypatch, index_bytes):
    """hive writes a file of `.hive/`, then records it in that worktree's git index: a person's
    save landing in between must stay an edit, not become what git shows as staged (an absorb
    leaves staged versions to git) — whichever stages it."""
    from hive.state import checkout as checkout_module

    if index_bytes is not None:
        monkeypatch.setattr(checkout_module, "GIT_INDEX_BYTES", index_bytes)

    issue = new_issue("first title")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    write = checkout_module._replace_if_unchanged

    def write_then_a_person_saves(target, data, expected):
        written = write(target, data, expected)
        if target == path:
            saved = path.with_name(f".{path.name}.swp")
            saved.write_text(path.read_text().replace("first title", "their title"))
            saved.replace(path)
        return written

    monkeypatch.setattr(checkout_module, "_replace_if_unchanged", write_then_a_person_saves)
    issues.update(project, issue, {"priority": 1})          # hive's write and its refresh
    monkeypatch.undo()
    staged = git("ls-files", "-s", f"issues/{issue}.md", cwd=repo / ".hive").stdout.split()[1]
    assert staged == git("rev-parse", f"hive/state:issues/{issue}.md", cwd=repo).stdout.strip()
    assert project.absorb(only={f"issues/{issue}.md"}).committed == [f"issues/{issue}.md"]
    on_tip = on_branch(git, repo, f"issues/{issue}.md")
    assert 'title = "their title"' in on_tip and "priority = 1" in on_tip


@pytest.mark.parametrize("staged_by", ["git update-index", "libgit2, where git refuses"])
def test_a_refresh_stages_the_tips_blobs_in_the_checkouts_own_index_whatever_the_person_set(
        repo, project, git, new_issue, monkeypatch, tmp_path, staged_by):
    """A refresh's few changes go to `.hive/`'s git index in one `git update-index` — never to the
    index or repository a person's GIT_INDEX_FILE/GIT_DIR names, never in a form libgit2 cannot
    read back (a split index); where git refuses them, libgit2 stages them instead."""
    import pygit2

    from hive.state import checkout as checkout_module

    issue, gone = new_issue("staged", status="done"), new_issue("to be archived", status="done")
    monkeypatch.setattr(checkout_module, "GIT_INDEX_BYTES", 0)   # the few paths of a big index's
    git("config", "core.splitIndex", "true", cwd=repo)
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "their-index"))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-this-repository"))
    if staged_by != "git update-index":
        def git_refuses(*args, **kwargs):
            raise HiveError("git update-index failed: Invalid path")
        monkeypatch.setattr(hgit, "update_worktree_index", git_refuses)
    issues.update(project, issue, {"priority": 0})
    set_status(project, gone, "finalized")
    monkeypatch.delenv("GIT_INDEX_FILE")
    monkeypatch.delenv("GIT_DIR")
    assert not (tmp_path / "their-index").exists() and not (tmp_path / "not-this-repository").exists()
    hive_dir = repo / ".hive"
    archived = layout.archive_path(gone)
    for path in (f"issues/{issue}.md", archived):
        staged = git("ls-files", "-s", path, cwd=hive_dir).stdout.split()[1]
        assert staged == git("rev-parse", f"hive/state:{path}", cwd=repo).stdout.strip()
    assert len(pygit2.Repository(str(hive_dir)).index) > 0    # libgit2 reads it back (not split)
    assert git("ls-files", "-v", archived, f"issues/{gone}.md", cwd=hive_dir).stdout == f"S {archived}\n"
    assert git("status", "--porcelain", cwd=hive_dir).stdout == ""   # their git splits it now
    issues.update(project, issue, {"title": "after their git split the index"})
    assert project.checkout._git_index_blob(f"issues/{issue}.md") == \
        git("rev-parse", f"hive/state:issues/{issue}.md", cwd=repo).stdout.strip()   # made whole, read
    assert "priority = 0" in (hive_dir / "issues" / f"{issue}.md").read_text()


def test_the_stager_takes_every_path_as_a_path_never_as_an_option(repo, project, git, new_issue):
    """The second lock behind the trust check: a path that looks like an option, or holds a
    comma, is staged by `git update-index` under that very name — and removed by it again."""
    issue = new_issue("the real one")
    hive_dir = repo / ".hive"
    oid = git("rev-parse", f"hive/state:issues/{issue}.md", cwd=repo).stdout.strip()
    odd = ["--force-remove", "-q", "--skip-worktree", "issues/a,b.md", "issues/--help.md"]
    hgit.update_worktree_index(hive_dir, {path: oid for path in odd}, ["--skip-worktree", "issues/a,b.md"])
    listed = set(git("ls-files", "-v", "--", *odd, cwd=hive_dir).stdout.splitlines())
    assert listed == {"H --force-remove", "H -q", "S --skip-worktree", "S issues/a,b.md", "H issues/--help.md"}
    hgit.update_worktree_index(hive_dir, {path: None for path in odd}, [])
    assert git("ls-files", "--", *odd, cwd=hive_dir).stdout == ""
    staged = git("ls-files", "-s", f"issues/{issue}.md", cwd=hive_dir).stdout.split()[1]
    assert staged == oid and git("status", "--porcelain", cwd=hive_dir).stdout == ""


def test_a_persons_staged_work_in_hive_survives_the_index_made_whole(repo, project, git, new_issue):
    """Making a split index whole (for libgit2) replaces the index file: what a person staged
    there is in it afterwards."""
    issue = new_issue("split")
    hive_dir = repo / ".hive"
    git("config", "core.splitIndex", "true", cwd=repo)
    (hive_dir / "their-notes.txt").write_text("staged by the person\n")
    git("add", "their-notes.txt", cwd=hive_dir)                # their git writes a split index
    assert project.checkout._git_index_blob(f"issues/{issue}.md") is not None   # made whole, read
    staged = git("-c", "core.splitIndex=false", "ls-files", "-s", "their-notes.txt", cwd=hive_dir).stdout.split()
    assert staged[1] == git("hash-object", "their-notes.txt", cwd=hive_dir).stdout.strip()


def test_no_git_to_stage_with_is_a_one_line_error_the_refresh_gets_past(repo, project, git, new_issue, monkeypatch):
    from hive.state import checkout as checkout_module

    issue = new_issue("no git on PATH")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(HiveError, match="git update-index could not start in .*: No such file"):
        hgit.update_worktree_index(repo / ".hive", {f"issues/{issue}.md": None}, [])
    monkeypatch.setattr(checkout_module, "GIT_INDEX_BYTES", 0)
    issues.update(project, issue, {"priority": 0})       # staged through libgit2 instead
    monkeypatch.undo()
    staged = git("ls-files", "-s", f"issues/{issue}.md", cwd=repo / ".hive").stdout.split()[1]
    assert staged == git("rev-parse", f"hive/state:issues/{issue}.md", cwd=repo).stdout.strip()


def test_a_file_named_with_bytes_no_state_holds_is_one_warning_and_stays(repo, hive, git, new_issue):
    """A file in `.hive/issues/` whose name is not UTF-8 (a tool's, a person's): every command
    warns once naming it and goes on; the file is left as it is, nothing else changes."""
    issue = new_issue("beside it")
    odd = os.fsencode(str(repo / ".hive" / "issues")) + b"/hv-\xff\xfe.md"
    with open(odd, "wb") as made:
        made.write(b'+++\ntitle = "odd"\n+++\n')
    listed = hive("list")
    assert issue in listed.stdout and listed.stderr.count("\n") == 1
    assert "is not a valid issue id" in listed.stderr and "hv-" in listed.stderr
    created = hive("create", "after it").stdout.strip()
    assert git("show", f"hive/state:issues/{created}.md", cwd=repo).returncode == 0
    with open(odd, "rb") as kept:
        assert kept.read() == b'+++\ntitle = "odd"\n+++\n'


def test_a_persons_invalid_edit_is_never_overwritten(repo, hive, git, new_issue, state_log):
    issue = new_issue("mine to edit")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    half_made = path.read_bytes().replace(b'title = "mine to edit"', b'title = "half-typed')
    path.write_bytes(half_made)
    proc = hive("update", issue, "-p", "0")
    assert f"issues/{issue}.md:2" in proc.stderr  # warned about, with its line
    assert path.read_bytes() == half_made
    branch = on_branch(git, repo, f"issues/{issue}.md")
    assert "priority = 0" in branch and 'title = "mine to edit"' in branch
    assert state_log()[-1].event == "updated"
    assert all(c.event != "edited" for c in state_log())
    # another command later still leaves it alone
    hive("list")
    assert path.read_bytes() == half_made


def test_a_fixed_edit_is_merged_with_what_happened_meanwhile(repo, project, hive, git, new_issue):
    issue = new_issue("merge me")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    original = path.read_text()
    path.write_text(original.replace('title = "merge me"', 'title = "oops'))
    issues.update(project, issue, {"priority": 0})  # meanwhile, hive changes another field
    path.write_text(original.replace('title = "merge me"', 'title = "merged title"'))
    shown = json.loads(hive("show", issue, "--json").stdout)
    assert (shown["title"], shown["priority"]) == ("merged title", 0)
    assert path.read_text() == on_branch(git, repo, f"issues/{issue}.md")


def test_a_reverted_edit_gets_the_current_state(repo, project, hive, git, new_issue):
    issue = new_issue("revert me")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    original = path.read_bytes()
    path.write_bytes(original.replace(b"revert me", b"broken\""))
    issues.update(project, issue, {"priority": 0})
    path.write_bytes(original)  # the person gives up their edit
    hive("list")
    assert path.read_text() == on_branch(git, repo, f"issues/{issue}.md")
    assert "priority = 0" in path.read_text()


def test_a_write_after_a_plain_commit_in_the_checkout_refreshes_the_file(repo, project, git, new_issue):
    issue = new_issue("committed by hand")
    checkout = repo / ".hive"
    path = checkout / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace("committed by hand", "renamed by hand"))
    git("commit", "-q", "-am", "by hand", cwd=checkout)
    issues.update(project, issue, {"priority": 0})  # a hive write on top, with no sync before it
    assert path.read_text() == on_branch(git, repo, f"issues/{issue}.md")
    assert "renamed by hand" in path.read_text() and "priority = 0" in path.read_text()
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    # a staged but uncommitted edit is still the person's: left alone
    staged = path.read_text().replace("renamed by hand", "staged, not committed")
    path.write_text(staged)
    git("add", path.name, cwd=path.parent)
    issues.update(project, issue, {"priority": 1})
    assert path.read_text() == staged
    assert "priority = 1" in on_branch(git, repo, f"issues/{issue}.md")


def test_saved_edits_in_the_checkout_are_committed_by_the_next_command(repo, hive, git, new_issue, state_log):
    issue, doomed = new_issue("edit me"), new_issue("delete me")
    git("config", "user.name", "Pat Person", cwd=repo)
    checkout = repo / ".hive"
    path = checkout / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace("priority = 2", "priority = 4"))
    (checkout / "context.md").write_text("# Project context\n\nUse tabs.\n")
    (checkout / "issues" / f"{doomed}.md").unlink()
    listed = {i["id"]: i for i in json.loads(hive("list", "--json").stdout)}
    assert listed[issue]["priority"] == 4 and doomed not in listed
    assert "priority = 4" in on_branch(git, repo, f"issues/{issue}.md")
    assert on_branch(git, repo, "context.md") == "# Project context\n\nUse tabs.\n"
    assert on_branch(git, repo, f"issues/{doomed}.md") is None
    edits = [c for c in state_log() if c.author == "Pat Person"]
    assert sorted(c.event for c in edits) == ["deleted", "edited", "edited"]
    assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_deleting_a_file_others_depend_on_is_refused(repo, hive, git, new_issue):
    blocker = new_issue("needed")
    new_issue("needs it", depends_on=[blocker])
    (repo / ".hive" / "issues" / f"{blocker}.md").unlink()
    proc = hive("list", "--json")
    assert blocker in {i["id"] for i in json.loads(proc.stdout)}
    assert on_branch(git, repo, f"issues/{blocker}.md") is not None
    assert f"issues/{blocker}.md" in proc.stderr and "depend" in proc.stderr


def test_store_refuses_to_run_out_of_attempts_silently(repo, project, monkeypatch):
    from hive.state import store as store_module

    monkeypatch.setattr(store_module, "MAX_ATTEMPTS", 2)
    monkeypatch.setattr(store_module, "cas_update", lambda *a, **k: False)
    with pytest.raises(HiveError, match="kept moving"):
        project.store.commit(lambda snap: Change({"notes/x.jsonl": b"{}\n"}, summary="x", event="noted"))


# -- the trees a store writes, and the folders it keeps between writes ------------------------------

def test_trees_are_the_ones_git_itself_would_write(repo, project, git):
    """hive serializes folder trees itself (hive.state.trees): same ids as libgit2's TreeBuilder,
    git's entry order (a subtree sorts as if its name ended with "/"), and `git fsck` is happy."""
    import pygit2

    from hive.state.trees import write_tree

    store = project.store
    # the folder "ab" sorts as "ab/": after the file "ab.md", before the file "ab0"
    names = ["a", "a-b", "a0", "ab.md", "ab0", "b", "A", "Z.md", "z", "été.md", "x y.md"]
    files = {name: name.encode() for name in names}
    files.update({f"ab/{name}": b"nested " + name.encode() for name in names})
    files.update({"a.b/deeper/file": b"1", "b0/x": b"2"})
    ours = write_tree(store.repo, None, files)

    def libgit2_tree(entries: dict) -> pygit2.Oid:
        builder = store.repo.TreeBuilder()
        for name, value in entries.items():
            if isinstance(value, dict):
                builder.insert(name, libgit2_tree(value), pygit2.GIT_FILEMODE_TREE)
            else:
                builder.insert(name, store.repo.create_blob(value), pygit2.GIT_FILEMODE_BLOB)
        return builder.write()

    nested: dict = {}
    for path, data in files.items():
        *folders, name = path.split("/")
        node = nested
        for folder in folders:
            node = node.setdefault(folder, {})
        node[name] = data
    assert ours == libgit2_tree(nested)
    assert git("cat-file", "-p", f"{ours}:a.b/deeper/file", cwd=repo).stdout == "1"
    removed = write_tree(store.repo, store.repo[ours], {"a.b/deeper/file": None, "ab/a": None, "b": None})
    del nested["a.b"], nested["ab"]["a"], nested["b"]   # a.b/ empties: it goes too
    assert removed == libgit2_tree(nested)
    with pytest.raises(ValueError, match="invalid file name"):
        write_tree(store.repo, None, {"issues/../x.md": b"x"})
    assert git("fsck", "--strict", "--no-dangling", cwd=repo).returncode == 0


def test_kept_folders_write_the_same_trees_as_fresh_ones(repo, project, git, new_issue):
    """A long-lived store changes the folders it wrote last in place; a fresh store on the same
    tips must build byte-identical trees, and both read the same files."""
    from hive.state.store import StateStore
    from hive.state.trees import write_tree

    ids = [new_issue(f"issue {n}") for n in range(5)]
    store = project.store
    for n, issue_id in enumerate(ids):
        issues.update(project, issue_id, {"priority": n % 4})
        issues.add_notes(project, [issues.note_line(f"note {n}", "context")], file_id=issue_id)
        set_status(project, ids[0], "canceled" if n % 2 == 0 else "open")   # archive and back
        snap = store.snapshot()
        fresh = StateStore(store.paths).snapshot()
        for path in (f"issues/{issue_id}.md", f"notes/{issue_id}.jsonl", layout.path_for(ids[0], "canceled"),
                     f"issues/{ids[0]}.md", "issues/nothing.md", "context.md", "issues"):
            assert snap.blob_id(path) == fresh.blob_id(path), path
            assert snap.read(path) == fresh.read(path), path
        files = {f"issues/{issue_id}.md": b"x", f"issues/archive/zz/{issue_id}.md": None}
        assert write_tree(store.repo, snap.tree, files, folders=store.folders) == \
            write_tree(store.repo, fresh.tree, files)
    assert git("fsck", "--no-dangling", cwd=repo).returncode == 0


def test_a_store_whose_folders_are_stale_builds_on_the_new_tip(repo, project, git, new_issue):
    """Another writer moved the branch: the kept folders no longer match and are not used."""
    from hive.project import Project

    first, second = new_issue("first"), new_issue("second")
    issues.update(project, first, {"priority": 0})             # project's store keeps its folders
    other = Project.open(repo)
    issues.update(other, second, {"priority": 4})              # a second writer, its own store
    issues.update(project, first, {"labels": ["mine"]})
    shown = {i: project.index.get(i) for i in (first, second)}
    assert shown[first].priority == 0 and shown[first].labels == ["mine"]
    assert shown[second].priority == 4                          # the other writer's change survived
    on_tip = on_branch(git, repo, f"issues/{second}.md")
    assert on_tip is not None and "priority = 4" in on_tip
    other.close()


def test_a_failed_write_leaves_no_half_changed_folder(repo, project, git, new_issue, monkeypatch):
    from hive.state import store as store_module

    issue_id = new_issue("kept")
    issues.update(project, issue_id, {"priority": 0})
    real = project.store.repo.create_blob
    calls = []

    def failing(data):
        calls.append(data)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(data)

    monkeypatch.setattr(store_module.pygit2.Repository, "create_blob", lambda self, data: failing(data))
    with pytest.raises(OSError):   # the issues/ folder already holds half.md when the write fails
        project.store.commit(lambda snap: Change({"issues/half.md": b"half", f"issues/{issue_id}.md": b"broken"},
                                                 summary="half", event="noted"))
    monkeypatch.undo()
    issues.update(project, issue_id, {"priority": 3})
    text = on_branch(git, repo, f"issues/{issue_id}.md")
    assert text is not None and "priority = 3" in text and on_branch(git, repo, "issues/half.md") is None


def test_a_malformed_tree_object_is_refused_not_misread(project):
    from hive.state.trees import Folder

    store = project.store
    raw = store.repo.odb.read(store.snapshot().tree.id)[1]
    assert b"".join(Folder.parse(raw).entries) == raw
    for broken in (raw[:-3], raw + b"x", b"100644 name-without-id\0short"):
        with pytest.raises(ValueError, match="malformed tree"):
            Folder.parse(broken)


def test_a_tree_s_raw_records_tile_it_and_are_parsed_once_per_id(project):
    from hive.state import raw_trees
    from hive.state.trees import Folder

    store = project.store
    tree = str(store.snapshot().tree.id)
    raw = store.repo.odb.read(tree)[1]
    records = raw_trees.records(store.repo.odb, tree)
    assert records == Folder.parse(raw).entries and b"".join(records) == raw

    class Unreadable:
        def read(self, oid: str) -> tuple[int, bytes]:
            raise KeyError(oid)

    assert raw_trees.records(Unreadable(), tree) is records        # kept: an id names one content
    blob = str(store.repo.create_blob(b"not a tree"))
    with pytest.raises(raw_trees.NotATree):
        raw_trees.records(store.repo.odb, blob)
    garbled = str(store.repo.odb.write(2, raw[:-3]))   # pygit2 writes any bytes as a tree object
    with pytest.raises(raw_trees.MalformedTree):
        raw_trees.records(store.repo.odb, garbled)


def test_walk_changes_names_every_changed_file_as_git_diff_does(project, git, repo):
    """The tree walk behind every catch-up (index, `.hive/`, sync, plans) against git's own diff."""
    import pygit2

    from hive.state.trees import walk_changes, write_tree

    store = project.store
    base = write_tree(store.repo, None, {"a.md": b"1", "keep.md": b"k", "sub/x.md": b"x", "sub/deep/y.md": b"y",
                                         "gone/z.md": b"z", "ab.md": b"f"})
    builder = store.repo.TreeBuilder(store.repo[base])           # a mode change alone: not a change
    builder.insert("keep.md", store.repo[base]["keep.md"].id, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE)
    moded = builder.write()
    changed = write_tree(store.repo, store.repo[moded], {"a.md": b"2", "sub/deep/y.md": None, "sub/new.md": b"n",
                                                         "gone/z.md": None, "ab.md": None, "ab/inner.md": b"i"})
    ours = sorted(walk_changes(store.repo, store.repo[base], store.repo[changed]))
    diff = store.repo.diff(store.repo[base], store.repo[changed])
    theirs = sorted((d.new_file.path if d.status_char() != "D" else d.old_file.path,
                     None if d.status_char() == "A" else str(d.old_file.id),
                     None if d.status_char() == "D" else str(d.new_file.id))
                    for d in diff.deltas if d.old_file.id != d.new_file.id)
    assert ours == theirs
    assert [p for p, _, _ in ours] == ["a.md", "ab.md", "ab/inner.md", "gone/z.md", "sub/deep/y.md", "sub/new.md"]
    assert list(walk_changes(store.repo, store.repo[base], store.repo[moded])) == []
    assert sorted(p for p, old, _ in walk_changes(store.repo, None, store.repo[base]) if old is None) == \
        ["a.md", "ab.md", "gone/z.md", "keep.md", "sub/deep/y.md", "sub/x.md"]


def test_a_stores_own_commits_give_what_changed_across_several_of_them(project, new_issue):
    """A daemon refreshes `.hive/` after several of its commits at once: their recorded changes,
    chained, must say what a tree walk would, and nothing when another writer came in between."""
    import pygit2

    from hive.state.trees import walk_changes

    store = project.store
    keep, move, flip = new_issue("kept"), new_issue("archived"), new_issue("flipped")
    start = store.tip()
    set_status(project, keep, "in_progress")
    set_status(project, move, "finalized")                       # a move into the archive
    issues.update(project, flip, {"labels": ["x"]})
    issues.update(project, flip, {"labels": []})
    end = store.tip()

    def walked(old: str, new: str) -> list:
        tree = lambda oid: store.repo[oid].peel(pygit2.Commit).tree
        return sorted(walk_changes(store.repo, tree(old), tree(new)))

    assert sorted(store.changes_between(start, end)) == walked(start, end)
    assert store.changes_between(end, end) == []
    assert store.changes_between(None, end) is None
    other = store.repo.create_commit(None, store.repo.default_signature, store.repo.default_signature, "outside",
                                     store.repo[end].peel(pygit2.Commit).tree.id, [pygit2.Oid(hex=end)])
    assert cas_update(store.repo, "refs/heads/hive/state", end, str(other), "outside")
    set_status(project, keep, "done")
    assert store.changes_between(start, store.tip()) is None             # not all of them ours
    assert sorted(store.changes_between(str(other), store.tip())) == walked(str(other), store.tip())


# -- other branches of state files, and the first commit -------------------------------------------

def test_a_store_on_another_ref_commits_there_and_leaves_hive_state_alone(repo, project, git):
    state_tip = project.store.tip()
    plan = project.store.on_ref("refs/heads/hive/plan/demo")
    assert plan.tip() is None
    assert plan.adopt(state_tip, "hive: plan demo")
    assert not plan.adopt(state_tip, "hive: plan demo")   # exists: nothing done
    new = plan.commit(lambda snap: Change({"PLAN.md": b"# plan\n"}, summary="plan it", event="planned"))
    assert git("rev-parse", "hive/plan/demo", cwd=repo).stdout.strip() == new
    assert git("show", "hive/plan/demo:PLAN.md", cwd=repo).stdout == "# plan\n"
    assert project.store.tip() == state_tip
    assert git("rev-parse", f"{new}^", cwd=repo).stdout.strip() == state_tip


def test_start_makes_a_root_commit_once(repo, project, git):
    other = project.store.on_ref("refs/heads/hive/other")
    first = other.start(Change({"a.txt": b"a\n"}, summary="start it", event="initialized"))
    assert first is not None
    assert git("rev-list", "--parents", "-n1", first, cwd=repo).stdout.split() == [first]
    assert git("log", "-1", "--format=%B", first, cwd=repo).stdout.strip() == "start it\n\nHive-Event: initialized"
    assert other.start(Change({"b.txt": b"b\n"}, summary="again", event="initialized")) is None
    assert other.tip() == first


def test_the_checkout_commits_nothing_itself(repo, project, git, new_issue):
    """`Checkout.absorb` finds and records edits; what commits them is handed in by the layer above."""
    issue = new_issue("Edited")
    path = project.paths.state_checkout / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace("Edited", "Edited by hand"))
    before = tip(git, repo)
    seen = []

    def commit_edit(edit):
        seen.append(edit.path)
        return Committed(edit.data, edit.path)

    assert project.checkout.absorb(commit_edit).committed == [f"issues/{issue}.md"]
    assert seen == [f"issues/{issue}.md"] and tip(git, repo) == before
    assert project.absorb().committed == []   # recorded as committed: no edit any more


# -- an edit saved while the issue is archived ----------------------------------------------------

def test_an_edit_saved_while_the_issue_is_archived_is_carried_to_its_new_path(repo, project, git, new_issue,
                                                                               capsys):
    issue = new_issue("Finishing soon", status="done", description="What was done.")
    live = repo / ".hive" / "issues" / f"{issue}.md"
    archived = layout.archive_path(issue)
    live.write_text(live.read_text().replace("What was done.", "What was done.\n\nA person's afterthought."))
    set_status(project, issue, "finalized")          # the daemon finalizes before the absorb
    assert on_branch(git, repo, f"issues/{issue}.md") is None
    assert "afterthought" not in on_branch(git, repo, archived)

    result = project.absorb()
    assert result.committed == [archived] and result.problems == []
    on_tip = on_branch(git, repo, archived)
    assert "A person's afterthought." in on_tip and 'status = "finalized"' in on_tip
    assert on_branch(git, repo, f"issues/{issue}.md") is None
    assert f"committed at .hive/{archived}" in capsys.readouterr().err
    # the checkout shows it where it is now; nothing is stranded, nothing left to absorb
    assert not live.exists() and (repo / ".hive" / archived).read_text().encode() == on_tip.encode()
    project.sync(warn=False)
    assert project.absorb(full=True).committed == []
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    # checked out in the archive (the person was editing it): a normal file, not skip-worktree
    assert git("ls-files", "-v", archived, cwd=repo / ".hive").stdout == f"H {archived}\n"
    # a later edit of the archived file is an ordinary edit
    path = repo / ".hive" / archived
    path.write_text(path.read_text().replace("afterthought", "second thought"))
    assert project.absorb(full=True).committed == [archived]
    assert "second thought" in on_branch(git, repo, archived)


def test_a_conflicting_edit_of_an_issue_archived_meanwhile_is_kept_and_reported(repo, project, git, new_issue):
    issue = new_issue("Finishing soon", status="done", description="The last line.")
    live = repo / ".hive" / "issues" / f"{issue}.md"
    archived = layout.archive_path(issue)
    mine = live.read_text().replace("The last line.", "The last line, as the person has it.")
    live.write_text(mine)
    issues.update(project, issue, {}, body="The last line, as hive has it.\n")   # the same line
    set_status(project, issue, "finalized")
    before = on_branch(git, repo, archived)

    result = project.absorb()
    assert result.committed == []
    assert [str(p) for p in result.problems] == [
        f".hive/issues/{issue}.md: the issue moved to {archived} meanwhile and your edit conflicts "
        "with a change made meanwhile on hive/state; the file is left as you wrote it"]
    assert live.read_text() == mine and on_branch(git, repo, archived) == before   # kept, nothing lost
    problems = project.sync(warn=False)
    assert any(p.path == f".hive/issues/{issue}.md" for p in problems), problems
    assert live.read_text() == mine


def test_a_bulk_refresh_writes_every_file_as_on_the_branch_and_leaves_a_persons_file(repo, project, git,
                                                                                     new_issue, monkeypatch):
    """A queue taken in by plain git (many paths: `BULK_PATHS`, here 0) is written file by file
    without pathlib or per-file records: the same bytes as the branch, `git status` clean in
    `.hive/`, and a file a person put in the way is theirs."""
    from hive.state import checkout as checkout_module

    monkeypatch.setattr(checkout_module, "BULK_PATHS", 0)
    ids = [new_issue(f"issue {n}", labels=["x"]) for n in range(4)]
    archived = new_issue("finished", status="canceled")
    issues.add_notes(project, [issues.note_line("a note", "gotcha")], file_id=ids[0])
    project.sync(warn=False)
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    root = git("rev-list", "--max-parents=0", "hive/state", cwd=repo).stdout.split()[0]
    git("update-ref", "refs/heads/hive/state", root, cwd=repo)
    project.sync(warn=False)
    checkout = repo / ".hive"
    assert not (checkout / layout.archive_path(archived)).exists()
    in_the_way = checkout / layout.live_path(ids[1])
    in_the_way.write_text("+++\ntitle = \"mine\"\n+++\n")     # a person's, not yet committed
    git("update-ref", "refs/heads/hive/state", tip, cwd=repo)
    project.checkout.refresh()
    listed = git("ls-tree", "-r", "--name-only", "hive/state", cwd=repo).stdout.split()
    assert layout.archive_path(archived) in listed and layout.notes_path(ids[0]) in listed
    for path in listed:
        if path == layout.live_path(ids[1]) or layout.is_archived(path):
            continue
        assert (checkout / path).read_text() == git("cat-file", "blob", f"hive/state:{path}", cwd=repo).stdout, path
    assert not (checkout / layout.ARCHIVE_DIR).exists()   # the archive is not checked out
    assert in_the_way.read_text() == "+++\ntitle = \"mine\"\n+++\n"
    assert git("status", "--porcelain", cwd=checkout).stdout.split() == ["M", f"issues/{ids[1]}.md"]
    assert git("ls-files", "-v", layout.archive_path(archived), cwd=checkout).stdout.split() == [
        "S", layout.archive_path(archived)]
    records = dict(project.checkout.db.execute("SELECT path, blob FROM files"))
    blob = {path: git("rev-parse", f"hive/state:{path}", cwd=repo).stdout.strip() for path in listed}
    assert layout.archive_path(archived) not in records
    assert all(records[path] == blob[path] for path in listed
               if path != layout.live_path(ids[1]) and not layout.is_archived(path))
    assert records.get(layout.live_path(ids[1])) != blob[layout.live_path(ids[1])]   # never recorded as hive's


@pytest.mark.parametrize("points_at", ["the issue's own bytes", "other bytes"])
def test_a_refresh_neither_reads_nor_writes_through_a_symlink_put_at_an_issues_name(repo, project, git, new_issue,
                                                                                   tmp_path, points_at):
    """A symlink where an issue's file is (a person's, or left by a tool): the branch moving that
    issue on changes nothing there — the symlink stays, the file it points at is neither written
    nor taken for the issue's (were it read, the same bytes would make it look clean to replace)."""
    issue = new_issue("pointed elsewhere")
    target = repo / ".hive" / "issues" / f"{issue}.md"
    elsewhere = tmp_path / "elsewhere.md"
    own = target.read_text()
    elsewhere.write_text(own if points_at == "the issue's own bytes" else own.replace("pointed elsewhere",
                                                                                    "not hive's to read"))
    before = elsewhere.stat()
    target.unlink()
    target.symlink_to(elsewhere)
    issues.update(project, issue, {"priority": 0})
    assert target.is_symlink() and os.readlink(target) == str(elsewhere)
    assert (elsewhere.stat().st_mtime_ns, elsewhere.stat().st_ino) == (before.st_mtime_ns, before.st_ino)
    on_tip = on_branch(git, repo, f"issues/{issue}.md")
    assert "priority = 0" in on_tip and "not hive's to read" not in on_tip


def test_the_checkout_scan_finds_only_the_files_hive_reads_and_follows_no_symlink(repo, project, new_issue,
                                                                                 tmp_path, monkeypatch):
    """What a command's look at `.hive/` finds: the live issue files (all the records with
    `full`, the folders under them too), each with its stat; never a symlink (a file or a folder),
    a hidden or foreign name; a file deleted while its folder is read is left out, not an error."""
    import os

    from hive.state import live_folder

    issue = new_issue("scanned")
    root = repo / ".hive"
    secret = tmp_path / "secret.md"
    secret.write_text("+++\ntitle = \"not hive's\"\n+++\n")
    (root / "issues" / "hv-linked.md").symlink_to(secret)
    (root / "issues" / ".hv-hidden.md").write_text("hidden")
    (root / "issues" / "README.txt").write_text("not an issue")
    (root / "issues" / "folder.md").mkdir()
    (root / "issues" / "folder.md" / "hv-inner.md").write_text("inside a folder")
    listdir = os.listdir
    monkeypatch.setattr(live_folder.os, "listdir",
                        lambda folder: [*listdir(folder), "hv-gone00.md"])   # gone by its stat
    live = live_folder.scan(root, full=False)
    assert set(live) == {f"issues/{issue}.md", "context.md"}
    st = os.stat(root / "issues" / f"{issue}.md")
    assert live[f"issues/{issue}.md"] == (st.st_mtime_ns, st.st_size, st.st_ino)
    monkeypatch.undo()

    outside = tmp_path / "notes-elsewhere"
    outside.mkdir()
    (outside / "hv-aaaaaa.jsonl").write_text("{}\n")
    notes = root / "notes"
    if notes.exists():
        for file in notes.iterdir():
            file.unlink()
        notes.rmdir()
    notes.symlink_to(outside)
    everything = live_folder.scan(root, full=True)
    assert set(everything) == {f"issues/{issue}.md", f"issues/folder.md/hv-inner.md", "context.md"}


@pytest.mark.parametrize("saves_in_the_window", [0, 1, 3])
def test_a_save_landing_while_hive_swaps_a_persons_file_back_is_the_one_that_stays(tmp_path, monkeypatch,
                                                                                  saves_in_the_window):
    """hive swaps its version in (RENAME_EXCHANGE), finds that what came out is a person's edit,
    and swaps it back. An editor that saved in between — it found the text it started from, hive's
    copy of the same — replaced hive's file: the swap back took that save out, and it was deleted
    with hive's temporary file (seen once in tests/faults/test_concurrent_writers.py: an editor's
    save gone from disk, never committed). The newest save stays; an older one it replaced is kept
    beside it; no temporary file is left."""
    from hive.state import checkout as checkout_module

    target = tmp_path / "issues" / "hv-aaaaaa.md"
    target.parent.mkdir()
    target.write_bytes(b"their edit\n")                       # not what hive expects there
    exchange = checkout_module._exchange
    saves = iter(range(1, saves_in_the_window + 1))

    def exchange_while_a_person_saves(a, b):
        swapped = exchange(a, b)
        save = next(saves, None)
        if save is not None:                                  # an editor's save: temp file, rename
            mine = target.with_name(f".{target.name}.swp")
            mine.write_bytes(f"their save {save}\n".encode())
            mine.replace(target)
        return swapped

    monkeypatch.setattr(checkout_module, "_exchange", exchange_while_a_person_saves)
    expected = checkout_module.blob_id(b"what hive wrote before\n")
    assert checkout_module._replace_if_unchanged(target, b"the branch's version\n", expected) is None
    newest = f"their save {saves_in_the_window}\n" if saves_in_the_window else "their edit\n"
    assert target.read_text() == newest
    kept = [p for p in target.parent.iterdir() if p != target]   # an older save of theirs: kept
    # one save: the edit it replaced is kept; three: the edit and the first save were replaced
    # by their own saves at `target`, the second was swapped out by hive's give-back when the
    # third landed (whatever the file system does with a deleted file's inode number: hive's
    # file is held open, so no save is taken for it)
    older = {0: [], 1: ["their edit\n"], 3: ["their save 2\n"]}[saves_in_the_window]
    assert [p.read_text() for p in kept] == older
    assert all(p.name.startswith(f"{target.name}.superseded-") for p in kept)


def test_a_save_made_while_hive_brings_an_undone_edit_back_to_the_branch_stays(repo, project, git, new_issue,
                                                                              monkeypatch):
    """A person's invalid edit is left alone while hive commits a change to the same issue; the
    person then undoes it (the file back at the version the edit started from), and the next look
    brings the file to the branch's version — unless the person saved again meanwhile: that save
    stays on disk and is taken in (the file was overwritten by rename, whatever it held then)."""
    from hive.state.store import Snapshot

    issue = new_issue("undo me")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    started_from = path.read_bytes()
    path.write_bytes(started_from.replace(b'title = "undo me"', b'title = "half-typed'))
    issues.update(project, issue, {"priority": 1})             # left alone: the file is the person's
    path.write_bytes(started_from)                                 # undone

    read = Snapshot.read

    def read_while_the_person_saves(self, wanted):
        if wanted == f"issues/{issue}.md":
            saved = path.with_name(f".{path.name}.swp")
            saved.write_bytes(started_from.replace(b'title = "undo me"', b'title = "saved again"'))
            saved.replace(path)
        return read(self, wanted)

    monkeypatch.setattr(Snapshot, "read", read_while_the_person_saves)
    project.absorb()
    monkeypatch.undo()
    assert b'title = "saved again"' in path.read_bytes()
    assert project.absorb().committed == [f"issues/{issue}.md"]
    on_tip = on_branch(git, repo, f"issues/{issue}.md")
    assert 'title = "saved again"' in on_tip and "priority = 1" in on_tip


def test_a_file_deleted_only_if_it_still_holds_what_hive_read(tmp_path, monkeypatch):
    """`_unlink_if_unchanged`: what hive read goes; a save made since stays, and so does a newer
    save that took its place while hive looked (the one it replaced is kept beside it)."""
    from hive.state import checkout as checkout_module

    folder = tmp_path / "issues"
    folder.mkdir()
    target = folder / "hv-aaaaaa.md"
    target.write_bytes(b"read by hive\n")
    assert checkout_module._unlink_if_unchanged(target, checkout_module.blob_id(b"read by hive\n"))
    assert list(folder.iterdir()) == []

    target.write_bytes(b"saved since\n")
    assert not checkout_module._unlink_if_unchanged(target, checkout_module.blob_id(b"read by hive\n"))
    assert target.read_bytes() == b"saved since\n" and list(folder.iterdir()) == [target]

    holds = checkout_module._holds

    def holds_while_a_newer_save_lands(path, expected):
        target.write_bytes(b"newer save\n")
        return holds(path, expected)

    monkeypatch.setattr(checkout_module, "_holds", holds_while_a_newer_save_lands)
    assert not checkout_module._unlink_if_unchanged(target, checkout_module.blob_id(b"read by hive\n"))
    assert target.read_bytes() == b"newer save\n"
    kept = [p for p in folder.iterdir() if p != target]          # the save it replaced: kept beside
    assert [p.read_bytes() for p in kept] == [b"saved since\n"]
    monkeypatch.undo()

    kept[0].unlink()
    target.unlink()
    target.mkdir()                                            # a folder where the file was: not hive's
    assert not checkout_module._unlink_if_unchanged(target, checkout_module.blob_id(b"read by hive\n"))
    assert target.is_dir() and list(folder.iterdir()) == [target]


def test_a_save_made_while_a_refresh_deletes_the_file_stays(repo, project, new_issue, monkeypatch):
    """The branch deletes an issue file `.hive/` holds unchanged: the refresh deletes it — unless
    the person saved it after hive looked (it is theirs then, and stays on disk)."""
    from hive.state import checkout as checkout_module
    from hive.state.store import Change

    issue = new_issue("deleted on the branch")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    as_committed = path.read_bytes()
    looked_at = checkout_module.blob_id

    def look_while_the_person_saves(data):
        found = looked_at(data)
        if sys._getframe(1).f_code.co_name == "_follow" and data == as_committed:   # the refresh's look
            saved = path.with_name(f".{path.name}.swp")
            saved.write_bytes(as_committed.replace(b"deleted on the branch", b"still wanted"))
            saved.replace(path)
        return found

    project.store.commit(lambda snap: Change({f"issues/{issue}.md": None}, f"delete {issue}", "deleted", issue))
    monkeypatch.setattr(checkout_module, "blob_id", look_while_the_person_saves)
    project.after_write()                                     # hive's own write: the refresh follows it
    monkeypatch.undo()
    assert path.exists() and b"still wanted" in path.read_bytes()
    assert project.absorb().committed == [f"issues/{issue}.md"]   # theirs: taken in again


def test_doctor_lists_the_saves_kept_beside_their_file_and_fix_removes_only_those_holding_nothing_new(
        repo, project, hive, new_issue, tmp_path):
    """A save kept beside its file (`_keep_superseded`, the races above) may hold an edit never
    committed: `doctor` names it, and `--fix` removes only a kept save whose bytes the file beside
    it or the branch holds. A link that looks like one is neither followed nor touched."""
    from hive.state import checkout as checkout_module

    root = repo / ".hive"
    issue_file = root / "issues" / f"{new_issue('kept saves')}.md"
    context = root / "context.md"
    assert context.is_file()

    def kept(beside: Path, data: bytes) -> Path:
        save = beside.with_name(".an-editor-s-save")
        save.write_bytes(data)
        return checkout_module._keep_superseded(save, beside)

    saved_beside, saved_context = issue_file.read_bytes(), context.read_bytes()
    as_beside = kept(issue_file, issue_file.read_bytes())
    never_committed = kept(issue_file, issue_file.read_bytes().replace(b"kept saves", b"an edit never committed"))
    as_context = kept(context, context.read_bytes())
    decoy_target = tmp_path / "not-hive-s.md"
    decoy_target.write_text("someone else's file\n")
    decoy = issue_file.with_name(f"{issue_file.name}.superseded-0123abcd")
    decoy.symlink_to(decoy_target)

    report = hive("doctor", cwd=repo, check=False)
    line = next(line for line in report.stdout.splitlines() if "kept saves" in line)
    assert line.startswith("!!") and "3 older save(s)" in line, report.stdout
    assert all(str(path.relative_to(root)) in line for path in (as_beside, never_committed, as_context)), line
    assert as_beside.exists() and as_context.exists()      # a look removes nothing

    fixed = hive("doctor", "--fix", cwd=repo, check=False)
    line = next(line for line in fixed.stdout.splitlines() if "kept saves" in line)
    assert "1 older save(s)" in line and str(never_committed.relative_to(root)) in line, line
    assert line.startswith("!!") and "removed 2 that held nothing" in line
    assert not as_beside.exists() and not as_context.exists()
    assert issue_file.read_bytes() == saved_beside and context.read_bytes() == saved_context   # still held
    assert b"an edit never committed" in never_committed.read_bytes()
    assert decoy.is_symlink() and decoy_target.read_text() == "someone else's file\n"

    never_committed.unlink()                                # a person compared, and deleted it
    assert "ok  .hive/ kept saves: none" in hive("doctor", cwd=repo, check=False).stdout.splitlines()


def test_a_loose_object_is_written_past_a_temp_file_a_dead_process_left(tmp_path, monkeypatch):
    """`write_loose` names its temp file by process id and a counter: one a dead process of the
    same id left behind is neither reused nor lost, and the object is written all the same (into
    a fan-out folder made for it), read back by libgit2 as git wrote it."""
    import itertools

    import pygit2

    from hive.state import trees

    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    objects = tmp_path / "r.git" / "objects"
    expected = str(repo.create_blob(b"left behind\n"))      # its id, written here and taken out
    (objects / expected[:2] / expected[2:]).unlink()
    (objects / expected[:2]).rmdir()
    monkeypatch.setattr(trees, "_temp_numbers", itertools.count(7))
    (objects / expected[:2]).mkdir()
    stale = objects / expected[:2] / f"tmp_obj_{os.getpid()}_7"
    stale.write_bytes(b"a dead process's half-written object")

    assert str(trees.write_loose(str(objects), b"blob", b"left behind\n")) == expected
    assert stale.read_bytes() == b"a dead process's half-written object"
    assert pygit2.Repository(str(tmp_path / "r.git"))[expected].data == b"left behind\n"
    assert oct(os.stat(objects / expected[:2] / expected[2:]).st_mode & 0o777) == "0o444"

    data = next(d for k in range(100) if not (objects / str(pygit2.hash(d := b"%d\n" % k))[:2]).exists())
    other = trees.write_loose(str(objects), b"blob", data)       # its fan-out folder made
    assert pygit2.Repository(str(tmp_path / "r.git"))[other].data == data
