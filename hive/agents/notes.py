"""Which notes a worker's prompt gets: the most relevant first, within a token budget.

Every live note (`Index.notes`: the archive left out) is ranked by how it relates to the issue —
its own earlier attempts', then its blockers' (the dependency chain, transitively), its epic's,
issues whose `touches` overlap its own, issues that share a label, the project's notes, then the
rest — and within a rank by recency (`at`, newest first; then the note's key, so that the choice
is the same on every machine and every run). Notes are taken in that order while they fit in
`notes_prompt_tokens`; one that does not fit is skipped and smaller ones after it may still go in.
The same content is taken once. A note's cost is the estimate (`note_record.estimate_tokens`)
of its line as the prompt shows it, never what the note says of itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hive.agents.prompts import format_note
from hive.state import globs, note_record
from hive.state.index import Index
from hive.state.issue_file import Issue

REASONS = ("this issue", "dependency chain", "same epic", "shares files", "shares a label", "project", "recent")
MAX_CHAIN = 500   # blockers followed back (transitively) for the dependency chain


@dataclass
class Choice:
    note: dict[str, Any]
    reason: str
    tokens: int


@dataclass
class Selection:
    chosen: list[Choice] = field(default_factory=list)
    candidates: int = 0      # live notes considered
    left_out: int = 0        # notes that did not fit (or were off: a budget of 0)
    budget: int = 0

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.chosen)

    @property
    def notes(self) -> list[dict[str, Any]]:
        return [c.note for c in self.chosen]


def choose(index: Index, issue: Issue, budget: int) -> Selection:
    notes = index.notes()
    related = _Relations(index, issue)
    ranked: list[dict[str, Any]] = sorted(notes, key=lambda note: str(note["key"]))   # stable sorts: rank, then newest, then key
    ranked.sort(key=lambda note: str(note.get("at") or ""), reverse=True)
    ranked.sort(key=related.rank)
    selection, seen, used = Selection(candidates=len(notes), budget=budget), set[str](), 0
    for note in ranked:
        if note["content"] in seen:
            continue
        seen.add(note["content"])
        tokens = note_record.estimate_tokens(format_note(note))
        if used + tokens > budget:
            selection.left_out += 1
            continue
        used += tokens
        selection.chosen.append(Choice(note, REASONS[related.rank(note)], tokens))
    return selection


class _Relations:
    """How the issue of a note relates to the issue being prompted (the rank in REASONS)."""

    def __init__(self, index: Index, issue: Issue):
        self.index, self.issue = index, issue
        self.chain = _blockers(index, issue.id)
        self.labels = set(issue.labels)
        self.issues: dict[str, Issue | None] = {}
        self.ranks: dict[str, int] = {}

    def rank(self, note: dict[str, Any]) -> int:
        of = str(note.get("issue") or "")
        if of not in self.ranks:
            self.ranks[of] = self._rank(of)
        return self.ranks[of]

    def _rank(self, of: str) -> int:
        if not of:
            return REASONS.index("project")
        if of == self.issue.id:
            return REASONS.index("this issue")
        if of in self.chain:
            return REASONS.index("dependency chain")
        other = self.index.get(of)
        if other is None:
            return REASONS.index("recent")
        parent = self.issue.parent
        if parent and (of == parent or other.parent == parent):
            return REASONS.index("same epic")
        if any(globs.overlap(a, b) for a in self.issue.touches for b in other.touches):
            return REASONS.index("shares files")
        if self.labels & set(other.labels):
            return REASONS.index("shares a label")
        return REASONS.index("recent")


def _blockers(index: Index, issue_id: str) -> set[str]:
    found: set[str] = set()
    todo = list(index.blockers_of(issue_id))
    while todo and len(found) < MAX_CHAIN:
        blocker = todo.pop()
        if blocker not in found:
            found.add(blocker)
            todo.extend(index.blockers_of(blocker))
    return found
