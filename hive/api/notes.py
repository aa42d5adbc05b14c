"""Notes through the API: adding one, listing them, what they did, archiving and restoring them
(`git hive note`, `notes`, `notes --effect`, `notes prune`, `notes restore`; `Hive` has each as a
method)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hive import issues
from hive.agents import note_effect
from hive.agents.note_effect import Effect, Group
from hive.errors import BadInput
from hive.project import Project
from hive.runtime import Runtime
from hive.runtime.attempt_log import Attempt

__all__ = ["Effect", "Effects", "Group", "NotesPruned", "add", "effects", "listed", "prune", "restore"]

CATEGORIES = ("discovery", "gotcha", "pattern", "dependency", "context")
LISTED = ("category", "content", "issue", "agent", "at", "attempt", "tokens", "key")


@dataclass(frozen=True)
class Effects:
    """`notes --effect`: this machine's ended attempts, per category and per note (`about`: its
    category, issue, content and whether it is archived; a note gone from `hive/state` says so)."""
    attempts: int
    min_count: int
    categories: dict[str, Effect]
    notes: list[tuple[str, dict[str, Any], Effect]]     # (key, about, effect)


@dataclass(frozen=True)
class NotesPruned:
    archived: int                  # how many moved to notes/archive/ (0 on a dry run)
    dry_run: bool
    notes: list[dict[str, str]]    # key, why, category, issue, content of each chosen


def add(project: Project, text: str, category: str = "context", issue_id: str = "") -> str:
    """A note for later agents' prompts (the project's, or `issue_id`'s); where it went."""
    if not text.strip():
        raise BadInput("the note is empty")
    if category not in CATEGORIES:
        raise BadInput(f"bad category {category!r} (one of: {', '.join(CATEGORIES)})")
    issue_id = issues.resolve_id(project, issue_id) if issue_id else ""
    issues.add_notes(project, [issues.note_line(text, category, issue=issue_id)],
                     file_id=issue_id or issues.PROJECT_NOTES)
    return issue_id


def listed(project: Project, issue_id: str = "", archived: bool = False) -> list[dict[str, Any]]:
    """The notes (of one issue), oldest first, with the fields `notes --json` prints."""
    found = project.index.notes(issue=issues.resolve_id(project, issue_id) if issue_id else None, archived=archived)
    return [{k: n[k] for k in LISTED} for n in found]


def _attempts(project: Project) -> tuple[list[Attempt], dict[str, float]]:
    """This machine's ended attempts and when each note was last received (none: no runtime.db)."""
    if not project.paths.runtime_db.exists():
        return [], {}
    runtime = Runtime(project.paths)
    try:
        return runtime.attempt_log.ended(), runtime.attempt_log.last_seen()
    finally:
        runtime.close()


def about(note: dict[str, Any] | None) -> dict[str, Any]:
    if note is None:
        return {"category": "?", "issue": "", "content": "(no longer on hive/state)", "archived": False}
    return {"category": note["category"], "issue": note["issue"], "content": note["content"],
            "archived": bool(note["archived"])}


def effects(project: Project) -> Effects:
    attempts, _ = _attempts(project)
    known = {n["key"]: n for n in [*project.index.notes(archived=True), *project.index.notes()]}
    return Effects(len(attempts), note_effect.MIN_COUNT, note_effect.by_category(attempts),
                   [(key, about(known.get(key)), e) for key, e in note_effect.by_note(attempts).items()])


def prune(project: Project, unused_days: float | None = None, harmful: bool = False,
          min_count: int = note_effect.MIN_COUNT, dry_run: bool = False) -> NotesPruned:
    """Archive the notes no attempt received in `unused_days` days (and written before then)
    and/or those whose attempts did worse than comparable ones (`harmful`, with at least
    `min_count` attempts on each side), to `notes/archive/` in one state commit per reason."""
    if unused_days is None and not harmful:
        raise BadInput("say what to prune: --unused DAYS and/or --harmful")
    attempts, last_seen = _attempts(project)
    live = {n["key"]: n for n in project.index.notes()}
    why: dict[str, str] = {}
    if unused_days is not None:
        for n in note_effect.unused(live.values(), last_seen, unused_days, time.time()):
            why[n["key"]] = f"unused for {unused_days:g} days"
    if harmful:
        for key in note_effect.harmful(note_effect.by_note(attempts), min_count):
            if key in live:
                why[key] = why.get(key, "") + ("; " if key in why else "") + f"harmful (min count {min_count})"
    moved = 0 if dry_run else sum(
        issues.archive_notes(project, {k: live[k]["issue"] for k in why if why[k] == reason}, reason)
        for reason in sorted(set(why.values())))
    rows = [{"key": k, "why": why[k], **{f: live[k][f] for f in ("category", "issue", "content")}} for k in sorted(why)]
    return NotesPruned(moved, dry_run, rows)


def restore(project: Project, keys: list[str]) -> int:
    """Archived notes (by key) back where they were; how many moved."""
    archived = {n["key"]: n for n in project.index.notes(archived=True)}
    unknown = [k for k in keys if k not in archived]
    if unknown:
        raise BadInput(f"no archived note {unknown[0]} (see git hive notes --archived)")
    return issues.restore_notes(project, {k: archived[k]["issue"] for k in keys})
