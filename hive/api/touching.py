"""Why a ready issue waits for the files another's work changes (its declared `touches`:
`list --ready`). Apart from `hive.api.waits`, so that listing loads no runtime database."""

from __future__ import annotations

from hive import touches
from hive.project import Project
from hive.state.issue_file import Issue

__all__ = ["touch_waits"]


def touch_waits(project: Project, ready: list[Issue]) -> dict[str, str]:
    """Why each of these ready issues that waits for files another's work changes does so."""
    return {issue_id: str(wait) for issue_id, wait in touches.waits(project, ready).items()}
