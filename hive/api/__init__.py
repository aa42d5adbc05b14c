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
`queue.py`): a command that only reads — `git hive notes`, `reindex` — must not pay for the
write path (pygit2 among it) by importing this package. The modules `notes`, `logs`, `settings`,
`browsing`, `demo`, `doctor` and `reindex` beside it are parts of the API of their own, and so are
(issue 31) `preflight`, `backends` and `run`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hive.api.queue import (COST_GROUPS, MIN_COUNT, NOTE_CATEGORIES, CostReport, Effect, Finalized, Group, Hive,
                                NoteEffects, NotesPruned, Pruned, Review, StatusWatch, Synced, Told, Usage,
                                describe_usage, follow_file, log_lines, transcript_entries)

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
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'hive.api' has no attribute {name!r}")
