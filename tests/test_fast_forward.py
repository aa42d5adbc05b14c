"""The fast-forward of a checked-out target branch (hive.workspace.fastforward.fast_forward).

The target is moved with libgit2: the touched paths are checked clean in the person's checkout,
written there (files and index), and only then does the ref move. These tests hold it to what
`git merge --ff-only` guarantees: nothing of the person's is lost or recreated, and the checkout
is clean afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pygit2
import pytest

from hive import git as hive_git
from hive.workspace import fastforward


def commit_on(repo: pygit2.Repository, parent: str, changes: dict[str, bytes | None]) -> str:
    """A commit child of `parent` with `changes` applied (None deletes); no ref moves."""
    index = pygit2.Index()
    index.read_tree(repo[parent].peel(pygit2.Commit).tree)
    for path, data in changes.items():
        if data is None:
            index.remove(path)
        else:
            index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.GIT_FILEMODE_BLOB))
    tree = index.write_tree(repo)
    who = pygit2.Signature("worker", "worker@example.invalid")
    return str(repo.create_commit(None, who, who, "work", tree, [pygit2.Oid(hex=parent)]))


@pytest.fixture
def checkout(make_repo: Callable[..., Path], git: Callable[..., Any]) -> Path:
    """A person's clone with `main` checked out and a few tracked files."""
    path = make_repo("person")
    for name in ("a.txt", "b.txt", "c.txt", "keep.txt"):
        (path / name).write_text(f"{name}\n", encoding="utf-8")
    (path / "src").mkdir()
    (path / "src" / "deep.txt").write_text("deep\n", encoding="utf-8")
    git("add", "-A", cwd=path)
    git("commit", "-qm", "files", cwd=path)
    return path


def move(path: Path, changes: dict[str, bytes | None]) -> tuple[pygit2.Repository, str, str, fastforward.FastForward]:
    repo = pygit2.Repository(str(path))
    old = str(repo.head.target)
    new = commit_on(repo, old, changes)
    return repo, old, new, fastforward.fast_forward(hive_git.discover(path), repo, "main", old, new)


def porcelain(git: Callable[..., Any], path: Path) -> str:
    return git("status", "--porcelain", "--untracked-files=all", cwd=path).stdout


def test_the_checkout_is_updated_and_clean_in_the_touched_paths(checkout: Path, git: Callable[..., Any]):
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n", "b.txt": None, "src/new.txt": b"new\n",
                                            "src/deep.txt": b"deeper\n"})
    assert moved.ok and moved.moved
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == new
    assert (checkout / "a.txt").read_text() == "changed\n"
    assert not (checkout / "b.txt").exists()
    assert (checkout / "src" / "new.txt").read_text() == "new\n"
    assert (checkout / "src" / "deep.txt").read_text() == "deeper\n"
    assert porcelain(git, checkout) == ""
    assert "hive merge" in git("reflog", "-1", "--format=%gs", "main", cwd=checkout).stdout


def test_changes_of_the_person_outside_the_touched_paths_stay_as_they_were(checkout: Path, git: Callable[..., Any]):
    (checkout / "keep.txt").write_text("my edit\n", encoding="utf-8")
    (checkout / "c.txt").unlink()                         # deleted by the person: never recreated
    (checkout / "notes.txt").write_text("untracked\n", encoding="utf-8")
    (checkout / "src" / "deep.txt").write_text("staged edit\n", encoding="utf-8")
    git("add", "src/deep.txt", cwd=checkout)
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n"})
    assert moved.ok
    assert (checkout / "a.txt").read_text() == "changed\n"
    assert (checkout / "keep.txt").read_text() == "my edit\n"
    assert not (checkout / "c.txt").exists()
    assert (checkout / "notes.txt").read_text() == "untracked\n"
    assert sorted(porcelain(git, checkout).splitlines()) == [" D c.txt", " M keep.txt", "?? notes.txt",
                                                            "M  src/deep.txt"]


@pytest.mark.parametrize("person", ["modified", "staged", "deleted", "untracked where the branch adds"])
def test_a_touched_path_the_person_changed_makes_it_wait(checkout: Path, git: Callable[..., Any], person: str):
    if person == "modified":
        (checkout / "a.txt").write_text("mine\n", encoding="utf-8")
    elif person == "staged":
        (checkout / "a.txt").write_text("mine\n", encoding="utf-8")
        git("add", "a.txt", cwd=checkout)
    elif person == "deleted":
        (checkout / "a.txt").unlink()
    else:
        (checkout / "added.txt").write_text("mine\n", encoding="utf-8")
    before = porcelain(git, checkout)
    repo, old, new, moved = move(checkout, {"a.txt": b"theirs\n", "added.txt": b"theirs\n"})
    assert not moved.ok and not moved.moved
    wanted = "added.txt" if person.startswith("untracked") else "a.txt"
    assert f"uncommitted changes in {wanted}" in moved.waiting and "waiting to update main" in moved.waiting
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == old
    assert porcelain(git, checkout) == before
    if person != "deleted":
        assert "mine" in (checkout / wanted).read_text()


def test_a_target_moved_meanwhile_leaves_the_checkout_as_its_head(checkout: Path, git: Callable[..., Any],
                                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fastforward, "cas_update", lambda *args: False)
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n", "b.txt": None, "added.txt": b"new\n"})
    assert not moved.ok and not moved.waiting        # the caller replays onto the new target
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == old
    assert (checkout / "a.txt").read_text() == "a.txt\n" and (checkout / "b.txt").exists()
    assert not (checkout / "added.txt").exists()
    assert porcelain(git, checkout) == ""


def test_a_fast_forward_killed_after_writing_the_files_finishes_on_the_next_attempt(
        checkout: Path, git: Callable[..., Any]):
    repo = pygit2.Repository(str(checkout))
    old = str(repo.head.target)
    new = commit_on(repo, old, {"a.txt": b"changed\n", "b.txt": None, "added.txt": b"new\n"})
    touched = fastforward.touched_paths(repo, old, new)
    repo.checkout_tree(repo[new].peel(pygit2.Tree), paths=touched,   # what fast_forward writes first
                       strategy=pygit2.enums.CheckoutStrategy.SAFE)
    assert porcelain(git, checkout) != ""                              # then the daemon was killed
    (checkout / "keep.txt").write_text("my edit\n", encoding="utf-8")

    moved = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
    assert moved.ok, moved.waiting
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == new
    assert porcelain(git, checkout) == " M keep.txt\n"


def test_a_fast_forward_killed_before_the_index_was_written_finishes_on_the_next_attempt(
        checkout: Path, git: Callable[..., Any]):
    """libgit2 writes a checkout's files, then its index: killed in between, the files hold the
    merge's version unstaged. The next attempt takes them and stages them; a file of the person's
    that differs from the merge still makes it wait."""
    repo = pygit2.Repository(str(checkout))
    old = str(repo.head.target)
    new = commit_on(repo, old, {"a.txt": b"changed\n", "added.txt": b"new\n", "b.txt": None})
    (checkout / "a.txt").write_text("changed\n", encoding="utf-8")       # written, never staged
    (checkout / "added.txt").write_text("new\n", encoding="utf-8")
    assert porcelain(git, checkout) == " M a.txt\n?? added.txt\n"        # then the daemon was killed

    (checkout / "added.txt").write_text("new, and mine\n", encoding="utf-8")
    waiting = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
    assert not waiting.ok and "uncommitted changes in added.txt" in waiting.waiting
    (checkout / "added.txt").write_text("new\n", encoding="utf-8")

    moved = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
    assert moved.ok, moved.waiting
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == new
    assert porcelain(git, checkout) == ""
    assert not (checkout / "b.txt").exists()


KILLED_WHILE_WRITING = """
import os, signal, sys
import pygit2
from hive import git as hive_git
from hive.workspace import fastforward

root, old, new, written = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def cut_short(self, tree, strategy=None, paths=None):
    # libgit2 writes each file in place: the process killed after `written` bytes of each
    for path in paths:
        where = os.path.join(self.workdir, path)
        if path not in tree:
            os.unlink(where)
            continue
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "wb") as out:
            out.write(self[tree[path].id].data[:written])
    os.kill(os.getpid(), signal.SIGKILL)

pygit2.Repository.checkout_tree = cut_short
fastforward.fast_forward(hive_git.discover(root), pygit2.Repository(root), "main", old, new)
"""


@pytest.mark.parametrize("written", [0, 3])
@pytest.mark.parametrize("meanwhile", ["nothing", "the person's file", "a broken note", "the target moved"])
def test_a_fast_forward_killed_while_libgit2_wrote_a_file_finishes_on_the_next_attempt(
        checkout: Path, git: Callable[..., Any], tmp_path: Path, written: int, meanwhile: str):
    """libgit2 writes a file in place: a process killed in the middle leaves it empty or cut
    short, no person's and not the merge's either. The next attempt writes it again (it noted
    what it was writing) instead of waiting for a person forever; a file a person put there
    since, with other bytes, still waits for them."""
    import subprocess
    import sys

    repo = pygit2.Repository(str(checkout))
    old = str(repo.head.target)
    new = commit_on(repo, old, {"a.txt": b"changed, and longer\n", "b.txt": None, "src/new/x.txt": b"new file\n"})
    script = tmp_path / "killed.py"
    script.write_text(KILLED_WHILE_WRITING, encoding="utf-8")
    killed = subprocess.run([sys.executable, str(script), str(checkout), old, new, str(written)],
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert (checkout / "src" / "new" / "x.txt").read_bytes() == b"new file\n"[:written]
    assert porcelain(git, checkout) != ""
    note = checkout / ".git" / "hive" / "fast-forward.json"
    if meanwhile != "nothing":
        # what the note does not vouch for waits: a person's bytes; a note that is no note; or
        # one of a fast-forward from another tip (a person moved the branch meanwhile)
        if meanwhile == "the person's file":
            (checkout / "src" / "new" / "x.txt").write_text("mine\n", encoding="utf-8")
        elif meanwhile == "a broken note":
            note.write_text('["src/new/x.txt"]', encoding="utf-8")
        else:
            note.write_text(note.read_text(encoding="utf-8").replace(old, "0" * 40), encoding="utf-8")
        waiting = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
        in_the_way = "src/new/x.txt" if meanwhile == "the person's file" else "a.txt, b.txt, src/new/x.txt"
        assert not waiting.ok and f"uncommitted changes in {in_the_way}:" in waiting.waiting
        kept = b"mine\n" if meanwhile == "the person's file" else b"new file\n"[:written]
        assert (checkout / "src" / "new" / "x.txt").read_bytes() == kept
        assert git("rev-parse", "main", cwd=checkout).stdout.strip() == old
        return

    moved = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
    assert moved.ok, moved.waiting
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == new
    assert porcelain(git, checkout) == ""
    assert (checkout / "a.txt").read_text(encoding="utf-8") == "changed, and longer\n"
    assert not (checkout / "b.txt").exists()
    assert not note.exists()


@pytest.mark.parametrize("there", ["new\n", "the person's\n"])
def test_a_merge_never_writes_through_a_persons_symlinked_folder(
        checkout: Path, git: Callable[..., Any], tmp_path: Path, there: str):
    """A person's untracked `lib` symlink to a folder outside the checkout, and a merge (an
    agent's commit) that adds `lib/x.txt`: libgit2 would write through the link, outside. The
    fast-forward waits for the person instead, whatever the file there holds (even the merge's
    own bytes: it is not a file of this checkout), and stages nothing through it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.txt").write_text(there, encoding="utf-8")
    (checkout / "lib").symlink_to(elsewhere, target_is_directory=True)
    repo, old, new, moved = move(checkout, {"lib/x.txt": b"new\n"})
    assert not moved.ok and "uncommitted changes in lib/x.txt" in moved.waiting
    assert git("rev-parse", "main", cwd=checkout).stdout.strip() == old
    assert (elsewhere / "x.txt").read_text(encoding="utf-8") == there
    assert "lib/x.txt" not in pygit2.Repository(str(checkout)).index


def test_a_staged_change_that_differs_from_the_merge_still_waits(checkout: Path, git: Callable[..., Any]):
    (checkout / "a.txt").write_text("changed\n", encoding="utf-8")   # the merge's content, staged…
    git("add", "a.txt", cwd=checkout)
    (checkout / "a.txt").write_text("changed again\n", encoding="utf-8")  # …then edited further
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n"})
    assert not moved.ok and "uncommitted changes in a.txt" in moved.waiting
    assert (checkout / "a.txt").read_text() == "changed again\n"


def test_a_path_with_a_filter_attribute_goes_through_git(checkout: Path, git: Callable[..., Any]):
    """libgit2 runs no external filter (git-lfs is one): git writes such a checkout."""
    git("config", "filter.shout.smudge", "tr a-z A-Z", cwd=checkout)
    git("config", "filter.shout.clean", "tr A-Z a-z", cwd=checkout)
    (checkout / ".gitattributes").write_text("*.loud filter=shout\n", encoding="utf-8")
    git("add", ".gitattributes", cwd=checkout)
    git("commit", "-qm", "attributes", cwd=checkout)
    repo, old, new, moved = move(checkout, {"x.loud": b"quiet words\n"})
    assert moved.ok
    assert (checkout / "x.loud").read_text() == "QUIET WORDS\n"   # smudged: git did the checkout
    assert porcelain(git, checkout) == ""


def test_a_sparse_checkout_goes_through_git(checkout: Path, git: Callable[..., Any]):
    git("sparse-checkout", "set", "--no-cone", "/*.txt", cwd=checkout)
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n", "src/deep.txt": b"deeper\n"})
    assert moved.ok
    assert (checkout / "a.txt").read_text() == "changed\n"
    assert not (checkout / "src" / "deep.txt").exists()           # outside the sparse set
    assert porcelain(git, checkout) == ""


def test_a_checkout_through_git_is_of_its_own_repository_whatever_the_environment_names(
        checkout: Path, make_repo: Callable[..., Path], git: Callable[..., Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch):
    """The fast-forward that goes through git (a sparse checkout) runs in the target's checkout
    on that checkout's own repository and index, even where the environment names others (a
    hook's GIT_INDEX_FILE, an exported GIT_DIR): those are left as they were."""
    other = make_repo("other")
    other_head = git("rev-parse", "HEAD", cwd=other).stdout
    git("sparse-checkout", "set", "--no-cone", "/*.txt", cwd=checkout)
    their_index = tmp_path / "their-index"
    their_index.write_bytes((checkout / ".git" / "index").read_bytes())
    index_before = their_index.read_bytes()
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(their_index))
    repo, old, new, moved = move(checkout, {"a.txt": b"changed\n"})
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name)
    assert moved.ok and moved.moved
    assert (checkout / "a.txt").read_text() == "changed\n"
    assert porcelain(git, checkout) == ""
    assert their_index.read_bytes() == index_before
    assert git("rev-parse", "HEAD", cwd=other).stdout == other_head
    assert porcelain(git, other) == ""


def test_a_fast_forward_through_git_runs_no_hook_the_merged_work_brings(checkout: Path, git: Callable[..., Any],
                                                                        tmp_path: Path):
    """husky's setup: `core.hooksPath` names a tracked folder, so the hooks are files of the
    branch, and the work merged into it may bring one (an agent writes its worktree as it likes).
    `git merge --ff-only` ran that `post-merge` as the person, outside any jail. Hive's
    fast-forward through git runs no hook, as its libgit2 path never did."""
    git("config", "core.hooksPath", ".githooks", cwd=checkout)
    git("sparse-checkout", "set", "--no-cone", "/*.txt", "/.githooks/", cwd=checkout)
    marker = tmp_path / "the-agent-ran-here"
    repo = pygit2.Repository(str(checkout))
    old = str(repo.head.target)
    index = pygit2.Index()
    index.read_tree(repo[old].peel(pygit2.Commit).tree)
    index.add(pygit2.IndexEntry("a.txt", repo.create_blob(b"changed\n"), pygit2.GIT_FILEMODE_BLOB))
    for name in ("post-merge", "post-checkout", "reference-transaction"):
        hook = repo.create_blob(f"#!/bin/sh\necho {name} >> {marker}\n".encode())
        index.add(pygit2.IndexEntry(f".githooks/{name}", hook, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE))
    who = pygit2.Signature("worker", "worker@example.invalid")
    new = str(repo.create_commit(None, who, who, "work", index.write_tree(repo), [pygit2.Oid(hex=old)]))
    moved = fastforward.fast_forward(hive_git.discover(checkout), repo, "main", old, new)
    assert moved.ok and moved.moved
    assert (checkout / "a.txt").read_text() == "changed\n"
    assert os.access(checkout / ".githooks" / "post-merge", os.X_OK)     # written: git did run the merge
    assert not marker.exists(), marker.read_text()
    assert porcelain(git, checkout) == ""
