"""`Hive`: one repository's queue as a library (the docstring of `hive.api` says how to use it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from hive import cost as spending
from hive import issues, lifecycle, report
from hive.backends.base import Usage
from hive.cost import GROUPS as COST_GROUPS
from hive.cost import Report as CostReport
from hive.cost import describe as describe_usage
from hive.agents.note_effect import MIN_COUNT
from hive.api import detail as issue_detail, logs, moves, notes as note_api, prompt as issue_prompt, touching, waits
from hive.api import issues as issue_api
from hive.api.attention import Attention, attention
from hive.api.detail import Detail
from hive.api.history import History, history
from hive.api.issues import Editing
from hive.api.logs import entries as transcript_entries
from hive.api.logs import follow_file
from hive.api.logs import lines as log_lines
from hive.api.notes import CATEGORIES as NOTE_CATEGORIES
from hive.api.notes import Effect, Effects as NoteEffects, Group, NotesPruned
from hive.api.prompt import PromptPreview
from hive.errors import BadInput, HiveError
from hive.initialize import initialize
from hive.remote import Remote, SyncReport
from hive.merge import mechanical
from hive.merge.lander import Lander, done_base
from hive.project import Project
from hive.runtime import DaemonLock, Runtime
from hive.runtime import watch as runtime_watch
from hive.state import layout, trust
from hive.state.index import Problem
from hive.state.issue_file import TERMINAL_STATUSES, Issue
from hive.state.store import notify
from hive.state.watch import wakeups
from hive.workspace import retention, worktrees

__all__ = ["COST_GROUPS", "CostReport", "Effect", "Finalized", "Group", "Hive", "MIN_COUNT", "NOTE_CATEGORIES",
           "NoteEffects", "NotesPruned", "Pruned", "Review", "StatusWatch", "Synced", "Told", "Usage",
           "describe_usage", "follow_file", "log_lines", "transcript_entries"]


@dataclass(frozen=True)
class Told:
    issue_id: str
    now: bool           # a running agent gets it now; else it goes in the issue's next prompt


@dataclass(frozen=True)
class Review:
    """A done issue waiting to be merged by hand, and what its branch changes against the target."""
    id: str
    title: str
    branch: str | None          # None: the work branch is gone
    commits: int
    files: int
    insertions: int
    deletions: int
    inspect: str                # the command that shows the diff ("" without a branch)
    merge: str                  # the command that lands it


@dataclass(frozen=True)
class Synced:
    """What `sync()` exchanged with a remote (`report`: `remote.SyncReport`, as `sync --json` prints it)."""
    remote: str
    report: SyncReport
    pruned: list[str]            # the remote's work branches of finished issues deleted (prune=True)
    pushed_target: bool          # the target branch was pushed (push_target=True)
    target: str
    unpushed: int                # commits of the target the remote lacks (< 0: the two have diverged)


@dataclass(frozen=True)
class Pruned:
    attempts: list[tuple[str, str]]     # (ref, commit) of each kept attempt removed
    transcripts: list[str]              # the transcript files removed


@dataclass(frozen=True)
class Finalized:
    issue_id: str
    target: str
    commit: str                 # the target's commit that holds the work


class StatusWatch:
    """`status()` on a runtime handle held open, and the changes that call for a new one."""

    def __init__(self, project: Project):
        self.project = project
        self.runtime = Runtime(project.paths)

    def status(self) -> dict[str, Any]:
        return report.collect(self.project, self.runtime)

    def changes(self, timeout_ms: int) -> Iterator[bool]:
        """True after each change of the state or of runtime.db; False after `timeout_ms` without any."""
        return runtime_watch.changes(self.project.paths, timeout_ms=timeout_ms)

    def close(self) -> None:
        self.runtime.close()

    def __enter__(self) -> StatusWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Hive:
    """One repository's hive (`git hive init` must have run there)."""

    def __init__(self, project: Project):
        self.project = project

    @classmethod
    def open(cls, path: Path | str | None = None, *, sync: bool = True, warn: bool = False) -> Hive:
        """The hive of the repository at `path` (default: the current directory), caught up with
        the person's saved edits in `.hive/` and the branch, as every command starts (`sync=False`:
        not yet; `status()` catches up itself; `warn`: the invalid files found said on stderr)."""
        project = Project.open(path)
        if sync:
            project.sync(warn=warn)
        return cls(project)

    @property
    def checkout(self) -> Path:
        """`.hive/`: the editable checkout of `hive/state`."""
        return self.project.paths.state_checkout

    def close(self) -> None:
        self.project.close()

    def __enter__(self) -> Hive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------
    def issue(self, issue_id: str) -> Issue:
        """One issue, by id or unique prefix (`hv-1a` for `hv-1a2b3c`)."""
        found = self.project.index.get(self.resolve(issue_id))
        if found is None:
            raise HiveError(f"no issue {issue_id}")
        return found

    def issues(self, status: str | Iterable[str] | None = None, parent: str | None = None) -> list[Issue]:
        """Every issue (or those of `status`, or the children of `parent`), as `git hive list`."""
        statuses = [status] if isinstance(status, str) else status
        return self.project.index.list(statuses, parent=parent)

    def ready(self) -> list[Issue]:
        """The issues an agent would take next, in the order it would take them."""
        return self.project.index.ready()

    def problems(self) -> list[Problem]:
        """The files on `hive/state` that are not valid (file:line and why), as `doctor` lists them."""
        return self.project.index.problems()

    def state_tip(self) -> str:
        """The commit `hive/state` points at ("" before the first)."""
        return self.project.store.tip() or ""

    def resolve(self, issue_id: str) -> str:
        """The id of an exact id or a unique prefix of one."""
        return issue_api.resolve(self.project, issue_id)

    def status(self) -> dict[str, Any]:
        """Everything `git hive status` shows, as `status --json` prints it (hive/report.py)."""
        return report.collect(self.project)

    def cost(self, by: str = "issue") -> CostReport:
        """Tokens and USD spent, one row per issue, role, model or day (`COST_GROUPS`): the usage
        records on `hive/state` plus the sessions still running, as `git hive cost`."""
        config = self.project.config
        return spending.report(self.project.paths, by, {role: config.model_for(role) for role in ("worker", "refinery")})

    def watching(self) -> StatusWatch:
        """`status()` again and again, on one runtime handle (`git hive status --watch`)."""
        return StatusWatch(self.project)

    def detail(self, issue_id: str) -> Detail:
        """The issue with its description, its file and the issues that wait for it (`git hive show`)."""
        return issue_detail.detail(self.project, issue_id)

    def attention(self, issue: Issue) -> Attention | None:
        """Why an escalated or failed issue needs a person and the commands that go on; else None."""
        return attention(self.project, issue)

    def merge_waits(self, issue: Issue) -> str:
        """Why this machine's merge of a done issue waits, or ""."""
        return waits.merge_waits(self.project, issue)

    def touch_waits(self, ready: list[Issue]) -> dict[str, str]:
        """Why each of these ready issues waits for files another's work changes (`list --ready`)."""
        return touching.touch_waits(self.project, ready)

    def history(self, issue_id: str) -> History:
        """`git hive log`: the commits of `hive/state` that touched the issue, then its kept attempts."""
        return history(self.project, issue_id)

    def prompt(self, issue_id: str) -> PromptPreview:
        """What a worker would be given for a first attempt at the issue (`git hive show --prompt`)."""
        return issue_prompt.preview(self.project, issue_id)

    # -- writing (`hive.api.issues`, `moves`) --------------------------------------------------------------
    def create(self, title: str, **fields: Any) -> Issue:
        """A new open issue. `fields`: description, priority, type, parent, depends_on, labels, touches."""
        return issue_api.create(self.project, title, **fields)

    def update(self, issue_id: str, *, add_labels: Iterable[str] = (), remove_labels: Iterable[str] = (),
               description: str | None = None, force: bool = False, **fields: Any) -> Issue:
        """Change fields of an issue as a person does (`git hive update`): a status change that
        would strand it is refused unless `force=True`; set done, its merge pipeline may take it."""
        return moves.update(self.project, issue_id, fields, add_labels=add_labels, remove_labels=remove_labels,
                                description=description, force=force)

    def depend(self, issue_id: str, blocker: str) -> Issue:
        """`issue_id` waits for `blocker` (refused where it would make a cycle)."""
        return issue_api.depend(self.project, issue_id, blocker)

    def undepend(self, issue_id: str, blocker: str) -> Issue:
        return issue_api.undepend(self.project, issue_id, blocker)

    def cancel(self, issue_id: str) -> Issue:
        """Cancel an issue; a daemon working it stops its agent."""
        return moves.cancel(self.project, issue_id)

    def retry(self, issue_id: str) -> Issue:
        """An escalated, failed or canceled issue back in the queue, with a fresh budget."""
        return moves.retry(self.project, issue_id)

    def start_edit(self, issue_id: str) -> Editing:
        """The issue's file in `.hive/` for a person's editor (`git hive edit`); `finish_edit` commits it."""
        return issue_api.start_edit(self.project, issue_id)

    def finish_edit(self, editing: Editing) -> BadInput | None:
        """Commit the saved file: None once on `hive/state`, else its first problem, the file left as written."""
        return issue_api.finish_edit(self.project, editing)

    # -- logs ------------------------------------------------------------------------------------
    def transcripts(self, issue_id: str) -> list[Path]:
        """The transcripts of every session that worked the issue, in order (their entries:
        `transcript_entries(path)`)."""
        return logs.transcripts(self.project, self.resolve(issue_id))

    def follow_transcripts(self, issue_id: str, sessions_ended: Callable[[], bool]) -> Iterator[list[Path]]:
        """The issue's transcripts now and after each change, until it is finished with and
        `sessions_ended()` (or no daemon runs to end them): `git hive logs ID -f`."""
        return logs.follow_issue(self.project, self.resolve(issue_id), sessions_ended)

    @property
    def daemon_log(self) -> Path:
        """The daemon's log (`git hive logs`; its lines: `log_lines(path)`, followed: `follow_file`)."""
        return self.project.paths.daemon_log

    # -- notes -----------------------------------------------------------------------------------
    def note(self, text: str, category: str = "context", issue_id: str = "") -> str:
        """A note later agents get in their prompts: the project's, or `issue_id`'s (returned, "" for
        the project's). `category`: one of `NOTE_CATEGORIES`."""
        if not text.strip():
            raise BadInput("the note is empty")
        if category not in NOTE_CATEGORIES:
            raise BadInput(f"bad category {category!r} (one of: {', '.join(NOTE_CATEGORIES)})")
        issue_id = self.resolve(issue_id) if issue_id else ""
        file_id = issue_id or issues.PROJECT_NOTES
        if issues.add_notes(self.project, [issues.note_line(text, category, issue=issue_id)], file_id=file_id):
            raise BadInput(f"no room for the note in {layout.notes_path(file_id)}: {trust.NOTES_BOUNDS} "
                           "(remove notes no one needs from .hive/notes/)")
        return issue_id

    def notes(self, issue_id: str = "", archived: bool = False) -> list[dict[str, Any]]:
        """The notes (of one issue; the archived ones), oldest first: category, content, issue,
        agent, at, attempt, tokens, key (`hive.api.notes.listed` without a `Hive`)."""
        return note_api.listed(self.project, self.resolve(issue_id) if issue_id else "", archived)

    def note_effects(self) -> NoteEffects:
        """What notes did on this machine: the outcomes of attempts that received each note (and
        category) against comparable ones that did not (`git hive notes --effect`)."""
        return note_api.effects(self.project)

    def prune_notes(self, unused_days: float | None = None, harmful: bool = False,
                    min_count: int = MIN_COUNT, dry_run: bool = False) -> NotesPruned:
        """Archive unused and/or harmful notes (`hive.api.notes.archivable` says which and why) to
        `notes/archive/`, one state commit per reason (`git hive notes prune`)."""
        chosen = note_api.archivable(self.project, unused_days, harmful, min_count)
        moved = 0 if dry_run else sum(
            issues.archive_notes(self.project, {n["key"]: n["issue"] for n in chosen if n["why"] == reason}, reason)
            for reason in sorted({n["why"] for n in chosen}))
        return NotesPruned(moved, dry_run, chosen)

    def restore_notes(self, keys: Iterable[str]) -> int:
        """Bring archived notes back by key; how many moved."""
        keys = list(keys)
        archived = {n["key"]: n for n in self.project.index.notes(archived=True)}
        unknown = [k for k in keys if k not in archived]
        if unknown:
            raise BadInput(f"no archived note {unknown[0]} (see git hive notes --archived)")
        return issues.restore_notes(self.project, {k: archived[k]["issue"] for k in keys})

    # -- upkeep ----------------------------------------------------------------------------------
    @staticmethod
    def init(path: Path | str | None = None) -> list[str]:
        """Set the repository at `path` up for hive (`git hive init`): what it did, [] when nothing
        was left to do (it is safe to run again)."""
        return initialize(Path(path) if path is not None else None)

    def prune(self, older_than_days: float | None = None) -> Pruned:
        """Remove kept attempts and session transcripts past their retention (`attempt_retention_days`,
        `transcript_retention_days` and `transcript_max_mb`, or `older_than_days` for both); never
        the transcripts of an issue in progress (`git hive prune`)."""
        config, paths = self.project.config, self.project.paths
        busy = {issue.id for issue in self.project.index.list(["in_progress"])}   # a session may be writing
        pruned = retention.prune(worktrees.open_repo(paths), paths.hive_dir,
                                 config.attempt_retention_days if older_than_days is None else older_than_days,
                                 config.transcript_retention_days if older_than_days is None else older_than_days,
                                 config.transcript_max_mb * retention.MB, busy)
        return Pruned([(a.ref, a.commit) for a in pruned.attempts], [str(p) for p in pruned.transcripts])

    def sync(self, remote: str | None = None, *, prune: bool = False, push_target: bool = False,
             log: Callable[[str], None] = lambda _: None) -> Synced:
        """Fetch `hive/state` from `remote` (default: `sync_remote`, else origin), merge it with the
        hive rules and push it, retried when someone pushed meanwhile (`git hive sync`); `log` hears
        what git does. An unreachable remote is `report.offline`: nothing exchanged, nothing lost."""
        shared = self._remote(remote, log)
        report = shared.sync()
        pruned = shared.prune_work_branches() if prune and not report.offline else []
        target, unpushed = self.project.config.target_branch, 0
        if push_target and not report.offline:
            pushed = shared.push_branch(target)
            if not pushed.ok:
                raise HiveError(f"could not push {target} to {shared.name}: {pushed.message}")
        elif not report.offline and shared.fetch(target):
            unpushed = shared.unpushed(target)
        return Synced(shared.name, report, pruned, push_target and not report.offline, target, unpushed)

    def reset_remote(self, remote: str | None = None, *,
                     log: Callable[[str], None] = lambda _: None) -> tuple[str, list[str]]:
        """Replace a `hive/state` this machine refused on `remote` with this machine's: (the remote's
        name, what the replaced one held that this one drops, one line each)."""
        shared = self._remote(remote, log)
        return shared.name, shared.reset()

    def _remote(self, remote: str | None, log: Callable[[str], None]) -> Remote:
        shared = Remote(self.project, remote or self.project.config.sync_remote or "origin")
        shared.log = log
        return shared

    def watch(self, committed: Callable[[str], None], refused: Callable[[str], None],
              tick_ms: int = 1000) -> None:
        """Commit valid edits saved in `.hive/` as they happen (`git hive watch`), telling
        `committed` each file committed and `refused` each problem of one that is not; returns
        on KeyboardInterrupt. `tick_ms`: the safety net's period, not the hot path."""
        project = self.project

        async def loop() -> None:
            first = True
            # the first wakeup (a tick or an event) comes once the watcher is live, and then sweeps
            # up what was saved while it started
            async for wake in wakeups(project, timeout_ms=tick_ms):
                if wake.checkout_paths or first:
                    result = project.absorb(full=first, only=None if first else wake.checkout_paths)
                    first = False
                    for path in result.committed:
                        committed(path)
                    for problem in result.problems:
                        refused(str(problem))
                project.checkout.refresh()
                project.update_index()

        try:
            asyncio.run(loop())
        except KeyboardInterrupt:
            return

    # -- the merge step by hand (`merge_mode = "manual"`) --------------------------------------
    def reviews(self) -> list[Review]:
        """The done issues waiting to be merged, as `git hive review` lists them."""
        target = self.project.config.target_branch
        found = []
        for issue in self.project.index.list(["done"]):
            stat = mechanical.diffstat(self.project.paths, issue.id, target)
            branch = worktrees.branch_name(issue.id) if stat is not None else None
            commits, files, insertions, deletions = stat or (0, 0, 0, 0)
            found.append(Review(issue.id, issue.title, branch, commits, files, insertions, deletions,
                                f"git diff {target}...{branch}" if branch else "", f"git hive finalize {issue.id}"))
        return found

    def finalize(self, issue_id: str) -> Finalized:
        """Land a done issue's branch on the target as the pipeline does — replayed from the base
        its worker started from, gated by its agent's test command and `test_command`, jailed —
        and finalize it. What a person committed in its worktree is what lands."""
        project, config = self.project, self.project.config
        issue = self.issue(issue_id)
        if issue.status != "done":
            raise HiveError(f"{issue.id} is {issue.status}: only done issues can be finalized")
        head = worktrees.follow_worktree(project.paths, issue.id)
        if head is None:
            raise HiveError(f"{issue.id} has no branch {worktrees.branch_name(issue.id)} to merge")
        if not worktrees.worktree_path(project.paths, issue.id).exists():
            worktrees.recreate(project.paths, issue.id)
        runtime = Runtime(project.paths)
        try:
            lander = Lander(project)
            landing = lander.land(lander.plan(issue, head, done_base(project, issue.id),
                                              runtime.handoffs().get(issue.id, ""), by_person=True))
            if landing.status != "merged":
                raise HiveError(f"{issue.id} not merged ({landing.status}): "
                                f"{landing.detail.splitlines()[0] if landing.detail else ''}")
            lifecycle.finalize(project, runtime, issue.id, landing.commit, config.target_branch)
        finally:
            runtime.close()
        worktrees.retire(project.paths, issue.id, config.target_branch, keep_uncommitted=False)
        return Finalized(issue.id, config.target_branch, landing.commit)

    def tell(self, issue_id: str, text: str) -> Told:
        """A message to the agent working the issue: now, or in its next attempt's prompt."""
        if not text.strip():
            raise BadInput("the message is empty")
        issue = self.issue(issue_id)
        if issue.status in TERMINAL_STATUSES:   # no agent will work these again
            raise HiveError(f"{issue.id} is {issue.status}: no agent will work it again")
        runtime = Runtime(self.project.paths)
        try:
            runtime.tell(issue.id, text)
            working = bool(DaemonLock(self.project.paths).holder()) and any(
                a["issue_id"] == issue.id and a["session_id"] for a in runtime.agents())
        finally:
            runtime.close()
        notify(self.project.paths)                 # wakes a running daemon
        return Told(issue.id, working)
