"""The `hive` merge driver: issue files field by field, notes as a de-duplicated union.

Most tests run a real `git merge` of two diverged branches, with the driver registered in the
repository config and `.gitattributes` committed on the branch, exactly as `git hive init` sets it
up; the rest test the pure functions that sync and plan approval call in-process.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hive.state import issue_file
from hive.state.merge_driver import (
    main,
    merge_file,
    merge_issue,
    merge_jsonl,
    merge_text_lines,
    path_kind,
)

ROOT = Path(__file__).resolve().parents[1]
ID = "hv-1a2b3c"
ISSUE = f"issues/{ID}.md"
NOTES = f"notes/{ID}.jsonl"

BASE = """\
+++
# Issue created by the queen
title = "Add JWT login"
status = "open"            # open | in_progress | done | finalized | failed | escalated | canceled
priority = 2               # 0 = highest
type = "task"
depends_on = ["hv-9f8e7d", "hv-000001"]
labels = ["auth", "api", "db"]
assignee = ""
created = 2026-11-30T10:00:00Z
updated = 2026-11-30T10:00:00Z
+++

Implement login with JWT.

## Acceptance
- tokens expire after 1h
- refresh works
- logout revokes the token

Notes at the end.
"""


# --------------------------------------------------------------------------------------------
# helpers


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") or k in ("GIT_EXEC_PATH",)}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_TERMINAL_PROMPT"] = "0"
    # The driver runs as `python -m hive.state.merge_driver` from inside the test repository.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=repo, env=git_env(), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def write(repo: Path, files: dict[str, str | bytes | None]) -> None:
    for rel, content in files.items():
        target = repo / rel
        if content is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)


Files = dict[str, str | bytes | None]


def make_repo(tmp_path: Path, base: Files, ours: Files, theirs: Files, *,
              driver: bool = True) -> Path:
    """A repo whose branches `ours` and `theirs` diverge from `base` (holding .gitattributes)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "base")
    git(repo, "config", "user.name", "Hive Test")
    git(repo, "config", "user.email", "hive-test@example.com")
    git(repo, "config", "commit.gpgsign", "false")
    if driver:
        command = f"{shlex.quote(sys.executable)} -m hive.state.merge_driver %O %A %B %P"
        git(repo, "config", "merge.hive.name", "git-hive state merge")
        git(repo, "config", "merge.hive.driver", command)
    write(repo, {".gitattributes": "issues/** merge=hive\nnotes/** merge=hive\n", **base})
    commit(repo, "base")
    git(repo, "checkout", "-q", "-b", "ours")
    write(repo, ours)
    commit(repo, "ours")
    git(repo, "checkout", "-q", "-b", "theirs", "base")
    write(repo, theirs)
    commit(repo, "theirs")
    return repo


class Merged:
    def __init__(self, repo: Path, done: subprocess.CompletedProcess[str]):
        self.repo = repo
        self.returncode = done.returncode
        self.stderr = done.stderr
        self.output = done.stdout + done.stderr
        self.unmerged = git(repo, "diff", "--name-only", "--diff-filter=U").stdout.split()

    def read(self, rel: str) -> bytes:
        return (self.repo / rel).read_bytes()

    def text(self, rel: str) -> str:
        return self.read(rel).decode()


def merge(repo: Path, into: str, other: str) -> Merged:
    """Check out a fresh branch at `into` and `git merge other`; the result stays checked out."""
    git(repo, "reset", "-q", "--hard")
    git(repo, "checkout", "-q", "-B", f"merge-{into}-{other}", into)
    done = git(repo, "merge", "--no-edit", "--no-ff", other, check=False)
    return Merged(repo, done)


def merge_both_ways(repo: Path, rel: str) -> tuple[Merged, bytes, Merged, bytes]:
    first = merge(repo, "ours", "theirs")
    first_bytes = first.read(rel)
    second = merge(repo, "theirs", "ours")
    return first, first_bytes, second, second.read(rel)


def edit(text: str, **changes: object) -> str:
    """Change fields the way hive does (tomlkit, keeping the layout)."""
    return issue_file.update_text(text, dict(changes), ISSUE)


def parsed(data: bytes | str, issue_id: str = ID) -> issue_file.Issue:
    return issue_file.parse(data, issue_id, f"issues/{issue_id}.md")


def front_and_body(data: bytes | str) -> tuple[str, str]:
    text = data.decode() if isinstance(data, bytes) else data
    front, body, _ = issue_file.split(text, ISSUE)
    return front, body


def fields(issue: issue_file.Issue) -> dict[str, object]:
    """Field values with the set-like fields as sets (their order follows ours by design)."""
    data = issue.to_json()
    data["labels"] = set(data["labels"])
    data["depends_on"] = set(data["depends_on"])
    return data


# --------------------------------------------------------------------------------------------
# sanity of the set-up itself


def test_driver_module_runs_from_a_foreign_directory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hive.state.merge_driver"], cwd=tmp_path,
                          env=git_env(), capture_output=True, text=True)
    assert done.returncode == 2
    assert "usage" in done.stderr


def test_without_the_driver_the_same_edits_conflict(tmp_path: Path) -> None:
    """Control: adjacent front-matter lines changed on both sides conflict in a plain text merge,
    so the clean merges below are the driver's doing."""
    ours = edit(BASE, status="in_progress", assignee="w-1", updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, priority=0, updated="2026-11-30T10:30:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs}, driver=False)
    result = merge(repo, "ours", "theirs")
    assert result.returncode != 0
    assert result.unmerged == [ISSUE]


# --------------------------------------------------------------------------------------------
# real git merges of issue files


def test_different_fields_changed_on_each_side_merge_cleanly(tmp_path: Path) -> None:
    ours = edit(BASE, status="in_progress", assignee="w-1", updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, priority=0, title="Add JWT login and refresh",
                  updated="2026-11-30T10:30:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    for result, data in ((first, first_bytes), (second, second_bytes)):
        assert result.returncode == 0, result.output
        assert result.unmerged == []
        issue = parsed(data)
        assert issue.status == "in_progress"
        assert issue.assignee == "w-1"
        assert issue.priority == 0
        assert issue.title == "Add JWT login and refresh"
        assert issue.updated == "2026-11-30T11:00:00Z"  # the later of the two
        assert issue.labels == ["auth", "api", "db"]
        assert b"<<<<<<<" not in data
    assert fields(parsed(first_bytes)) == fields(parsed(second_bytes))
    # the merge commit really holds it
    assert git(repo, "show", f"HEAD:{ISSUE}").stdout.encode() == second_bytes


def test_same_field_changed_on_both_sides_the_later_update_wins(tmp_path: Path) -> None:
    ours = edit(BASE, title="Ours: JWT login", priority=1, updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, title="Theirs: JWT login", priority=3, updated="2026-11-30T12:00:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    for result, data in ((first, first_bytes), (second, second_bytes)):
        assert result.returncode == 0, result.output
        issue = parsed(data)
        assert issue.title == "Theirs: JWT login"
        assert issue.priority == 3
        assert issue.updated == "2026-11-30T12:00:00Z"


@pytest.mark.parametrize("terminal", ["canceled", "finalized"])
def test_terminal_status_wins_over_a_later_non_terminal_one(tmp_path: Path, terminal: str) -> None:
    ours = edit(BASE, status=terminal, updated="2026-11-30T10:05:00Z")
    theirs = edit(BASE, status="in_progress", assignee="w-7", updated="2026-11-30T12:00:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    for result, data in ((first, first_bytes), (second, second_bytes)):
        assert result.returncode == 0, result.output
        issue = parsed(data)
        assert issue.status == terminal
        assert issue.assignee == ""     # the holder rule: a canceled or finalized issue is held by nobody
        assert issue.updated == "2026-11-30T12:00:00Z"


def test_labels_and_depends_on_merge_as_sets_with_removals(tmp_path: Path) -> None:
    # base: labels auth, api, db; depends_on hv-9f8e7d, hv-000001
    ours = edit(BASE, labels=["auth", "db", "ui"],
                depends_on=["hv-9f8e7d", "hv-000001", "hv-000002"],
                updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, labels=["auth", "api", "perf"], depends_on=["hv-000001", "hv-000003"],
                  updated="2026-11-30T12:00:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    one, other = parsed(first_bytes), parsed(second_bytes)
    # ours' order, then theirs' additions
    assert one.labels == ["auth", "ui", "perf"]
    assert one.depends_on == ["hv-000001", "hv-000002", "hv-000003"]
    assert other.labels == ["auth", "perf", "ui"]
    assert other.depends_on == ["hv-000001", "hv-000003", "hv-000002"]
    assert fields(one) == fields(other)


def test_comments_in_ours_front_matter_survive(tmp_path: Path) -> None:
    ours = BASE.replace('priority = 2               # 0 = highest',
                        'priority = 1  # bumped: the demo needs it (alice)')
    ours = ours.replace('labels = ["auth", "api", "db"]',
                        '# reviewed by alice on Monday\n'
                        'labels = ["auth", "api", "db"]  # keep short')
    theirs = edit(BASE, status="in_progress", assignee="w-3", labels=["auth", "api", "db", "sec"],
                  updated="2026-11-30T12:00:00Z")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    result = merge(repo, "ours", "theirs")
    assert result.returncode == 0, result.output
    text = result.text(ISSUE)
    assert "# Issue created by the queen\n" in text
    assert "priority = 1  # bumped: the demo needs it (alice)\n" in text
    assert "# reviewed by alice on Monday\n" in text
    assert 'labels = ["auth", "api", "db", "sec"]  # keep short\n' in text
    assert 'status = "in_progress"            # open | in_progress | done' in text
    issue = parsed(text)
    assert (issue.priority, issue.status, issue.assignee) == (1, "in_progress", "w-3")
    assert issue.updated == "2026-11-30T12:00:00Z"


def test_body_changed_on_different_lines_merges_cleanly(tmp_path: Path) -> None:
    ours = edit(BASE, status="in_progress").replace("Implement login with JWT.",
                                                   "Implement login with JWT (RS256).")
    theirs = BASE.replace("- logout revokes the token\n",
                          "- logout revokes the token\n- rate limit the login endpoint\n")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    assert first_bytes == second_bytes
    issue = parsed(first_bytes)
    assert issue.status == "in_progress"
    assert issue.body == ("Implement login with JWT (RS256).\n\n## Acceptance\n"
                          "- tokens expire after 1h\n- refresh works\n- logout revokes the token\n"
                          "- rate limit the login endpoint\n\nNotes at the end.\n")


def test_body_conflict_has_markers_in_the_body_only(tmp_path: Path) -> None:
    ours = edit(BASE, status="in_progress", assignee="w-1", updated="2026-11-30T11:00:00Z").replace(
        "- refresh works\n", "- refresh works with rotation\n")
    theirs = edit(BASE, priority=0, updated="2026-11-30T10:30:00Z").replace(
        "- refresh works\n", "- refresh is out of scope\n")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    result = merge(repo, "ours", "theirs")
    assert result.returncode != 0
    assert result.unmerged == [ISSUE]
    assert git(repo, "ls-files", "-u", "--", ISSUE).stdout.count(ISSUE) == 3
    data = result.read(ISSUE)
    front, body = front_and_body(data)
    for marker in ("<<<<<<<", "=======", ">>>>>>>"):
        assert marker not in front
    issue = parsed(data)  # parses as it is, nothing stripped
    assert (issue.assignee, issue.priority, issue.updated) == ("w-1", 0, "2026-11-30T11:00:00Z")
    assert body == ("Implement login with JWT.\n\n## Acceptance\n- tokens expire after 1h\n"
                    "<<<<<<< ours\n- refresh works with rotation\n=======\n"
                    "- refresh is out of scope\n>>>>>>> theirs\n"
                    "- logout revokes the token\n\nNotes at the end.\n")


def test_both_sides_added_the_same_issue_file(tmp_path: Path) -> None:
    """No base (add/add): every differing field counts as changed on both sides."""
    ours = edit(BASE, status="in_progress", labels=["auth", "ui"], updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, status="canceled", labels=["auth", "perf"], title="Other title",
                  updated="2026-11-30T10:30:00Z")
    repo = make_repo(tmp_path, {}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    one = parsed(first_bytes)
    assert one.status == "canceled"  # terminal wins
    assert one.title == "Add JWT login"  # ours is later
    assert one.labels == ["auth", "ui", "perf"]  # union: nothing was removed from a base
    assert one.updated == "2026-11-30T11:00:00Z"
    assert fields(one) == fields(parsed(second_bytes))


def test_archived_issue_files_merge_field_by_field(tmp_path: Path) -> None:
    rel = f"issues/archive/1a/{ID}.md"
    base = edit(BASE, status="done")
    ours = edit(base, status="finalized", updated="2026-11-30T11:00:00Z")
    theirs = edit(base, status="failed", labels=["auth"], updated="2026-11-30T12:00:00Z")
    repo = make_repo(tmp_path, {rel: base}, {rel: ours}, {rel: theirs})
    result = merge(repo, "ours", "theirs")
    assert result.returncode == 0, result.output
    issue = parsed(result.read(rel))
    assert (issue.status, issue.labels, issue.updated) == ("finalized", ["auth"],
                                                           "2026-11-30T12:00:00Z")


def test_issue_fields_are_symmetric_in_both_directions(tmp_path: Path) -> None:
    base = BASE.replace('assignee = ""\n', 'assignee = ""\nestimate = 3\nowner = "team-a"\n')
    # Same `updated` on both sides: every both-sides conflict falls to the deterministic tie break.
    ours = edit(base, title="Title A", priority=1, type="bug", estimate=5, owner=None,
                depends_on=["hv-9f8e7d", "hv-000004"], reviewer="bob",
                updated="2026-11-30T11:00:00Z")
    theirs = edit(base, title="Title B", priority=4, type="feature", estimate=8, labels=["x"],
                  depends_on=["hv-000001"], reviewer="carol", parent="hv-0e0e0e",
                  updated="2026-11-30T11:00:00Z")
    repo = make_repo(tmp_path, {ISSUE: base}, {ISSUE: ours}, {ISSUE: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, ISSUE)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    one, other = parsed(first_bytes), parsed(second_bytes)
    assert fields(one) == fields(other)
    assert one.body == other.body == parsed(BASE).body
    assert one.title == "Title B"  # tie: the greater value
    assert one.priority == 4
    assert one.type == "feature"
    assert one.extra["estimate"] == 8
    assert "owner" not in one.extra  # removed on one side, untouched on the other
    assert one.extra["reviewer"] == "carol"
    assert one.parent == "hv-0e0e0e"
    assert set(one.depends_on) == {"hv-000004"}  # hv-9f8e7d and hv-000001 removed on a side each
    assert one.labels == ["x"]


def test_notes_appended_on_both_sides_are_a_union(tmp_path: Path) -> None:
    def note(content: str, at: str, agent: str = "w-1") -> str:
        return json.dumps({"category": "discovery", "content": content, "issue": ID,
                           "agent": agent, "at": at})

    base = (note("uses pyjwt", "2026-11-30T10:00:00Z") + "\n"
            + note("db is sqlite", "2026-11-30T10:01:00Z") + "\n")
    shared = {"category": "gotcha", "content": "clock skew", "issue": ID, "agent": "w-2",
              "at": "2026-11-30T10:20:00Z"}
    ours = base + note("ours first", "2026-11-30T10:30:00Z") + "\n" + json.dumps(shared) + "\n"
    theirs = (base + json.dumps(dict(reversed(list(shared.items()))), indent=None) + "\n"
              + note("theirs early", "2026-11-30T10:10:00Z", "w-9") + "\n")
    repo = make_repo(tmp_path, {NOTES: base}, {NOTES: ours}, {NOTES: theirs})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, NOTES)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    assert first.unmerged == second.unmerged == []
    assert first_bytes == second_bytes
    lines = first_bytes.decode().splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["content"] for o in objects] == ["uses pyjwt", "db is sqlite", "theirs early",
                                               "clock skew", "ours first"]
    assert objects[3] == shared
    assert first_bytes.endswith(b"\n")


def test_a_union_of_notes_stops_where_the_file_would_pass_what_another_machine_takes_in(tmp_path: Path) -> None:
    """Two machines each append ~5 MB of notes to one issue: the union would be a notes file
    another machine's trust check refuses (and with it all of `hive/state`). It keeps the base
    and the additions in their merge order up to `trust.MAX_NOTES_BYTES`, the same both ways."""
    from hive.state import trust

    def notes(side: str, count: int) -> str:
        return "".join(json.dumps({"category": "discovery", "content": f"{side} {n:05d} " + "x" * 2000,
                                   "issue": ID, "at": f"2026-11-30T10:{n % 60:02d}:00Z"}) + "\n"
                       for n in range(count))

    base = notes("base", 10)
    each = trust.MAX_NOTES_BYTES * 5 // 8 // 2100
    repo = make_repo(tmp_path, {NOTES: base}, {NOTES: base + notes("ours", each)},
                     {NOTES: base + notes("theirs", each)})
    first, first_bytes, second, second_bytes = merge_both_ways(repo, NOTES)
    assert first.returncode == 0 and second.returncode == 0, first.output + second.output
    assert first_bytes == second_bytes and first_bytes.startswith(base.encode())
    assert trust.MAX_NOTES_BYTES - 2200 < len(first_bytes) <= trust.MAX_NOTES_BYTES
    kept = first_bytes.decode().splitlines()
    assert len(kept) < 10 + 2 * each and all(json.loads(line)["content"] for line in kept)


def test_a_broken_side_leaves_a_conflict_and_loses_nothing(tmp_path: Path) -> None:
    ours = edit(BASE, status="in_progress", updated="2026-11-30T11:00:00Z")
    theirs = BASE.replace('status = "open"', 'status = "done').replace(
        "Notes at the end.", "Notes at the end, edited by hand.")
    repo = make_repo(tmp_path, {ISSUE: BASE}, {ISSUE: ours}, {ISSUE: theirs})
    result = merge(repo, "ours", "theirs")
    assert result.returncode != 0
    assert result.unmerged == [ISSUE]
    data = result.text(ISSUE)
    assert ours in data and theirs in data  # both versions whole
    assert data.startswith("<<<<<<< ours\n") and data.endswith(">>>>>>> theirs\n")
    driver_lines = [line for line in result.stderr.splitlines() if "hive merge-driver" in line]
    assert len(driver_lines) == 1
    assert ISSUE in driver_lines[0] and "theirs" in driver_lines[0]
    # git keeps all three stages too
    assert git(repo, "show", f":2:{ISSUE}").stdout == ours
    assert git(repo, "show", f":3:{ISSUE}").stdout == theirs


def test_unknown_paths_under_issues_fall_back_to_a_text_merge(tmp_path: Path) -> None:
    rel = "issues/README.txt"
    base = "one\ntwo\nthree\nfour\nfive\n"
    repo = make_repo(tmp_path, {rel: base}, {rel: base.replace("one", "ONE")},
                     {rel: base.replace("five", "FIVE")})
    result = merge(repo, "ours", "theirs")
    assert result.returncode == 0, result.output
    assert result.text(rel) == "ONE\ntwo\nthree\nfour\nFIVE\n"


# --------------------------------------------------------------------------------------------
# merge_issue, in-process


def test_merge_issue_trivial_cases_return_a_side_verbatim() -> None:
    ours = edit(BASE, status="done").encode()
    assert merge_issue(BASE.encode(), ours, ours, ISSUE) == (ours, True)
    assert merge_issue(BASE.encode(), BASE.encode(), ours, ISSUE) == (ours, True)
    assert merge_issue(BASE.encode(), ours, BASE.encode(), ISSUE) == (ours, True)


def test_merge_issue_keeps_ours_bytes_when_theirs_only_changed_layout() -> None:
    theirs = BASE.replace('priority = 2               # 0 = highest', 'priority=2')
    ours = BASE.replace("title = ", "# a person's note\ntitle = ")
    result, clean = merge_issue(BASE.encode(), ours.encode(), theirs.encode(), ISSUE)
    assert clean
    assert result == ours.encode()


def test_merge_issue_fields_and_keys() -> None:
    base = edit(BASE, parent="hv-0e0e0e", owner="team-a")
    ours = edit(base, parent=None, labels=None, updated="2026-11-30T11:00:00Z")  # removes keys
    theirs = edit(base, size="L", owner="team-b", updated="2026-11-30T10:30:00Z")  # adds, changes
    result, clean = merge_issue(base.encode(), ours.encode(), theirs.encode(), ISSUE)
    assert clean
    issue = parsed(result)
    assert issue.parent == ""
    assert "parent" not in front_and_body(result)[0]
    assert "labels" not in front_and_body(result)[0]  # removed by ours, untouched by theirs
    assert issue.extra == {"owner": "team-b", "size": "L"}
    assert issue.updated == "2026-11-30T11:00:00Z"


def test_merge_issue_set_field_removed_as_a_key_on_one_side() -> None:
    ours = edit(BASE, labels=None)  # drops every label (and the key)
    theirs = edit(BASE, labels=["auth", "api", "db", "new"])
    for a, b in ((ours, theirs), (theirs, ours)):
        result, clean = merge_issue(BASE.encode(), a.encode(), b.encode(), ISSUE)
        assert clean
        assert parsed(result).labels == ["new"]


def test_merge_issue_status_between_two_terminal_or_two_open_states_uses_time() -> None:
    ours = edit(BASE, status="finalized", updated="2026-11-30T11:00:00Z")
    theirs = edit(BASE, status="canceled", updated="2026-11-30T12:00:00Z")
    for a, b in ((ours, theirs), (theirs, ours)):
        result, _ = merge_issue(BASE.encode(), a.encode(), b.encode(), ISSUE)
        assert parsed(result).status == "canceled"
    ours = edit(BASE, status="done", updated="2026-11-30T12:00:00Z")
    theirs = edit(BASE, status="failed", updated="2026-11-30T11:00:00Z")
    for a, b in ((ours, theirs), (theirs, ours)):
        result, _ = merge_issue(BASE.encode(), a.encode(), b.encode(), ISSUE)
        assert parsed(result).status == "done"


def test_merge_issue_missing_base() -> None:
    ours = edit(BASE, priority=0, updated="2026-11-30T09:00:00Z")
    theirs = edit(BASE, priority=4, updated="2026-11-30T09:30:00Z")
    for base in (None, b""):
        for a, b in ((ours, theirs), (theirs, ours)):
            result, clean = merge_issue(base, a.encode(), b.encode(), ISSUE)
            assert clean
            assert parsed(result).priority == 4
            assert parsed(result).updated == "2026-11-30T09:30:00Z"


def test_merge_issue_broken_base_counts_as_missing() -> None:
    base = BASE.replace('title = "Add JWT login"', 'title = ')
    ours = edit(BASE, priority=0)
    theirs = edit(BASE, status="done")
    result, clean = merge_issue(base.encode(), ours.encode(), theirs.encode(), ISSUE)
    assert clean
    issue = parsed(result)
    # with no usable base both differing fields were "changed on both sides"; same `updated`,
    # so the greater value wins each
    assert (issue.priority, issue.status) == (2, "open")


@pytest.mark.parametrize("side", ["ours", "theirs"])
@pytest.mark.parametrize("broken", [
    b"no front matter at all\n",
    BASE.replace('status = "open"', 'status = "nonsense"').encode(),
    BASE.replace("+++\n\nImplement", "\nImplement").encode(),
    b"+++\ntitle = \"x\"\n+++\n\xff\xfe bad utf-8\n",
])
def test_merge_issue_broken_side_keeps_both_whole(side: str, broken: bytes) -> None:
    good = edit(BASE, status="done").encode()
    ours, theirs = (broken, good) if side == "ours" else (good, broken)
    problems: list[str] = []
    result, clean = merge_issue(BASE.encode(), ours, theirs, ISSUE, problems=problems)
    assert not clean
    assert result == b"<<<<<<< ours\n" + ours + b"=======\n" + theirs + b">>>>>>> theirs\n"
    assert len(problems) == 1
    assert ISSUE in problems[0] and f"{side} is not a valid issue file" in problems[0]


def test_merge_issue_body_conflict_is_reported_not_clean() -> None:
    ours = BASE.replace("Notes at the end.", "Ours at the end.")
    theirs = edit(BASE, priority=1).replace("Notes at the end.", "Theirs at the end.")
    result, clean = merge_issue(BASE.encode(), ours.encode(), theirs.encode(), ISSUE)
    assert not clean
    issue = parsed(result)
    assert issue.priority == 1
    assert issue.body.endswith("<<<<<<< ours\nOurs at the end.\n=======\nTheirs at the end.\n"
                               ">>>>>>> theirs\n")


def test_merge_issue_is_symmetric_on_random_edits() -> None:
    rng = random.Random(20261130)
    choices = {
        "title": ["Add JWT login", "Login A", "Login B"],
        "status": list(issue_file.STATUSES),
        "priority": [0, 1, 2, 3, 4],
        "assignee": ["", "w-1", "w-2"],
        "labels": [["auth", "api", "db"], ["auth"], ["db", "x"], [], None],
        "depends_on": [["hv-9f8e7d", "hv-000001"], ["hv-000001", "hv-000005"], None],
        "owner": [None, "a", "b"],
        "updated": ["2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z", "2026-11-30T12:00:00Z"],
    }

    def mutate() -> str:
        keys = rng.sample(sorted(choices), rng.randint(1, 4))
        return edit(BASE, **{k: rng.choice(choices[k]) for k in keys})

    for _ in range(150):
        a, b = mutate(), mutate()
        ab, clean_ab = merge_issue(BASE.encode(), a.encode(), b.encode(), ISSUE)
        ba, clean_ba = merge_issue(BASE.encode(), b.encode(), a.encode(), ISSUE)
        assert clean_ab and clean_ba
        one, other = parsed(ab), parsed(ba)
        assert fields(one) == fields(other), (a, b)
        a_issue, b_issue, base_issue = parsed(a), parsed(b), parsed(BASE)
        for key in ("title", "priority", "assignee"):
            if getattr(b_issue, key) == getattr(base_issue, key):
                kept = getattr(a_issue, key)
                if key == "assignee" and b != BASE and a != b:   # merged (not taken whole): the holder rule holds
                    kept = issue_file.holder_after(one.status, kept)
                assert getattr(one, key) == kept
        terminal = issue_file.TERMINAL_STATUSES
        if a_issue.status in terminal or b_issue.status in terminal:
            assert one.status in issue_file.TERMINAL_STATUSES
        assert one.updated == max(a_issue.updated, b_issue.updated)


# --------------------------------------------------------------------------------------------
# the line merge


def test_merge_text_lines() -> None:
    base = "a\nb\nc\nd\ne\n"
    assert merge_text_lines(base, "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n") == ("A\nb\nc\nd\nE\n", 0)
    assert merge_text_lines(base, "a\nB\nc\nd\ne\n", "a\nB\nc\nd\ne\n") == ("a\nB\nc\nd\ne\n", 0)
    assert merge_text_lines(base, "a\nc\nd\ne\n", "a\nb\nc\nd\ne\nf\n") == ("a\nc\nd\ne\nf\n", 0)
    merged, conflicts = merge_text_lines(base, "a\nX\nsame\nc\nd\ne\n", "a\nY\nsame\nc\nd\ne\n")
    assert conflicts == 1
    assert merged == "a\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\nsame\nc\nd\ne\n"
    merged, conflicts = merge_text_lines("a\n", "a\nours", "a\ntheirs")
    assert conflicts == 1
    assert merged == "a\n<<<<<<< ours\nours\n=======\ntheirs\n>>>>>>> theirs\n"
    assert merge_text_lines("", "x\n", "x\n") == ("x\n", 0)


# --------------------------------------------------------------------------------------------
# merge_jsonl


def line(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_merge_jsonl_union_dedup_and_order() -> None:
    b1 = line(content="b1", at="2026-01-01T00:00:03Z")
    b2 = line(content="b2", at="2026-01-01T00:00:01Z")
    o1 = line(content="o1", at="2026-01-01T00:00:09Z")
    t1 = line(content="t1", at="2026-01-01T00:00:05Z")
    same_ours = b'{"at": "2026-01-01T00:00:07Z", "content": "s"}'
    same_theirs = b'{"content":"s","at":"2026-01-01T00:00:07Z"}'
    base = b1 + b"\n" + b2 + b"\n"
    ours = b2 + b"\n" + b1 + b"\n" + o1 + b"\n" + same_ours + b"\n" + o1 + b"\n"
    theirs = (base + b"\n" + t1 + b"\r\n" + same_theirs + b"\n"
              + line(content="b1", at="2026-01-01T00:00:03Z"))
    result = merge_jsonl(base, ours, theirs)
    assert result == merge_jsonl(base, theirs, ours)
    lines = result.split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(x)["content"] for x in lines[:-1]] == ["b1", "b2", "t1", "s", "o1"]
    assert lines[0] == b1 and lines[1] == b2


def test_merge_jsonl_keeps_unparseable_lines_verbatim_once() -> None:
    base = line(content="b", at="1") + b"\n"
    ours = base + b"{not json\n" + b"\xff\xfe raw bytes\n"
    theirs = base + b"{not json\n" + line(content="t", at="2") + b"\n"
    result = merge_jsonl(base, ours, theirs)
    assert result == merge_jsonl(base, theirs, ours)
    assert result.split(b"\n") == [line(content="b", at="1"), line(content="t", at="2"),
                                   b"{not json", b"\xff\xfe raw bytes", b""]


def test_merge_jsonl_without_base_and_trivial_cases() -> None:
    a = line(content="a", at="2") + b"\n"
    b = line(content="b", at="1") + b"\n"
    assert merge_jsonl(None, a, b) == b + a == merge_jsonl(None, b, a)
    assert merge_jsonl(b"", a, a + b) == b + a
    assert merge_jsonl(a, a, a + b) == a + b
    assert merge_jsonl(None, b"", b"") == b""


def test_merge_jsonl_never_drops_a_base_line_removed_on_one_side() -> None:
    base = line(content="x", at="1") + b"\n" + line(content="y", at="2") + b"\n"
    ours = line(content="y", at="2") + b"\n"
    theirs = base + line(content="z", at="3") + b"\n"
    assert merge_jsonl(base, ours, theirs) == theirs


# --------------------------------------------------------------------------------------------
# dispatch and main()


def test_path_kind() -> None:
    assert path_kind(f"issues/{ID}.md") == "issue"
    assert path_kind(f"issues/archive/1a/{ID}.md") == "issue"
    assert path_kind(f"notes/{ID}.jsonl") == "jsonl"
    assert path_kind("issues/README.md") == "other"
    assert path_kind("notes/readme.txt") == "other"
    assert path_kind(f"{ID}.md") == "other"


def test_merge_file_falls_back_to_git_merge_file() -> None:
    base = b"1\n2\n3\n4\n5\n"
    result, clean = merge_file(base, b"1\nX\n3\n4\n5\n", b"1\n2\n3\n4\nY\n", "issues/notes.txt")
    assert (result, clean) == (b"1\nX\n3\n4\nY\n", True)
    result, clean = merge_file(base, b"1\nX\n3\n4\n5\n", b"1\nZ\n3\n4\n5\n", "issues/notes.txt")
    assert not clean
    assert result == b"1\n<<<<<<< ours\nX\n=======\nZ\n>>>>>>> theirs\n3\n4\n5\n"
    binary = b"\0\1\2"
    result, clean = merge_file(binary, binary + b"a", binary + b"b", "issues/blob.bin")
    assert (result, clean) == (binary + b"a", False)


def run_main(tmp_path: Path, base: bytes | None, ours: bytes, theirs: bytes,
             path: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, bytes, str]:
    files = {}
    for name, data in (("O", base), ("A", ours), ("B", theirs)):
        files[name] = tmp_path / name
        if data is not None:
            files[name].write_bytes(data)
    code = main([str(files["O"]), str(files["A"]), str(files["B"]), path])
    return code, files["A"].read_bytes(), capsys.readouterr().err


def test_main_clean_merge_writes_ours_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ours = edit(BASE, priority=0).encode()
    theirs = edit(BASE, status="done").encode()
    code, result, err = run_main(tmp_path, BASE.encode(), ours, theirs, ISSUE, capsys)
    assert code == 0 and err == ""
    issue = parsed(result)
    assert (issue.priority, issue.status) == (0, "done")


def test_main_missing_base_file_and_jsonl(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = run_main(tmp_path, None, b'{"a":1}\n', b'{"b":2}\n', NOTES, capsys)
    assert (code, result, err) == (0, b'{"a":1}\n{"b":2}\n', "")


def test_main_conflict_exit_code_and_one_stderr_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ours = edit(BASE, priority=0).encode()
    theirs = b"+++\ntitle = [\n+++\n"
    code, result, err = run_main(tmp_path, BASE.encode(), ours, theirs, ISSUE, capsys)
    assert code == 1
    assert ours in result and theirs in result
    assert len(err.strip().splitlines()) == 1
    assert ISSUE in err and "theirs" in err and "line 2" in err


def test_main_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["only", "three", "args"]) == 2
    assert "usage" in capsys.readouterr().err
