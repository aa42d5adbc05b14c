"""The one landing operation: a done issue's work onto the target, gated the same way wherever
it lands — the merge pipeline, its rescan after a restart, and `git hive finalize`.

What a landing must pass is decided here once: the test command the issue's agent named when it
handed the work off (`lifecycle.hand_off` records it in the runtime), then the project's
`test_command`, both run in the worktree's jail; the base its worker started from; the landing
the issue file records and its blockers (`mechanical.land` checks both on every target tip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hive.agents import jails
from hive.jail import JailSpec
from hive.merge import mechanical
from hive.merge.host import SharedTarget
from hive.merge.mechanical import Landing, LandingEvents, Quiet
from hive.project import Project
from hive.state import history
from hive.state.issue_file import Issue
from hive.workspace import landings


def done_base(project: Project, issue_id: str) -> str:
    """The base commit a worker recorded in its `done` commit (Hive-Base trailer), if any."""
    done = history.last_event(project.paths, issue_id, "done")
    return done.trailers.get("Hive-Base", "") if done else ""


class Lander:
    """Lands done issues of one project on its target (a shared daemon's: on the remote's first)."""

    def __init__(self, project: Project, shared: SharedTarget | None = None):
        self.project = project
        self.shared = shared

    def target(self) -> mechanical.Target:
        branch = self.project.config.target_branch
        if self.shared is None:
            return mechanical.Target(branch)
        return mechanical.Target(branch, self.shared.target_ref, self.shared.publish_target)

    def plan(self, issue: Issue, head: str, base: str, agent_test_command: str, *,
             trust_head: bool = False, by_person: bool = False) -> mechanical.Plan:
        config = self.project.config
        return mechanical.Plan(issue.id, head, base, agent_test_command, config.test_command,
                               config.test_timeout_seconds, landings.recorded_of(issue),
                               {b: self.project.index.get(b) for b in issue.depends_on},
                               trust_head=trust_head, by_person=by_person)

    def land(self, plan: mechanical.Plan, events: LandingEvents = Quiet()) -> Landing:
        return mechanical.land(self.project.paths, self.target(), plan, events, jail=self._jail)

    def land_train(self, plans: list[mechanical.Plan], events: Sequence[LandingEvents]) -> mechanical.Train:
        """`plans` landed together on the local target (`mechanical.land_train`): the landings
        by issue id; none when the train does not make it, and then each lands alone."""
        assert self.shared is None, "a shared target lands one branch at a time"
        return mechanical.land_train(self.project.paths, self.project.config.target_branch, plans, events,
                                     jail=self._jail)

    def _jail(self, worktree: Path) -> JailSpec | None:
        return jails.worktree_jail(self.project.config, self.project.paths, worktree)
