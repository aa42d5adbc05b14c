"""Notes that earn their place (issue 34): provenance, the budget, the relevance order, `show --prompt`,
the attempt log, `notes --effect`, `notes prune` and `restore`, and a daemon run end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hive import issues
from hive.agents import note_effect
from hive.agents.notes import choose
from hive.runtime import Runtime
from hive.runtime.attempt_log import Attempt, Seen
from hive.state import note_record
from tests.test_orchestrator import daemon_env, prompts, run_until_idle, statuses, work_steps
from tests.daemon_helpers import write_script


def _notes_of(project: Any, file_id: str, contents: list[str], category: str = "context", **fields: Any) -> None:
    issue = "" if file_id == issues.PROJECT_NOTES else file_id
    issues.add_notes(project, [issues.note_line(c, category, issue=issue, **fields) for c in contents],
                     file_id=file_id)


# -- the note line ----------------------------------------------------------------------------------

def test_a_note_records_its_attempt_and_tokens_and_old_lines_still_parse(repo, project, git, new_issue):
    issue = new_issue("noted")
    _notes_of(project, issue, ["use the staging DB"], "gotcha", agent="w-abc123", attempt=2)
    stored = json.loads(git("show", f"hive/state:notes/{issue}.jsonl", cwd=repo).stdout)
    assert stored["attempt"] == 2 and stored["tokens"] == note_record.estimate_tokens("use the staging DB")
    assert stored["agent"] == "w-abc123" and stored["issue"] == issue and stored["at"]

    # a line written before issue 34 (no attempt, no tokens) and lines that lie about themselves
    old = {"category": "pattern", "content": "old style", "issue": issue, "agent": "w-old", "at": "2026-01-01T00:00:00Z"}
    liars = [{"content": "x" * 700, "tokens": 1, "attempt": True},
             {"content": "huge attempt", "attempt": 10 ** 12}, {"content": "text attempt", "attempt": "3"}]
    path = repo / ".hive" / "notes" / f"{issue}.jsonl"
    with path.open("a") as out:
        for line in [old, *liars]:
            out.write(json.dumps(line) + "\n")
    project.sync(full=True, warn=False)   # a saved edit of a notes file, as a person's or a merge's
    found = {n["content"]: n for n in project.index.notes(issue=issue)}
    assert found["old style"]["attempt"] == 0 and found["old style"]["tokens"] == note_record.estimate_tokens("old style")
    assert found["x" * 700]["tokens"] == 200 and found["x" * 700]["attempt"] == 0   # 700 bytes / 3.5: its own claim ignored
    assert found["huge attempt"]["attempt"] == 0 and found["text attempt"]["attempt"] == 0
    assert not project.index.problems()


def test_the_estimate_is_bytes_over_three_and_a_half_rounded_up():
    assert [note_record.estimate_tokens(t) for t in ("", "a", "abcd", "abcdefg", "é" * 7)] == [0, 1, 2, 2, 4]
    assert note_record.key_of("hv-aaaaaa", "x") == note_record.key_of("hv-aaaaaa", "x") != note_record.key_of("", "x")


# -- the choice -------------------------------------------------------------------------------------

def test_notes_are_chosen_by_relevance_then_recency_within_the_budget(repo, project, new_issue):
    epic = new_issue("epic", type="epic")
    blocker_of_blocker = new_issue("far blocker")
    blocker = new_issue("blocker", depends_on=[blocker_of_blocker])
    sibling = new_issue("sibling", parent=epic)
    files = new_issue("same files", touches=["src/parse/**"])
    label = new_issue("same label", labels=["parser"])
    stranger = new_issue("stranger", labels=["ui"], touches=["web/**"])
    issue_id = new_issue("the work", parent=epic, depends_on=[blocker], labels=["parser"], touches=["src/parse/lex.py"])
    _notes_of(project, stranger, ["stranger old"], at="2026-01-01T00:00:00Z")
    _notes_of(project, stranger, ["stranger new"], at="2026-06-01T00:00:00Z")
    _notes_of(project, issues.PROJECT_NOTES, ["project wide"])
    _notes_of(project, label, ["label note"])
    _notes_of(project, files, ["files note"])
    _notes_of(project, sibling, ["epic note"])
    _notes_of(project, blocker_of_blocker, ["chain note"])
    _notes_of(project, issue_id, ["own note"])
    _notes_of(project, label, ["own note"])      # the same content twice: taken once
    project.sync(warn=False)
    issue = project.index.get(issue_id)

    everything = choose(project.index, issue, 10 ** 6)
    assert [(c.reason, c.note["content"]) for c in everything.chosen] == [
        ("this issue", "own note"), ("dependency chain", "chain note"), ("same epic", "epic note"),
        ("shares files", "files note"), ("shares a label", "label note"), ("project", "project wide"),
        ("recent", "stranger new"), ("recent", "stranger old")]
    assert [c.tokens for c in everything.chosen] == [
        note_record.estimate_tokens(line) for line in (
            f"- [context] (issue {c.note['issue']}) {c.note['content']}" if c.note["issue"]
            else f"- [context] {c.note['content']}" for c in everything.chosen)]
    assert choose(project.index, issue, 10 ** 6).chosen == everything.chosen   # deterministic

    first_three = sum(c.tokens for c in everything.chosen[:3])
    tight = choose(project.index, issue, first_three)
    assert [c.note["content"] for c in tight.chosen] == ["own note", "chain note", "epic note"]
    assert tight.tokens <= first_three and tight.left_out == len(everything.chosen) - 3
    assert choose(project.index, issue, 0).chosen == []


def test_a_note_that_does_not_fit_is_skipped_and_smaller_later_ones_still_go_in(repo, project, new_issue):
    issue_id = new_issue("the work")
    _notes_of(project, issue_id, ["a" * 350], at="2026-06-02T00:00:00Z")
    _notes_of(project, issues.PROJECT_NOTES, ["tiny"])
    project.sync(warn=False)
    small = choose(project.index, project.index.get(issue_id), 20)
    assert [c.note["content"] for c in small.chosen] == ["tiny"] and small.left_out == 1


# -- show --prompt ----------------------------------------------------------------------------------

def test_show_prompt_prints_the_notes_and_context_a_worker_gets_with_token_counts(repo, hive, project, new_issue):
    blocker = new_issue("blocker")
    issue_id = new_issue("the work", depends_on=[blocker])
    _notes_of(project, blocker, ["the schema lives in db/schema.sql"], "discovery")
    _notes_of(project, issues.PROJECT_NOTES, ["noise " * 200])

    shown = json.loads(hive("show", issue_id, "--prompt", "--json", cwd=repo).stdout)
    [chain, noise] = shown["notes"]
    assert (chain["reason"], chain["content"], noise["reason"]) == ("dependency chain", "the schema lives in db/schema.sql", "project")
    assert "the schema lives in db/schema.sql" in shown["prompt"] and shown["notes_budget"] == 2000
    assert shown["notes_tokens"] == chain["tokens"] + noise["tokens"]
    assert shown["prompt_tokens"] == note_record.estimate_tokens(shown["prompt"]) and shown["context_tokens"] > 0

    text = hive("show", issue_id, "--prompt", cwd=repo).stdout
    assert f"notes: 2 of 2 live, ~{shown['notes_tokens']:,} tokens of notes_prompt_tokens 2,000" in text
    assert "dependency chain" in text and "--- the prompt ---" in text and f"# Issue {issue_id}" in text

    hive("config", "set", "notes_prompt_tokens", str(chain["tokens"]), cwd=repo)
    tight = json.loads(hive("show", issue_id, "--prompt", "--json", cwd=repo).stdout)
    assert [n["content"] for n in tight["notes"]] == [chain["content"]] and tight["notes_left_out"] == 1
    hive("config", "set", "notes_prompt_tokens", "0", cwd=repo)
    off = json.loads(hive("show", issue_id, "--prompt", "--json", cwd=repo).stdout)
    assert off["notes"] == [] and "## Notes from other agents" not in off["prompt"]


# -- the attempt log and the effect -------------------------------------------------------------------

def test_the_attempt_log_counts_each_attempt_once_with_its_notes_and_spend(repo):
    from hive.git import discover

    runtime = Runtime(discover(repo))
    try:
        log = runtime.attempt_log
        first, number = log.start("hv-aaaaaa", "w-1", epic="hv-eeeeee", labels=["b", "a"],
                                  notes=[Seen("n1", "gotcha", 12)], tokens_before=100)
        log.end(first, "retried", 1_100)
        log.end(first, "done", 9_999)                      # a second ending changes nothing
        second, number2 = log.start("hv-aaaaaa", "w-1", epic="hv-eeeeee", labels=["a", "b"], notes=[], tokens_before=1_100)
        log.end(second, "done", 1_600)
        third, _ = log.start("hv-aaaaaa", "w-2", epic="", labels=[], notes=[], tokens_before=0)
        log.end(third, "stopped", 50)
        log.settle("hv-aaaaaa", "finalized")            # the last done attempt's work landed
        log.settle("hv-aaaaaa", "rejected")             # settled once
        with pytest.raises(ValueError):
            log.end(third, "exploded", 0)
        ended = log.ended()
    finally:
        runtime.close()
    assert (number, number2) == (1, 2)
    assert [(a.attempt, a.outcome, a.tokens, a.labels, [n.key for n in a.notes], a.landed) for a in ended] == [
        (1, "retried", 1_000, ["a", "b"], ["n1"], ""), (2, "done", 500, ["a", "b"], [], "finalized")]


def _attempt(n: int, outcome: str, notes: list[tuple[str, str]], epic: str = "hv-eeeeee",
             labels: tuple[str, ...] = ("x",), tokens: int = 1000, attempt: int = 1, landed: str = "") -> Attempt:
    return Attempt(n, f"hv-{n:06d}", attempt, epic, list(labels), 0.0, outcome, tokens,
                   [Seen(key, category, 10) for key, category in notes], landed)


def test_the_effect_compares_attempts_that_saw_a_note_with_comparable_ones_that_did_not():
    attempts = [
        _attempt(1, "done", [("good", "discovery")], landed="finalized"),
        _attempt(2, "done", [("good", "discovery"), ("bad", "context")]),
        _attempt(7, "done", [("bad", "context")], landed="rejected"),      # done, then sent back: not ok
        _attempt(3, "retried", [("bad", "context")], tokens=3000), _attempt(4, "escalated", [], tokens=5000),
        _attempt(5, "done", []),
        _attempt(6, "retried", [], epic="hv-other"),     # another epic: comparable to nothing here
    ]
    notes = note_effect.by_note(attempts)
    good, bad = notes["good"], notes["bad"]
    assert (good.seen.attempts, good.seen.done, good.unseen.attempts, good.unseen.done) == (2, 2, 4, 1)
    assert good.delta == pytest.approx(1 - 1 / 4) and good.seen.first_try == 1     # only 1's work was finalized
    assert (bad.seen.attempts, bad.seen.done, bad.seen.rejected, bad.seen.retried, bad.unseen.attempts) == (3, 1, 1, 1, 3)
    assert bad.seen.mean_tokens == pytest.approx(5000 / 3) and bad.unseen.escalated == 1
    categories = note_effect.by_category(attempts)
    assert (categories["discovery"].seen.attempts, categories["context"].seen.attempts) == (2, 3)
    assert note_effect.harmful(notes, min_count=3) == ["bad"] and note_effect.harmful(notes, min_count=4) == []
    worse = [_attempt(k, "retried", [("bad", "context")]) for k in range(10, 15)] + \
            [_attempt(k, "done", []) for k in range(20, 25)]
    assert note_effect.harmful(note_effect.by_note(worse), min_count=5) == ["bad"]
    assert note_effect.harmful(note_effect.by_note(worse), min_count=6) == []


def test_unused_means_not_received_lately_and_written_before_then():
    now = 1_000 * 86400.0
    notes = [{"key": "fresh", "at": "1972-09-20T00:00:00Z"}, {"key": "seen", "at": "1970-01-02T00:00:00Z"},
             {"key": "stale", "at": "1970-01-02T00:00:00Z"}, {"key": "undated", "at": "?"}]
    found = note_effect.unused(notes, {"seen": now - 86400}, 30, now)
    assert [n["key"] for n in found] == ["stale", "undated"]


# -- prune, the archive, restore ---------------------------------------------------------------------

def _seed_attempts(repo: Path, rows: list[tuple[str, list[Seen]]]) -> None:
    from hive.git import discover

    runtime = Runtime(discover(repo))
    try:
        for outcome, seen in rows:
            attempt_id, _ = runtime.attempt_log.start("hv-zzzzzz", "w-1", epic="", labels=["x"], notes=seen,
                                                      tokens_before=0)
            runtime.attempt_log.end(attempt_id, outcome, 100)
    finally:
        runtime.close()


def test_prune_harmful_archives_on_hive_state_visibly_and_restore_brings_it_back(repo, hive, git, project, new_issue):
    issue_id = new_issue("noted")
    _notes_of(project, issue_id, ["misleading advice", "good advice"], "gotcha")
    project.sync(warn=False)
    keys = {n["content"]: n["key"] for n in project.index.notes()}
    bad, good = Seen(keys["misleading advice"], "gotcha", 5), Seen(keys["good advice"], "gotcha", 5)
    _seed_attempts(repo, [("retried", [bad])] * 3 + [("done", [good])] * 3)

    effect = json.loads(hive("notes", "--effect", "--json", cwd=repo).stdout)
    by_key = {n["key"]: n for n in effect["notes"]}
    assert effect["attempts"] == 6
    assert by_key[bad.key]["seen"]["attempts"] == 3 and by_key[bad.key]["delta_ok"] == -1.0
    assert by_key[bad.key]["content"] == "misleading advice" and by_key[good.key]["delta_ok"] == 1.0
    assert "by category" in hive("notes", "--effect", cwd=repo).stdout

    assert "0 note(s) archived" in hive("notes", "prune", "--harmful", cwd=repo).stdout   # 3 < min count 5
    dry = json.loads(hive("notes", "prune", "--harmful", "--min-count", "3", "--dry-run", "--json", cwd=repo).stdout)
    assert [n["key"] for n in dry["notes"]] == [bad.key] and dry["archived"] == 0
    out = hive("notes", "prune", "--harmful", "--min-count", "3", cwd=repo).stdout
    assert bad.key in out and "1 note(s) archived" in out

    live = git("show", f"hive/state:notes/{issue_id}.jsonl", cwd=repo).stdout
    kept = json.loads(git("show", f"hive/state:notes/archive/{issue_id}.jsonl", cwd=repo).stdout)
    assert "misleading advice" not in live and "good advice" in live
    assert kept["content"] == "misleading advice" and kept["archived_why"] == "harmful (min count 3)" and kept["archived_at"]
    assert [n["content"] for n in json.loads(hive("notes", "--json", cwd=repo).stdout)] == ["good advice"]
    assert [n["key"] for n in json.loads(hive("notes", "--archived", "--json", cwd=repo).stdout)] == [bad.key]
    project.sync(warn=False)
    assert "misleading advice" not in choose(project.index, project.index.get(issue_id), 10 ** 6).notes[0]["content"]

    assert hive("notes", "restore", "nnotakey", cwd=repo, check=False).returncode == 2
    assert "1 note(s) restored" in hive("notes", "restore", bad.key, cwd=repo).stdout
    assert sorted(n["content"] for n in json.loads(hive("notes", "--json", cwd=repo).stdout)) == [
        "good advice", "misleading advice"]
    assert hive("notes", "--archived", cwd=repo).stdout.strip() == "no archived notes"


def test_prune_unused_and_an_archived_line_merged_back_stays_archived(repo, hive, git, project, new_issue):
    issue_id = new_issue("noted")
    _notes_of(project, issue_id, ["ancient"], at="2020-01-01T00:00:00Z")
    _notes_of(project, issue_id, ["received lately"], at="2020-01-01T00:00:00Z")
    project.sync(warn=False)
    keys = {n["content"]: n["key"] for n in project.index.notes()}
    _seed_attempts(repo, [("done", [Seen(keys["received lately"], "context", 3)])])
    assert hive("notes", "prune", cwd=repo, check=False).returncode == 2      # says what to prune
    out = hive("notes", "prune", "--unused", "30", cwd=repo).stdout
    assert "ancient" in out and "received lately" not in out and "1 note(s) archived" in out

    # a merge (a clone that still had the line) puts it back in the live file: it stays archived
    path = repo / ".hive" / "notes" / f"{issue_id}.jsonl"
    project.sync(warn=False)
    with path.open("a") as out_file:
        out_file.write(json.dumps({"category": "context", "content": "ancient", "issue": issue_id,
                                   "at": "2020-01-01T00:00:00Z"}) + "\n")
    project.sync(full=True, warn=False)
    assert "ancient" in git("show", f"hive/state:notes/{issue_id}.jsonl", cwd=repo).stdout
    assert [n["content"] for n in project.index.notes()] == ["received lately"]


def test_a_fetched_archive_is_adopted_and_a_folder_inside_it_is_refused(repo, git, project):
    from hive.state.trust import TreeRefused, check_tree

    import pygit2

    repository = pygit2.Repository(str(repo))
    blob = repository.create_blob(b'{"content": "x"}\n')

    def tree(entries: dict[str, Any]) -> pygit2.Oid:
        builder = repository.TreeBuilder()
        for name, value in entries.items():
            if isinstance(value, dict):
                builder.insert(name, tree(value), pygit2.GIT_FILEMODE_TREE)
            else:
                builder.insert(name, value, pygit2.GIT_FILEMODE_BLOB)
        return builder.write()

    good = tree({"notes": {"project.jsonl": blob, "archive": {"hv-aaaaaa.jsonl": blob, "project.jsonl": blob}}})
    check_tree(repository, str(good))
    for bad in ({"notes": {"archive": {"deeper": {"hv-aaaaaa.jsonl": blob}}}},
                {"notes": {"archive": {"evil.txt": blob}}}):
        with pytest.raises(TreeRefused):
            check_tree(repository, str(tree(bad)))


# -- a daemon run ------------------------------------------------------------------------------------

def test_a_dependent_gets_the_scouts_note_succeeds_and_the_attempt_log_says_so(repo: Path, tmp_path: Path, hive,
                                                                                new_issue, list_json):
    scout = new_issue("scout", labels=["scout"])
    dependent = new_issue("dependent", depends_on=[scout], labels=["needs"])
    fact = "export FROB_LEVEL=7 before the tests"
    script = {"labels": {"scout": [*work_steps()[:-1], {"note": fact, "category": "discovery"}, work_steps()[-1]],
                         "needs": work_steps([{"needs_fact": "FROB_LEVEL=7", "summary": "tests fail"}])}}
    run_until_idle(repo, daemon_env(write_script(tmp_path, script)))
    assert statuses(list_json, repo)[dependent] == "finalized"
    [turn] = prompts(repo, dependent)
    assert fact in turn["text"]

    [stored] = json.loads(hive("notes", "--issue", scout, "--json", cwd=repo).stdout)
    assert stored["attempt"] == 1 and stored["agent"].startswith("w-") and stored["tokens"] > 0
    effect = json.loads(hive("notes", "--effect", "--json", cwd=repo).stdout)
    assert effect["attempts"] == 2
    [credited] = effect["notes"]
    assert credited["key"] == stored["key"] and credited["seen"]["done"] == 1 and credited["seen"]["first_try"] == 1
    assert effect["categories"]["discovery"]["seen"]["attempts"] == 1


def test_with_notes_off_the_dependent_never_hears_of_it_and_escalates(repo: Path, tmp_path: Path, hive, new_issue,
                                                                       list_json):
    scout = new_issue("scout", labels=["scout"])
    dependent = new_issue("dependent", depends_on=[scout], labels=["needs"])
    script = {"labels": {"scout": [*work_steps()[:-1], {"note": "FROB_LEVEL=7", "category": "discovery"}, work_steps()[-1]],
                         "needs": work_steps([{"needs_fact": "FROB_LEVEL=7", "summary": "tests fail"}])}}
    env = daemon_env(write_script(tmp_path, script), notes_prompt_tokens=0, max_retries=1, max_agent_switches=0)
    run_until_idle(repo, env, expect=3)
    assert statuses(list_json, repo)[dependent] == "escalated"
    assert all("FROB_LEVEL=7" not in t["text"] for t in prompts(repo, dependent))
    from hive.git import discover

    runtime = Runtime(discover(repo))
    try:
        outcomes = [(a.issue_id, a.attempt, a.outcome, len(a.notes)) for a in runtime.attempt_log.ended()]
    finally:
        runtime.close()
    assert outcomes == [(scout, 1, "done", 0), (dependent, 1, "retried", 0), (dependent, 2, "escalated", 0)]
    # the runtime data stays local: nothing of it is on hive/state
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", "hive/state"], cwd=repo, capture_output=True,
                           text=True, check=True).stdout
    assert "attempt" not in files and "runtime" not in files


def test_done_work_the_merge_step_escalated_or_failed_is_not_ok():
    stuck = note_effect.by_note([_attempt(1, "done", [("n", "context")], landed="stuck"),
                                 _attempt(2, "done", [], landed="finalized")])["n"]
    assert (stuck.seen.done, stuck.seen.rejected, stuck.seen.ok, stuck.unseen.ok) == (0, 1, 0.0, 1.0)

