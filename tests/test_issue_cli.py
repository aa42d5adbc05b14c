"""The issue commands of DESIGN §5, through the real CLI: output, JSON, exit codes, the queue.

Set-up goes through the in-process API (`new_issue`, `project`); the command under test always
runs as a subprocess.
"""

from __future__ import annotations

import json
import re

from hive import issues
from hive.state.issue_file import ID_RE
from tests.state_helpers import set_status


def blob(git, repo, path: str) -> str:
    return git("show", f"hive/state:{path}", cwd=repo).stdout


def has_path(git, repo, path: str) -> bool:
    return git("cat-file", "-e", f"hive/state:{path}", cwd=repo, check=False).returncode == 0


def archive(issue_id: str) -> str:
    return f"issues/archive/{issue_id.split('-', 1)[1][:2]}/{issue_id}.md"


def show(hive, issue_id: str) -> dict:
    return json.loads(hive("show", issue_id, "--json").stdout)


# -- create / show / list -------------------------------------------------------------------------

def test_create_prints_the_new_id_and_writes_the_file(repo, hive, git, state_log):
    blocker = hive("create", "Blocker").stdout.strip()
    proc = hive("create", "Add JWT login", "-p", "1", "-d", "Tokens, please.", "-t", "feature",
                "-l", "auth", "-l", "api", "--depends-on", blocker)
    issue = proc.stdout.strip()
    assert ID_RE.match(issue) and issue.startswith("hv-") and issue != blocker
    text = blob(git, repo, f"issues/{issue}.md")
    assert text.startswith("+++\n")
    for line in ('title = "Add JWT login"', "priority = 1", 'type = "feature"', 'status = "open"',
                 'labels = ["auth", "api"]', f'depends_on = ["{blocker}"]', 'assignee = ""'):
        assert line in text.splitlines(), line
    assert text.rstrip().endswith("Tokens, please.")
    # the checkout shows it straight away
    assert (repo / ".hive" / "issues" / f"{issue}.md").read_text() == text
    last = state_log()[-1]
    assert (last.event, last.issue) == ("created", issue)
    assert last.subject == f"create {issue}: Add JWT login"


def test_create_json_and_show_json_agree(repo, hive, new_issue):
    epic = new_issue("The epic", type="epic")
    created = json.loads(hive("create", "JSON please", "-d", "body text", "--parent", epic, "--json").stdout)
    shown = show(hive, created["id"])
    for key in ("id", "title", "status", "priority", "type", "parent", "depends_on", "labels",
                "assignee", "created", "updated", "body"):
        assert shown[key] == created[key], key
    assert shown["parent"] == epic and shown["body"].strip() == "body text"
    assert shown["path"] == f"issues/{created['id']}.md"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", shown["created"])


def test_show_text_lists_the_fields_and_what_it_blocks(repo, hive, new_issue):
    first = new_issue("First thing", description="The long story.")
    second = new_issue("Second thing", depends_on=[first])
    out = hive("show", first[:5]).stdout  # a unique prefix of an id works too
    assert first in out and "First thing" in out and "The long story." in out
    assert f"blocks: {second}" in out


def test_list_shows_every_status_unless_filtered(repo, hive, new_issue, list_json):
    assert list_json() == []
    assert "no issues" in hive("list").stdout
    a, b, c = new_issue("a"), new_issue("b", status="done"), new_issue("c", status="canceled")
    everything = list_json()
    assert {i["id"]: i["status"] for i in everything} == {a: "open", b: "done", c: "canceled"}
    assert set(everything[0]) >= {"id", "title", "status", "priority", "type", "parent", "depends_on",
                                  "labels", "assignee", "created", "updated"}
    assert [i["id"] for i in list_json("--status", "done")] == [b]
    assert {i["id"] for i in list_json("--status", "open", "--status", "canceled")} == {a, c}
    text = hive("list").stdout
    assert all(x in text for x in (a, b, c)) and "canceled" in text


def test_every_listing_command_takes_json(repo, hive, new_issue):
    issue = new_issue("for json")
    hive("note", "a note", "--issue", issue)
    for command, kind in ((["list"], list), (["list", "--ready"], list), (["show", issue], dict),
                          (["log", issue], list), (["notes"], list), (["status"], dict),
                          (["config", "list"], dict)):
        out = hive(*command, "--json").stdout
        data = json.loads(out)
        assert data and isinstance(data, kind), (command, out)


# -- ready queue ----------------------------------------------------------------------------------

def write_issue(repo, issue_id: str, text: str) -> None:
    (repo / ".hive" / "issues" / f"{issue_id}.md").write_text(text)


def test_ready_is_ordered_by_priority_then_creation(repo, list_json, issue_text):
    # written straight into .hive/: the next command picks them up and commits them
    write_issue(repo, "hv-aaaaa3", issue_text("late, urgent", priority=0, created="2026-03-01T00:00:00Z"))
    write_issue(repo, "hv-aaaaa2", issue_text("early, normal", priority=2, created="2026-01-01T00:00:00Z"))
    write_issue(repo, "hv-aaaaa1", issue_text("late, normal", priority=2, created="2026-02-01T00:00:00Z"))
    write_issue(repo, "hv-aaaaa0", issue_text("early, urgent", priority=0, created="2026-01-15T00:00:00Z"))
    assert [i["id"] for i in list_json("--ready")] == ["hv-aaaaa0", "hv-aaaaa3", "hv-aaaaa2", "hv-aaaaa1"]


def test_ready_queue_rules(repo, project, new_issue, list_json):
    blocker = new_issue("blocker")
    waiting = new_issue("waits for blocker", depends_on=[blocker])
    epic = new_issue("an epic", type="epic")
    child = new_issue("child of the epic", parent=epic)
    taken = new_issue("someone has it")
    issues.update(project, taken, {"assignee": "w-1"})
    assert {i["id"] for i in list_json("--ready")} == {blocker, child}  # created in the same second

    def ready_after(status: str) -> bool:
        set_status(project, blocker, status)
        return waiting in [i["id"] for i in list_json("--ready")]

    assert ready_after("done") and ready_after("finalized") and ready_after("canceled")
    assert not ready_after("in_progress") and not ready_after("failed") and not ready_after("escalated")
    # an epic is never ready, even with nothing blocking it
    assert epic not in [i["id"] for i in list_json("--ready")]


def test_unknown_blocker_is_never_ready(repo, hive, git, list_json, issue_text):
    # only a hand-made commit can put an unknown blocker on the branch: hive refuses to
    write_issue(repo, "hv-bbbbb1", issue_text("blocked by a ghost", depends_on=["hv-zzzzzz"]))
    checkout = repo / ".hive"
    git("add", "issues/hv-bbbbb1.md", cwd=checkout)
    git("commit", "-q", "-m", "by hand", cwd=checkout)
    proc = hive("list", "--json")
    assert [i["id"] for i in json.loads(proc.stdout)] == ["hv-bbbbb1"]
    assert "hv-zzzzzz" in proc.stderr
    assert list_json("--ready") == []


# -- update / dep / cancel / retry / finalize -----------------------------------------------------

def test_update_changes_fields_in_one_commit_each(repo, hive, new_issue, state_log):
    issue = new_issue("before", labels=["x"])
    start = len(state_log())
    hive("update", issue, "--title", "after", "-p", "0", "-t", "bug", "-l", "y", "--remove-label", "x",
         "-d", "new description")
    hive("update", issue, "--status", "in_progress", "--assignee", "w-7")
    data = show(hive, issue)
    assert (data["title"], data["priority"], data["type"], data["labels"]) == ("after", 0, "bug", ["y"])
    assert data["body"].strip() == "new description"
    assert (data["status"], data["assignee"]) == ("in_progress", "w-7")
    commits = state_log()[start:]
    assert [(c.event, c.issue) for c in commits] == [("updated", issue), ("in_progress", issue)]
    # a status that takes the issue away from its agent clears the assignee
    hive("update", issue, "--status", "open")
    assert show(hive, issue)["assignee"] == ""
    # nothing to change: bad usage, no commit
    before = len(state_log())
    proc = hive("update", issue, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert len(state_log()) == before


def test_dep_add_and_rm(repo, hive, new_issue, state_log):
    a, b = new_issue("a"), new_issue("b")
    assert b in hive("dep", "add", a, b).stdout
    assert show(hive, a)["depends_on"] == [b]
    assert (state_log()[-1].event, state_log()[-1].issue) == ("dep-added", a)
    hive("dep", "rm", a, b)
    assert show(hive, a)["depends_on"] == []
    assert state_log()[-1].event == "dep-removed"
    proc = hive("dep", "rm", a, b, check=False)
    assert proc.returncode == 2 and "does not depend" in proc.stderr


def test_cancel_archives_the_file_and_retry_brings_it_back(repo, hive, git, new_issue, state_log):
    issue = new_issue("to cancel")
    live = f"issues/{issue}.md"
    hive("cancel", issue)
    assert not has_path(git, repo, live)
    assert 'status = "canceled"' in blob(git, repo, archive(issue))
    # the archive is not checked out: nothing written there, git told so (status clean)
    assert not (repo / ".hive" / "issues" / "archive").exists() and not (repo / ".hive" / live).exists()
    assert git("ls-files", "-v", cwd=repo / ".hive").stdout.count(f"S {archive(issue)}\n") == 1
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    data = show(hive, issue)   # read from the branch
    assert (data["status"], data["path"], data["title"]) == ("canceled", archive(issue), "to cancel")
    assert "to cancel" in hive("show", issue).stdout and "canceled" in hive("log", issue).stdout
    listed = json.loads(hive("list", "--json", "--status", "canceled").stdout)
    assert [i["id"] for i in listed] == [issue]
    assert (state_log()[-1].event, state_log()[-1].issue) == ("canceled", issue)
    hive("retry", issue)
    assert has_path(git, repo, live) and not has_path(git, repo, archive(issue))
    assert (repo / ".hive" / live).read_text() == blob(git, repo, live)
    assert not (repo / ".hive" / archive(issue)).exists()
    assert show(hive, issue)["status"] == "open"
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    hive("cancel", issue)
    hive("update", issue, "--status", "open")
    assert (repo / ".hive" / live).read_text() == blob(git, repo, live) and 'status = "open"' in blob(git, repo, live)
    assert not (repo / ".hive" / "issues" / "archive").exists()
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""


def test_retry_refuses_an_open_issue_and_reopens_stuck_ones(repo, hive, new_issue, state_log):
    issue = new_issue("fine as it is")
    before = len(state_log())
    proc = hive("retry", issue, check=False)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and issue in proc.stderr
    assert len(state_log()) == before
    for status in ("escalated", "failed"):
        stuck = new_issue("stuck", status=status)
        hive("retry", stuck)
        data = show(hive, stuck)
        assert (data["status"], data["assignee"]) == ("open", ""), status


def test_retry_gives_a_fresh_budget(repo, project, hive, new_issue):
    """`retry` promises a fresh budget: retries, switches and the anomaly window start again."""
    import time

    from hive.runtime import Budget, Runtime

    stuck = new_issue("spent its budget", status="escalated")
    runtime = Runtime(project.paths)
    try:
        runtime.save_budget(Budget(stuck, retries=2, switches=2, failures=[time.time()] * 3,
                                   last_error="boom", tokens=999))
        hive("retry", stuck)
        assert runtime.budget(stuck) == Budget(stuck)
    finally:
        runtime.close()


def test_update_refuses_a_status_no_daemon_moves_on_from_unless_forced(repo, hive, new_issue, state_log):
    issue = new_issue("no limbo")
    before = len(state_log())
    for args in (("--status", "in_progress"), ("--assignee", "w-7"), ("--status", "escalated", "--assignee", "me")):
        proc = hive("update", issue, *args, check=False)
        assert proc.returncode == 1, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and issue in proc.stderr
    assert len(state_log()) == before
    hive("update", issue, "--status", "in_progress", "--force")
    assert (show(hive, issue)["status"], show(hive, issue)["assignee"]) == ("in_progress", "")


def test_finalize_refuses_what_it_cannot_merge(repo, hive, new_issue, state_log):
    not_done = new_issue("not done yet")
    no_branch = new_issue("done, but no work branch", status="done")
    before = len(state_log())
    for issue, reason in ((not_done, "only done issues"), (no_branch, f"no branch hive/work/{no_branch}")):
        proc = hive("finalize", issue, check=False)
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and reason in proc.stderr
    assert len(state_log()) == before


def test_log_renders_the_history_of_one_issue(repo, project, hive, new_issue):
    issue, other = new_issue("tracked"), new_issue("not tracked")
    issues.update(project, issue, {"priority": 0})
    issues.update(project, other, {"priority": 0})
    issues.add_notes(project, [issues.note_line("learned", "gotcha", issue=issue)], file_id=issue)
    issues.update(project, issue, {"status": "in_progress", "assignee": "w-3"}, event="claimed", agent="w-3")
    hive("cancel", issue)
    entries = json.loads(hive("log", issue, "--json").stdout)
    assert [e["event"] for e in entries] == ["created", "updated", "noted", "claimed", "canceled"]
    assert entries[3]["agent"] == "w-3"
    assert all(e["author"] == "Hive Tester" for e in entries)
    assert all(re.fullmatch(r"[0-9a-f]{40}", e["commit"]) for e in entries)
    text = hive("log", issue).stdout
    assert len(text.strip().splitlines()) == 5 and "canceled" in text and "w-3" in text


# -- notes ----------------------------------------------------------------------------------------

def test_note_and_notes_round_trip(repo, hive, git, new_issue, state_log):
    issue = new_issue("noted issue")
    hive("note", "tests need PYTHONPATH=src", "--category", "gotcha")
    hive("note", "the API is in api/", "--issue", issue, "-c", "discovery")
    everything = json.loads(hive("notes", "--json").stdout)
    assert {(n["content"], n["category"], n["issue"]) for n in everything} == {
        ("tests need PYTHONPATH=src", "gotcha", ""), ("the API is in api/", "discovery", issue)}
    assert all(set(n) == {"category", "content", "issue", "agent", "at", "attempt", "tokens", "key"} for n in everything)
    mine = json.loads(hive("notes", "--issue", issue, "--json").stdout)
    assert [n["content"] for n in mine] == ["the API is in api/"]
    stored = json.loads(blob(git, repo, f"notes/{issue}.jsonl"))
    assert (stored["content"], stored["category"], stored["issue"]) == ("the API is in api/", "discovery", issue)
    assert (state_log()[-1].event, state_log()[-1].issue) == ("noted", issue)
    assert "PYTHONPATH=src" in hive("notes").stdout


def test_status_counts_and_needs_attention(repo, hive, new_issue):
    a, b = new_issue("a"), new_issue("b", status="escalated")
    new_issue("c")
    data = json.loads(hive("status", "--json").stdout)
    assert data["counts"]["open"] == 2 and data["counts"]["escalated"] == 1 and data["total"] == 3
    assert a in data["ready"] and b not in data["ready"]
    assert [x["issue"] for x in data["needs_attention"]] == [b]


# -- exit codes -----------------------------------------------------------------------------------

def test_bad_input_exits_2_with_one_line_on_stderr_and_changes_nothing(repo, hive, state_log):
    before = len(state_log())
    for args in (["show", "hv-zzzzzz"], ["update", "hv-zzzzzz", "-p", "1"], ["cancel", "hv-zzzzzz"],
                 ["create", "x", "-p", "9"], ["create", "x", "-t", "saga"],
                 ["create", "x", "--depends-on", "hv-zzzzzz"], ["list", "--status", "sleeping"],
                 ["show", "../../etc/passwd"], ["note", "x", "--issue", "../notes/x"]):
        proc = hive(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == "" and proc.stderr.strip(), args
    assert len(state_log()) == before
    proc = hive("show", "hv-zzzzzz", check=False)
    assert proc.stderr.strip().splitlines() == ["git hive: unknown issue hv-zzzzzz"]


def test_titles_and_bodies_reach_the_terminal_with_control_characters_escaped(repo: Path, cli) -> None:
    hostile = "a \x1b]52;c;cHduZWQ=\x07 title \x1b[2J"
    issue_id = cli("create", hostile, "-d", "body \x1b[31mred\x9b", cwd=repo).stdout.strip()
    listed = cli("list", cwd=repo).stdout
    shown = cli("show", issue_id, cwd=repo).stdout
    for out in (listed, shown):
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\\x1b]52;c;cHduZWQ=\\x07" in listed and "\\x1b[31mred\\x9b" in shown
