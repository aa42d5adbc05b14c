"""The archive (`issues/archive/`) is not checked out in `.hive/` (hive/state/layout.py).

A refresh and init's first checkout write none of its files; their git index entries carry
skip-worktree, so `git status` in `.hive/` stays clean and a person's `git commit -a` / `git add -A`
deletes nothing. What real git does there (a pull writes the archived files it changes) is undone
by the next refresh. `git hive edit` checks one archived file out; a missing archived file is
never a deletion; a `.hive/` of an older hive (the archive on disk) keeps working and
`doctor --fix` removes its clean copies.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.state_helpers import set_status

from hive import issues
from hive.errors import HiveError
from hive.state import layout

# `git hive edit` runs $EDITOR FILE; this one replaces `FIND` by `REPLACE` in FILE
EDITOR_SCRIPT = ("import os, sys\np = sys.argv[-1]\ntext = open(p).read()\n"
                 "open(p, 'w').write(text.replace(os.environ['FIND'], os.environ['REPLACE']))\n")


def on_branch(git, repo, path: str) -> str | None:
    proc = git("show", f"hive/state:{path}", cwd=repo, check=False)
    return proc.stdout if proc.returncode == 0 else None


def tip(git, repo) -> str:
    return git("rev-parse", "hive/state", cwd=repo).stdout.strip()


def index_tags(git, checkout: Path) -> dict[str, str]:
    """path -> `git ls-files -v` tag (H: checked out, S: skip-worktree)."""
    lines = git("ls-files", "-v", "-z", cwd=checkout).stdout.split("\0")
    return {line[2:]: line[0] for line in lines if line}


def archived_tags(git, checkout: Path) -> dict[str, str]:
    return {path: tag for path, tag in index_tags(git, checkout).items() if layout.is_archived(path)}


@pytest.fixture
def edit(tmp_path, hive):
    script = tmp_path / "editor.py"
    script.write_text(EDITOR_SCRIPT)

    def run(issue_id: str, find: str, replace: str, check: bool = True):
        return hive("edit", issue_id, check=check,
                    env={"EDITOR": f"{sys.executable} {script}", "FIND": find, "REPLACE": replace})

    return run


def test_a_pull_in_the_checkout_stays_clean_and_the_next_refresh_removes_what_git_wrote(
        repo, project, git, new_issue):
    """Real git (no sparse-checkout config) writes the archived files a pull changes or adds,
    keeping the bit on the changed ones; hive's next sync takes them out again, and neither
    `git status` nor `git commit -a` ever sees a deletion."""
    checkout = repo / ".hive"
    kept, changed, reopened = (new_issue(t, status="canceled") for t in ("kept", "changed", "reopened"))
    live = new_issue("live")
    start = tip(git, repo)
    set_status(project, new_issue("added"), "canceled")
    issues.update(project, changed, {"title": "changed on the other side"})
    set_status(project, reopened, "open")
    issues.update(project, live, {"title": "live, changed"})
    git("branch", "side", tip(git, repo), cwd=repo)
    git("update-ref", "refs/heads/hive/state", start, cwd=repo)
    project.sync(warn=False)
    assert not (checkout / layout.ARCHIVE_DIR).exists() and set(archived_tags(git, checkout).values()) == {"S"}

    git("pull", "-q", "--ff-only", ".", "side", cwd=checkout)     # the person's pull, in .hive/
    assert (checkout / layout.archive_path(changed)).is_file()     # git wrote what the pull changed
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    pulled = tip(git, repo)
    project.sync(warn=False)
    assert not (checkout / layout.ARCHIVE_DIR).exists()
    tags = archived_tags(git, checkout)
    assert set(tags.values()) == {"S"} and len(tags) == 3 and layout.archive_path(kept) in tags
    assert (checkout / layout.live_path(reopened)).read_text() == on_branch(git, repo, layout.live_path(reopened))
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    assert tip(git, repo) == pulled   # nothing committed: no edit, no deletion
    assert not any(layout.is_archived(p) for p, in project.checkout.db.execute("SELECT path FROM files"))

    # a person's `git add -A` / `git commit -a` there commits their edit and deletes nothing
    (checkout / layout.live_path(live)).write_text(
        on_branch(git, repo, layout.live_path(live)).replace("live, changed", "by hand"))
    git("add", "-A", cwd=checkout)
    git("commit", "-q", "-a", "-m", "by hand", cwd=checkout)
    assert git("diff", "--name-status", "HEAD~1", "HEAD", cwd=checkout).stdout.split() == [
        "M", layout.live_path(live)]
    for issue in (kept, changed):
        assert on_branch(git, repo, layout.archive_path(issue))


def test_a_persons_merge_in_the_checkout_merges_an_archived_issue_and_leaves_no_file(
        repo, project, git, new_issue):
    """Both sides changed an archived issue: git's merge in `.hive/` runs the hive driver on it
    (writing the merged file there); the next sync takes the file out, the merge kept."""
    checkout = repo / ".hive"
    issue = new_issue("finished", status="finalized")
    path = layout.archive_path(issue)
    start = tip(git, repo)
    issues.update(project, issue, {"priority": 0})
    git("branch", "side", tip(git, repo), cwd=repo)
    git("update-ref", "refs/heads/hive/state", start, cwd=repo)
    project.sync(warn=False)
    issues.update(project, issue, {"labels": ["ours"]})
    git("merge", "-q", "--no-edit", "side", cwd=checkout)
    merged = on_branch(git, repo, path)
    assert "priority = 0" in merged and '"ours"' in merged
    assert (checkout / path).read_text() == merged and git("status", "--porcelain", cwd=checkout).stdout == ""
    project.sync(warn=False)
    assert not (checkout / path).exists() and archived_tags(git, checkout) == {path: "S"}
    assert git("status", "--porcelain", cwd=checkout).stdout == "" and on_branch(git, repo, path) == merged


def test_reset_and_restore_in_the_checkout_write_no_archived_file(repo, project, git, new_issue):
    checkout = repo / ".hive"
    archived = new_issue("finished", status="finalized")
    for command in (["reset", "-q", "--hard"], ["checkout", "-q", "--", "."], ["restore", "."]):
        git(*command, cwd=checkout)
        project.sync(warn=False)
        assert not (checkout / layout.archive_path(archived)).exists(), command
        assert archived_tags(git, checkout) == {layout.archive_path(archived): "S"}
        assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_edit_of_an_archived_issue_checks_its_one_file_out(repo, project, git, new_issue, edit, hive):
    checkout = repo / ".hive"
    issue, other = new_issue("done with", status="finalized"), new_issue("other", status="canceled")
    path = layout.archive_path(issue)
    edit(issue, 'title = "done with"', 'title = "done with, and noted"')
    assert 'title = "done with, and noted"' in on_branch(git, repo, path)
    # the one file is checked out now: a normal file, recorded, without the bit
    assert (checkout / path).read_text() == on_branch(git, repo, path)
    assert archived_tags(git, checkout) == {path: "H", layout.archive_path(other): "S"}
    assert not (checkout / layout.archive_path(other)).exists()
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    # it follows the branch like any file; an invalid save is left as written, exit 2
    issues.update(project, issue, {"priority": 0})
    assert (checkout / path).read_text() == on_branch(git, repo, path)
    before = tip(git, repo)
    proc = edit(issue, "priority = 0", "priority = 99", check=False)
    assert proc.returncode == 2 and f".hive/{path}" in proc.stderr
    assert "priority = 99" in (checkout / path).read_text() and tip(git, repo) == before
    (checkout / path).write_text(on_branch(git, repo, path))
    # reopened: the archived file goes, the live one comes back
    hive("update", issue, "--status", "open")
    assert not (checkout / path).exists() and (checkout / layout.live_path(issue)).is_file()
    assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_a_missing_archived_file_is_never_a_deletion(repo, project, git, new_issue):
    checkout = repo / ".hive"
    issue = new_issue("finished", status="canceled")
    path = layout.archive_path(issue)
    before = tip(git, repo)
    # not checked out: no scan takes it for deleted
    assert project.absorb(full=True).committed == [] and project.absorb(only=[path]).committed == []
    # checked out, then removed by the person: it is just not checked out any more
    project.checkout.check_out(path)
    assert archived_tags(git, checkout) == {path: "H"}
    (checkout / path).unlink()
    assert project.absorb(only=[path]).committed == []       # the watcher's way
    assert archived_tags(git, checkout) == {path: "S"} and project.checkout.find_edits(full=True) == []
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    project.checkout.check_out(path)
    (checkout / path).unlink()
    assert project.absorb(full=True).committed == []         # a full scan (doctor, watch's first)
    assert tip(git, repo) == before and on_branch(git, repo, path)
    assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_init_in_a_fresh_clone_checks_out_no_archived_file(clones, git, hive, tmp_path):
    remote, (a,) = clones("A")
    finished = [hive("create", f"finished {n}", cwd=a).stdout.strip() for n in range(3)]
    for issue in finished:
        hive("cancel", issue, cwd=a)
    live = hive("create", "still open", cwd=a).stdout.strip()
    hive("sync", cwd=a)
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(remote), str(fresh))
    hive("init", cwd=fresh)
    checkout = fresh / ".hive"
    assert (checkout / layout.live_path(live)).read_text() == on_branch(git, fresh, layout.live_path(live))
    assert not (checkout / layout.ARCHIVE_DIR).exists()
    assert archived_tags(git, checkout) == {layout.archive_path(i): "S" for i in finished}
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    assert f"{checkout} " in git("worktree", "list", cwd=fresh).stdout and \
        git("symbolic-ref", "HEAD", cwd=checkout).stdout.strip() == "refs/heads/hive/state"
    assert hive("show", finished[0], cwd=fresh).stdout.count("finished 0") == 1
    hive("init", cwd=fresh)   # idempotent: still nothing of the archive
    assert not (checkout / layout.ARCHIVE_DIR).exists() and git("status", "--porcelain", cwd=checkout).stdout == ""


def test_an_older_checkout_with_the_archive_on_disk_keeps_working_and_doctor_fix_tidies_it(
        repo, project, git, new_issue, hive):
    checkout = repo / ".hive"
    edited, clean, followed, broken = (new_issue(t, status="finalized") for t in ("edited", "clean", "followed", "broken"))
    for issue in (edited, clean, followed, broken):   # as an older hive left them: on disk, recorded
        project.checkout.check_out(layout.archive_path(issue))
    path = {i: checkout / layout.archive_path(i) for i in (edited, clean, followed, broken)}
    path[edited].write_text(path[edited].read_text().replace('title = "edited"', 'title = "edited by a person"'))
    path[broken].write_text("+++\nthis is not toml\n+++\n")
    issues.update(project, followed, {"title": "followed the branch"})    # a refresh still follows
    assert 'title = "followed the branch"' in path[followed].read_text()
    report = hive("doctor", cwd=repo, check=False)
    assert "4 archived issue file(s) checked out" in report.stdout and report.returncode == 2   # the broken file
    assert 'title = "edited by a person"' in on_branch(git, repo, layout.archive_path(edited))   # absorbed
    fixed = hive("doctor", "--fix", cwd=repo, check=False)
    assert "removed 3 clean archived issue file(s)" in fixed.stdout and "kept 1 checked out" in fixed.stdout
    assert path[broken].read_text() == "+++\nthis is not toml\n+++\n"       # a person's, kept
    assert not any(path[i].exists() for i in (edited, clean, followed))
    assert archived_tags(git, checkout) == {layout.archive_path(i): ("H" if i == broken else "S")
                                            for i in (edited, clean, followed, broken)}
    assert git("status", "--porcelain", cwd=checkout).stdout.split() == ["M", layout.archive_path(broken)]
    assert all(on_branch(git, repo, layout.archive_path(i)) for i in (edited, clean, followed, broken))


def test_doctor_reports_and_fix_marks_archived_entries_git_would_take_for_deleted(repo, project, git,
                                                                                  new_issue, hive):
    checkout = repo / ".hive"
    issue = new_issue("finished", status="canceled")
    assert ".hive/ archive: not checked out" in hive("doctor", cwd=repo, check=False).stdout
    git("read-tree", "HEAD", cwd=checkout)    # the bits gone (an older hive's index, a person's read-tree)
    assert git("status", "--porcelain", cwd=checkout).stdout.split() == ["D", layout.archive_path(issue)]
    report = hive("doctor", cwd=repo, check=False)
    assert report.returncode == 1 and "1 archived issue file(s) not checked out and not marked" in report.stdout
    assert on_branch(git, repo, layout.archive_path(issue))   # doctor's own scans deleted nothing
    hive("doctor", "--fix", cwd=repo, check=False)
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    assert archived_tags(git, checkout) == {layout.archive_path(issue): "S"}


def test_the_archive_is_never_written_through_a_symlink(repo, project, git, new_issue, tmp_path):
    """A symlinked `issues/archive` (a person's, or any trick): neither `check_out` nor a refresh
    removing what looks like git's copy touches what is behind it."""
    checkout = repo / ".hive"
    issue = new_issue("finished", status="canceled")
    elsewhere = tmp_path / "elsewhere"
    shard = Path(layout.archive_path(issue)).parent.name
    (elsewhere / shard).mkdir(parents=True)
    decoy = elsewhere / shard / f"{issue}.md"
    original = on_branch(git, repo, layout.archive_path(issue))
    decoy.write_text(original)   # what git would have written
    (checkout / layout.ARCHIVE_DIR).symlink_to(elsewhere)
    with pytest.raises(HiveError, match="leads outside"):
        project.checkout.check_out(layout.archive_path(issue))
    issues.update(project, issue, {"title": "changed while archived"})
    set_status(project, new_issue("another", status="done"), "finalized")
    assert "changed while archived" in on_branch(git, repo, layout.archive_path(issue))
    assert decoy.read_text() == original
    assert sorted(p.name for p in elsewhere.rglob("*")) == sorted([shard, decoy.name])


def test_a_removed_checkout_is_made_again_without_the_archive(repo, project, git, new_issue, hive):
    """`.hive/` deleted (made by an older hive, with libgit2's worktree name): init prunes the
    registration and makes it again, the archive left out."""
    import shutil

    import pygit2

    archived, live = new_issue("finished", status="canceled"), new_issue("open one")
    checkout = repo / ".hive"
    git("worktree", "remove", "--force", str(checkout), cwd=repo)
    pygit2.Repository(str(repo)).add_worktree("hive-state", str(checkout),
                                              pygit2.Repository(str(repo)).references["refs/heads/hive/state"])
    assert (checkout / layout.archive_path(archived)).is_file()          # an older hive's: all files
    shutil.rmtree(checkout)
    hive("init", cwd=repo)
    assert (checkout / layout.live_path(live)).is_file() and not (checkout / layout.ARCHIVE_DIR).exists()
    assert archived_tags(git, checkout) == {layout.archive_path(archived): "S"}
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 2


def test_removing_an_older_checkouts_whole_archive_folder_deletes_no_issue(repo, project, git, new_issue):
    import shutil

    checkout = repo / ".hive"
    finished = [new_issue(f"finished {n}", status="finalized") for n in range(3)]
    for issue in finished:   # as an older hive left them: on disk, recorded
        project.checkout.check_out(layout.archive_path(issue))
    before = tip(git, repo)
    shutil.rmtree(checkout / layout.ARCHIVE_DIR)
    assert project.absorb(full=True).committed == []
    assert tip(git, repo) == before and all(on_branch(git, repo, layout.archive_path(i)) for i in finished)
    assert archived_tags(git, checkout) == {layout.archive_path(i): "S" for i in finished}
    assert git("status", "--porcelain", cwd=checkout).stdout == ""
    issues.update(project, finished[0], {"title": "changed since"})   # and a refresh writes none back
    assert not (checkout / layout.ARCHIVE_DIR).exists() and git("status", "--porcelain", cwd=checkout).stdout == ""


def test_a_refresh_looks_at_each_folder_once_and_still_finds_a_symlinked_one(tmp_path):
    """`leads_outside` with a refresh's `folders_inside`: a real folder is looked at once, a
    symlinked one (or a file under it) is refused every time, and never remembered as inside."""
    root = tmp_path / "checkout"
    (root / "issues").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (root / "notes").symlink_to(tmp_path / "elsewhere")
    inside: set[str] = set()
    assert not layout.leads_outside(root, "issues/hv-aaaaaa.md", inside)
    assert inside == {f"{root}/issues"}
    assert not layout.leads_outside(root, "issues/hv-bbbbbb.md", inside)
    (root / "issues" / "hv-cccccc.md").symlink_to(tmp_path / "elsewhere" / "x")
    assert layout.leads_outside(root, "issues/hv-cccccc.md", inside)   # the file itself still looked at
    for _ in range(2):
        assert layout.leads_outside(root, "notes/hv-aaaaaa.jsonl", inside)
    assert inside == {f"{root}/issues"}
    assert layout.leads_outside(root, "issues/../notes/x.jsonl", inside)
