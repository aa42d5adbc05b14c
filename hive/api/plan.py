"""`git hive plan`, `plans` and `approve` through the API: a conversation with the Queen that
turns a spec into issues on a plan branch (`PlanSession`: the caller drives its turns and shows
them), and the plan branches themselves — listed, approved into `hive/state`, removed."""

from __future__ import annotations

import dataclasses
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hive.api.preflight import require_agents
from hive.backends.registry import backend_for_role
from hive.errors import BadInput, HiveError
from hive.project import Project
from hive.queen import (MAX_ROUNDS, PlanResult, Queen, ascii_tree, commit_plan, has_valid_plan, list_plans, plan_ref,
                        proposed_issues, prune_plans, reject, remove_plan_worktree, slugify)
from hive.queen import approve as merge_plan
from hive.state.issue_file import Issue

__all__ = ["Approved", "Edits", "Plan", "PlanSession", "Proposal", "Removed", "approve", "plans", "prune", "remove"]


@dataclass(frozen=True)
class Proposal:
    """A valid plan, committed on its branch `hive/plan/<slug>`."""
    slug: str
    issues: list[Issue]
    tree: str            # the issues as a tree of their dependencies, one line each


@dataclass(frozen=True)
class Edits:
    """What a person's edits of the plan's issue files came to: problems, or a new proposal."""
    problems: list[str]
    proposal: Proposal | None


@dataclass(frozen=True)
class Approved:
    name: str
    commit: str | None       # the merge into hive/state; None when it already was there
    warnings: list[str]


@dataclass(frozen=True)
class Plan:
    name: str
    issues: int
    status: str              # proposed | approved | empty (no valid plan was committed)
    commit: str


@dataclass(frozen=True)
class Removed:
    name: str
    status: str              # what it was: proposed, approved or empty


class PlanSession:
    """One planning conversation with the Queen: `propose` (the spec, then a person's feedback),
    `take_edits` and `fix` (a person's own edits of the issue files), then `approve` or `reject`;
    `close` ends the Queen's session, `settle` what an unfinished plan leaves behind."""

    def __init__(self, project: Project, queen: Queen, warning: str | None) -> None:
        self.project = project
        self.queen = queen
        self.slug = queen.slug
        self.warning = warning            # the Queen runs, but unjailed
        self.transcript: Path = queen.transcript        # her session, as it happens
        self.directory: Path = queen.directory          # the plan branch's worktree she writes in

    @classmethod
    def open(cls, spec: str, path: Path | str | None = None, *, backend: str | None = None,
             log: Callable[[str], None] = print) -> PlanSession:
        """A conversation about `spec` in the repository at `path`, its Queen on `backend`
        (default: config `queen_backend`), checked before a plan branch exists that would need
        removing; `log` hears each round sent back to her."""
        project = Project.open(path)
        try:
            project.sync()
            config = project.config
            if backend:
                config = dataclasses.replace(config, queen_backend=backend)
            warning = require_agents(config, ("queen",))
            paths = project.paths
            agent = backend_for_role(config, "queen", str(paths.hive_dir), str(paths.main_worktree))
        except BaseException:
            project.close()
            raise
        return cls(project, Queen(project, agent, spec, slugify(spec), log=log), warning)

    async def propose(self, feedback: str | None = None) -> Proposal:
        """A round of planning: the spec (first) or a person's feedback on the plan, until it is
        valid (`HiveError` when her session fails or the plan is still not valid after
        `MAX_ROUNDS` rounds)."""
        message = f"Revise the plan in {self.directory}: {feedback}" if feedback is not None else None
        return self._valid(await self.queen.propose(message))

    def issue_files(self) -> list[Path]:
        """The plan's issue files, for a person to edit; `take_edits` afterwards."""
        return sorted((self.directory / "issues").glob("*.md"))

    def take_edits(self) -> Edits:
        """Validate a person's edits of the issue files: committed when valid, else the problems
        (`fix` has the Queen mend them)."""
        issues, problems = proposed_issues(self.project, self.slug, self.directory)
        if problems:
            return Edits(problems, None)
        commit_plan(self.project, self.slug, self.directory, self.queen.spec, issues, f"plan {self.slug}: edited by hand")
        return Edits([], Proposal(self.slug, issues, ascii_tree(issues)))

    async def fix(self, problems: list[str]) -> Proposal:
        """Have the Queen mend what a person's edits left invalid."""
        return self._valid(await self.queen.propose("A person edited the plan and left these problems; fix them:\n"
                                                    + "\n".join(problems)))

    def _valid(self, result: PlanResult) -> Proposal:
        if not result.ok and result.session_failed:
            raise HiveError(f"the Queen's session failed: {result.session_failed}")
        if not result.ok:
            raise HiveError(f"the plan is not valid after {MAX_ROUNDS} rounds: {result.errors[0]}")
        return Proposal(self.slug, result.issues, ascii_tree(result.issues))

    async def close(self, abort: bool = False) -> None:
        """End the Queen's session (`abort`, an interruption: her processes at once)."""
        await self.queen.close(abort=abort)

    def approve(self) -> Approved:
        """Merge the plan into `hive/state`; its worktree goes."""
        return _approve(self.project, self.slug)

    def reject(self) -> None:
        """Delete the plan: its branch, worktree and the Queen's transcripts."""
        reject(self.project, self.slug)

    def settle(self, keep: bool) -> str:
        """Settle the branch of a plan that was not approved; what was left behind, said."""
        if has_valid_plan(self.project, self.slug):
            return (f"the valid plan is kept on hive/plan/{self.slug}: `git hive approve {self.slug}` or "
                    f"`git hive plans rm {self.slug}`")
        if keep:
            return f"branch hive/plan/{self.slug} and the Queen's files in {self.directory} kept (--keep)"
        reject(self.project, self.slug)
        return f"nothing kept: hive/plan/{self.slug} and its worktree removed (--keep keeps them)"


def approve(name: str, path: Path | str | None = None) -> Approved:
    """Merge the plan branch `hive/plan/<name>` into `hive/state` (with hive's merge rules, even
    if `hive/state` moved meanwhile) and remove its worktree."""
    with closing(Project.open(path)) as project:
        project.sync()
        return _approve(project, name.removeprefix("hive/plan/"))


def _approve(project: Project, name: str) -> Approved:
    commit, warnings = merge_plan(project, name)
    remove_plan_worktree(project, name)
    return Approved(name, commit, warnings)


def plans(path: Path | str | None = None) -> list[Plan]:
    """The plan branches, by name."""
    with closing(Project.open(path)) as project:
        return [Plan(p.name, p.issues, p.status, p.commit) for p in list_plans(project)]


def remove(name: str, path: Path | str | None = None) -> Removed:
    """Remove a plan: its branch and worktree (a proposed plan's issues never reach hive/state;
    an approved plan's stay there)."""
    name = name.removeprefix("hive/plan/")
    with closing(Project.open(path)) as project:
        if project.store.repo.references.get(plan_ref(name)) is None:
            raise BadInput(f"no plan named {name!r} (see `git hive plans`)")
        status = next((p.status for p in list_plans(project) if p.name == name), "")
        reject(project, name)
        return Removed(name, status)


def prune(path: Path | str | None = None) -> list[str]:
    """Remove what plans left behind (approved and empty plans, stale worktree registrations,
    folders whose branch is gone); proposed plans stay. One line per removal."""
    with closing(Project.open(path)) as project:
        return prune_plans(project)
