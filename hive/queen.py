"""The Queen: a planning session that turns a spec into issues, proposed on a plan branch.

`git hive plan` forks `hive/plan/<slug>` from `hive/state` and checks it out at
`<git-common-dir>/hive/plans/<slug>`. A Queen session (backend and model per config) explores the
repository read-only and writes proposed issue files there. hive validates them — format, ids,
references to existing or proposed issues, no cycles — and sends errors back with file:line for a
bounded number of rounds. A valid plan is committed on the branch with a `PLAN.md` (spec, table,
Mermaid graph) so that a pull request of the branch reads well; approving merges it into
`hive/state` with the hive merge rules, leaving `PLAN.md` out of the state.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pygit2

from hive import git, lines
from hive.agents.jails import queen_jail
from hive.agents.session import AgentSession, Grant, SessionLost
from hive.backends.base import Backend, SessionSpec, TurnResult
from hive.backends.transcripts import new_transcript, plan_folder
from hive.errors import BadInput, HiveError
from hive.project import Project
from hive.prompts import load, material, render
from hive.state import issue_file, layout, trust, validate
from hive.state.issue_file import Issue
from hive.state.store import Change, Refused, Snapshot
from hive.state.trees import walk_changes
from hive.workspace import rewrite

PLAN_FILE = "PLAN.md"
MAX_ROUNDS = 3

QUEEN_SYSTEM_PROMPT = load("queen-system")


@dataclass
class PlanResult:
    ok: bool
    issues: list[Issue] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    commit: str = ""
    session_failed: str = ""    # the Queen's session itself failed (not the plan's content)


def slugify(spec: str) -> str:
    words = re.findall(r"[a-z0-9]+", spec.lower())
    slug = "-".join(words)[:40].strip("-") or "plan"
    return f"{slug}-{secrets.token_hex(2)}"


def plan_ref(slug: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,60}", slug):
        raise BadInput(f"not a valid plan name: {slug!r}")
    return f"{git.PLAN_REF_PREFIX}{slug}"


def plan_dir(project: Project, slug: str) -> Path:
    return project.paths.hive_dir / "plans" / slug


def worktree_name(slug: str) -> str:
    return f"plan-{slug}"


# -- the plan branch ---------------------------------------------------------------------------

def create_plan_branch(project: Project, slug: str) -> Path:
    tip = project.store.tip()
    if tip is None:
        raise HiveError("no hive/state yet: run `git hive init`")
    plan = project.store.on_ref(plan_ref(slug))
    if plan.tip() is None:
        plan.adopt(tip, f"hive: plan {slug}")
    return ensure_plan_worktree(project, slug)


def ensure_plan_worktree(project: Project, slug: str) -> Path:
    repo = project.store.repo
    path = plan_dir(project, slug)
    if (path / ".git").exists():
        return path
    # the branch may have come from a remote: checked before libgit2 checks it out (symlinks...)
    check_plan_tip(project, str(repo.references[plan_ref(slug)].target), slug)
    name = worktree_name(slug)
    if name in repo.list_worktrees():
        repo.lookup_worktree(name).prune(True)
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.add_worktree(name, str(path), repo.references[plan_ref(slug)])
    return path


def remove_plan_worktree(project: Project, slug: str) -> None:
    repo = project.store.repo
    path = plan_dir(project, slug)
    shutil.rmtree(path, ignore_errors=True)
    name = worktree_name(slug)
    if name in repo.list_worktrees():
        repo.lookup_worktree(name).prune(True)


def check_plan_tip(project: Project, tip: str, slug: str) -> None:
    """Raise trust.Untrusted unless the plan branch's tree keeps the rules of a fetched state."""
    trust.check_commit(project.store.repo, tip, project.index.indexed_commit or None,
                       source=plan_ref(slug).removeprefix("refs/heads/"))


def read_plan_file(directory: Path, rel: str) -> bytes | None:
    """A file of the plan directory: a regular file, reached through real folders only (the
    Queen writes there, and its session may still run: a link must never make hive read, or
    commit, a file outside, nor a FIFO block it). None when it or a folder on its way is missing
    or not a folder."""
    *folders, name = rel.split("/")
    at = _open_folder(directory, folders)
    if at is None:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
    except FileNotFoundError:
        return None
    except OSError:
        raise BadInput(_NOT_REGULAR, rel) from None      # a link (ELOOP), a socket (ENXIO)
    finally:
        os.close(at)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(_NOT_REGULAR, rel)
        os.set_blocking(fd, True)
        return handle.read(trust.MAX_CONTEXT_BYTES + 1)


def write_plan_file(directory: Path, rel: str, text: str) -> None:
    """Write a plan directory's file in place of whatever is there (a link is replaced, never
    followed), through real folders only."""
    *folders, name = rel.split("/")
    at = _open_folder(directory, folders)
    if at is None:
        raise BadInput("only regular files may be in a plan (its folders are real folders)", rel)
    tmp = f".hive-tmp-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=at)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, name, src_dir_fd=at, dst_dir_fd=at)
    finally:
        os.close(at)


def _open_folder(directory: Path, folders: list[str]) -> int | None:
    """The plan directory's folder `folders` opened, each step without following a link (so that
    nothing the Queen swaps in after a check is followed); None when one is not a real folder."""
    try:
        return lines.open_folder(directory, folders)
    except OSError:
        return None


_NOT_REGULAR = "only regular files may be in a plan (no symlinks, folders or devices)"


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return 0


def _plan_issue_files(directory: Path) -> list[str]:
    issues_dir = directory / layout.ISSUES_DIR
    if not stat.S_ISDIR(_lstat_mode(issues_dir)):
        return []
    return sorted(f"{layout.ISSUES_DIR}/{f.name}" for f in issues_dir.glob("*.md"))


def proposed_issues(project: Project, slug: str, directory: Path) -> tuple[list[Issue], list[str]]:
    """The issue files the plan directory adds or changes, parsed and validated together."""
    files = {}
    for rel in _plan_issue_files(directory):
        data = read_plan_file(directory, rel)
        if data is not None:
            files[rel] = data
    return check_plan(project, files)


def check_plan(project: Project, files: dict[str, bytes]) -> tuple[list[Issue], list[str]]:
    """Validate proposed issue files (path → content) against the state and each other:
    format, ids, references to existing or proposed issues, no cycle. Errors name file:line."""
    base = project.store.snapshot()
    errors: list[str] = []
    found: dict[str, Issue] = {}
    texts: dict[str, str] = {}
    for rel, data in sorted(files.items()):
        if base.read(rel) == data:
            continue
        issue_id = rel.rsplit("/", 1)[-1][:-3]
        try:
            issue = issue_file.parse(data, issue_id, rel)
        except BadInput as exc:
            errors.append(str(exc))
            continue
        if base.issue_path(issue.id) is None and (issue.status != "open" or issue.assignee):
            errors.append(f"{rel}:1: a proposed issue must be open and unassigned")
            continue
        found[issue.id] = issue
        texts[issue.id] = data.decode("utf-8", "replace")
    project.update_index()

    def exists(issue_id: str) -> bool:
        return issue_id in found or project.index.exists(issue_id)

    def blockers_of(issue_id: str) -> list[str]:
        return found[issue_id].depends_on if issue_id in found else project.index.blockers_of(issue_id)

    def where(issue_id: str, key: str) -> str:
        return f"{layout.ISSUES_DIR}/{issue_id}.md:{_key_line(texts.get(issue_id, ''), key)}"

    for issue in found.values():
        try:
            validate.check_references(issue.id, issue.depends_on, "", exists, where(issue.id, "depends_on"))
            validate.check_references(issue.id, [], issue.parent, exists, where(issue.id, "parent"))
        except BadInput as exc:
            errors.append(str(exc))
    if not errors:
        cycle = validate.find_cycle(found, blockers_of)
        if cycle:
            errors.append(f"{where(cycle[0], 'depends_on')}: dependency cycle: {' -> '.join(cycle)}")
    return sorted(found.values(), key=lambda i: (i.priority, i.id)), errors


def _key_line(text: str, key: str) -> int:
    """The line of `key = ...` in an issue file's front matter (1 if not found), for errors."""
    for number, line in enumerate(text.splitlines(), 1):
        if number > 1 and line.strip() == "+++":
            break
        if re.match(rf"\s*{key}\s*=", line):
            return number
    return 1


def render_plan(spec: str, issues: list[Issue]) -> str:
    """PLAN.md: the spec, a table of the proposed issues, the dependency graph in Mermaid."""
    lines = ["# Plan", "", "## Spec", "", spec.strip(), "", "## Issues", "",
             "| id | title | type | priority | depends on | parent | touches |",
             "|---|---|---|---|---|---|---|"]
    for issue in issues:
        title = issue.title.replace("|", "\\|")
        touches = ", ".join(f"`{glob}`" for glob in issue.touches).replace("|", "\\|") or "-"
        lines.append(f"| {issue.id} | {title} | {issue.type} | {issue.priority} | "
                     f"{', '.join(issue.depends_on) or '-'} | {issue.parent or '-'} | {touches} |")
    lines += ["", "## Dependency graph", "", "```mermaid", "graph TD"]
    for issue in issues:
        label = issue.title.replace('"', "'")
        lines.append(f'    {_mermaid_id(issue.id)}["{issue.id}: {label}"]')
    for issue in issues:
        for blocker in issue.depends_on:
            lines.append(f"    {_mermaid_id(blocker)} --> {_mermaid_id(issue.id)}")
        if issue.parent:
            lines.append(f"    {_mermaid_id(issue.parent)} -.- {_mermaid_id(issue.id)}")
    lines += ["```", "", "Arrows point from a blocker to the issue that waits for it; dotted lines join "
              "an epic to its issues.", ""]
    return "\n".join(lines)


def _mermaid_id(issue_id: str) -> str:
    return issue_id.replace("-", "_")


def ascii_tree(issues: list[Issue]) -> str:
    """The plan's DAG as a tree: blockers first, dependents below them."""
    ids = {i.id for i in issues}
    by_id = {i.id: i for i in issues}
    children: dict[str, list[str]] = {i.id: [] for i in issues}
    for issue in issues:
        for blocker in issue.depends_on:
            if blocker in ids:
                children[blocker].append(issue.id)
    roots = [i.id for i in issues if not any(b in ids for b in i.depends_on)]
    out: list[str] = []
    shown: set[str] = set()

    def visit(node: str, prefix: str, last: bool, top: bool) -> None:
        issue = by_id[node]
        branch = "" if top else ("└── " if last else "├── ")
        again = " (see above)" if node in shown else ""
        out.append(f"{prefix}{branch}{node}  {issue.title} [P{issue.priority} {issue.type}]{again}")
        if again:
            return
        shown.add(node)
        kids = sorted(children[node])
        for n, kid in enumerate(kids):
            visit(kid, prefix + ("" if top else ("    " if last else "│   ")), n == len(kids) - 1, False)

    for root in sorted(roots, key=lambda r: (by_id[r].priority, r)):
        visit(root, "", True, True)
    return "\n".join(out)


def commit_plan(project: Project, slug: str, directory: Path, spec: str, issues: list[Issue],
                message: str) -> str:
    """Commit the plan directory's files (and a fresh PLAN.md) on the plan branch."""
    ref = plan_ref(slug)
    stamp = issue_file.format_time(issue_file.now())
    for issue in issues:
        if not issue.created:  # the Queen need not write timestamps: the queue orders by them
            rel = layout.live_path(issue.id)
            text = (read_plan_file(directory, rel) or b"").decode("utf-8")
            write_plan_file(directory, rel, issue_file.update_text(text, {"created": stamp, "updated": stamp}, rel))
            issue.created = issue.updated = stamp
    write_plan_file(directory, PLAN_FILE, render_plan(spec, issues))
    plan = project.store.on_ref(ref)
    tip = plan.tip()
    wanted = {PLAN_FILE, layout.CONTEXT_FILE, *_plan_issue_files(directory)}

    def build(snap: Snapshot) -> Change | None:
        if snap.oid != tip:
            raise Refused(f"{ref} moved")
        files = _changed_files(directory, wanted, snap)
        if not files:
            return None
        return Change(files, summary=message, event="planned",
                      trailers={"Hive-Plan": slug, "Hive-Plan-Issues": str(len(issues))})

    try:
        new = plan.commit(build)
    except Refused:
        raise HiveError(f"{ref} moved while the plan was being committed; run the command again") from None
    if new is None:
        return str(tip)
    # the plan directory's files are the commit's already; the Queen's session may still write there
    rewrite.move_head(git.open_worktree(directory), new)
    return new


def _changed_files(directory: Path, wanted: set[str], snap: Snapshot) -> dict[str, bytes | None]:
    """The files of `wanted` whose bytes in `directory` differ from the snapshot's."""
    files: dict[str, bytes | None] = {}
    for rel in wanted:
        data = read_plan_file(directory, rel)
        if data != snap.read(rel):
            files[rel] = data
    return files


def approve(project: Project, slug: str) -> tuple[str | None, list[str]]:
    """Merge the plan into `hive/state` (hive merge rules; `PLAN.md` left out of the state)."""
    repo = project.store.repo
    ref = repo.references.get(plan_ref(slug))
    if ref is None:
        raise BadInput(f"no plan named {slug!r} (see `git hive plans`)")
    plan_tip = str(ref.target)
    if not _has_plan_commit(repo, plan_tip, slug):
        raise BadInput(f"plan {slug} is empty (the Queen committed no valid plan): nothing to approve; "
                       f"`git hive plans rm {slug}` removes it")
    project.update_index()
    check_plan_tip(project, plan_tip, slug)
    paths = _plan_issue_paths(repo, plan_tip, project.store.tip())
    tree = repo[plan_tip].peel(pygit2.Commit).tree
    # A plan branch may have been edited by hand (a pull request): check it like the Queen's work.
    files = {p: repo[tree[p].id].data for p in paths if p.count("/") == 1}
    _, errors = check_plan(project, files)
    if errors:
        raise BadInput(f"plan {slug} is not valid: {errors[0]}" +
                       (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    count = len(paths)
    change = Change({}, summary=f"approve plan {slug}: {count} issue(s)", event="plan-approved",
                    trailers={"Hive-Plan": slug})
    commit, warnings = project.store.merge(plan_tip, change, drop=(PLAN_FILE,))
    project.after_write()
    return commit, warnings


def _plan_issue_paths(repo: pygit2.Repository, plan_tip: str, state_tip: str | None) -> list[str]:
    base = repo.merge_base(plan_tip, state_tip) if state_tip else None
    base_tree = repo[base].peel(pygit2.Commit).tree if base else None
    return [p for p, _, new in walk_changes(repo, base_tree, repo[plan_tip].peel(pygit2.Commit).tree)
            if new and layout.issue_id_of(p)]


@dataclass
class PlanInfo:
    name: str
    issues: int
    status: str          # proposed | approved | empty (no valid plan was committed)
    commit: str


def list_plans(project: Project) -> list[PlanInfo]:
    repo = project.store.repo
    state_tip = project.store.tip()
    plans = []
    for name in sorted(repo.references):
        if not name.startswith(git.PLAN_REF_PREFIX):
            continue
        tip = str(repo.references[name].target)
        slug = name[len(git.PLAN_REF_PREFIX):]
        if not _has_plan_commit(repo, tip, slug):
            # the branch never got a valid plan (the Queen failed validation, or was interrupted):
            # it still points into hive/state's history, which must not read as "approved"
            plans.append(PlanInfo(slug, 0, "empty", tip))
            continue
        approved = state_tip is not None and (tip == state_tip or repo.descendant_of(state_tip, tip))
        recorded = _trailer(repo[tip].peel(pygit2.Commit).message, "Hive-Plan-Issues")
        count = int(recorded) if recorded.isdigit() else len(_plan_issue_paths(repo, tip, state_tip))
        plans.append(PlanInfo(slug, count, "approved" if approved else "proposed", tip))
    return plans


def _has_plan_commit(repo: pygit2.Repository, tip: str, slug: str, limit: int = 100) -> bool:
    """Whether the plan branch holds a plan commit of its own (`Hive-Plan: <slug>`), possibly
    under later commits (a person's edits on the pull request)."""
    commit = repo[tip].peel(pygit2.Commit)
    for _ in range(limit):
        if _trailer(commit.message, "Hive-Plan") == slug:
            return True
        if not commit.parents:
            return False
        commit = commit.parents[0]
    return False


def _trailer(message: str, key: str) -> str:
    for line in reversed(message.strip().splitlines()):
        if line.startswith(key + ": "):
            return line[len(key) + 2:].strip()
    return ""


def reject(project: Project, slug: str) -> None:
    remove_plan_worktree(project, slug)
    shutil.rmtree(plan_folder(project.paths.hive_dir, slug), ignore_errors=True)   # the Queen's transcripts
    ref = project.store.repo.references.get(plan_ref(slug))
    if ref is not None:
        ref.delete()


def has_valid_plan(project: Project, slug: str) -> bool:
    """Whether `hive/plan/<slug>` exists and holds a committed (validated) plan."""
    ref = project.store.repo.references.get(plan_ref(slug))
    return ref is not None and _has_plan_commit(project.store.repo, str(ref.target), slug)


def prune_plans(project: Project) -> list[str]:
    """Remove approved and empty plans (branch and worktree), then what is left of plans whose
    worktree or branch is gone; proposed plans stay. One line per removal."""
    removed = []
    for info in list_plans(project):
        if info.status in ("approved", "empty"):
            reject(project, info.name)
            removed.append(f"{info.name}: removed ({info.status})")
    repo = project.store.repo
    for name in repo.list_worktrees():
        if name.startswith("plan-") and not Path(repo.lookup_worktree(name).path).exists():
            repo.lookup_worktree(name).prune(True)
            removed.append(f"{name.removeprefix('plan-')}: stale worktree registration removed (its folder is gone)")
    plans_root = project.paths.hive_dir / "plans"
    branches = {p.name for p in list_plans(project)}
    for folder in sorted(plans_root.iterdir()) if plans_root.is_dir() else ():
        if folder.name not in branches:
            remove_plan_worktree(project, folder.name)
            removed.append(f"{folder.name}: folder removed (its branch is gone)")
    return removed


# -- the Queen session ---------------------------------------------------------------------------

class Queen:
    """One planning conversation: propose, validate, fix, revise."""

    def __init__(self, project: Project, backend: Backend, spec: str, slug: str,
                 log: Callable[[str], None] = print):
        self.project = project
        self.backend = backend
        self.spec = spec
        self.slug = slug
        self.log = log
        self.directory = plan_dir(project, slug)
        # the session's transcript (`git hive plan` shows it live)
        self.transcript = Path(new_transcript(plan_folder(project.paths.hive_dir, slug), "queen"))
        # it reads the repository and writes only its plan directory; no runtime.db: no daemon
        self.session = AgentSession(backend, None, Grant("queen", root=str(project.paths.main_worktree),
                                                         plan_root=str(self.directory)), log=log)

    @property
    def session_id(self) -> str:
        return self.session.id

    async def _ask(self, text: str) -> TurnResult:
        if not self.session_id:
            config = self.project.config
            spec = SessionSpec(role="queen", cwd=str(self.directory),
                               model=config.model_for("queen"), system_prompt=QUEEN_SYSTEM_PROMPT,
                               jail=queen_jail(config, self.project.paths, self.directory),
                               transcript=str(self.transcript))
            await self.session.open(spec)
        try:
            return await self.session.turn(text)
        except SessionLost as exc:
            return TurnResult(False, str(exc))

    def _first_prompt(self) -> str:
        snap = self.project.store.snapshot()
        context = (snap.read(layout.CONTEXT_FILE) or b"").decode("utf-8", "replace").strip()
        open_issues = self.project.index.list(["open", "in_progress", "done", "escalated"])
        listing = "\n".join(f"- {i.id} [{i.status}] {i.title}" + (f" (depends on {', '.join(i.depends_on)})"
                                                                  if i.depends_on else "")
                            for i in open_issues) or "(none)"
        prefix = self.project.config.id_prefix
        return render("queen-plan", spec=self.spec.strip(), worktree=self.directory,
                      repository=self.project.paths.main_worktree, prefix=prefix,
                      context=material(context or "(empty)", "context.md on hive/state"),
                      listing=material(listing, "the issues on hive/state"))

    def _followup(self, text: str) -> str:
        """A later turn (errors to fix, feedback): it names the plan directory on a line of its
        own, as the first prompt does, so the Queen (and scripted agents) find it in every turn."""
        line = f"worktree: {self.directory}"
        return text if line in text.splitlines() else f"{text.rstrip()}\n\n{line}\n"

    async def propose(self, message: str | None = None) -> PlanResult:
        """A round of planning (first call: the spec; later: feedback), validated and fixed."""
        create_plan_branch(self.project, self.slug)
        text = self._followup(message) if message else self._first_prompt()
        errors: list[str] = []
        for round_no in range(1, MAX_ROUNDS + 1):
            turn = await self._ask(text)
            if not turn.ok:
                return PlanResult(False, errors=[f"the Queen's session failed: {turn.error}"],
                                  session_failed=turn.error or "unknown error")
            issues, errors = proposed_issues(self.project, self.slug, self.directory)
            if not errors and not issues:
                errors = ["no issue files were written in the plan directory"]
            if not errors:
                commit = commit_plan(self.project, self.slug, self.directory, self.spec, issues,
                                     f"plan {self.slug}: {len(issues)} issue(s)")
                return PlanResult(True, issues, commit=commit)
            named = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
            self.log(f"plan round {round_no}: {len(errors)} problem(s), sent back to the Queen: {named}")
            text = self._followup(render("queen-fix", directory=self.directory,
                                         errors="\n".join(f"- {e}" for e in errors)))
        return PlanResult(False, errors=errors)

    async def close(self, abort: bool = False) -> None:
        """End the session; `abort` (an interruption) ends its process group at once."""
        await self.session.close(abort)
        try:
            await self.backend.stop()
        except Exception:  # noqa: BLE001
            pass

