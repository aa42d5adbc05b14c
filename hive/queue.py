"""The ready queue over the dependency DAG (DESIGN §3).

`ready()` is one SQL query on the index; taking an issue from it is `lifecycle.claim`, a
compare-and-swap commit that re-checks status, assignee and every blocker against the tip.
"""

from __future__ import annotations

from hive.project import Project
from hive.state.issue_file import Issue


def ready(project: Project, limit: int | None = None) -> list[Issue]:
    project.update_index()
    return project.index.ready(limit)
