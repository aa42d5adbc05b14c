"""One issue as `git hive show` presents it, the light part: the issue with its description, its
file, the issues that wait for it, and whether more is to be told (why it needs a person:
`hive.api.attention`; why its merge waits: `hive.api.waits`) — each loaded only when it is.
Functions of an open project (`hive.api.listing.open_project`); `Hive` has them as methods.
"""

from __future__ import annotations

from dataclasses import dataclass

from hive.issues import resolve_id
from hive.project import Project
from hive.state.issue_file import Issue

__all__ = ["Detail", "detail"]

ASKING_A_PERSON = ("escalated", "failed")


@dataclass(frozen=True)
class Detail:
    issue: Issue                # with its description
    path: str                   # its file on `hive/state`
    dependents: list[str]       # the issues that wait for it

    @property
    def asks_a_person(self) -> bool:
        """Escalated or failed: `attention.attention` says why and how to go on."""
        return self.issue.status in ASKING_A_PERSON

    @property
    def merge_may_wait(self) -> bool:
        """Done: this machine's merge of it may wait (`waits.merge_waits` says why)."""
        return self.issue.status == "done"


def detail(project: Project, issue_id: str) -> Detail:
    """The issue (by id or unique prefix), its file and the issues that wait for it."""
    found = project.index.get(resolve_id(project, issue_id))
    assert found is not None
    return Detail(found, project.index.path_of(found.id) or "", project.index.dependents_of(found.id))
