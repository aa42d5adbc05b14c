"""hive as a Python library: one repository's queue, what `git hive` does, without the CLI.

    from hive.api import Hive

    with Hive.open("path/to/repo") as hive:
        login = hive.create("Add JWT login", priority=1)
        hive.create("Tests for JWT", depends_on=[login.id])
        [issue.title for issue in hive.ready()]

Every method works on the repository's `hive/state` as the commands do (each write is one
commit, checked like a person's edit) and raises `hive.errors.HiveError` (`BadInput` for bad
input, exit code 2 in the CLI) with the same one-line messages. docs/API.md documents it, and
tests/test_api.py runs its examples.

The names load when first used, each from the module that holds it (`Hive` and its records from
`queue.py`; `Issue` and its fields' choices from `hive.state.issue_file`): a command that only
reads — `git hive notes`, `reindex` — must not pay for the write path (pygit2 among it) by
importing this package. The modules `notes`, `logs`, `settings`, `browsing`, `demo`, `doctor`,
`reindex`, `preflight`, `backends` and `run` beside it are parts of the API of their own, and so
are `listing` (opening a project as a command does, listing its issues: no write path), `issues`
(create, dependencies, edit), `moves` (update, cancel, retry), `detail`, `attention`, `waits`,
`touching` and `prompt` (one issue shown, `--prompt`), `history` (`git hive log`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hive.api.queue import (COST_GROUPS, MIN_COUNT, NOTE_CATEGORIES, CostReport, Effect, Finalized, Group, Hive,
                                NoteEffects, NotesPruned, Pruned, Review, StatusWatch, Synced, Told, Usage,
                                describe_usage, follow_file, log_lines, transcript_entries)
    from hive.api.attention import Attention
    from hive.api.detail import Detail
    from hive.api.history import History
    from hive.api.issues import Editing
    from hive.api.prompt import ChosenNote, PromptPreview
    from hive.state.issue_file import DEFAULT_PRIORITY, PRIORITIES, STATUSES, TYPES, Issue

_HOME = {
    "COST_GROUPS": "hive.api.queue",
    "CostReport": "hive.api.queue",
    "Effect": "hive.api.queue",
    "Finalized": "hive.api.queue",
    "Group": "hive.api.queue",
    "Hive": "hive.api.queue",
    "MIN_COUNT": "hive.api.queue",
    "NOTE_CATEGORIES": "hive.api.queue",
    "NoteEffects": "hive.api.queue",
    "NotesPruned": "hive.api.queue",
    "Pruned": "hive.api.queue",
    "Review": "hive.api.queue",
    "StatusWatch": "hive.api.queue",
    "Synced": "hive.api.queue",
    "Told": "hive.api.queue",
    "Usage": "hive.api.queue",
    "describe_usage": "hive.api.queue",
    "follow_file": "hive.api.queue",
    "log_lines": "hive.api.queue",
    "transcript_entries": "hive.api.queue",
    # issues: the records of one shown, its history, its prompt, an edit; `Issue` and its fields'
    # choices from where they live (what `git hive create --help` needs, and no more)
    "Attention": "hive.api.attention",
    "ChosenNote": "hive.api.prompt",
    "Detail": "hive.api.detail",
    "Editing": "hive.api.issues",
    "History": "hive.api.history",
    "PromptPreview": "hive.api.prompt",
    "DEFAULT_PRIORITY": "hive.state.issue_file",
    "Issue": "hive.state.issue_file",
    "PRIORITIES": "hive.state.issue_file",
    "STATUSES": "hive.state.issue_file",
    "TYPES": "hive.state.issue_file",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'hive.api' has no attribute {name!r}")
