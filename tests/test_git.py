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
