"""Hive reads and rewrites what an agent wrote (its worktree: the merge's resets, the train's
test checkouts; its private object store) without following a link it left or reading a FIFO."""

from __future__ import annotations

import multiprocessing
import os
import stat
import time
from functools import partial
from pathlib import Path
from typing import Callable

import pytest

from hive import git as hive_git
from hive.workspace import worktrees
from tests.hostile import finishes, finishes_while

ISSUE = "hv-reset1"


def _resets() -> dict[str, Callable[[hive_git.RepoPaths, str], None]]:
    return {
        "sync_worktree": lambda paths, commit: worktrees.sync_worktree(paths, ISSUE, commit),
        "check_out_for_tests": lambda paths, commit: worktrees.check_out_for_tests(paths, ISSUE, commit),
        "prepare_for_merge": lambda paths, commit: worktrees.prepare_for_merge(paths, ISSUE, commit),
    }


@pytest.mark.parametrize("reset", sorted(_resets()))
def test_a_reset_of_an_agents_worktree_writes_nothing_through_its_links_and_reads_no_fifo(repo, git, reset):
    """The agent committed `pkg/evil.txt` and `src/inner/evil.txt`, then replaced the folders
    `pkg` and `src/inner` by links out of its worktree (`src` made unreadable around the second),
    a tracked file by a FIFO, and left files staged and untracked. Each reset hive makes of its
    worktree writes the commit's files into the worktree itself: nothing outside it is written,
    none of its reads waits on the FIFO, and the worktree is exactly the commit after it, what it
    held uncommitted kept first."""
    for folder in ("pkg", "src/inner"):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "keep.txt").write_text("kept\n")
    (repo / "a.py").write_text("A = 1\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "folders", cwd=repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, base).path
    for folder in ("pkg", "src/inner"):
        (repo / folder / "evil.txt").write_text("the agent's content\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "what the agent committed", cwd=repo)
    commit = git("rev-parse", "main", cwd=repo).stdout.strip()

    outsides = [repo.parent / "outside-pkg", repo.parent / "outside-inner"]
    old = (time.time_ns() // 1_000_000_000 - 3600) * 1_000_000_000
    for outside, folder in zip(outsides, ("pkg", "src/inner")):
        outside.mkdir()
        (outside / "keep.txt").write_text("a file of the user's\n")
        os.utime(outside / "keep.txt", ns=(old, old))
        for name in os.listdir(tree / folder):
            os.unlink(tree / folder / name)
        os.rmdir(tree / folder)
        os.symlink(outside, tree / folder)
    os.chmod(tree / "src", 0o100)
    os.unlink(tree / "a.py")
    os.mkfifo(tree / "a.py")
    (tree / "staged.py").write_text("S = 1\n")
    git("add", "staged.py", cwd=tree)
    (tree / "untracked.py").write_text("U = 1\n")
    os.symlink("untracked.py", tree / "alias.py")                # a new link: the agent's work too
    (tree / "cache.pyc").write_text("ignored\n")
    with open(paths.common_dir / "info" / "exclude", "a") as exclude:
        exclude.write("*.pyc\n")

    assert finishes(lambda: _resets()[reset](paths, commit), tree / "a.py"), "the reset read the FIFO"

    for outside in outsides:
        assert sorted(os.listdir(outside)) == ["keep.txt"]
        assert (outside / "keep.txt").read_text() == "a file of the user's\n"
        assert (outside / "keep.txt").stat().st_mtime_ns == old
    for folder in ("pkg", "src/inner"):
        assert stat.S_ISDIR(os.lstat(tree / folder).st_mode)
        assert (tree / folder / "evil.txt").read_text() == "the agent's content\n"
    assert stat.S_ISREG(os.lstat(tree / "a.py").st_mode)
    assert git("rev-parse", "HEAD", cwd=tree).stdout.strip() == commit
    # exactly the commit: what the agent left uncommitted is gone, ignored files (caches) stay
    assert git("status", "--porcelain", "--ignored", cwd=tree).stdout == "!! cache.pyc\n"
    # what it left uncommitted is kept first, as an attempt: its HEAD and the files
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{ISSUE}/").stdout.split()
    uncommitted = [c for c in kept if git("show", "-s", "--format=%s", c).stdout.startswith("uncommitted")]
    assert len(uncommitted) == 1, kept
    assert git("rev-parse", f"{uncommitted[0]}^", cwd=repo).stdout.strip() == base
    assert git("show", f"{uncommitted[0]}:staged.py").stdout == "S = 1\n"
    assert git("show", f"{uncommitted[0]}:untracked.py").stdout == "U = 1\n"
    assert git("ls-tree", uncommitted[0], "alias.py").stdout.startswith("120000 blob ")
    assert git("show", f"{uncommitted[0]}:alias.py").stdout == "untracked.py"
    assert git("cat-file", "-e", f"{uncommitted[0]}:cache.pyc", check=False).returncode != 0


@pytest.mark.parametrize("keep", [True, False])
def test_a_removed_worktree_keeps_what_it_held_uncommitted_reading_no_fifo(repo, git, tmp_path, keep):
    """A worktree hive removes (an agent switched, an issue canceled) held a file and a link its
    agent never committed, a FIFO and a link out of it: the removal ends (no read waits on the
    FIFO), what was uncommitted is kept first as an attempt (links as links, nothing of what they
    name), and nothing outside is touched. Removed right after its landing (`keep_uncommitted`
    False: what is there since is the tests' output), nothing is kept."""
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, base).path
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("a file of the user's\n")
    (tree / "draft.py").write_text("D = 1\n")
    os.symlink(outside, tree / "out")
    os.mkfifo(tree / "pipe")

    def remove() -> None:
        uncommitted = worktrees.remove(paths, ISSUE, target="main", keep_uncommitted=keep)
        assert (uncommitted is not None) == keep

    assert finishes(remove, tree / "pipe"), "the removal read the FIFO"
    assert not tree.exists()
    assert sorted(os.listdir(outside)) == ["keep.txt"]
    kept = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{ISSUE}/").stdout.split()
    if not keep:
        assert kept == []
        return
    [uncommitted] = kept
    assert git("rev-parse", f"{uncommitted}^").stdout.strip() == base
    assert git("show", f"{uncommitted}:draft.py").stdout == "D = 1\n"
    assert git("ls-tree", uncommitted, "out").stdout.startswith("120000 blob ")
    assert git("ls-tree", "--name-only", uncommitted).stdout.split() == sorted(
        ["draft.py", "out", *git("ls-tree", "--name-only", base).stdout.split()])


@pytest.mark.parametrize("reset", sorted(_resets()))
def test_a_reset_reads_no_ignore_file_an_agent_made_a_link_to_a_fifo(repo, git, tmp_path, reset):
    """libgit2's status reads every `.gitignore` (and `.gitattributes`) through a link, and waits
    for good on a FIFO it names (git itself follows no such link). An agent leaves its worktree's
    `.gitignore` and a nested `.gitattributes` as links to a FIFO of the host's, with a file
    uncommitted: the reset ends, and the uncommitted file and the links (as links) are kept."""
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, base).path
    host_fifo = tmp_path / "host-fifo"
    os.mkfifo(host_fifo)
    (tree / "draft.py").write_text("D = 1\n")
    os.symlink(host_fifo, tree / ".gitignore")
    (tree / "sub").mkdir()
    os.symlink(host_fifo, tree / "sub" / ".gitattributes")

    (repo / "landed.txt").write_text("L\n")
    git("add", "landed.txt", cwd=repo)
    git("commit", "-q", "-m", "what the reset goes to", cwd=repo)
    commit = git("rev-parse", "main", cwd=repo).stdout.strip()

    assert finishes(lambda: _resets()[reset](paths, commit), host_fifo), "the reset read the FIFO"

    [uncommitted] = git("for-each-ref", "--format=%(objectname)", f"refs/hive/attempts/{ISSUE}/").stdout.split()
    assert git("show", f"{uncommitted}:draft.py").stdout == "D = 1\n"
    for link in (".gitignore", "sub/.gitattributes"):
        assert git("ls-tree", uncommitted, link).stdout.startswith("120000 blob ")
        assert git("show", f"{uncommitted}:{link}").stdout == str(host_fifo)
        assert not os.path.lexists(tree / link)
    assert stat.S_ISFIFO(os.stat(host_fifo).st_mode)


def test_a_link_in_a_folder_the_agent_made_unreadable_is_removed_all_the_same(tmp_path):
    """An agent (the user, or nobody under a root daemon) may take a folder's read bit away:
    a link in it would stay unseen by a walk and be followed by the reset. The folder is made
    readable again (it is the user's own) and the link goes; its regular files stay."""
    from hive.workspace import rewrite

    root = tmp_path / "worktree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "kept.py").write_text("K = 1\n")
    os.symlink(tmp_path, root / "src" / "inner")
    os.chmod(root / "src", 0o100)

    def as_the_folders_owner() -> None:
        os.chdir(root)                        # nobody cannot pass pytest's own 0700 folders
        if os.geteuid() == 0:                 # root reads any folder: the mode binds nobody
            for folder, _, names in os.walk("."):
                for name in [folder, *(os.path.join(folder, n) for n in names)]:
                    os.chown(name, 65534, 65534, follow_symlinks=False)
            os.setgid(65534)
            os.setuid(65534)
        rewrite.remove_links_and_special_files(Path("."))

    child = multiprocessing.get_context("fork").Process(target=as_the_folders_owner)
    child.start()
    child.join(20)
    assert child.exitcode == 0
    assert not os.path.lexists(root / "src" / "inner")
    assert (root / "src" / "kept.py").read_text() == "K = 1\n"


def _agent_commit(paths: hive_git.RepoPaths, tree: Path, private: Path) -> str:
    """A commit of one new file made as a jailed agent makes it: its objects in its private store
    only, the worktree's index and detached HEAD at it."""
    import pygit2

    work = hive_git.open_worktree(tree)
    (private / "pack").mkdir(parents=True, exist_ok=True)
    own = pygit2.Odb(str(private))
    work.odb.add_disk_alternate(str(private))       # as the agent's git sees its objects
    (tree / "work.txt").write_text("the agent's work\n")
    blob = own.write(pygit2.enums.ObjectType.BLOB, b"the agent's work\n")
    work.index.add(pygit2.IndexEntry("work.txt", blob, pygit2.enums.FileMode.BLOB))
    work.index.write()
    entries = sorted([(e.path.encode(), e.id, e.mode) for e in work.index], key=lambda e: e[0])
    body = b"".join(b"%o %s\0" % (mode, name) + oid.raw for name, oid, mode in entries)
    tree_id = own.write(pygit2.enums.ObjectType.TREE, body)
    parent = str(work.head.target)
    text = (f"tree {tree_id}\nparent {parent}\nauthor A <a@example.com> 0 +0000\n"
            f"committer A <a@example.com> 0 +0000\n\nwork\n")
    commit = str(own.write(pygit2.enums.ObjectType.COMMIT, text.encode()))
    hive_git.worktree_admin(paths.common_dir, ISSUE).joinpath("HEAD").write_text(commit + "\n")
    return commit


def test_a_fifo_and_a_link_in_an_agents_object_store_block_nothing_and_are_not_followed(repo, git, tmp_path):
    """While the agent works, the files its work changed are read without its private store (a
    FIFO named as its commit blocks nothing); once it is done, its objects are taken in with every
    link and FIFO there removed first, the one named by a link left as it was."""
    from hive.workspace.changes import changed_files

    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    private = hive_git.private_objects(paths.common_dir, ISSUE)
    commit = _agent_commit(paths, tree, private)
    loose = private / commit[:2] / commit[2:]
    real = loose.read_bytes()
    os.unlink(loose)
    os.mkfifo(loose)

    def changes_are_the_agents() -> None:
        assert changed_files(paths, ISSUE, "refs/heads/main") == ["work.txt"]

    assert finishes(changes_are_the_agents, loose), "reading the changes waited on the FIFO"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("a file of the user's\n")
    loose.unlink(missing_ok=True)                  # the reader may have removed it
    loose.write_bytes(real)
    (private / "ab").mkdir()
    os.symlink(elsewhere, private / "ab" / ("c" * 38))
    (private / "ef").mkdir()
    os.mkfifo(private / "ef" / ("f" * 38))
    os.mkfifo(private / "pack" / ("pack-" + "d" * 40 + ".idx"))
    (private / "pack" / ("pack-" + "d" * 40 + ".pack")).write_bytes(b"")
    assert finishes(lambda: worktrees.absorb_objects(paths, ISSUE), loose), "taking the objects in waited on a FIFO"
    assert git("cat-file", "-t", commit, cwd=repo).stdout.strip() == "commit"
    assert elsewhere.read_text() == "a file of the user's\n"
    assert [p.name for p in private.iterdir()] == ["pack"] and not any((private / "pack").iterdir())


def test_the_objects_an_agent_packed_are_taken_in_from_a_copy_of_its_pack(repo, git):
    """An agent's `git gc` packs its objects in its private store: they are taken in from a copy
    of the pack and its index in a folder of hive's, and the store is emptied."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    private = hive_git.private_objects(paths.common_dir, ISSUE)
    commit = _agent_commit(paths, tree, private)
    as_the_agent = {**os.environ, "GIT_OBJECT_DIRECTORY": str(private),
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(paths.common_dir / "objects")}
    git("repack", "-d", "-l", "-q", cwd=tree, env=as_the_agent)
    assert list((private / "pack").glob("*.pack")) and not (private / commit[:2]).exists()

    assert worktrees.absorb_objects(paths, ISSUE) == 3                 # its commit, tree and blob
    assert git("show", f"{commit}:work.txt", cwd=repo).stdout == "the agent's work\n"
    assert [p.name for p in private.iterdir()] == ["pack"] and not any((private / "pack").iterdir())
    assert not list(paths.hive_dir.glob("absorbing-*"))


def test_fifos_an_agent_keeps_making_in_its_git_dir_while_hive_reads_it_block_nothing(repo, git):
    """What the agent left running keeps putting FIFOs where hive reads next (its index, a loose
    object, its HEAD) as fast as it can, while hive reads its changes, takes in its objects and
    reads its HEAD a few hundred times: no read waits (a clearing before libgit2's open lost that
    race)."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    private = hive_git.private_objects(paths.common_dir, ISSUE)
    admin = hive_git.worktree_admin(paths.common_dir, ISSUE)
    commit = _agent_commit(paths, tree, private)
    targets = [admin / "index", private / "ab" / ("c" * 38), admin / "HEAD"]
    (private / "ab").mkdir()

    remake = [step for target in targets for step in (partial(os.unlink, target), partial(os.mkfifo, target))]

    def read_often() -> None:
        from hive.workspace.changes import changed_files

        for _ in range(300):
            changed_files(paths, ISSUE, "refs/heads/main")
            worktrees.absorb_objects(paths, ISSUE)
            worktrees.worktree_head(paths, ISSUE)

    assert finishes_while(remake, read_often, targets[0]), "a read waited on a FIFO"
    assert git("cat-file", "-t", commit, cwd=repo).stdout.strip() == "commit"


def test_a_head_naming_a_branch_is_detached_without_reading_or_logging_what_the_agent_keeps_remaking(repo, git):
    """The agent ran `git checkout --ignore-other-worktrees main` and left something running that
    keeps putting its HEAD back to `ref: refs/heads/main` and a FIFO at `logs/HEAD` (where
    libgit2's detaching appended its reflog, and waited for good): hive takes main's tip from the
    shared repository, makes the HEAD that id by a rename, and never opens the log."""
    paths = hive_git.discover(repo)
    main = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, main).path
    admin = hive_git.worktree_admin(paths.common_dir, ISSUE)
    (admin / "logs").mkdir(exist_ok=True)
    log = admin / "logs" / "HEAD"

    def head_back() -> None:
        (admin / "HEAD.agent").write_text("ref: refs/heads/main\n")
        os.replace(admin / "HEAD.agent", admin / "HEAD")

    def adopt_often() -> None:
        for _ in range(200):
            worktrees.adopt_head(paths, ISSUE)

    assert finishes_while([head_back, partial(os.unlink, log), partial(os.mkfifo, log)], adopt_often, log), \
        "detaching the HEAD waited on a FIFO"
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    assert worktrees.adopt_head(paths, ISSUE) == main
    assert (admin / "HEAD").read_text() == f"{main}\n"
    assert git("rev-parse", "HEAD", cwd=tree).stdout.strip() == main
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == main
    assert not list(admin.glob("HEAD.hive-*"))


def test_a_fifo_and_a_link_in_the_worktrees_git_dir_block_nothing_and_are_not_followed(repo, git, tmp_path):
    """The worktree's admin folder is the agent's to write (its HEAD, its index): a FIFO at its
    index and a link at its ORIG_HEAD neither block nor lead hive anywhere, while the agent works
    (the files its work changed) or once it is done (its head adopted)."""
    from hive.workspace.changes import changed_files

    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    admin = hive_git.worktree_admin(paths.common_dir, ISSUE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("a file of the user's\n")
    os.symlink(elsewhere, admin / "ORIG_HEAD")
    os.unlink(admin / "index")
    os.mkfifo(admin / "index")

    assert finishes(lambda: changed_files(paths, ISSUE, "refs/heads/main"), admin / "index"), \
        "reading the changes waited on the FIFO"
    assert stat.S_ISFIFO(os.lstat(admin / "index").st_mode)   # the changes are read refusing it, not removing it
    assert finishes(lambda: worktrees.adopt_head(paths, ISSUE), admin / "index"), "adopting the head waited on the FIFO"
    assert elsewhere.read_text() == "a file of the user's\n"
    assert git("rev-parse", "HEAD", cwd=tree).stdout.strip() == base


def test_a_folder_swapped_for_a_link_while_it_is_cleared_leads_nowhere(tmp_path):
    """An agent still running swaps a folder of its worktree for a link to a folder of the
    user's, as fast as it can, while hive clears its links: the user's own link there is never
    removed (a walk may give up on a folder that keeps changing, and say so)."""
    from hive.workspace import rewrite

    root, outside = tmp_path / "worktree", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "kept.py").write_text("K = 1\n")
    outside.mkdir()
    os.symlink("/etc/hostname", outside / "users-link")

    def swap() -> None:
        while True:
            try:
                os.rename(root / "sub", root / "kept")
                os.symlink(outside, root / "sub")
                os.unlink(root / "sub")
                os.rename(root / "kept", root / "sub")
            except OSError:
                if not (root / "sub").is_dir() and (root / "kept").is_dir():
                    os.rename(root / "kept", root / "sub")

    swapper = multiprocessing.get_context("fork").Process(target=swap, daemon=True)   # truly at once
    swapper.start()
    try:
        for _ in range(3000):
            try:
                rewrite.remove_links_and_special_files(root)
            except OSError:
                pass              # "it kept changing": a refusal to rewrite there, also right
    finally:
        swapper.kill()
        swapper.join()
    assert os.path.islink(outside / "users-link")
