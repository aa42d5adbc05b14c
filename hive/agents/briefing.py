"""What a worker gets for one attempt: the prompt and the notes chosen for it, with their sizes.

The worker sends it (`hive/orchestrator/worker.py`), and `git hive show ID --prompt` prints it
for a first attempt, so what a person reads is what an agent would be told.
"""

from __future__ import annotations

from dataclasses import dataclass

from hive.agents import notes as note_choice
from hive.agents.prompts import WORKER_SYSTEM_PROMPT, worker_prompt
from hive.project import Project
from hive.state import layout
from hive.state.issue_file import Issue
from hive.state.note_record import estimate_tokens


@dataclass
class Briefing:
    prompt: str
    selection: note_choice.Selection
    context_tokens: int     # context.md as the prompt carries it

    @property
    def prompt_tokens(self) -> int:
        return estimate_tokens(self.prompt)

    @property
    def system_tokens(self) -> int:
        return estimate_tokens(WORKER_SYSTEM_PROMPT)


def brief(project: Project, issue: Issue, notes_budget: int, *, previous_failure: str = "", combined_blockers: list[str] | None = None,
          skipped_blockers: list[str] | None = None, told: list[str] | None = None) -> Briefing:
    index = project.index
    epic = index.get(issue.parent) if issue.parent else None
    selection = note_choice.choose(index, issue, notes_budget)
    context = (project.store.snapshot().read(layout.CONTEXT_FILE) or b"").decode("utf-8", "replace")
    prompt = worker_prompt(issue, context=context, epic=epic, notes=selection.notes,
                           previous_failure=previous_failure, combined_blockers=combined_blockers,
                           skipped_blockers=skipped_blockers, told=told)
    return Briefing(prompt, selection, estimate_tokens(context.strip()))
