"""`git hive reindex` through the API: the SQLite index rebuilt from `hive/state` — a read of the
branch, so it loads no part of the write path (pygit2 among it) that it does not need."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from hive.errors import BadInput
from hive.project import Project
from hive.state.index import Problem

__all__ = ["Reindexed", "reindex"]


@dataclass(frozen=True)
class Reindexed:
    issues: int
    seconds: float
    problems: list[BadInput | Problem]   # invalid edits in .hive/ (not indexed), invalid files on the branch


def reindex(path: Path | str | None = None) -> Reindexed:
    """Rebuild the index of the repository at `path` (the person's valid saves in `.hive/`
    committed first)."""
    project = Project.open(path)
    try:
        unsaved = project.absorb(full=True).problems  # invalid edits in .hive/: not indexed
        project.checkout.refresh()
        started = time.perf_counter()
        problems = project.index.rebuild()
        took = time.perf_counter() - started
        return Reindexed(sum(project.index.counts().values()), took, [*unsaved, *problems])
    finally:
        project.close()
