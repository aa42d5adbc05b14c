"""What workers are told: hive's standing instructions and the prompt for one issue."""

from __future__ import annotations

from typing import Any, Iterable

from hive.agents.protocol import NOTES_FILE, RESULT_FILE
from hive.prompts import render
from hive.state.issue_file import Issue

WORKER_SYSTEM_PROMPT = render("worker-system", notes_file=NOTES_FILE, result_file=RESULT_FILE)

MAX_NOTES = 30


def _format_notes(notes: Iterable[dict[str, Any]]) -> list[str]:
    lines = []
    for note in notes:
        source = f" ({note['issue']})" if note.get("issue") else ""
        lines.append(f"- [{note.get('category', 'context')}]{source} {note['content']}")
    return lines


def worker_prompt(issue: Issue, *, context: str, epic: Issue | None, epic_notes: list[dict[str, Any]],
                  project_notes: list[dict[str, Any]], previous_failure: str = "",
                  combined_blockers: list[str] | None = None, skipped_blockers: list[str] | None = None) -> str:
    parts = [f"# Issue {issue.id}: {issue.title}", ""]
    meta = [f"type {issue.type}", f"priority {issue.priority}"]
    if issue.labels:
        meta.append("labels " + ", ".join(issue.labels))
    parts.append(" · ".join(meta))
    if issue.body.strip():
        parts += ["", issue.body.strip()]
    if epic is not None:
        parts += ["", f"## Part of epic {epic.id}: {epic.title}"]
        if epic.body.strip():
            parts += ["", epic.body.strip()]
    if combined_blockers:
        parts += ["", render("worker-blockers-combined", issues=", ".join(combined_blockers))]
    if skipped_blockers:
        parts += ["", render("worker-blockers-skipped", issues=", ".join(skipped_blockers))]
    if context.strip():
        parts += ["", "## Project context", "", context.strip()]
    seen: set[str] = set()
    notes = []
    for note in [*epic_notes, *project_notes]:
        key = note["content"]
        if key not in seen:
            seen.add(key)
            notes.append(note)
    if notes:
        parts += ["", "## Notes from other agents", *_format_notes(notes[-MAX_NOTES:])]
    if previous_failure:
        parts += ["", render("worker-previous-failure", failure=previous_failure.strip())]
    parts += ["", render("worker-done", result_file=RESULT_FILE)]
    return "\n".join(parts) + "\n"


def fyi_message(note: dict[str, Any]) -> str:
    return render("fyi", issue=note.get("issue", "?"), category=note.get("category"), content=note["content"])
