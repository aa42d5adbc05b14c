"""Validation: references, cycles, field values, file format; file:line in every report.

Bad input exits 2 naming the file and line (DESIGN §5); an invalid file is never committed and
never hides the valid ones.
"""

from __future__ import annotations

import json
import sys

import pytest

# `git hive edit` runs $EDITOR FILE; this editor replaces FILE with the file named in $EDIT_WITH.
EDITOR_SCRIPT = "import os, shutil, sys\nshutil.copyfile(os.environ['EDIT_WITH'], sys.argv[-1])\n"


@pytest.fixture
def edit_with(tmp_path, hive):
    """`edit_with(issue_id, text, check=False)`: run `git hive edit ID` with an editor that saves `text`."""
    script = tmp_path / "editor.py"
    script.write_text(EDITOR_SCRIPT)

    def run(issue_id: str, text: str, check: bool = False):
        content = tmp_path / "content.md"
        content.write_text(text)
        return hive("edit", issue_id, check=check,
                    env={"EDITOR": f"{sys.executable} {script}", "EDIT_WITH": str(content)})

    return run


def tip(git, repo) -> str:
    return git("rev-parse", "hive/state", cwd=repo).stdout.strip()


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- references and cycles ------------------------------------------------------------------------

def test_dep_add_refuses_unknown_ids_self_dependency_and_cycles(repo, hive, git, new_issue):
    a = new_issue("a")
    b = new_issue("b", depends_on=[a])
    c = new_issue("c", depends_on=[b])
    before = tip(git, repo)

    proc = hive("dep", "add", a, "hv-zzzzzz", check=False)
    assert proc.returncode == 2 and "unknown issue hv-zzzzzz" in one_line(proc)
    proc = hive("dep", "add", "hv-zzzzzz", a, check=False)
    assert proc.returncode == 2 and "hv-zzzzzz" in one_line(proc)
    proc = hive("dep", "add", a, a, check=False)
    assert proc.returncode == 2 and "itself" in one_line(proc)
    proc = hive("dep", "add", a, b, check=False)
    assert proc.returncode == 2
    assert one_line(proc).endswith(f"dependency cycle: {a} -> {b} -> {a}")
    proc = hive("dep", "add", a, c, check=False)
    assert proc.returncode == 2
    assert one_line(proc).endswith(f"dependency cycle: {a} -> {c} -> {b} -> {a}")
    assert tip(git, repo) == before


def test_create_and_update_refuse_unknown_references(repo, hive, git, new_issue):
    issue = new_issue("x")
    before = tip(git, repo)
    for args in (["create", "y", "--parent", "hv-zzzzzz"], ["create", "y", "--depends-on", "hv-zzzzzz"],
                 ["update", issue, "--parent", "hv-zzzzzz"], ["update", issue, "--parent", issue]):
        proc = hive(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert one_line(proc).startswith("git hive: ")
    assert tip(git, repo) == before


# -- git hive edit --------------------------------------------------------------------------------

def test_edit_commits_a_valid_change(repo, git, new_issue, edit_with, state_log):
    issue = new_issue("edit me")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    proc = edit_with(issue, path.read_text().replace("edit me", "edited in $EDITOR"), check=True)
    assert f"saved {issue}" in proc.stdout
    assert "edited in $EDITOR" in git("show", f"hive/state:issues/{issue}.md", cwd=repo).stdout
    assert (state_log()[-1].event, state_log()[-1].issue) == ("edited", issue)


BAD_EDITS = [  # (replace this, with that) -> (line reported, reason)
    (('status = "open"', 'status = "pending"'), 3, "bad status 'pending'"),
    (("priority = 2", "priority = 7"), 4, "bad priority 7"),
    (("priority = 2", "priority = -1"), 4, "bad priority -1"),
    (('type = "task"', 'type = "story"'), 5, "bad type 'story'"),
    (('type = "task"', 'type = "task'), 5, "broken TOML"),
    (("depends_on = []", 'depends_on = ["hv-zzzzzz"]'), 6, "unknown issue hv-zzzzzz"),   # the depends_on line
    (("depends_on = []", 'depends_on = ["not an id"]'), 6, "invalid issue id"),
    (("+++\ntitle", "title"), 1, "missing front matter"),
]


def test_edit_refuses_bad_content_with_file_and_line(repo, git, new_issue, edit_with):
    issue = new_issue("edit me")
    path = repo / ".hive" / "issues" / f"{issue}.md"
    original = path.read_text()
    assert original.startswith("+++\ntitle")
    before = tip(git, repo)
    for (old, new), line, reason in BAD_EDITS:
        bad = original.replace(old, new, 1)
        assert bad != original
        proc = edit_with(issue, bad)
        assert proc.returncode == 2, (reason, proc.stderr)
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"git hive: .hive/issues/{issue}.md:{line}: ") and reason in last, (reason, last)
        assert tip(git, repo) == before, reason
        assert path.read_text() == bad, reason  # left exactly as written, nothing lost


def test_edit_refuses_a_cycle_and_prints_it(repo, git, new_issue, edit_with):
    a = new_issue("a")
    b = new_issue("b", depends_on=[a])
    path = repo / ".hive" / "issues" / f"{a}.md"
    before = tip(git, repo)
    proc = edit_with(a, path.read_text().replace("depends_on = []", f'depends_on = ["{b}"]'))
    assert proc.returncode == 2
    assert f"dependency cycle: {a} -> {b} -> {a}" in proc.stderr
    assert f".hive/issues/{a}.md:6: dependency cycle" in proc.stderr   # the depends_on line
    assert tip(git, repo) == before


# -- files written straight into .hive/ -----------------------------------------------------------

def test_one_broken_file_never_hides_the_others(repo, hive, git, new_issue, issue_text):
    good = {new_issue(f"good {n}") for n in range(3)}
    issues_dir = repo / ".hive" / "issues"
    (issues_dir / "hv-ggggg1.md").write_text(issue_text("bad status", status="sleeping"))
    (issues_dir / "hv-ggggg2.md").write_text("just some notes, no front matter\n")
    (issues_dir / "not-an-id.md").write_text(issue_text("bad file name"))
    (issues_dir / "hv-ggggg3.md").write_text(issue_text("ok", depends_on=["hv-zzzzzz"]))
    before = tip(git, repo)
    proc = hive("list", "--json")
    assert proc.returncode == 0
    assert {i["id"] for i in json.loads(proc.stdout)} == good
    warnings = proc.stderr.strip().splitlines()
    assert all(line.startswith("warning: .hive/issues/") for line in warnings), warnings
    for expected in ("hv-ggggg1.md:3: bad status 'sleeping'", "hv-ggggg2.md:1: missing front matter",
                     "not-an-id.md:1: file name is not a valid issue id", "hv-ggggg3.md:6: unknown issue hv-zzzzzz"):
        assert any(expected in line for line in warnings), (expected, warnings)
    assert tip(git, repo) == before  # none of them was committed
    assert "good 0" in hive("list").stdout


def test_doctor_exits_2_naming_an_invalid_file(repo, hive, new_issue, issue_text):
    new_issue("fine")
    (repo / ".hive" / "issues" / "hv-hhhhh1.md").write_text(issue_text("bad", priority=9))
    proc = hive("doctor", check=False)
    assert proc.returncode == 2
    assert ".hive/issues/hv-hhhhh1.md:4" in proc.stdout


def test_a_cycle_written_by_hand_is_not_committed(repo, hive, git, new_issue):
    a = new_issue("a")
    b = new_issue("b", depends_on=[a])
    path = repo / ".hive" / "issues" / f"{a}.md"
    path.write_text(path.read_text().replace("depends_on = []", f'depends_on = ["{b}"]'))
    before = tip(git, repo)
    proc = hive("list", "--json")
    assert f"dependency cycle: {a} -> {b} -> {a}" in proc.stderr
    assert tip(git, repo) == before
    assert {i["id"]: i["depends_on"] for i in json.loads(proc.stdout)} == {a: [], b: [a]}


def test_a_cycle_committed_by_hand_is_reported_and_never_ready(repo, hive, git, issue_text):
    issues_dir = repo / ".hive" / "issues"
    (issues_dir / "hv-kkkkk1.md").write_text(issue_text("one", depends_on=["hv-kkkkk2"]))
    (issues_dir / "hv-kkkkk2.md").write_text(issue_text("two", depends_on=["hv-kkkkk1"]))
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "a cycle, by hand", cwd=repo / ".hive")
    proc = hive("list", "--ready", "--json")
    assert json.loads(proc.stdout) == []
    assert "dependency cycle: hv-kkkkk1 -> hv-kkkkk2 -> hv-kkkkk1" in proc.stderr


def test_notes_lines_are_validated(repo, hive, git, new_issue):
    issue = new_issue("noted")
    hive("note", "good note", "--issue", issue)
    path = repo / ".hive" / "notes" / f"{issue}.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    before = tip(git, repo)
    # commands scan the live issues folder; doctor (and the watcher) look at every file
    proc = hive("doctor", check=False)
    assert proc.returncode == 2
    assert f".hive/notes/{issue}.jsonl:2: bad note line" in proc.stdout
    assert tip(git, repo) == before
    assert [n["content"] for n in json.loads(hive("notes", "--json").stdout)] == ["good note"]


def test_a_notes_file_edited_past_what_another_machine_takes_in_is_refused(repo, hive, git, new_issue):
    from hive.state import trust

    issue = new_issue("noted by hand")
    hive("note", "good note", "--issue", issue)
    path = repo / ".hive" / "notes" / f"{issue}.jsonl"
    line = json.dumps({"category": "context", "content": "y" * 2000}) + "\n"
    path.write_text(path.read_text() + line * (trust.MAX_NOTES_BYTES // len(line) + 1))
    before = tip(git, repo)
    proc = hive("doctor", check=False)
    assert proc.returncode == 2
    assert f".hive/notes/{issue}.jsonl:1: {path.stat().st_size} bytes, more than {trust.MAX_NOTES_BYTES}" in proc.stdout
    assert tip(git, repo) == before
    assert path.stat().st_size > trust.MAX_NOTES_BYTES      # the person's file is left as they wrote it


# -- checks run against the branch, not a stale index ---------------------------------------------

def commit_by_hand(git, repo, issue_id: str, old: str, new: str) -> None:
    """Change an issue with a plain git commit in `.hive/`: the index has not seen it yet."""
    path = repo / ".hive" / "issues" / f"{issue_id}.md"
    path.write_text(path.read_text().replace(old, new))
    git("commit", "-q", "-am", "by hand", cwd=repo / ".hive")


def test_a_cycle_is_refused_even_when_the_index_lags_the_branch(repo, project, git, new_issue):
    from hive.errors import BadInput
    from hive import issues

    a, b = new_issue("a"), new_issue("b")
    commit_by_hand(git, repo, b, "depends_on = []", f'depends_on = ["{a}"]')  # b -> a
    with pytest.raises(BadInput, match=f"dependency cycle: {a} -> {b} -> {a}"):
        issues.add_dependency(project, a, b)
    assert f'"{b}"' not in git("show", f"hive/state:issues/{a}.md", cwd=repo).stdout


def test_dep_add_and_rm_never_drop_a_dependency_added_meanwhile(repo, project, git, new_issue):
    from hive import issues

    a, b, c, d = new_issue("a"), new_issue("b"), new_issue("c"), new_issue("d")
    commit_by_hand(git, repo, a, "depends_on = []", f'depends_on = ["{c}"]')
    assert issues.add_dependency(project, a, b).depends_on == [c, b]
    commit_by_hand(git, repo, a, f'depends_on = ["{c}", "{b}"]', f'depends_on = ["{c}", "{b}", "{d}"]')
    assert issues.remove_dependency(project, a, c).depends_on == [b, d]


def test_a_parsed_issue_is_its_own_even_when_the_reading_is_shared(issue_text):
    """Parsing the same front matter twice reuses tomllib's reading; an Issue changed by its
    holder must not change what the next parse returns."""
    from hive.errors import BadInput
    from hive.state import issue_file

    extra = 'reviewers = ["ana", "bo"]\nlimits = {cpu = 2}\n'
    text = issue_text("shared reading").replace("\n+++\n", "\n" + extra + "+++\n", 1)
    first = issue_file.parse(text, "hv-aaaaa1")
    first.extra["reviewers"].append("cy")
    first.extra["limits"]["cpu"] = 8
    first.depends_on.append("hv-bbbbb2")
    second = issue_file.parse(text, "hv-aaaaa1")
    assert second.extra == {"reviewers": ["ana", "bo"], "limits": {"cpu": 2}}
    assert second.depends_on == []
    with pytest.raises(BadInput, match=r"issues/hv-aaaaa1.md:3"):
        issue_file.parse(text.replace('status = "open"', 'status = "opn"'), "hv-aaaaa1")
