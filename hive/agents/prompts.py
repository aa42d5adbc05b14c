"""What workers are told: hive's standing instructions and the prompt for one issue."""

from __future__ import annotations

from typing import Any, Iterable

from hive.agents.protocol import NOTES_FILE, RESULT_FILE
from hive.prompts import material, render
from hive.state.issue_file import Issue

WORKER_SYSTEM_PROMPT = render("worker-system", notes_file=NOTES_FILE, result_file=RESULT_FILE)

def format_note(note: dict[str, Any]) -> str:
    """A note as its prompt line, naming its issue and agent; its own line breaks are indented,
    so no line of one can pass for another note or a heading."""
    where = ", ".join(f"{key} {_word(note[key])}" for key in ("issue", "agent") if note.get(key))
    category = _word(note.get("category") or "context")
    content = str(note["content"]).replace("\n", "\n    ")
    return f"- [{category}]" + (f" ({where})" if where else "") + f" {content}"


def _format_notes(notes: Iterable[dict[str, Any]]) -> str:
    """The notes as one block of material."""
    return material("\n".join(format_note(note) for note in notes),
                    "notes on hive/state, written by agents on any machine")


def _word(value: object) -> str:
    """An id, agent or category as a plain word (they come with the notes, from anyone)."""
    return "".join(ch for ch in str(value) if ch.isalnum() or ch in "-_.")[:40] or "?"


def one_line(text: str) -> str:
    """A title on one line: a line break in it (TOML allows `\\n`) cannot start a heading."""
    return " ".join(text.split())


def worker_prompt(issue: Issue, *, context: str, epic: Issue | None, notes: list[dict[str, Any]],
                  previous_failure: str = "",
                  combined_blockers: list[str] | None = None, skipped_blockers: list[str] | None = None,
                  told: list[str] | None = None) -> str:
    parts = [f"# Issue {issue.id}: {one_line(issue.title)}", ""]
    meta = [f"type {issue.type}", f"priority {issue.priority}"]
    if issue.labels:
        meta.append("labels " + ", ".join(issue.labels))
    parts.append(" · ".join(meta))
    if issue.body.strip():
        parts += ["", material(issue.body.strip(), f"issue {issue.id}: its description on hive/state")]
    if epic is not None:
        parts += ["", f"## Part of epic {epic.id}: {one_line(epic.title)}"]
        if epic.body.strip():
            parts += ["", material(epic.body.strip(), f"epic {epic.id}: its description on hive/state")]
    if combined_blockers:
        parts += ["", render("worker-blockers-combined", issues=", ".join(combined_blockers))]
    if skipped_blockers:
        parts += ["", render("worker-blockers-skipped", issues=", ".join(skipped_blockers))]
    if context.strip():
        parts += ["", "## Project context", "", material(context.strip(), "context.md on hive/state")]
    if notes:   # chosen by hive.agents.notes: the budget, relevance first
        parts += ["", "## Notes from other agents", _format_notes(notes)]
    if previous_failure:
        parts += ["", render("worker-previous-failure", failure=previous_failure.strip())]
    if told:
        parts += ["", render("worker-told", text=_told_text(told))]
    parts += ["", render("worker-done", result_file=RESULT_FILE)]
    return "\n".join(parts) + "\n"


def _told_text(told: list[str]) -> str:
    return "\n\n".join(text.strip() for text in told)


def told_message(told: list[str]) -> str:
    """A person's messages (`git hive tell`) to a session at work; it starts `FYI:` like the notes
    relayed between workers: an aside to the work in progress, not a new task."""
    return render("told", text=_told_text(told))


def fyi_message(note: dict[str, Any]) -> str:
    issue = _word(note.get("issue") or "?")
    return render("fyi", issue=issue, category=_word(note.get("category") or "context"),
                  content=material(str(note["content"]), f"a note of issue {issue}, agent {_word(note.get('agent') or '?')}"))
