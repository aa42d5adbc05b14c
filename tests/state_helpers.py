"""Putting an issue in a status for a test's setup, without a transition's preconditions: hive
itself moves a status only through `hive.lifecycle` (tests/test_architecture.py checks it)."""

from __future__ import annotations

from typing import Any

from hive import issues
from hive.state.issue_file import Issue


def set_status(project: Any, issue_id: str, status: str, **kwargs: Any) -> Issue:
    """One state commit setting `status` (the event named after it unless `event=` says)."""
    return issues.update(project, issue_id, {"status": status}, event=kwargs.pop("event", status), **kwargs)
