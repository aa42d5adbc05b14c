"""The audit trail: the commits of `hive/state`, read back as events (DESIGN §2).

Each state change is a commit whose trailers say what happened (`Hive-Event`, `Hive-Issue`,
`Hive-Agent`, and event-specific ones such as `Hive-Reason` or `Hive-Merged`). This module walks
that history with dulwich — a pure-Python walker with path filtering and a real trailer parser, so
`git hive log` needs no subprocess and no hand-rolled message parsing — and checks that the story
it tells is consistent (an issue is never held by two agents at once).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Collection, Iterator

from hive import git
from hive.state import layout

# Events after which an issue has no agent any more.
RELEASING_EVENTS = frozenset({"done", "escalated", "released", "recovered", "canceled", "rejected",
                              "finalized", "failed", "open", "lease-expired"})


@dataclass
class StateEvent:
    commit: str
    at: str
    author: str
    summary: str
    event: str
    issue: str
    agent: str
    trailers: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "at": self.at, "author": self.author, "event": self.event,
                "agent": self.agent, "summary": self.summary, "trailers": self.trailers}


def _event_of(commit) -> StateEvent:
    from dulwich.trailers import parse_trailers

    message = commit.message
    _, trailers = parse_trailers(message)
    values = {t.key: t.value for t in trailers}
    subject = message.decode("utf-8", "replace").split("\n", 1)[0]
    author = commit.author.decode("utf-8", "replace").split(" <", 1)[0]
    when = datetime.fromtimestamp(commit.author_time, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return StateEvent(commit=commit.id.decode(), at=when, author=author, summary=subject,
                      event=values.get("Hive-Event", "edited"), issue=values.get("Hive-Issue", ""),
                      agent=values.get("Hive-Agent", ""), trailers=values)


@contextmanager
def _walks(paths: git.RepoPaths) -> Iterator[Callable[..., Any]]:
    """`walk(include, **options)`: dulwich's walker over the repository's object store, as
    `Repo.get_walker` makes it (a shallow clone's cut commits with no parents), without
    `dulwich.repo.Repo`, which refuses a repository with an extension it does not know (a partial
    clone's `extensions.partialClone`; the format is `git.discover`'s to check)."""
    from dulwich.object_store import DiskObjectStore
    from dulwich.walk import Walker

    try:
        with open(paths.common_dir / "shallow", "rb") as listed:
            shallow = {line.strip() for line in listed if line.strip()}
    except OSError:
        shallow = set()
    store = DiskObjectStore(str(paths.common_dir / "objects"))
    try:
        yield lambda include, **options: Walker(
            store, include, get_parents=lambda commit: [] if commit.id in shallow else commit.parents, **options)
    finally:
        store.close()


def events(paths: git.RepoPaths, issue_id: str | None = None, since: str = "") -> Iterator[StateEvent]:
    """State events, oldest first; with `issue_id`, only commits that touched that issue's files;
    with `since` (a commit), only those made after it."""
    tip = git.read_ref(paths.common_dir, git.STATE_REF)
    if tip is None:
        return
    with _walks(paths) as walk:
        filters = None
        if issue_id is not None:
            filters = [p.encode() for p in (*layout.candidate_paths(issue_id), layout.notes_path(issue_id))]
        include: list[Any] = [tip.encode()]            # ids as bytes (dulwich types them by version)
        exclude: list[Any] | None = [since.encode()] if since else None
        for entry in walk(include, exclude=exclude, paths=filters, order="topo", reverse=True):
            yield _event_of(entry.commit)


# Events that leave an issue waiting for a person, with the why in `Hive-Reason`.
PERSON_NEEDED_EVENTS = frozenset({"escalated", "failed", "recovered"})


def reasons(paths: git.RepoPaths, issue_ids: Collection[str]) -> dict[str, str]:
    """Issue -> the `Hive-Reason` of its latest escalating or failing commit, for the issues
    given (walking from the tip back, only until each has one)."""
    wanted, found = set(issue_ids), dict[str, str]()
    tip = git.read_ref(paths.common_dir, git.STATE_REF)
    if tip is None or not wanted:
        return found
    with _walks(paths) as walk:
        include: list[Any] = [tip.encode()]
        for entry in walk(include):
            item = _event_of(entry.commit)
            if item.issue in wanted and item.issue not in found and item.event in PERSON_NEEDED_EVENTS:
                found[item.issue] = item.trailers.get("Hive-Reason", "")
                if len(found) == len(wanted):
                    break
    return found


def last_event(paths: git.RepoPaths, issue_id: str, event: str) -> StateEvent | None:
    found = None
    for item in events(paths, issue_id):
        if item.event == event and (item.issue in ("", issue_id)):
            found = item
    return found


def lapsed_while_away(paths: git.RepoPaths, issue_id: str, agent_id: str) -> bool:
    """Whether the last claim or release of `issue_id` is the expiry of `agent_id`'s lease (the
    trailer names exactly that agent); a person's reopen, or a claim after it, is not. Lease
    extensions and syncs hold nobody and release nobody (a machine cut off extends its leases
    beside the expiry another pushed)."""
    last = None
    for event in events(paths, issue_id):
        if event.event == "claimed" or event.event in RELEASING_EVENTS:
            last = event
    return last is not None and last.event == "lease-expired" and \
        last.trailers.get("Hive-Previous-Agent") == agent_id


def double_claims(paths: git.RepoPaths) -> list[str]:
    """Issues claimed while another agent still held them, as one-line descriptions."""
    holder: dict[str, str] = {}
    problems = []
    for item in events(paths):
        if not item.issue:
            continue
        if item.event == "claimed":
            if holder.get(item.issue):
                problems.append(f"{item.issue} claimed by {item.agent} at {item.commit[:10]} "
                                f"while {holder[item.issue]} held it")
            holder[item.issue] = item.agent
        elif item.event == "switched":
            holder[item.issue] = item.agent
        elif item.event in RELEASING_EVENTS:
            holder.pop(item.issue, None)
    return problems
