"""A worktree's HEAD as hive reads and moves it: through the file itself, never libgit2.

The HEAD file and `logs/HEAD` of a worktree an agent worked in are the agent's: what it left
running may make either a FIFO or a link at any moment, and libgit2 would wait on one for good
(it reads the HEAD, and appends to its log when it moves it). Here the HEAD is read as a regular
file only, and replaced by renaming a new file over it; no log is written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pygit2

from hive import git, lines


def read(paths: git.RepoPaths, name: str) -> str:
    """What the HEAD file of the worktree `name` says (a commit id, or `ref: <branch>`); "" for
    no such file, or one that is not a regular file."""
    try:
        text = lines.read_regular(git.worktree_admin(paths.common_dir, name) / "HEAD", 128)
    except OSError:
        return ""
    return (text or b"").decode("ascii", "replace").strip()


def commit(paths: git.RepoPaths, name: str, *, detach: bool = False) -> str | None:
    """The commit the worktree's HEAD names: the id its file holds, or the tip of the branch it
    names (`ref: refs/heads/…`, read from the shared repository, which no agent writes); with
    `detach`, its file is then made that id. None for anything else, left as it is."""
    head = read(paths, name)
    if git.is_object_id(head):
        return head
    branch = head.removeprefix("ref: ")
    if not head.startswith("ref: refs/heads/") or not pygit2.reference_is_valid_name(branch):
        return None
    try:
        tip = str(git.repository(paths.common_dir).references[branch].peel(pygit2.Commit).id)
    except (KeyError, ValueError, pygit2.GitError):
        return None                       # no such branch (an unborn one), or not a commit
    if detach:
        write(git.worktree_admin(paths.common_dir, name), tip)
    return tip


def write(admin: Path, commit_id: str) -> None:
    """The HEAD file in the admin folder `admin` made `commit_id` (detached): a new file, of a
    name no one can have made before, renamed over what is there."""
    fd, temp = tempfile.mkstemp(prefix="HEAD.hive-", dir=admin)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(f"{commit_id}\n")
        os.replace(temp, admin / "HEAD")
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
