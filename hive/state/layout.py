"""Where each kind of file lives on `hive/state` (DESIGN §2).

Live issues are at `issues/<id>.md`, one flat folder that people browse. Terminal issues
(finalized, canceled) move to `issues/archive/<xx>/<id>.md`, where `xx` is the first two characters
of the id's random part: a commit rewrites only the trees on the changed path, so keeping the flat
folder small keeps every state write cheap however long the project's history of done work gets
(one flat folder of 100k entries costs ~150 ms per commit; 1,024-way shards — two characters of
the base-32 alphabet — cost ~5 ms).
Any valid issue file anywhere under `issues/` is read, whatever its status.

The archive is not checked out in `.hive/` (`is_archived`): most of a big queue is finished work,
and creating its files is most of the cost of taking the queue in (~13 s for 100k files here).
Its entries in the checkout's git index carry git's skip-worktree bit, so `git status` there stays
clean and a `git commit -a` deletes nothing; `git hive show` reads such an issue from the branch,
and `git hive edit` checks its one file out (see state/checkout.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hive.state.issue_file import TERMINAL_STATUSES

ISSUES_DIR = "issues"
ARCHIVE_DIR = "issues/archive"
NOTES_DIR = "notes"
NOTES_ARCHIVE_DIR = "notes/archive"   # notes a prune archived: hive/state/note_record.py
CONTEXT_FILE = "context.md"
PROJECT_NOTES = "project"   # notes/project.jsonl: the notes about no one issue
ATTRIBUTES_FILE = ".gitattributes"
ATTRIBUTES = "issues/** merge=hive\nnotes/** merge=hive\n"

CONTEXT_TEMPLATE = """# Project context

What agents have learned about this project: conventions, commands, pitfalls.
The Queen reads this before planning; workers get it in their prompt. Edit freely.
"""


def live_path(issue_id: str) -> str:
    return f"{ISSUES_DIR}/{issue_id}.md"


def archive_path(issue_id: str) -> str:
    shard = issue_id.rsplit("-", 1)[-1][:2]
    return f"{ARCHIVE_DIR}/{shard}/{issue_id}.md"


def path_for(issue_id: str, status: str) -> str:
    return archive_path(issue_id) if status in TERMINAL_STATUSES else live_path(issue_id)


def is_archived(path: str) -> bool:
    """Whether `path` is in the archive, which `.hive/` does not check out."""
    return path.startswith(ARCHIVE_DIR + "/")


def candidate_paths(issue_id: str) -> tuple[str, str]:
    return live_path(issue_id), archive_path(issue_id)


def notes_path(issue_id: str) -> str:
    return f"{NOTES_DIR}/{issue_id}.jsonl"


def archived_notes_path(issue_id: str) -> str:
    return f"{NOTES_ARCHIVE_DIR}/{issue_id}.jsonl"


def issue_id_of(path: str) -> str | None:
    """The issue id a path under `issues/` names, or None if the path is not an issue file."""
    if not path.startswith(ISSUES_DIR + "/") or not path.endswith(".md"):
        return None
    name = path.rsplit("/", 1)[-1]
    return name[:-3]


def leads_outside(root: Path | str, path: str, folders_inside: set[str] | None = None, *,
                  name_itself: bool = True) -> bool:
    """Whether `path` (relative to `root`) could lead outside it: a symlink or under one, or a
    name that climbs or is not one (`..`, `.`, empty, NUL, `.git`). Hive never reads or writes
    through those: in `.hive/` (the trust check refuses them on the branch; this is the second
    lock on the door), nor in a person's checkout of the target branch. `folders_inside`: the
    folders found to be none of those by earlier calls (one refresh of many files in a folder
    looks at it once), which this call adds to. Not `name_itself`: the last name is left to the
    caller's own `O_NOFOLLOW` open (one system call where a look and an open were two)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") or "\0" in part or part.casefold() == ".git" for part in parts):
        return True
    current = str(root)
    last = len(parts) - 1
    if not name_itself:
        parts = parts[:-1]
    for depth, part in enumerate(parts):
        current = f"{current}/{part}"
        if depth < last and folders_inside is not None and current in folders_inside:
            continue
        try:   # os.path.islink, without its layers: a taken-in queue asks this of 400k names
            mode = os.lstat(current).st_mode
        except (OSError, ValueError):
            continue
        if stat.S_ISLNK(mode):
            return True
        if depth < last and folders_inside is not None and stat.S_ISDIR(mode):
            folders_inside.add(current)
    return False
