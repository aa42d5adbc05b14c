"""Fixtures of the fault-injection suite (tests/conftest.py's `repo`, `hive`, `git`... apply too)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from .helpers import Daemons


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    """Start daemons with `daemons.start(...)`; at the end every one of them, and every scripted
    agent whose cwd is under this test's temp dir, is gone."""
    tracker = Daemons(tmp_path)
    yield tracker
    tracker.cleanup()
