"""`hive.git`: the repositories kept open per thread."""

from __future__ import annotations

import threading

from hive import git


def test_a_repository_is_opened_once_per_thread_and_the_last_few_are_kept(repo, tmp_path, make_repo):
    first = git.repository(repo / ".git")
    assert git.repository(repo / ".git") is first
    assert git.repository(str(repo / ".git")) is first

    other_thread: list[object] = []
    worker = threading.Thread(target=lambda: other_thread.append(git.repository(repo / ".git")))
    worker.start()
    worker.join()
    assert other_thread[0] is not first        # libgit2 must not be used by two threads at once

    others = [make_repo(f"other-{k}") for k in range(git.OPENED_PER_THREAD)]
    for other in others:
        git.repository(other / ".git")
    assert git.repository(repo / ".git") is not first   # the oldest was let go


def test_a_worktree_without_its_git_file_is_never_taken_for_the_repository_above_it(repo, git):
    """`.hive/` and the agents' worktrees lie inside another repository's folders: with their
    `.git` file gone, pygit2's and git's search upward would find the person's repository, and
    hive would write its index entries there."""
    import pygit2
    import pytest

    from hive import git as hive_git
    from hive.errors import HiveError

    git("worktree", "add", "-q", "--detach", "nested", cwd=repo)
    nested = repo / "nested"
    (nested / ".git").unlink()
    staged_before = git("ls-files", "--stage", cwd=repo).stdout
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input="hive's\n").stdout.strip()

    with pytest.raises(pygit2.GitError):
        hive_git.repository(nested)
    with pytest.raises(HiveError):
        hive_git.update_worktree_index(nested, {"issues/hv-aaa001.md": blob}, [])
    with pytest.raises(HiveError):
        hive_git.unsplit_worktree_index(nested)
    assert git("ls-files", "--stage", cwd=repo).stdout == staged_before   # the person's index untouched


def test_core_settings_are_read_as_git_reads_them_the_last_one_set_winning(tmp_path):
    """`core.worktree` relative to the git folder, the last one set in any `[core]` section
    counting; `core.bare` true where any section sets it so last."""
    folder = tmp_path / "modules" / "lib"
    folder.mkdir(parents=True)
    (folder / "config").write_text('[core]\n\tworktree = ../elsewhere\n\tbare = false\n[user]\n\tworktree = no\n'
                                   '[core]\n\tworktree = "../../vendor/lib"\n')
    assert git.core_worktree(folder) == tmp_path / "vendor" / "lib"
    assert not git.is_bare(folder)
    (folder / "config").write_text("[core]\n\tbare = true\n")
    assert git.core_worktree(folder) is None and git.is_bare(folder)
    (folder / "config").write_text("[core]\n\tbare = true\n[core]\n\tbare = false ; set again\n")
    assert not git.is_bare(folder)
    (folder / "config").unlink()
    assert git.core_worktree(folder) is None and not git.is_bare(folder)
