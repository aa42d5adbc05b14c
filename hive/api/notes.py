"""Notes through the API, the reading side: listing them, what they did, which to archive and why
(`git hive notes`, `notes --effect`, what `notes prune` chooses). It loads no part of the write path
(`git hive notes` is a read); `Hive` adds, archives and restores them (`note`, `prune_notes`,
`restore_notes`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hive.agents import note_effect
from hive.agents.note_effect import Effect, Group
from hive.errors import BadInput
from hive.project import Project
from hive.runtime import Runtime
from hive.runtime.attempt_log import Attempt

__all__ = ["CATEGORIES", "Effect", "Effects", "Group", "NotesPruned", "archivable", "effects", "listed"]

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


def listed(project: Project, issue_id: str = "", archived: bool = False) -> list[dict[str, Any]]:
    """The notes (of one issue: its full id), oldest first, with the fields `notes --json` prints
    (each row narrowed where it stands: a big notes file is not held twice)."""
    found = project.index.notes(issue=issue_id or None, archived=archived)
    for n, row in enumerate(found):
        found[n] = {k: row[k] for k in LISTED}
    return found


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


def archivable(project: Project, unused_days: float | None = None, harmful: bool = False,
               min_count: int = note_effect.MIN_COUNT) -> list[dict[str, str]]:
    """The live notes `notes prune` would archive, and why: those no attempt received in
    `unused_days` days (and written before then) and/or those whose attempts did worse than
    comparable ones (`harmful`, with at least `min_count` attempts on each side). Each: key, why,
    category, issue, content."""
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
    return [{"key": k, "why": why[k], **{f: live[k][f] for f in ("category", "issue", "content")}} for k in sorted(why)]
