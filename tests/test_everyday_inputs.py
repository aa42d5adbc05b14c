"""Everyday inputs a person types (issue 17): what is refused, what is read, what is said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def one_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_empty_and_multi_line_titles_are_refused(repo, hive, list_json):
    for title, reason in (("", "the title is empty"), ("   ", "the title is empty"),
                          ("one\ntwo", "the title must be one line")):
        proc = hive("create", title, cwd=repo, check=False)
        assert proc.returncode == 2 and one_error(proc) == f"git hive: {reason}" + (
            " (put the details in the description: -d TEXT)" if "line" in reason else "")
    issue = hive("create", "fine", cwd=repo).stdout.strip()
    proc = hive("update", issue, "--title", "a\nb", cwd=repo, check=False)
    assert proc.returncode == 2 and "one line" in one_error(proc)
    assert [i["title"] for i in list_json(cwd=repo)] == ["fine"]


def test_an_empty_note_is_refused(repo, hive):
    proc = hive("note", "  ", cwd=repo, check=False)
    assert proc.returncode == 2 and one_error(proc) == "git hive: the note is empty"
    assert "no notes" in hive("notes", cwd=repo).stdout


def test_description_dash_reads_stdin(repo, hive):
    issue = hive("create", "from a pipe", "-d", "-", cwd=repo, input="line one\nline two\n").stdout.strip()
    assert hive("show", issue, "--json", cwd=repo).stdout.count("line one\\nline two") == 1


def test_a_misspelled_front_matter_key_is_warned(repo, hive, cli):
    issue = hive("create", "typo", cwd=repo).stdout.strip()
    path = repo / ".hive" / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace("depends_on = []", "depend_on = []"))
    listed = hive("list", cwd=repo)
    assert f"warning: .hive/issues/{issue}.md: unknown field 'depend_on' (did you mean 'depends_on'?)" in listed.stderr


def test_a_canceled_issue_keeps_no_assignee(repo, hive):
    issue = hive("create", "held", cwd=repo).stdout.strip()
    hive("update", issue, "--status", "in_progress", "--assignee", "w-someone", "--force", cwd=repo)
    hive("cancel", issue, cwd=repo)
    assert '"assignee": ""' in hive("show", issue, "--json", cwd=repo).stdout


def test_blocked_by_lists_only_unfinished_blockers(repo, hive):
    done = hive("create", "finished blocker", cwd=repo).stdout.strip()
    waiting = hive("create", "open blocker", cwd=repo).stdout.strip()
    child = hive("create", "child", "--depends-on", done, "--depends-on", waiting, cwd=repo).stdout.strip()
    hive("update", done, "--status", "finalized", "--force", cwd=repo)
    row = next(l for l in hive("list", cwd=repo).stdout.splitlines() if l.startswith(child))
    assert waiting in row and done not in row


def test_a_missing_git_identity_is_warned_once(repo, git_env, tmp_path):
    bare_home = tmp_path / "nobody"
    bare_home.mkdir()
    (bare_home / ".gitconfig").write_text("")
    env = {"HOME": str(bare_home), "GIT_CONFIG_GLOBAL": str(bare_home / ".gitconfig"),
           "GIT_CONFIG_NOSYSTEM": "1", "EMAIL": "",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    import os

    env = {**os.environ, **env}
    env.pop("EMAIL")
    code = ("from hive.cli import main\nimport sys\n"
            "sys.argv=['git-hive']\n"
            "from hive.project import Project\nfrom hive import issues\n"
            "p = Project.open()\nissues.create(p, 'one')\nissues.create(p, 'two')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("warning: no git identity") == 1


def test_an_escalated_issue_says_how_to_recover(repo, hive, git):
    issue = hive("create", "stuck", cwd=repo).stdout.strip()
    hive("update", issue, "--status", "escalated", "--force", cwd=repo)
    worktree = repo / ".git" / "hive" / "worktrees" / issue
    git("worktree", "add", "-q", "-b", f"hive/work/{issue}", str(worktree), cwd=repo)
    shown = hive("show", issue, cwd=repo).stdout
    assert "escalated: hive needs you" in shown
    assert f"the work is in {worktree}" in shown and f"`git hive update {issue} --status done`" in shown
    assert f"`git hive retry {issue}`" in shown and f"`git hive cancel {issue}`" in shown
    assert "hive needs you" not in hive("show", hive("create", "fine", cwd=repo).stdout.strip(), cwd=repo).stdout


def test_demo_keep_refuses_a_folder_that_holds_anything(hive, tmp_path):
    """`git hive demo --keep DIR` builds a repository there: a folder with something in it is
    refused (exit 2, one line), and what it holds is left alone."""
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("my notes\n")
    done = hive("demo", "--keep", str(kept), cwd=tmp_path, check=False)
    assert done.returncode == 2 and "it exists and is not empty; give a new directory" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and [p.name for p in kept.iterdir()] == ["notes.txt"]
