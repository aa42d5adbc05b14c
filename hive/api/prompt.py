"""What a worker would be given for a first attempt at an issue (`git hive show --prompt`): the
prompt, the notes chosen within `notes_prompt_tokens` and why, with their sizes (estimated as
UTF-8 bytes / 3.5)."""

from __future__ import annotations

from dataclasses import dataclass

from hive.agents.briefing import brief
from hive.issues import resolve_id
from hive.project import Project

__all__ = ["ChosenNote", "PromptPreview", "preview"]


@dataclass(frozen=True)
class ChosenNote:
    key: str
    reason: str         # why it was chosen
    tokens: int
    category: str
    issue: str          # "" for the project's
    content: str


@dataclass(frozen=True)
class PromptPreview:
    """As `show --prompt --json` prints it (`dataclasses.asdict`)."""
    id: str
    prompt: str
    prompt_tokens: int
    system_tokens: int          # hive's standing instructions, beside the prompt
    context_tokens: int         # context.md as the prompt carries it
    notes_budget: int           # notes_prompt_tokens
    notes_tokens: int
    notes_candidates: int       # the live notes considered
    notes_left_out: int
    notes: list[ChosenNote]


def preview(project: Project, issue_id: str) -> PromptPreview:
    """The prompt and notes a worker would get for a first attempt at the issue."""
    issue = project.index.get(resolve_id(project, issue_id))
    assert issue is not None
    budget = project.config.notes_prompt_tokens
    briefing = brief(project, issue, budget)
    selection = briefing.selection
    notes = [ChosenNote(c.note["key"], c.reason, c.tokens, c.note["category"], c.note["issue"], c.note["content"])
             for c in selection.chosen]
    return PromptPreview(issue.id, briefing.prompt, briefing.prompt_tokens, briefing.system_tokens,
                         briefing.context_tokens, budget, selection.tokens, selection.candidates, selection.left_out,
                         notes)
