"""`touches`: the globs of the files an issue's work is expected to change (DESIGN §2).

The field through the real CLI (`create`/`update --touches`, `show`, `list --json`), its checks
(a bad glob or a list over the bounds is a problem row naming file:line, from a person's commit
as from fetched state), and the glob language itself (`hive/state/globs.py`: strings only).
"""

from __future__ import annotations

import json

import pytest

from hive.state import globs


def show(hive, issue_id: str) -> dict:
    return json.loads(hive("show", issue_id, "--json").stdout)


def test_create_and_update_take_touches_and_show_and_list_print_them(repo, hive, git):
    issue = hive("create", "Auth", "--touches", "src/auth/**", "--touches", "docs/auth.md").stdout.strip()
    text = git("show", f"hive/state:issues/{issue}.md", cwd=repo).stdout
    assert 'touches = ["src/auth/**", "docs/auth.md"]' in text.splitlines()
    assert show(hive, issue)["touches"] == ["src/auth/**", "docs/auth.md"]
    assert "touches: src/auth/**, docs/auth.md" in hive("show", issue).stdout
    listed = {i["id"]: i for i in json.loads(hive("list", "--json").stdout)}
    assert listed[issue]["touches"] == ["src/auth/**", "docs/auth.md"]

    hive("update", issue, "--touches", "src/login.py")
    assert show(hive, issue)["touches"] == ["src/login.py"]
    hive("update", issue, "--touches", "")
    assert show(hive, issue)["touches"] == []
    assert "touches =" not in git("show", f"hive/state:issues/{issue}.md", cwd=repo).stdout

    plain = hive("create", "No touches").stdout.strip()
    assert show(hive, plain)["touches"] == []
    assert "touches =" not in git("show", f"hive/state:issues/{plain}.md", cwd=repo).stdout


@pytest.mark.parametrize("glob", ["../secret", "/etc/passwd", "src/[ab", "a**b", ""])
def test_a_bad_glob_on_the_command_line_is_one_line_exit_2(repo, hive, glob):
    proc = hive("create", "Bad", "--touches", glob or " ", check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--touches" in proc.stderr and "Traceback" not in proc.stderr


def commit_file(git, repo, name: str, text: str) -> None:
    (repo / ".hive" / "issues" / name).write_text(text)
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-q", "-m", "by hand", cwd=repo / ".hive")


def test_a_bad_or_oversized_touches_is_a_problem_row_naming_file_and_line(repo, hive, git, issue_text):
    good = issue_text("good").replace('labels = []', 'labels = []\ntouches = ["src/*.py"]')
    bad = issue_text("bad").replace('labels = []', 'labels = []\ntouches = ["../outside"]')
    many = issue_text("many").replace('labels = []', f'labels = []\ntouches = {json.dumps(["f"] * 65)}')
    long = issue_text("long").replace('labels = []', f'labels = []\ntouches = {json.dumps(["x" * 300])}')
    commit_file(git, repo, "hv-ttttt1.md", good)
    for name, text in (("hv-ttttt2.md", bad), ("hv-ttttt3.md", many), ("hv-ttttt4.md", long)):
        commit_file(git, repo, name, text)
    proc = hive("doctor", check=False)
    assert proc.returncode == 2
    for name in ("hv-ttttt2.md:8: bad touches:", "hv-ttttt3.md:8: bad touches: more than 64 globs",
                 "hv-ttttt4.md:8: bad touches: a glob longer than 256"):
        assert f"issues/{name}" in proc.stdout, (name, proc.stdout)
    listed = {i["id"]: i["touches"] for i in json.loads(hive("list", "--json").stdout)}
    assert listed == {"hv-ttttt1": ["src/*.py"]}   # the broken ones are not taken in


def test_touches_merge_as_a_set_in_the_merge_driver():
    from hive.state import merge_driver

    assert "touches" in merge_driver.SET_FIELDS


# -- the glob language: strings only -------------------------------------------------------------

@pytest.mark.parametrize("a, b, meet", [
    ("src/auth/**", "src/auth/login.py", True),
    ("src/auth/", "src/auth/deep/x.py", True),
    ("src/auth", "src/auth/x.py", False),        # without `/` a glob names files only
    ("src/*.py", "src/*.md", False),
    ("src/*.py", "src/a*", True),
    ("**/*.py", "docs/readme.md", False),
    ("**/*.py", "a/b/c.py", True),
    ("a/**/z", "a/z", True),
    ("src/[ab].py", "src/[!a].py", True),
    ("src/[a].py", "src/[!a].py", False),
    ("x[a-c]", "x[!ac]", True),                  # b is in both
    ("x[a-c]", "x[d-f]", False),
    ("x[!a]", "x[!b]", True),
    ("*x", "*y", False),
    ("src/x?.py", "src/xy.py", True),
    ("notes.txt", "notes.txt", True),
    ("notes.txt", "other.txt", False),
])
def test_overlap_is_decided_on_the_strings(a, b, meet):
    assert globs.overlap(a, b) is meet and globs.overlap(b, a) is meet


def test_matches_a_path_as_a_string():
    assert globs.matches("src/*.py", "src/a.py") and not globs.matches("src/*.py", "src/a/b.py")
    assert globs.matches("src/", "src/a/b.py") and globs.matches("**", "any/path/at/all")
    assert globs.matches("a[*]b", "a*b") and not globs.matches("a[*]b", "axb")
    assert not globs.matches("src/a*", "src/[x]")   # the path's own brackets are plain characters
    assert globs.matches("src/?x?", "src/[x]")


@pytest.mark.parametrize("glob", ["", " ", "/abs", "../up", "a/../b", "a/./b", "a//b", "a\\b", "a\nb",
                                  "a**", "[ab", "x" * 257])
def test_invalid_globs_are_named(glob):
    assert globs.problem(glob)


def test_the_bounds():
    assert globs.problems(["a"] * globs.MAX_GLOBS) is None
    assert "more than 64" in globs.problems(["a"] * (globs.MAX_GLOBS + 1))


# -- the Queen declares them ----------------------------------------------------------------------

def test_the_queen_is_asked_for_touches_and_her_plan_takes_them(repo, tmp_path, hive, list_json):
    from hive.queen import QUEEN_SYSTEM_PROMPT
    from tests.test_plan import done_step, plan, queen_issue, queen_prompts, queen_script, write

    assert "Declare `touches` for every issue" in QUEEN_SYSTEM_PROMPT
    good = queen_issue("Rate limits").replace("labels = []", 'labels = []\ntouches = ["src/api/", "tests/test_api.py"]')
    bad = good.replace('"src/api/"', '"../outside/"')
    env = queen_script(tmp_path, [write("hv-tch001", bad, [1]), write("hv-tch001", good, [2]), done_step()])
    done = plan(hive, env)
    assert "plan round 1: 1 problem(s), sent back to the Queen: issues/hv-tch001.md:" in done.stdout
    assert "issues/hv-tch001.md:8: bad touches:" in queen_prompts(repo)[1]
    assert {i["id"]: i["touches"] for i in list_json()} == {"hv-tch001": ["src/api/", "tests/test_api.py"]}


def test_touches_from_fetched_state_are_bounded_data_that_can_only_hold_work_back(clones, cli, hive, git,
                                                                                 issue_text):
    _, (a, b) = clones("a", "b")
    over = issue_text("over the cap").replace("labels = []", f"labels = []\ntouches = {json.dumps(['x'] * 65)}")
    everything = issue_text("claimed elsewhere", status="in_progress", assignee="w-bbbbbb").replace(
        "labels = []", 'labels = []\ntouches = ["**"]')
    for name, text in (("hv-fffff1.md", over), ("hv-fffff2.md", everything)):
        (a / ".hive" / "issues" / name).write_text(text)
    git("add", "-A", cwd=a / ".hive")
    git("commit", "-q", "-m", "by hand, elsewhere", cwd=a / ".hive")
    git("push", "-q", "origin", "hive/state", cwd=a)
    cli("sync", cwd=b)
    mine = hive("create", "mine", "--touches", "src/x.py", cwd=b).stdout.strip()
    doctor = hive("doctor", cwd=b, check=False)
    assert doctor.returncode == 2 and "issues/hv-fffff1.md:8: bad touches: more than 64 globs" in doctor.stdout
    listed = {i["id"]: i["touches"] for i in json.loads(hive("list", "--json", cwd=b).stdout)}
    assert "hv-fffff1" not in listed and listed["hv-fffff2"] == ["**"]
    ready = hive("list", "--ready", cwd=b, env={"COLUMNS": "200"}).stdout
    assert f"{mine}" in ready and "waits: touches src/x.py like hv-fffff2" in ready


def test_plan_md_shows_what_each_issue_touches():
    from hive.queen import render_plan
    from hive.state.issue_file import Issue

    doc = render_plan("spec", [Issue(id="hv-aaaaaa", title="t", touches=["src/a|b.py", "docs/"]),
                               Issue(id="hv-bbbbbb", title="u")])
    assert "| hv-aaaaaa | t | task | 2 | - | - | `src/a\\|b.py`, `docs/` |" in doc
    assert "| hv-bbbbbb | u | task | 2 | - | - | - |" in doc


# -- the rule itself: the Picker's order --------------------------------------------------------

def _issue(name: str, *touches: str):
    from hive.state.issue_file import Issue

    return Issue(id=f"hv-{name:0>6}", title=name, touches=list(touches))


def test_the_picker_starts_clear_issues_first_and_each_claimed_one_counts():
    from hive.touches import Busy, Picker

    busy = [Busy("hv-000run", ("src/api/",), lambda: ["docs/changed.md"])]
    ready = [_issue("a", "src/api/x.py"), _issue("b", "lib/x.py"), _issue("c", "lib/*.py"),
             _issue("d"), _issue("e", "docs/*.md")]
    picker = Picker(lambda: list(busy))
    started = []
    for issue in picker.order(ready):
        started.append(issue.title)
        picker.started(issue)
    assert started == ["b", "d"]   # c meets b, claimed just before it; a and e meet the running issue
    assert {k: (str(w), w.declared_only) for k, w in picker.held.items()} == {
        "hv-00000a": ("touches src/api/x.py like hv-000run", True),
        "hv-00000c": ("touches lib/x.py like hv-00000b", True),
        "hv-00000e": ("touches docs/changed.md like hv-000run", False),   # what its agent changed
    }


def test_advise_starts_declared_overlaps_last_but_never_over_a_changed_file():
    from hive.touches import Busy, Picker

    busy = [Busy("hv-000run", ("src/api/",), lambda: ["docs/changed.md"])]
    ready = [_issue("a", "src/api/x.py"), _issue("b", "lib/x.py"), _issue("e", "docs/*.md")]
    picker = Picker(lambda: list(busy), mode="advise")
    assert [i.title for i in picker.order(ready)] == ["b", "a"]
    assert {k: str(w) for k, w in picker.held.items()} == {"hv-00000e": "touches docs/changed.md like hv-000run"}
    assert not picker.held["hv-00000e"].declared_only


def test_an_issues_blockers_never_hold_it_back():
    from hive.state.issue_file import Issue
    from hive.touches import Busy, Picker

    busy = [Busy("hv-00000a", ("x.txt",)), Busy("hv-00000b", ("x.txt",)), Busy("hv-00000z", ("y.txt",))]
    blockers = {"hv-00000c": ["hv-00000b"], "hv-00000b": ["hv-00000a"]}
    dependent = Issue(id="hv-00000c", title="c", depends_on=["hv-00000b"], touches=["x.txt", "y.txt"])
    picker = Picker(lambda: busy, blockers_of=lambda i: blockers.get(i, []))
    assert str(picker.wait_of(dependent)) == "touches y.txt like hv-00000z"
    busy.pop()
    assert picker.wait_of(dependent) is None   # its blockers' work is in its base, transitively
