"""What the merge step needs from the process it runs in (the daemon), as typed interfaces.

The pipeline and the refinery hold one of these, never the daemon itself: the daemon satisfies
them, and a test can give a small fake instead.
"""

from __future__ import annotations

from typing import Protocol

import pygit2

from hive.backends.base import Backend
from hive.config import Config
from hive.project import Project
from hive.runtime import Runtime
from hive.state.issue_file import Issue
from hive.workspace.fastforward import FastForward


class RefineryHost(Protocol):
    @property
    def project(self) -> Project: ...

    @property
    def config(self) -> Config: ...

    @property
    def runtime(self) -> Runtime: ...

    def log(self, message: str) -> None: ...


class SharedTarget(Protocol):
    """The target branch as a remote holds it (shared mode): merges move it there first."""

    @property
    def name(self) -> str: ...

    @property
    def target_ref(self) -> str: ...

    @property
    def trouble(self) -> str:
        """Why the last exchange with the remote failed, in git's words."""

    def fetch_target(self) -> bool: ...

    def worked_here(self, issue: Issue) -> bool:
        """Whether this machine's agent did the issue's work (only that is merged here)."""

    def publish_target(self, repo: pygit2.Repository, old: str, new: str) -> FastForward: ...

    def catch_up_local_target(self, repo: pygit2.Repository) -> str: ...

    def request_push(self) -> None: ...

    def finalized(self, issue_id: str) -> None:
        """An issue this machine landed is finalized: drop its remote work branch (called in a
        thread, after `request_push` on the event loop)."""


class MergeHost(RefineryHost, Protocol):
    @property
    def backend(self) -> Backend: ...

    @property
    def shared_target(self) -> SharedTarget | None: ...

    def wake_up(self) -> None:
        """Something changed that the main loop should look at."""

    async def agents_started(self, at_most: float) -> None:
        """Return once no agent is being started, or after `at_most` seconds."""

    def worker_running(self, issue_id: str) -> bool:
        """Whether the issue's worker (and so maybe its agent, in its worktree) has not ended yet."""
