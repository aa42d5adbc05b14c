"""What workers are told: hive's standing instructions and the prompt for one issue."""

from __future__ import annotations

from typing import Any, Iterable

from hive.agents.protocol import NOTES_FILE, RESULT_FILE
from hive.state.issue_file import Issue

WORKER_SYSTEM_PROMPT = f"""You are a worker agent of git-hive. You work on exactly one issue, in the
git worktree you were started in, on its own branch. Rules:
- Change files only inside this worktree. Do not push, do not switch branches, do not touch the
  target branch or the hive/state branch: hive merges your work after you finish.
- Commit your work on the current branch (git add + git commit) with a clear message.
- When you learn something other agents should know (a command, a pitfall, a convention), append
  one JSON line to {NOTES_FILE}: {{"category": "discovery|gotcha|pattern|dependency|context",
  "content": "..."}}.
- When you are done, write one JSON line to {RESULT_FILE}:
  {{"status": "success|failure|blocked", "summary": "what you did or why not",
   "test_command": "the command that tests your change, if any"}}.
  Never commit {NOTES_FILE} or {RESULT_FILE}.
"""

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
        parts += ["", "## Work you build on",
                  "Your branch already contains the finished, not yet merged work of: "
                  + ", ".join(combined_blockers) + "."]
    if skipped_blockers:
        parts += ["", "Note: the work of " + ", ".join(skipped_blockers) + " could not be combined into "
                  "your starting point (it conflicts); it will be merged before yours."]
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
        parts += ["", "## Your previous attempt failed", "", previous_failure.strip(),
                  "", "Fix the cause, then finish the issue."]
    parts += ["", f"When done, write {RESULT_FILE} as instructed and commit your work."]
    return "\n".join(parts) + "\n"


def fyi_message(note: dict[str, Any]) -> str:
    return f"FYI: another agent ({note.get('issue', '?')}) noted [{note.get('category')}]: {note['content']}"
