"""The SQLite index: a cache of `hive/state` that follows every kind of change to the branch."""

from __future__ import annotations

import json
import os
import sqlite3

from hive.state import index as index_module
from hive.state import kept_listing
from hive import issues
from hive.state import trees
from tests.state_helpers import set_status


def listing(hive) -> list[dict]:
    proc = hive("list", "--json")
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


def titles(hive) -> dict[str, str]:
    return {i["id"]: i["title"] for i in listing(hive)}


def test_index_lives_in_the_common_dir_in_wal_mode(repo, project, new_issue):
    new_issue("indexed")
    path = repo / ".git" / "hive" / "index.db"
    assert project.index.path == path and path.is_file()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT count(*) FROM issues").fetchone()[0] == 1
    assert project.index.db.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    db.close()


def test_plain_git_commit_in_the_checkout_is_picked_up(repo, hive, git, new_issue):
    issue = new_issue("before")
    checkout = repo / ".hive"
    path = checkout / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace('title = "before"', 'title = "committed by hand"'))
    git("commit", "-q", "-am", "by hand", cwd=checkout)
    assert titles(hive) == {issue: "committed by hand"}
    assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_reset_in_the_checkout_is_picked_up(repo, hive, git, new_issue):
    kept = new_issue("kept")
    dropped = new_issue("dropped")
    assert set(titles(hive)) == {kept, dropped}
    git("reset", "-q", "--hard", "HEAD~1", cwd=repo / ".hive")
    assert titles(hive) == {kept: "kept"}
    assert not (repo / ".hive" / "issues" / f"{dropped}.md").exists()


def test_update_ref_of_the_state_branch_is_picked_up_and_the_checkout_follows(repo, hive, git, new_issue):
    first = new_issue("first")
    old = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    second = new_issue("second")
    new = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    assert set(titles(hive)) == {first, second}
    git("update-ref", "refs/heads/hive/state", old, cwd=repo)
    assert titles(hive) == {first: "first"}
    assert not (repo / ".hive" / "issues" / f"{second}.md").exists()
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""
    # and forward again
    git("update-ref", "refs/heads/hive/state", new, cwd=repo)
    assert titles(hive) == {first: "first", second: "second"}
    assert (repo / ".hive" / "issues" / f"{second}.md").is_file()
    assert git("status", "--porcelain", cwd=repo / ".hive").stdout == ""


def test_a_merge_into_the_state_branch_is_picked_up(repo, hive, git, new_issue):
    base = new_issue("base")
    checkout = repo / ".hive"
    git("branch", "hive/plan/extra", "hive/state", cwd=repo)
    git("worktree", "add", "-q", str(repo.parent / "plan"), "hive/plan/extra", cwd=repo)
    plan = repo.parent / "plan"
    (plan / "issues" / "hv-eeeee1.md").write_text(
        '+++\ntitle = "from the plan"\nstatus = "open"\npriority = 1\ntype = "task"\n'
        'depends_on = []\nlabels = []\nassignee = ""\ncreated = 2026-01-01T00:00:00Z\n'
        'updated = 2026-01-01T00:00:00Z\n+++\n\nPlanned.\n')
    git("add", "-A", cwd=plan)
    git("commit", "-q", "-m", "plan", cwd=plan)
    git("merge", "-q", "--no-edit", "hive/plan/extra", cwd=checkout)
    assert titles(hive) == {base: "base", "hv-eeeee1": "from the plan"}


def test_deleted_index_is_rebuilt_silently_with_the_same_data(repo, hive, new_issue):
    a = new_issue("a", priority=1, labels=["x"])
    new_issue("b", depends_on=[a])
    hive("note", "remember this", "--issue", a)
    before, notes = listing(hive), hive("notes", "--json").stdout
    ready = hive("list", "--ready", "--json").stdout
    for suffix in ("", "-wal", "-shm"):
        (repo / ".git" / "hive" / f"index.db{suffix}").unlink(missing_ok=True)
    assert listing(hive) == before
    assert hive("notes", "--json").stdout == notes
    assert hive("list", "--ready", "--json").stdout == ready


def test_corrupt_index_is_rebuilt(repo, hive, new_issue):
    new_issue("survives", priority=0)
    before = listing(hive)
    db = repo / ".git" / "hive" / "index.db"
    for suffix in ("-wal", "-shm"):
        (repo / ".git" / "hive" / f"index.db{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database at all \x00\xff" * 500)
    assert listing(hive) == before
    assert sqlite3.connect(db).execute("SELECT count(*) FROM issues").fetchone()[0] == 1


def test_foreign_or_outdated_index_is_rebuilt(repo, hive, new_issue):
    issue = new_issue("mine")
    before = listing(hive)
    db = sqlite3.connect(repo / ".git" / "hive" / "index.db")
    db.execute("UPDATE meta SET value = '/somewhere/else/.git' WHERE key = 'repo'")
    db.execute("DELETE FROM issues")
    db.commit()
    db.close()
    assert listing(hive) == before
    db = sqlite3.connect(repo / ".git" / "hive" / "index.db")
    db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    db.execute("UPDATE issues SET title = 'stale' WHERE id = ?", (issue,))
    db.commit()
    db.close()
    assert listing(hive) == before


def test_reindex_rebuilds_from_the_branch(repo, hive, new_issue):
    new_issue("one")
    new_issue("two", status="canceled")
    before = listing(hive)
    db = sqlite3.connect(repo / ".git" / "hive" / "index.db")
    db.execute("UPDATE issues SET title = 'tampered'")  # the indexed commit still matches the tip
    db.execute("UPDATE meta SET value = 'another' WHERE key = 'listing_generation'")   # as a writer does
    db.commit()
    db.close()
    assert {i["title"] for i in listing(hive)} == {"tampered"}
    (repo / ".hive" / "notes" / "project.jsonl").write_text("not json\n")  # only a full scan sees it
    proc = hive("reindex")
    assert "indexed 2 issues" in proc.stdout
    assert proc.stderr.strip().splitlines() == [
        "warning: .hive/notes/project.jsonl:1: bad note line: Expecting value: line 1 column 1 (char 0)"]
    (repo / ".hive" / "notes" / "project.jsonl").unlink()
    assert listing(hive) == before


def test_catch_up_parses_only_the_changed_files(repo, project, new_issue, monkeypatch):
    ids = [new_issue(f"issue {n}") for n in range(12)]
    project.sync(warn=False)
    parsed: list[str] = []
    real = index_module.parse_blob

    def counting(data, path):
        parsed.append(path)
        return real(data, path)

    monkeypatch.setattr(index_module, "parse_blob", counting)
    issues.update(project, ids[5], {"priority": 0})
    assert parsed == [f"issues/{ids[5]}.md"]
    assert project.index.get(ids[5]).priority == 0
    parsed.clear()
    project.index.rebuild()
    assert len(parsed) == 12


def test_a_bad_file_committed_by_hand_keeps_the_last_good_version(repo, hive, git, new_issue):
    issue = new_issue("good version")
    checkout = repo / ".hive"
    path = checkout / "issues" / f"{issue}.md"
    path.write_text(path.read_text().replace('status = "open"', 'status = "whatever"'))
    git("commit", "-q", "-am", "bad by hand", cwd=checkout)
    proc = hive("list", "--json")
    shown = json.loads(proc.stdout)
    assert [(i["id"], i["title"], i["status"]) for i in shown] == [(issue, "good version", "open")]
    assert f"issues/{issue}.md:3" in proc.stderr and "whatever" in proc.stderr
    # fixed by hand: the new version is indexed, the warning is gone
    path.write_text(path.read_text().replace('status = "whatever"', 'status = "done"'))
    git("commit", "-q", "-am", "fixed by hand", cwd=checkout)
    assert [(i["id"], i["status"]) for i in listing(hive)] == [(issue, "done")]


def test_own_writes_are_indexed_without_comparing_trees(repo, project, new_issue, monkeypatch):
    """After this process's own commit, the index applies the commit's known changes; the result
    is the same as a catch-up that walks the trees, and the same as a rebuild."""
    ids = [new_issue(f"issue {n}") for n in range(6)]
    project.sync(warn=False)

    def no_walk(*args, **kwargs):
        raise AssertionError("the trees were walked")

    monkeypatch.setattr(trees, "walk_changes", no_walk)
    issues.update(project, ids[1], {"priority": 0, "depends_on": [ids[0]]})
    set_status(project, ids[2], "canceled")                          # moves to the archive
    issues.add_notes(project, [issues.note_line("use PYTHONPATH=src", "gotcha")], file_id=ids[3])
    issues.create(project, "a new one", depends_on=[ids[1]])
    monkeypatch.undo()

    def contents() -> tuple:
        db = project.index.db
        return tuple(sorted(map(tuple, db.execute(f"SELECT * FROM {table}").fetchall()))
                     for table in ("issues", "deps", "notes", "problems"))

    incremental = contents()
    assert project.index.get(ids[1]).depends_on == [ids[0]]
    assert project.index.get(ids[2]).status == "canceled"
    assert [n["content"] for n in project.index.notes(ids[3])] == ["use PYTHONPATH=src"]
    project.index.rebuild()
    assert contents() == incremental


def test_the_json_listing_built_by_sqlite_is_the_issues_to_json(repo, project, new_issue, git):
    """`git hive list --json` comes from SQLite (`Index.list_json`); it must equal, key for key and
    in order, what `Issue.to_json()` gives for `Index.list()` — filters and extra keys included."""
    epic = new_issue("An épic ✓", type="epic", priority=0)
    first = new_issue("first", parent=epic, labels=["a", "b"])
    new_issue("second \"quoted\"\\n", depends_on=[first], status="done", priority=1)
    new_issue("plain")
    path = repo / ".hive" / "issues" / f"{first}.md"
    path.write_text(path.read_text().replace('title = "first"', 'title = "first"\nreviewer = "pat"\n'
                                             'due = 2026-12-01T10:00:00Z\nnested = { depth = [1, 2] }'))
    project.sync(warn=False)
    for status, parent in ((None, None), (["open"], None), (["done", "open"], None), (None, epic), (["canceled"], None)):
        expected = [i.to_json() for i in project.index.list(status, parent=parent, with_body=False)]
        text = project.index.list_json(status, parent=parent)
        assert json.loads(text) == expected
        assert [list(d) for d in json.loads(text)] == [list(d) for d in expected]   # key order too
    shown = {d["id"]: d for d in json.loads(project.index.list_json())}
    assert shown[first]["reviewer"] == "pat" and shown[first]["nested"] == {"depth": [1, 2]}
    assert shown[first]["due"] == "2026-12-01T10:00:00Z" and shown[epic]["title"] == "An épic ✓"



def _made_by_sqlite(index) -> str:
    return "".join(index._json_parts(None, None, index_module.LISTED_BATCH))


def test_the_whole_listing_is_kept_and_handed_out_again_only_while_the_rows_are_the_same(
        repo, project, new_issue, monkeypatch) -> None:
    """`list --json` of a big queue is SQLite's slowest answer, asked again and again while
    nothing changes: the whole listing is kept with the index's listing generation, drawn anew by
    every catch-up that changes the rows (a write, a rebuild at the same tip), and only if no
    catch-up came while its rows were read. Filtered listings are made each time."""
    index = project.index
    kept_file = repo / ".git" / "hive" / index_module.LISTING_FILE
    issue = new_issue("kept")
    first = index.list_json()
    assert first == _made_by_sqlite(index) and kept_file.read_text().endswith(first)

    with monkeypatch.context() as patched:   # handed out again: no row is read
        patched.setattr(index_module.Index, "_json_parts", lambda *_: iter(["rows read"]))
        assert index.list_json() == first
        assert index.list_json(["open"]) == "rows read"   # filtered: made each time, never kept
    assert kept_file.read_text().endswith(first)

    issues.update(project, issue, {"title": "changed"})
    project.update_index()
    changed = index.list_json()
    assert '"changed"' in changed and changed == _made_by_sqlite(index)

    kept_file.unlink()   # a catch-up another process commits while the rows are read: not kept
    made = index_module.Index._json_parts

    def rows_then_a_catch_up_elsewhere(self, *args):
        yield from made(self, *args)
        with sqlite3.connect(index.path) as other_process:
            other_process.execute("UPDATE meta SET value = 'drawn meanwhile' WHERE key = ?",
                                  (index_module.LISTING_GENERATION,))

    with monkeypatch.context() as patched:
        patched.setattr(index_module.Index, "_json_parts", rows_then_a_catch_up_elsewhere)
        assert index.list_json() == changed
    assert not kept_file.exists()

    generation = index._meta(index.db, index_module.LISTING_GENERATION)
    index.rebuild()   # the same tip: the rows made again (a bad file's last good version is lost then)
    assert index._meta(index.db, index_module.LISTING_GENERATION) != generation
    with monkeypatch.context() as patched:
        patched.setattr(index_module.Index, "_json_parts", lambda *_: iter(["rows read"]))
        assert index.list_json() == "rows read"


def test_a_kept_listing_is_not_read_through_a_link_nor_kept_when_not_read_to_its_end(
        repo, project, new_issue, tmp_path) -> None:
    """The kept listing is hive's own file: a link in its place is neither read (whatever its
    header says) nor written through, a pipe is not waited on; a listing left half read (a
    closed pipe) keeps nothing."""
    index = project.index
    hive_dir = repo / ".git" / "hive"
    for k in range(3):
        new_issue(f"issue {k}")
    generation = index._meta(index.db, index_module.LISTING_GENERATION)
    forged = tmp_path / "forged.json"
    forged.write_text(f"{kept_listing.HEADER}{generation}\n[\"forged\"]")
    (hive_dir / index_module.LISTING_FILE).symlink_to(forged)
    listed = index.list_json()
    assert listed == _made_by_sqlite(index) and "forged" not in listed
    assert forged.read_text().endswith('["forged"]')
    assert not (hive_dir / index_module.LISTING_FILE).is_symlink()
    (hive_dir / index_module.LISTING_FILE).unlink()
    os.mkfifo(hive_dir / index_module.LISTING_FILE)     # opened, it would wait for a writer
    assert index.list_json() == _made_by_sqlite(index)

    (hive_dir / index_module.LISTING_FILE).unlink()
    parts = index.list_json_parts(rows=1)
    next(parts)
    parts.close()
    assert sorted(p.name for p in hive_dir.iterdir() if "listing" in p.name) == []
    assert not index.db.in_transaction


def test_a_bulk_rebuild_gives_the_rows_and_indexes_of_incremental_catch_ups(repo, project, new_issue, monkeypatch, git):
    """A rebuild (or a queue taken in whole) into emptied tables inserts in key order and makes
    the other indexes afterwards (`_store_bulk`); the result must be what the one-by-one
    catch-ups gave: every row and column (ranks included), the same indexes, the same queries."""
    epic = new_issue("epic", type="epic")
    first = new_issue("first", parent=epic, labels=["b", "a", "b"], priority=1)
    second = new_issue("second", depends_on=[first])
    new_issue("third", depends_on=[first, second], status="done")
    new_issue("gone", status="canceled")                                      # archived
    new_issue("quoted \"title\" ✓", labels=['we"ird'])
    path = repo / ".hive" / "issues" / f"{second}.md"
    path.write_text(path.read_text().replace('title = "second"', 'title = "second"\nreviewer = "pat"'))
    project.sync(warn=False)
    db = project.index.db

    def contents() -> tuple:
        tables = tuple(sorted(map(tuple, db.execute(f"SELECT * FROM {table}").fetchall()))
                       for table in ("issues", "deps", "notes", "problems"))
        indexes = sorted(map(tuple, db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'")))
        return tables, indexes, [i.id for i in project.index.ready()], project.index.list_json()

    incremental = contents()
    assert db.execute("SELECT chain FROM issues WHERE id = ?", (first,)).fetchone()[0] == 1
    inserted: list[int] = []
    real = index_module.Index._store_bulk

    def counting(self, rows, deps):
        inserted.append(len(rows))
        return real(self, rows, deps)

    monkeypatch.setattr(index_module, "BULK_ROWS", 0)
    monkeypatch.setattr(index_module.Index, "_store_bulk", counting)
    assert project.index.rebuild() == []
    assert inserted == [6]
    assert contents() == incremental
    # a queue taken in whole (hive/state moved by git from a state without issues): the same
    tip = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    root = git("rev-list", "--max-parents=0", "hive/state", cwd=repo).stdout.split()[0]
    git("update-ref", "refs/heads/hive/state", root, cwd=repo)
    assert project.index.ensure_current() == [] and project.index.list() == []
    git("update-ref", "refs/heads/hive/state", tip, cwd=repo)
    assert project.index.ensure_current() == []
    assert inserted == [6, 6]
    assert contents() == incremental


WALK = """
import sys, pygit2
from hive.state.trees import walk_changes
repo = pygit2.Repository(sys.argv[1])
tree = repo.revparse_single("hive/state").peel(pygit2.Tree)
print("\\n".join(path for path, _, _ in walk_changes(repo, None, tree)))
"""


def test_a_tree_walk_is_in_name_order_on_every_machine_so_a_live_and_archived_issue_indexes_alike(
        repo, project, git, issue_text) -> None:
    """What a catch-up, an intake and a rebuild index follows the walk's order, which must not
    follow Python's string hashing (it differs from process to process); an issue file both live
    and archived (a hostile or botched state) is indexed as its live copy."""
    import os
    import subprocess
    import sys

    issues_dir = repo / ".hive" / "issues"
    for k in range(40):
        (issues_dir / f"hv-w{k:05d}.md").write_text(issue_text(f"walk {k}"), encoding="utf-8")
    (issues_dir / "hv-dup001.md").write_text(issue_text("live copy"), encoding="utf-8")
    (issues_dir / "archive" / "du").mkdir(parents=True)
    (issues_dir / "archive" / "du" / "hv-dup001.md").write_text(
        issue_text("archived copy", status="finalized"), encoding="utf-8")
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", "many issues, one twice", cwd=repo / ".hive")
    orders = {subprocess.run([sys.executable, "-c", WALK, str(repo)], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(orders) == 1
    walked = orders.pop().split()
    assert walked.index("issues/archive/du/hv-dup001.md") < walked.index("issues/hv-dup001.md")
    assert project.index.rebuild() is not None and project.index.get("hv-dup001").title == "live copy"


def _live_and_archived(repo, project, git, issue_text, issue_id: str):
    """`issue_id` committed both live ("live copy") and archived ("archived copy", finalized), as
    a person's plain merge of two states can leave it; indexed as its live copy. The archived file."""
    issues_dir = repo / ".hive" / "issues"
    (issues_dir / f"{issue_id}.md").write_text(issue_text("live copy"), encoding="utf-8")
    archived = issues_dir / "archive" / "du" / f"{issue_id}.md"
    archived.parent.mkdir(parents=True)
    archived.write_text(issue_text("archived copy", status="finalized"), encoding="utf-8")
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", "one issue twice", cwd=repo / ".hive")
    project.update_index()
    assert project.index.get(issue_id).title == "live copy"
    return archived


def test_an_issue_both_live_and_archived_is_its_live_copy_whichever_changed_last(repo, project, git, issue_text,
                                                                                 monkeypatch):
    """Hive never writes both copies of an issue; a person's plain `git merge` of two states can.
    The live copy is the issue while it exists — in a rebuild, and in a catch-up after a commit
    that changed only the archived copy (it took the archived one: "the later change")."""
    archived = _live_and_archived(repo, project, git, issue_text, "hv-dup002")
    archived.write_text(issue_text("archived copy, edited", status="finalized"), encoding="utf-8")
    git("add", "-A", cwd=repo / ".hive")
    git("commit", "-qm", "only the archived copy changes", cwd=repo / ".hive")
    project.update_index()
    assert project.index.get("hv-dup002").title == "live copy"
    assert project.index.rebuild() is not None and project.index.get("hv-dup002").title == "live copy"
    monkeypatch.setattr("hive.state.index.BULK_ROWS", 0)   # a big queue's rebuild: rows in bulk
    assert project.index.rebuild() is not None and project.index.get("hv-dup002").title == "live copy"


def test_deleting_the_live_copy_of_an_issue_also_archived_leaves_the_archived_one_indexed(
        repo, project, git, issue_text) -> None:
    """The other half of the rule above: once the live copy goes (a commit deleting only it), the
    archived copy — unchanged, so not in the commit's diff — is the issue, in a catch-up as in a
    rebuild (the catch-up dropped the issue until the next rebuild)."""
    _live_and_archived(repo, project, git, issue_text, "hv-dup003")
    git("rm", "-q", "issues/hv-dup003.md", cwd=repo / ".hive")
    git("commit", "-qm", "only the live copy goes", cwd=repo / ".hive")
    project.update_index()
    caught_up = project.index.get("hv-dup003")
    assert caught_up is not None and (caught_up.title, caught_up.status) == ("archived copy", "finalized")
    assert project.index.rebuild() is not None and project.index.get("hv-dup003").title == "archived copy"



def test_only_a_regular_file_is_taken_as_the_archived_copy_of_a_deleted_live_one(repo, project, git, issue_text) -> None:
    """The catch-up's look for an archived copy reads the tip's tree. An entry there that is not a
    regular file (a symlink, a folder) is no issue file: the trust check refuses such a tip before
    any catch-up (a fetched one, and one committed in `.hive/`); this is the layer under it."""
    import pygit2

    from hive.state.index import _with_archived_copies

    archived = _live_and_archived(repo, project, git, issue_text, "hv-dup004")
    checkout = repo / ".hive"
    live_blob = git("rev-parse", "HEAD:issues/hv-dup004.md", cwd=checkout).stdout.strip()
    deleted = [("issues/hv-dup004.md", live_blob, None)]
    git("rm", "-q", "issues/hv-dup004.md", cwd=checkout)
    git("commit", "-qm", "only the live copy goes", cwd=checkout)
    tips = {"file": git("rev-parse", "HEAD", cwd=checkout).stdout.strip()}
    archived.unlink()
    archived.symlink_to(checkout / "issues" / "hv-other.md")
    git("add", "-A", cwd=checkout)
    git("commit", "-qm", "a symlink at the archived copy", cwd=checkout)
    tips["symlink"] = git("rev-parse", "HEAD", cwd=checkout).stdout.strip()
    archived.unlink()
    archived.mkdir()
    (archived / "x.md").write_text(issue_text("inside a folder"), encoding="utf-8")
    git("add", "-A", cwd=checkout)
    git("commit", "-qm", "a folder at the archived copy", cwd=checkout)
    tips["folder"] = git("rev-parse", "HEAD", cwd=checkout).stdout.strip()

    found = {kind: _with_archived_copies(pygit2.Repository(str(repo)), tip, deleted) for kind, tip in tips.items()}
    archived_blob = git("rev-parse", f"{tips['file']}:issues/archive/du/hv-dup004.md", cwd=checkout).stdout.strip()
    assert found == {"file": [*deleted, ("issues/archive/du/hv-dup004.md", None, archived_blob)],
                     "symlink": deleted, "folder": deleted}
