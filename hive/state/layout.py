"""Where each kind of file lives on `hive/state` (DESIGN §2).

Live issues are at `issues/<id>.md`, one flat folder that people browse. Terminal issues
(finalized, canceled) move to `issues/archive/<xx>/<id>.md`, where `xx` is the first two characters
of the id's random part: a commit rewrites only the trees on the changed path, so keeping the flat
folder small keeps every state write cheap however long the project's history of done work gets
(one flat folder of 100k entries costs ~150 ms per commit; 1,024-way shards — two characters of
the base-32 alphabet — cost ~5 ms).
Any valid issue file anywhere under `issues/` is read, whatever its status.
"""

from __future__ import annotations

from hive.state.issue_file import TERMINAL_STATUSES

ISSUES_DIR = "issues"
ARCHIVE_DIR = "issues/archive"
NOTES_DIR = "notes"
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


def candidate_paths(issue_id: str) -> tuple[str, str]:
    return live_path(issue_id), archive_path(issue_id)


def notes_path(issue_id: str) -> str:
    return f"{NOTES_DIR}/{issue_id}.jsonl"


def issue_id_of(path: str) -> str | None:
    """The issue id a path under `issues/` names, or None if the path is not an issue file."""
    if not path.startswith(ISSUES_DIR + "/") or not path.endswith(".md"):
        return None
    name = path.rsplit("/", 1)[-1]
    return name[:-3]
