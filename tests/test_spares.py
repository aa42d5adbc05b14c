"""Worker worktrees, made fresh or from a spare (a retired issue's worktree reused for the next
issue's, never losing what it held)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import pygit2
import pytest

from hive import git as hive_git
from hive.workspace import attempts, files_on_disk, spares, worktrees
from tests.hostile import finishes

ISSUE, NEXT = "hv-spare1", "hv-spare2"


def _commit_in(tree: Path, name: str, text: str) -> str:
    work = pygit2.Repository(str(tree))
    (tree / name).write_text(text)
    work.index.add(name)
    work.index.write()
    sig = pygit2.Signature("Agent", "agent@example.com")
    return str(work.create_commit("HEAD", sig, sig, f"add {name}\n", work.index.write_tree(), [work.head.target]))


def _files(tree: Path) -> set[str]:
    return {str(Path(d, f).relative_to(tree)) for d, _, fs in os.walk(tree) for f in fs if f != ".git"}


def test_a_fresh_worktree_is_one_git_knows_detached_at_its_base(repo, git):
    """Made without libgit2's `add_worktree` (it opens every other worktree first): git lists
    it, detached at its base with exactly the base's files; git commits in it (through hive's
    hook) and hive adopts them; it is removed as any other, nothing left for git to prune."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    for other in ("hv-other1", "hv-other2"):
        worktrees.create(paths, other, base)
    tree = worktrees.create(paths, ISSUE, base).path

    assert f"worktree {tree}\nHEAD {base}\ndetached" in git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert _files(tree) == set(git("ls-tree", "-r", "--name-only", base, cwd=repo).stdout.split())
    assert git("status", "--porcelain", "--ignored", cwd=tree).stdout == ""
    assert git("rev-parse", "--git-common-dir", cwd=tree).stdout.strip() == str(paths.common_dir)
    assert git("rev-parse", f"hive/work/{ISSUE}", cwd=repo).stdout.strip() == base
    (tree / "work.txt").write_text("work\n")
    git("add", "work.txt", cwd=tree)
    git("commit", "-q", "-m", "work", cwd=tree)
    made = git("rev-parse", "HEAD", cwd=tree).stdout.strip()
    assert worktrees.adopt_head(paths, ISSUE) == made
    assert git("rev-parse", f"hive/work/{ISSUE}", cwd=repo).stdout.strip() == made

    worktrees.retire(paths, ISSUE, "main")
    assert not tree.exists() and not (paths.common_dir / "worktrees" / ISSUE).exists()
    pruned = git("worktree", "prune", "--dry-run", "-v", cwd=repo)
    assert pruned.stdout + pruned.stderr == ""
    assert [a.commit for a in attempts.kept(paths.common_dir, ISSUE)] == [made]
    git("fsck", "--no-dangling", cwd=repo)


def test_a_retired_worktree_is_the_next_issues_clean_at_its_base_and_its_unlanded_commit_is_kept(repo, git):
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    unlanded = _commit_in(tree, "work.txt", "the agent's work\n")
    (tree / "untracked.txt").write_text("left behind\n")
    (tree / "deep" / "er").mkdir(parents=True)
    (tree / "deep" / "er" / "junk").write_text("junk\n")
    (tree / ".git-admin-leftover").write_text("x")
    admin = paths.common_dir / "worktrees" / ISSUE
    (admin / "ORIG_HEAD").write_text(unlanded + "\n")
    worktrees.retire(paths, ISSUE, "main", spare=True)

    assert not tree.exists() and not admin.exists()
    assert git("branch", "--list", f"hive/work/{ISSUE}", cwd=repo).stdout == ""
    # kept before it went: its commit, and what it held uncommitted (on that commit)
    [uncommitted, kept] = [a.commit for a in attempts.kept(paths.common_dir, ISSUE)]
    assert kept == unlanded
    assert git("rev-parse", f"{uncommitted}^", cwd=repo).stdout.strip() == unlanded
    assert git("show", f"{uncommitted}:deep/er/junk", cwd=repo).stdout == "junk\n"
    assert len(list(spares.spares_dir(paths).glob("[0-9]*"))) == 1
    listed = git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert f"{spares.spares_dir(paths)}/1\nHEAD {unlanded}\ndetached" in listed

    again = worktrees.create(paths, NEXT, base)
    assert again.path == worktrees.worktree_path(paths, NEXT) and again.path.is_dir()
    assert list(spares.spares_dir(paths).glob("[0-9]*")) == []       # the spare was taken
    assert _files(again.path) == set(git("ls-tree", "-r", "--name-only", base, cwd=repo).stdout.split())
    assert git("rev-parse", "HEAD", cwd=again.path).stdout.strip() == base
    assert git("status", "--porcelain", "--ignored", cwd=again.path).stdout == ""
    assert git("symbolic-ref", "-q", "HEAD", cwd=again.path, check=False).returncode != 0   # detached
    assert not (paths.common_dir / "worktrees" / NEXT / "ORIG_HEAD").exists()
    # a worktree git knows by its new name, whose commits land on the new issue's branch
    made = _commit_in(again.path, "next.txt", "next\n")
    assert worktrees.adopt_head(paths, NEXT) == made
    assert git("rev-parse", f"hive/work/{NEXT}", cwd=repo).stdout.strip() == made
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count(str(again.path)) == 1
    git("fsck", "--no-dangling", cwd=repo)


def test_a_worktree_whose_head_names_a_branch_is_spared_detached_without_opening_its_log(repo, git):
    """The agent ran `git checkout --ignore-other-worktrees main` and left a FIFO at `logs/HEAD`
    (where libgit2's detaching appended its reflog, and waited for good): the retired worktree
    goes into the pool detached at main's tip by a rename of its HEAD file, main untouched, and
    the next issue's worktree is made from it."""
    paths = hive_git.discover(repo)
    main = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, main).path
    admin = hive_git.worktree_admin(paths.common_dir, ISSUE)
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    (admin / "logs").mkdir(exist_ok=True)
    os.mkfifo(admin / "logs" / "HEAD")

    # `retire` clears the admin folder's FIFOs first: here as if the agent had put one back after
    assert finishes(lambda: spares.put(paths, ISSUE, tree), admin / "logs" / "HEAD"), \
        "sparing the worktree waited on its log"
    assert not tree.exists() and not admin.exists()
    spare_admin = paths.common_dir / "worktrees" / f"{spares.ADMIN_PREFIX}1"
    assert (spare_admin / "HEAD").read_text() == f"{main}\n"
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == main
    assert worktrees.create(paths, NEXT, main).path.is_dir()
    assert git("rev-parse", "HEAD", cwd=worktrees.worktree_path(paths, NEXT)).stdout.strip() == main


def test_the_pool_holds_at_most_its_size_and_the_rest_are_removed(repo, git, monkeypatch):
    monkeypatch.setattr(spares, "MAX_SPARES", 2)
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    ids = [f"hv-pool{k}x" for k in range(3)]
    for issue in ids:
        worktrees.create(paths, issue, base)
    for issue in ids:
        worktrees.retire(paths, issue, "main", spare=True)
        assert not worktrees.worktree_path(paths, issue).exists()
    assert sorted(p.name for p in spares.spares_dir(paths).glob("[0-9]*")) == ["1", "2"]
    assert sorted(n for n in os.listdir(paths.common_dir / "worktrees") if n.startswith(spares.ADMIN_PREFIX)) == [
        "hive-spare-1", "hive-spare-2"]


def test_pieces_a_killed_process_left_are_no_spare_and_go_when_the_pool_is_next_used(repo, git):
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    worktrees.create(paths, ISSUE, base)
    worktrees.retire(paths, ISSUE, "main", spare=True)
    spare, admin = spares.spares_dir(paths) / "1", paths.common_dir / "worktrees" / "hive-spare-1"
    (spare / ".git").write_text(f"gitdir: {paths.common_dir / 'worktrees' / NEXT}\n")   # killed mid-take
    tree = worktrees.create(paths, NEXT, base)
    assert not spare.exists() and not admin.exists()
    assert git("status", "--porcelain", cwd=tree.path).stdout == ""
    assert git("rev-parse", "HEAD", cwd=tree.path).stdout.strip() == base


def test_pieces_a_killed_process_left_go_when_the_pool_seems_full_and_a_worktree_is_retired(repo, git, monkeypatch):
    """Retiring into a pool that counts its size only because of broken pieces: they go, and the
    worktree is spared."""
    monkeypatch.setattr(spares, "MAX_SPARES", 2)
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    for issue in (ISSUE, NEXT):
        worktrees.create(paths, issue, base)
    worktrees.retire(paths, ISSUE, "main", spare=True)
    (spares.spares_dir(paths) / "7").mkdir()                                   # no admin folder: a piece
    worktrees.retire(paths, NEXT, "main", spare=True)
    assert sorted(p.name for p in spares.spares_dir(paths).glob("[0-9]*")) == ["1", "8"]
    assert all(spares._whole(paths, n) for n in ("1", "8"))


def test_a_worktree_with_a_rebase_half_done_or_submodules_is_removed_not_spared(repo, git):
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    (paths.common_dir / "worktrees" / ISSUE / "MERGE_HEAD").write_text(base + "\n")
    worktrees.retire(paths, ISSUE, "main", spare=True)
    assert not tree.exists() and not (paths.common_dir / "worktrees" / ISSUE).exists()
    assert list(spares.spares_dir(paths).glob("[0-9]*")) == []


def test_spares_are_a_runs_own_a_cli_retire_makes_none_and_clear_removes_them_all(repo, git):
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    for issue in (ISSUE, NEXT):
        worktrees.create(paths, issue, base)
    worktrees.retire(paths, ISSUE, "main")                # not a daemon's: removed
    assert not spares.spares_dir(paths).exists()
    worktrees.retire(paths, NEXT, "main", spare=True)
    assert len(list(spares.spares_dir(paths).glob("[0-9]*"))) == 1
    spares.clear(paths)
    assert list(spares.spares_dir(paths).glob("[0-9]*")) == []
    assert not [n for n in os.listdir(paths.common_dir / "worktrees") if n.startswith(spares.ADMIN_PREFIX)]
    assert git("worktree", "list", "--porcelain", cwd=repo).stdout.count("worktree ") == 2   # main, .hive


def test_a_worktree_an_agent_may_still_write_is_never_spared(repo):
    """A jail's bind mount follows a folder wherever it is moved: an agent still alive in a
    worktree (its worker not ended yet, the refinery's idle session) could write the next issue's."""
    from types import SimpleNamespace

    from hive.merge.pipeline import MergeProcessor
    from hive.merge.refinery import Refinery

    paths = hive_git.discover(repo)
    running = {ISSUE}
    host = SimpleNamespace(project=SimpleNamespace(paths=paths), config=None, runtime=None,
                           worker_running=lambda issue: issue in running)
    refinery = Refinery.__new__(Refinery)
    refinery.cwd = ""
    merge = MergeProcessor(host, refinery)  # type: ignore[arg-type]
    assert not merge.may_spare(ISSUE)
    running.clear()
    assert merge.may_spare(ISSUE)
    refinery.cwd = str(worktrees.worktree_path(paths, ISSUE))
    assert not merge.may_spare(ISSUE) and merge.may_spare(NEXT)


def test_an_issue_retired_by_two_threads_at_once_is_no_error(repo, git, monkeypatch):
    """The merge queue's look around and the retirement after a merge may both remove a finalized
    issue's work: the branch deleted by the other between this one's look and its delete is gone,
    as wanted — it raised (and the exception ended the merge queue's task)."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    unlanded = _commit_in(tree, "work.txt", "the agent's work\n")
    real_checked_out = worktrees.checked_out

    def the_other_thread_deletes_it_first(paths_: hive_git.RepoPaths, ref: str) -> bool:
        found = real_checked_out(paths_, ref)
        git("update-ref", "-d", ref, cwd=repo)
        return found

    monkeypatch.setattr(worktrees, "checked_out", the_other_thread_deletes_it_first)
    worktrees.retire(paths, ISSUE, "main")
    assert git("branch", "--list", f"hive/work/{ISSUE}", cwd=repo).stdout == ""
    assert not worktrees.worktree_path(paths, ISSUE).exists()
    assert attempts.holding(paths.common_dir, ISSUE, unlanded) is not None   # kept first


def test_an_issue_retired_into_the_pool_while_another_thread_removes_it_is_no_error(repo, git, monkeypatch):
    """The daemon's loop stops the agent of an issue just finalized and retires its worktree into
    the pool while the merge step, which saw the agent still running, removes it outright: the
    folder went from under the spare being made (a crash of the daemon). The second waits."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    unlanded = _commit_in(tree, "work.txt", "the agent's work\n")
    real_rename, errors = os.rename, []

    def remove_outright() -> None:
        try:
            worktrees.retire(paths, ISSUE, "main", spare=False)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    other = threading.Thread(target=remove_outright)

    def the_other_removes_it_meanwhile(source: object, destination: object) -> None:
        real_rename(source, destination)
        if other.ident is None and str(source).endswith(f"worktrees/{ISSUE}"):   # the admin folder moved
            other.start()
            other.join(0.5)   # done at once unless it waits for this removal to end

    monkeypatch.setattr(spares.os, "rename", the_other_removes_it_meanwhile)
    worktrees.retire(paths, ISSUE, "main", spare=True)
    other.join()
    assert errors == []
    assert not worktrees.worktree_path(paths, ISSUE).exists()
    assert git("branch", "--list", f"hive/work/{ISSUE}", cwd=repo).stdout == ""
    assert attempts.holding(paths.common_dir, ISSUE, unlanded) is not None   # kept first
    [spare] = spares.spares_dir(paths).glob("[0-9]*")                         # one spare, whole
    assert worktrees.create(paths, NEXT, base).path.joinpath(".git").is_file()
    assert not spare.exists()                                                 # taken by the next issue


def test_a_worktree_whose_git_file_is_gone_is_never_taken_for_the_main_repository(repo, git):
    """Hive's worktrees lie inside the main repository's `.git`: opened with git's search upward,
    one without its `.git` file was the main repository — `prepare_for_merge` detached a person's
    HEAD and reset their checkout hard to the agent's work."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    unlanded = _commit_in(tree, "work.txt", "the agent's work\n")
    (tree / ".git").unlink()                                    # an agent outside the jail, say
    (repo / "mine.txt").write_text("a person's change, not committed\n")
    git("add", "mine.txt", cwd=repo)

    with pytest.raises(pygit2.GitError):
        worktrees.prepare_for_merge(paths, ISSUE, unlanded)
    assert worktrees.worktree_head(paths, ISSUE) is None
    worktrees.retire(paths, ISSUE, "main", spare=True)

    assert git("symbolic-ref", "HEAD", cwd=repo).stdout.strip() == "refs/heads/main"
    assert git("rev-parse", "main", cwd=repo).stdout.strip() == base
    assert (repo / "mine.txt").read_text() == "a person's change, not committed\n"
    assert "A  mine.txt" in git("status", "--porcelain", cwd=repo).stdout
    assert not tree.exists()
    assert list(spares.spares_dir(paths).glob("[0-9]*")) == []   # no spare made of it
    assert attempts.holding(paths.common_dir, ISSUE, unlanded) is not None   # the work is kept


@pytest.mark.parametrize("forged", ["link", "blob", "ref", "long"])
def test_the_admin_head_of_a_worktree_without_its_git_file_is_kept_only_as_a_commit(repo, git, forged):
    """The agent may write its worktree's admin `HEAD`: read in place of the worktree, only a
    commit id there is kept (never a link followed, a blob, a ref name, a file too long)."""
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    (tree / ".git").unlink()
    head = hive_git.worktree_admin(paths.common_dir, ISSUE) / "HEAD"
    head.unlink()
    if forged == "link":   # to a file holding a commit that nothing else holds
        tree_id = git("rev-parse", "main^{tree}", cwd=repo).stdout.strip()
        dangling = git("commit-tree", tree_id, "-m", "elsewhere", cwd=repo).stdout.strip()
        (repo.parent / "elsewhere").write_text(dangling + "\n")
        head.symlink_to(repo.parent / "elsewhere")
    else:
        blob = git("hash-object", "-w", "--stdin", cwd=repo, input="not a commit\n").stdout.strip()
        head.write_text({"blob": blob, "ref": "ref: refs/heads/main", "long": base * 1000}[forged] + "\n")
    worktrees.retire(paths, ISSUE, "main", spare=True)
    assert not tree.exists()
    assert git("for-each-ref", "refs/hive/attempts", cwd=repo).stdout == ""   # nothing kept of it
    assert git("symbolic-ref", "HEAD", cwd=repo).stdout.strip() == "refs/heads/main"


def _big_checkout(repo: Path, git) -> tuple[hive_git.RepoPaths, str]:
    """`repo` with 30 more files committed on main: its paths and main's commit."""
    for k in range(30):
        (repo / f"module_{k}.py").write_text(f"VALUE = {k}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "modules", cwd=repo)
    return hive_git.discover(repo), git("rev-parse", "main", cwd=repo).stdout.strip()


def _jailed_add_writes(paths: hive_git.RepoPaths, issue: str, tree: Path, git) -> set[str]:
    """The objects a jailed agent's `git add -A` of one new file writes into its own store."""
    from hive.jail import prepare, roles

    worktrees.absorb_objects(paths, issue)                               # its store emptied first
    launch = prepare(["sh", "-c", f"echo {tree.name} > new.txt && git add -A"], cwd=str(tree),
                     env={"PATH": os.environ["PATH"]}, jail=roles.worktree_jail(paths, tree))
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True)
    launch.release()
    assert done.returncode == 0, done.stderr
    return {p.parent.name + p.name for p in hive_git.private_objects(paths.common_dir, issue).glob("[0-9a-f][0-9a-f]/*")}


def test_an_agents_git_add_in_a_new_spare_or_remade_worktree_writes_only_what_it_changed(repo, git):
    """git compares timestamps to the second: a file checked out in the second its index was
    written is read again by the agent's `git add -A`, which in the jail (the shared object store
    read-only, so the copy there cannot be freshened) writes it anew into the agent's own store,
    for hive to read back. No worktree hive makes for an agent has such files, fresh, a spare or
    made again for the refinery: the agent's store gets only its own new file. A change made at once, in that
    second and of the same size, is still seen."""
    from tests.hostile import require_jail

    require_jail()
    paths, base = _big_checkout(repo, git)

    def only_the_new_file(issue: str, tree: Path) -> None:
        assert _jailed_add_writes(paths, issue, tree, git) == {git("hash-object", "new.txt", cwd=tree).stdout.strip()}

    only_the_new_file(ISSUE, worktrees.create(paths, ISSUE, base).path)
    worktrees.retire(paths, ISSUE, "main", spare=True)
    assert len(list(spares.spares_dir(paths).glob("[0-9]*"))) == 1
    only_the_new_file(NEXT, worktrees.create(paths, NEXT, base).path)
    assert not any(spares.spares_dir(paths).glob("[0-9]*"))            # the spare was taken
    worktrees.remove(paths, NEXT, delete_branch=False)
    worktrees.recreate(paths, NEXT)
    only_the_new_file(NEXT, worktrees.worktree_path(paths, NEXT))

    seen = worktrees.create(paths, "hv-spare3", base).path
    (seen / "module_1.py").write_text("VALUE = 7\n")                    # same size, at once
    assert git("status", "--porcelain", cwd=seen).stdout == " M module_1.py\n"


def test_files_checked_out_in_the_second_before_now_are_settled_too(repo, git):
    """A checkout whose files and index were written in one second that is over by the time hive
    looks: still racily clean (git compares to the second), so those files are dated back as well,
    and the agent's `git add` writes only what it changed."""
    from tests.hostile import require_jail

    require_jail()
    paths, base = _big_checkout(repo, git)
    tree = worktrees.create(paths, ISSUE, base).path
    admin = paths.common_dir / "worktrees" / ISSUE
    second = (time.time_ns() // 1_000_000_000 - 5) * 1_000_000_000
    files = [tree / path for path in git("ls-files", cwd=tree).stdout.split()]
    for n, path in enumerate(files):
        os.utime(path, ns=(second + n, second + n))
    git("update-index", "-q", "--refresh", cwd=tree)                       # the index records those times
    os.utime(admin / "index", ns=(second + 999, second + 999))           # written in that second too

    assert worktrees.settle_index(tree, admin) == len(files) > 0
    assert _jailed_add_writes(paths, ISSUE, tree, git) == {git("hash-object", "new.txt", cwd=tree).stdout.strip()}


def test_settling_dates_back_only_files_that_hold_what_the_index_says_and_follows_no_link(repo, git):
    """Settling compares before it records: a file changed since the checkout (same size, same
    second) keeps its time and git still sees the change; a folder that became a link out of the
    worktree is not followed (what it names keeps its times), nor is a file that became one."""
    paths, base = _big_checkout(repo, git)
    tree = worktrees.create(paths, ISSUE, base).path
    admin = paths.common_dir / "worktrees" / ISSUE
    outside = repo.parent / "outside"
    outside.mkdir()
    for k in range(30):                                    # the same files, outside
        (outside / f"module_{k}.py").write_text(f"VALUE = {k}\n")
    (tree / "module_1.py").write_text("VALUE = 7\n")          # changed: same size
    os.unlink(tree / "module_2.py")
    os.symlink(outside / "module_2.py", tree / "module_2.py")  # a file become a link
    tracked = git("ls-files", cwd=tree).stdout.split()
    now = time.time_ns()
    for path in [*(tree / name for name in tracked), *outside.iterdir()]:
        os.utime(path, ns=(now, now), follow_symlinks=False)
    os.utime(admin / "index", ns=(now, now))                  # all of them racily clean

    settled = worktrees.settle_index(tree, admin)

    assert settled == len(tracked) - 2                     # all but the changed one and the link
    assert os.lstat(tree / "module_1.py").st_mtime_ns == now
    assert os.lstat(tree / "module_2.py").st_mtime_ns == now
    assert all(path.stat().st_mtime_ns == now for path in outside.iterdir())
    assert git("status", "--porcelain", cwd=tree).stdout == " M module_1.py\n T module_2.py\n"


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_settling_writes_an_index_git_reads_and_leaves_one_of_another_version_as_it_is(repo, git, version):
    """The index is changed in place (each settled entry's stat record, then its checksum): git
    reads it back (it checks the checksum) with each file's new time recorded, an entry with an
    extended flag (`git add -N`, version 3) included; one of version 4 is left as it is."""
    paths, base = _big_checkout(repo, git)
    tree = worktrees.create(paths, ISSUE, base).path
    admin = paths.common_dir / "worktrees" / ISSUE
    (tree / "later.txt").write_text("later\n")
    git("add", "-N", "later.txt", cwd=tree)
    git("update-index", "--index-version", version, cwd=tree)
    tracked = git("ls-files", cwd=tree).stdout.split()
    now = time.time_ns()
    for name in tracked:
        os.utime(tree / name, ns=(now, now))
    git("update-index", "-q", "--refresh", cwd=tree)
    os.utime(admin / "index", ns=(now, now))
    index_before = (admin / "index").read_bytes()

    settled = worktrees.settle_index(tree, admin)

    if version == "4":
        assert settled == 0 and (admin / "index").read_bytes() == index_before
        return
    assert settled == len(tracked) - 1                    # all but the intent-to-add entry
    recorded = files_on_disk.index_entries(admin / "index")
    assert recorded is not None
    assert all(recorded[name][3] == os.lstat(tree / name).st_mtime_ns < now for name in tracked if name != "later.txt")
    assert git("status", "--porcelain", cwd=tree).stdout == " A later.txt\n"
    assert len(hive_git.open_worktree(tree).index) == len(tracked)   # libgit2 checks the checksum


def test_a_restamped_index_without_a_checksum_keeps_none():
    """An index written with `index.skipHash` (git 2.40 and later) ends in 20 zero bytes where the
    checksum would be: it is left so."""
    entry = struct.pack(">10I20sH", *([0] * 10), b"\1" * 20, 5) + b"a.txt" + b"\0" * 5
    data = b"DIRC" + struct.pack(">II", 2, 1) + entry + b"\0" * 20
    entries, offsets = files_on_disk.entries_and_offsets(data) or ({}, {})
    assert set(entries) == {"a.txt"}
    st = os.stat(__file__)
    out = files_on_disk.restamped(data, {offsets["a.txt"]: st})
    assert out[-20:] == b"\0" * 20 and len(out) == len(data)
    assert (files_on_disk.entries_of(out) or {})["a.txt"][3] == st.st_mtime_ns


def test_settling_past_a_lock_a_dead_git_left_leaves_the_index_and_the_files_as_they_are(repo, git):
    """An `index.lock` in the worktree's admin folder (a git that died): settling writes nothing
    and dates nothing back (the lock is taken before anything is); git compares the contents."""
    paths, base = _big_checkout(repo, git)
    tree = worktrees.create(paths, ISSUE, base).path
    admin = paths.common_dir / "worktrees" / ISSUE
    (admin / "index.lock").write_bytes(b"")
    index_before = (admin / "index").read_bytes()
    tracked = git("ls-files", cwd=tree).stdout.split()
    now = time.time_ns()
    for name in tracked:
        os.utime(tree / name, ns=(now, now))
    os.utime(admin / "index", ns=(now, now))

    assert worktrees.settle_index(tree, admin) == 0
    assert (admin / "index").read_bytes() == index_before
    assert all(os.lstat(tree / name).st_mtime_ns == now for name in tracked)
    (admin / "index.lock").unlink()
    assert git("status", "--porcelain", cwd=tree).stdout == ""


def test_settling_on_a_full_disk_leaves_the_index_as_it_was_and_no_lock(repo, git, monkeypatch):
    """The index cannot be written (a full disk): settling says none, the index is as it was, its
    lock is gone, and git (comparing contents) still sees a clean worktree."""
    import dulwich.file

    paths, base = _big_checkout(repo, git)
    tree = worktrees.create(paths, ISSUE, base).path
    admin = paths.common_dir / "worktrees" / ISSUE
    index_before = (admin / "index").read_bytes()
    now = time.time_ns()
    for name in git("ls-files", cwd=tree).stdout.split():
        os.utime(tree / name, ns=(now, now))
    os.utime(admin / "index", ns=(now, now))

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dulwich.file._GitFile, "write", full_disk)
    assert worktrees.settle_index(tree, admin) == 0
    assert (admin / "index").read_bytes() == index_before
    assert not (admin / "index.lock").exists()
    assert git("status", "--porcelain", cwd=tree).stdout == ""


def test_settling_follows_no_folder_become_a_link(repo, git):
    """An index entry under a folder that is now a link out of the worktree: nothing it names
    is read or dated back."""
    (repo / "src").mkdir()
    for k in range(5):
        (repo / "src" / f"m{k}.py").write_text(f"V = {k}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "src", cwd=repo)
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=repo).stdout.strip()).path
    admin = paths.common_dir / "worktrees" / ISSUE
    outside = repo.parent / "outside"
    os.rename(tree / "src", outside)
    os.symlink(outside, tree / "src")
    now = time.time_ns()
    for path in [*outside.iterdir(), *tree.iterdir()]:
        os.utime(path, ns=(now, now), follow_symlinks=False)
    os.utime(admin / "index", ns=(now, now))

    worktrees.settle_index(tree, admin)

    assert all(path.stat().st_mtime_ns == now for path in outside.iterdir())


def test_a_spare_an_agent_left_links_and_a_fifo_in_is_settled_without_following_or_reading_them(repo, git):
    """Hostile leftovers: the agent of a retired worktree replaced a tracked folder by a link out
    of it and a tracked file by a FIFO. The next issue's worktree, made from that spare and
    settled, follows neither (what the link names keeps its times, no read blocks on the FIFO),
    and comes clean, every tracked file in place."""
    import stat as stat_module

    paths, base = _big_checkout(repo, git)
    (repo / "src").mkdir()
    for k in range(3):
        (repo / "src" / f"m{k}.py").write_text(f"V = {k}\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "src", cwd=repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    outside = repo.parent / "outside"
    outside.mkdir()
    for k in range(3):
        (outside / f"m{k}.py").write_text(f"V = {k}\n")           # what the link names: the same files
    old = (time.time_ns() // 1_000_000_000 - 3600) * 1_000_000_000
    for path in outside.iterdir():
        os.utime(path, ns=(old, old))
    shutil.rmtree(tree / "src")
    os.symlink(outside, tree / "src")
    os.unlink(tree / "module_3.py")
    os.mkfifo(tree / "module_3.py")
    worktrees.retire(paths, ISSUE, "main", spare=True)

    made = worktrees.create(paths, NEXT, base).path

    assert all(path.stat().st_mtime_ns == old for path in outside.iterdir())
    assert stat_module.S_ISDIR(os.lstat(made / "src").st_mode)
    assert stat_module.S_ISREG(os.lstat(made / "module_3.py").st_mode)
    assert git("status", "--porcelain", "--ignored", cwd=made).stdout == ""


def test_through_the_daemon_the_agents_first_git_add_writes_only_its_own_file(repo, tmp_path, git, new_issue,
                                                                                state_log):
    """The daemon's workers get settled worktrees: in a checkout of 30 files, a jailed
    agent's first `git add -A` writes into its store only the file it made (the turn fails
    otherwise, and with no retry the issue would not be finalized)."""
    from tests.daemon_helpers import RUN, write_script
    from tests.hostile import require_jail

    require_jail()
    _big_checkout(repo, git)
    first = new_issue("first")
    second = new_issue("second", depends_on=[first])
    counted = 'test "$(find "$GIT_OBJECT_DIRECTORY" -type f | wc -l)" -eq 1'
    steps = [{"write": "{issue}.txt", "content": "{issue}\n"},
             {"run": f"git add -A && {counted}", "must_succeed": True},
             {"commit": "{issue}: its file"}, {"result": "success", "summary": "one file"}]
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(write_script(tmp_path, {"default": steps})),
           "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0"}
    daemon = subprocess.run([*RUN, "--until-idle", "--max-agents", "2"], cwd=repo, capture_output=True,
                            text=True, env=env, timeout=300)
    assert daemon.returncode == 0, daemon.stdout + daemon.stderr
    assert {c.issue for c in state_log(repo) if c.event == "finalized"} == {first, second}


def test_a_spare_at_a_base_whose_gitignore_is_a_link_to_a_fifo_is_checked_without_reading_it(repo, git, tmp_path):
    """Landed work may hold a `.gitignore` that is a link (git never follows one; libgit2's status
    does, and waits for good on a FIFO it names): a spare reset to that base is checked clean by
    its files' stat against the index, and the next issue's worktree is made."""
    import multiprocessing

    host_fifo = tmp_path / "host-fifo"
    os.mkfifo(host_fifo)
    os.symlink(host_fifo, repo / ".gitignore")
    git("add", ".gitignore", cwd=repo)
    git("commit", "-q", "-m", "a link where git reads its ignore rules", cwd=repo)
    paths = hive_git.discover(repo)
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    worktrees.create(paths, ISSUE, base)
    worktrees.retire(paths, ISSUE, "main", spare=True)
    assert len(list(spares.spares_dir(paths).glob("[0-9]*"))) == 1

    child = multiprocessing.get_context("fork").Process(target=lambda: worktrees.create(paths, NEXT, base))
    child.start()
    child.join(20)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "making the worktree from the spare waited on the FIFO"
    assert list(spares.spares_dir(paths).glob("[0-9]*")) == []       # the spare was taken
    assert os.readlink(worktrees.worktree_path(paths, NEXT) / ".gitignore") == str(host_fifo)


def test_kept_attempts_are_read_loose_and_packed_among_many_other_refs(repo, git):
    """`git pack-refs` moves the kept attempts into packed-refs beside every tag of a big
    repository: each issue's are found there (a ref naming another's attempt path inside its own
    name is not one), and the next one kept gets the next number."""
    paths = hive_git.discover(repo)
    main = git("rev-parse", "main", cwd=repo).stdout.strip()
    first = git("commit-tree", "-m", "one", f"{main}^{{tree}}", "-p", main, cwd=repo).stdout.strip()
    second = git("commit-tree", "-m", "two", f"{main}^{{tree}}", "-p", main, cwd=repo).stdout.strip()
    pyrepo = hive_git.repository(paths.common_dir)
    attempts.keep(pyrepo, ISSUE, [first])
    attempts.keep(pyrepo, NEXT, [first, second])
    refs = "".join(f"create refs/tags/t{k} {main}\n" for k in range(2000))
    refs += f"create refs/tags/refs/hive/attempts/{ISSUE}/9 {second}\n"
    git("update-ref", "--stdin", cwd=repo, input=refs)
    git("pack-refs", "--all", cwd=repo)
    assert not (paths.common_dir / "refs" / "hive" / "attempts" / ISSUE).exists() or not any(
        (paths.common_dir / "refs" / "hive" / "attempts" / ISSUE).iterdir())

    assert [(a.number, a.commit) for a in attempts.kept(paths.common_dir, ISSUE)] == [(1, first)]
    assert [(a.number, a.commit) for a in attempts.kept(paths.common_dir, NEXT)] == [(1, first), (2, second)]
    assert attempts.keep(pyrepo, ISSUE, [second]) == [attempts.Attempt(ISSUE, 2, second)]
    assert [(a.issue_id, a.number) for a in attempts.kept(paths.common_dir)] == [
        (a, n) for a, n in sorted([(ISSUE, 1), (ISSUE, 2), (NEXT, 1), (NEXT, 2)])]
