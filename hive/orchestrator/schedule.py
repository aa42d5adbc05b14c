"""Which ready issues this machine may start now, in what order, and when there is nothing to do."""

from __future__ import annotations

from typing import Callable, Container, Iterator

from hive import git, touches
from hive.merge.host import SharedTarget
from hive.project import Project
from hive.state.issue_file import Issue
from hive.workspace import landings, worktrees


class Schedule:
    def __init__(self, project: Project, touches_mode: str, shared: SharedTarget | None,
                 target_ref: Callable[[], str], running: Container[str], log: Callable[[str], None]):
        self.project = project
        self.touches_mode = touches_mode
        self.shared = shared
        self.target_ref = target_ref
        self.running = running
        self.log = log
        self._held_told: dict[str, str] = {}   # issue -> the touches wait logged last
        self._recent_changes = touches.RecentChanges(project.paths, target_ref)

    def nothing_to_start(self) -> bool:
        """No issue this machine could start now (the ready queue, less what waits)."""
        first = self.project.index.ready(limit=1, with_body=False)
        if not first or (not first[0].touches and not self.waits_for_work_elsewhere(first[0])):
            return not first
        return next(iter(self.picker().order(self.candidates())), None) is None

    def candidates(self) -> Iterator[Issue]:
        """The ready queue, in order, less what runs here or waits for work elsewhere."""
        for issue in self.project.index.ready(with_body=False):
            if issue.id not in self.running and not self.waits_for_work_elsewhere(issue):
                yield issue

    def picker(self) -> touches.Picker:
        """The touches rule over what is busy now (`hive/touches.py`), read only when an issue
        declares touches."""
        def busy() -> list[touches.Busy]:
            found = touches.busy_work(self.project, self.target_ref(), self._recent_changes)
            self._recent_changes.forget(b.issue_id for b in found)
            return found

        return touches.Picker(busy, self.touches_mode, self.project.index.blockers_of)

    def tell_held(self, held: dict[str, touches.Wait]) -> None:
        """Log each issue the touches rule holds back, once per reason."""
        for issue_id, wait in held.items():
            if self._held_told.get(issue_id) != str(wait):
                self._held_told[issue_id] = str(wait)
                self.log(f"{issue_id} waits: {wait}")

    def waits_for_work_elsewhere(self, issue: Issue) -> bool:
        """Whether a blocker's work is not where this machine may start from: done but neither on
        the target nor on a local work branch, which only this machine's agents make (done on
        another machine; a fetched branch is `refs/remotes/*`, never built on), or finalized but
        its landing not yet on the target workers start from (`target_ref`: fetched first in
        shared mode). Code lands only from agents run here, so the dependent waits — it is
        neither claimed nor failed — and starts from the target once the blocker is there."""
        common = self.project.paths.common_dir
        for blocker_id in issue.depends_on:
            blocker = self.project.index.get(blocker_id)
            if blocker is None:
                continue
            if blocker.status == "done" and (git.read_ref(
                    common, worktrees.work_ref(blocker_id)) is None or (
                    self.shared is not None and not self.shared.worked_here(blocker))):
                return True
            if blocker.status == "finalized":
                tip = git.read_ref(common, self.target_ref())
                if tip is None or not landings.on_target(worktrees.open_repo(self.project.paths), tip, blocker):
                    return True
        return False
