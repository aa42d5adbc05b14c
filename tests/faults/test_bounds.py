"""Bounded parsing: what a collaborator pushes to `hive/state` is parsed within limits
(`hive.lines`, `state/trust.py`, `state/index.py`; docs/SECURITY.md "Bounded parsing").

A notes line of 100,000 `[` (RecursionError in `json.loads`), notes files sharing one blob at
the size caps, and an intermediate commit with a huge message: each is a problem row or a
refusal, and no command of the victim goes over `MAX_RSS` of memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hive import git as hive_git, lines
from hive.state import index as index_module, trust

from .test_trust import BLOB, ISSUE_ID, TREE, Raw, Shared, attack, shared  # noqa: F401 - fixtures

MAX_RSS_KB = 200 * 1024
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
           "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def peak_rss(cwd: Path, *args: str) -> tuple[int, int]:
    """(exit code, peak RSS in KiB) of `git hive ARGS` in a fresh process and its children."""
    out = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "hive", *args], cwd=cwd,
                         capture_output=True, text=True, check=True, timeout=240).stdout.split()
    return int(out[0]), int(out[1])


def git_paths(repo: Path) -> hive_git.RepoPaths:
    return hive_git.discover(repo)


def push_tree(shared: Shared, git, build, message: str = "totally normal sync\n\nHive-Event: synced") -> str:
    raw = Raw(shared.attacker)
    base = raw._git("rev-parse", "origin/hive/state")
    tree = build(raw, raw._git("rev-parse", "origin/hive/state^{tree}"))
    commit = raw._git("commit-tree", tree, "-p", base, "-m", message)
    git("push", "-q", "origin", f"{commit}:refs/heads/hive/state", cwd=shared.attacker)
    return commit


def with_notes(files: int, data: bytes):
    """Notes files for `files` issues (the first ISSUE_ID), all one blob."""
    def build(raw: Raw, base: str) -> str:
        blob = raw.blob(data)
        notes = raw.tree([(BLOB, f"hv-n{n:05d}.jsonl".encode(), blob) for n in range(1, files)]
                         + [(BLOB, f"{ISSUE_ID}.jsonl".encode(), blob)])
        return raw.tree([e for e in raw.entries(base) if e[1] != b"notes"] + [(TREE, b"notes", notes)])
    return build


@pytest.mark.parametrize("line", [b"[" * 100_000, b'{"a":' * 100_000, b'["' + b"[" * 100_000 + b'"]' * 0,
                                  b'{"content": "' + b"]" * 40 + b'[' * 40 + b'"}'])
def test_json_line_never_recurses_out(line: bytes) -> None:
    if line.startswith(b'{"content"'):
        assert lines.json_line(line) == {"content": "]" * 40 + "[" * 40}   # brackets in a string count not
        return
    with pytest.raises(lines.BadLine):
        lines.json_line(line)


def test_a_deep_notes_line_is_a_problem_row_naming_its_line(repo: Path, shared: Shared, git, cli) -> None:
    good = b'{"content": "a real note", "category": "gotcha"}\n'
    push_tree(shared, git, with_notes(1, good + b"[" * 100_000 + b"\n" + b"[" * 60_000 + b"\n"))
    assert cli("sync", "origin", cwd=repo).returncode == 0
    problems = {str(p) for p in index_module.Index(git_paths(repo)).problems()}
    assert problems == {f"notes/{ISSUE_ID}.jsonl:2: bad note line: a line of 100000 bytes, longer than 65536"}
    assert index_module.parse_notes(b"[" * 60_000, "n")[1][0].message == "bad note line: JSON nested deeper than 32"
    assert "1 problem(s)" in cli("doctor", cwd=repo, check=False).stdout
    assert "a real note" in cli("notes", cwd=repo).stdout
    for command in (("list",), ("reindex",), ("doctor", "--fix"), ("create", "still works")):
        assert cli(*command, cwd=repo, check=False).returncode in (0, 1, 2), command   # raised nothing
    assert "still works" in cli("list", cwd=repo).stdout


def test_the_merge_driver_unions_deep_lines_as_text(tmp_path: Path) -> None:
    deep = b"[" * 100_000 + b"\n"
    base, ours, theirs = (tmp_path / n for n in ("base", "ours", "theirs"))
    base.write_bytes(b"")
    ours.write_bytes(deep)
    theirs.write_bytes(b'{"content": "x"}\n')
    proc = subprocess.run([sys.executable, "-m", "hive", "merge-driver", str(base), str(ours), str(theirs),
                           f"notes/{ISSUE_ID}.jsonl"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(ours.read_bytes().splitlines()) == sorted([deep.strip(), b'{"content": "x"}'])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("line", [b'{"content": ""}\n', b'{"content": "' + b"x" * (index_module.MAX_NOTE_LINE - 20) + b'"}\n'],
                         ids=["short-lines", "longest-lines"])
def test_notes_files_sharing_one_blob_at_the_caps_stay_within_memory(repo: Path, shared: Shared, tmp_path: Path,
                                                                     git, line: bytes) -> None:
    """Eight notes files sharing one blob of 8 MiB took 1.65 GB: as many files of the largest
    notes file as one adoption admits, once of the shortest lines, once of the longest."""
    data = line * (trust.MAX_NOTES_BYTES // len(line))
    files = trust.MAX_INCOMING_NOTES_BYTES // trust.MAX_NOTES_BYTES
    push_tree(shared, git, with_notes(files, data))
    for command in (("sync", "origin"), ("list",), ("notes",), ("doctor",), ("reindex",)):
        code, rss = peak_rss(repo, *command)
        assert code in (0, 1, 2) and rss < MAX_RSS_KB, (command, code, rss)
    assert (git("rev-parse", "hive/state", cwd=repo).stdout.strip()
            == git("rev-parse", "origin/hive/state", cwd=shared.attacker).stdout.strip())
    tip = push_tree(shared, git, with_notes(files + 1, data))   # taken in whole: one file too many
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(shared.remote), str(fresh))
    code, rss = peak_rss(fresh, "init")
    assert code == 0 and rss < MAX_RSS_KB, (code, rss)
    assert git("rev-parse", "hive/state", cwd=fresh).stdout.strip() != tip


def test_an_intermediate_commit_with_a_huge_message_is_refused(repo: Path, shared: Shared, git, cli) -> None:
    """Only the tip's tree was checked: a commit under it with a message of megabytes passed,
    and `cost`, `log` and `doctor` read it whole (1.9 GB). Its size is read from its header."""
    raw = Raw(shared.attacker)
    huge = shared.attacker / "message"
    huge.write_bytes(b"x" * (trust.MAX_COMMIT_BYTES + 1) + b"\n\nHive-Event: synced\n")
    base = raw._git("rev-parse", "origin/hive/state")
    tree = raw._git("rev-parse", "origin/hive/state^{tree}")
    bad = raw._git("commit-tree", tree, "-p", base, "-F", str(huge))
    tip = raw._git("commit-tree", tree, "-p", bad, "-m", "looks normal\n\nHive-Event: synced")
    git("push", "-q", "origin", f"{tip}:refs/heads/hive/state", cwd=shared.attacker)
    before = git("rev-parse", "hive/state", cwd=repo).stdout.strip()
    synced = cli("sync", "origin", cwd=repo, check=False)
    assert synced.returncode == 1, synced
    assert synced.stderr.startswith(f"git hive: refused origin/hive/state at {tip[:12]}: commit {bad}: "), synced
    assert synced.stderr.endswith(f" bytes of headers and message, over the limit of {trust.MAX_COMMIT_BYTES}\n")
    assert git("rev-parse", "hive/state", cwd=repo).stdout.strip() == before
    fresh = shared.attacker.parent / "fresh"
    git("clone", "-q", str(shared.remote), str(fresh))
    initialized = cli("init", cwd=fresh, check=False)
    assert initialized.returncode == 0 and f"commit {bad}" in initialized.stderr


def test_a_deeply_nested_hive_toml_is_bad_input_naming_the_file(repo: Path, hive) -> None:
    """An agent's commit can put anything in the target's `.hive.toml`."""
    (repo / ".hive.toml").write_text("max_agents = 2\nx = " + "[" * 100_000 + "\n")
    proc = hive("config", "list", cwd=repo, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"git hive: {repo / '.hive.toml'}:1: TOML nested deeper than 16"]


@pytest.mark.timeout(600)
def test_issue_files_at_the_caps_stay_within_memory(shared: Shared, tmp_path: Path, git) -> None:
    """As many distinct issue files of the largest size as one adoption admits, taken in whole by
    a fresh clone's `init`: the trust check reads them, the index parses and stores them, in
    batches (`halves.batches`), so that what is held at once stays flat."""
    from hive.state import issue_file

    from .test_trust import issue

    count = trust.MAX_INCOMING_BYTES // issue_file.MAX_ISSUE_BYTES - 1
    pad = issue_file.MAX_ISSUE_BYTES - len(issue(body="")) - 64

    def build(raw: Raw, base: str) -> str:
        entries = [(BLOB, f"hv-big{n:03d}.md".encode(), raw.blob(issue(f"big {n}", body=f"{n} " + "x" * pad)))
                   for n in range(count)]
        issues = raw.tree(entries)
        return raw.tree([e for e in raw.entries(base) if e[1] != b"issues"] + [(TREE, b"issues", issues)])

    push_tree(shared, git, build)
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(shared.remote), str(fresh))
    for command in (("init",), ("list",), ("doctor",), ("reindex",)):
        code, rss = peak_rss(fresh, *command)
        assert code in (0, 1, 2) and rss < MAX_RSS_KB, (command, code, rss)



SMALL_ISSUE_FILES = trust.MAX_ENTRIES - 16   # as many as one adoption admits (room for the other folders' entries)


@pytest.mark.timeout(600)
def test_many_small_issue_files_sharing_one_blob_stay_within_memory(shared: Shared, tmp_path: Path, git) -> None:
    """~65,000 small issue files took ~500 MB in `init` (every parsed row held at once): many
    small files, one blob shared by all (a push of a few KB), taken in whole by a fresh clone."""
    from hive.state import issue_file

    from .test_trust import issue

    data = issue("small", body="A few lines, as most issues have. " * 12)

    def build(raw: Raw, base: str) -> str:
        blob = raw.blob(data)
        names = (f"hv-{issue_file.ID_ALPHABET[n % 32]}{n // 32:05d}.md" for n in range(SMALL_ISSUE_FILES))
        issues = raw.tree([(BLOB, name.encode(), blob) for name in names])
        return raw.tree([e for e in raw.entries(base) if e[1] != b"issues"] + [(TREE, b"issues", issues)])

    push_tree(shared, git, build)
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(shared.remote), str(fresh))
    for command in (("init",), ("list", "--json"), ("reindex",)):
        code, rss = peak_rss(fresh, *command)
        assert code in (0, 1, 2) and rss < MAX_RSS_KB, (command, code, rss)
    listed = subprocess.run([sys.executable, "-m", "hive", "list", "--json"], cwd=fresh, capture_output=True,
                            check=True).stdout
    assert listed.count(b'"id":') == SMALL_ISSUE_FILES


def _notes_of(issue_id: str, count: int, size: int = 2000) -> list[dict]:
    from hive import issues

    return [issues.note_line(f"{n:05d} " + "x" * (size - 6), "context", issue=issue_id) for n in range(count)]


def test_hives_own_notes_never_make_a_file_another_machine_refuses(repo: Path, project, hive, new_issue) -> None:
    """However many notes come (an agent's flood), a notes file on `hive/state` stays within
    `trust.MAX_NOTES_BYTES`: past it, every machine taking in the state would refuse all of it.
    The oldest are kept, in order; the rest are counted as left out, and a person's note or an
    archiving that would not fit is refused naming the file."""
    from hive import issues
    from hive.errors import BadInput
    from hive.state import layout

    issue_id = new_issue("noted a great deal")
    flood = _notes_of(issue_id, trust.MAX_NOTES_BYTES // 2000 + 500)
    dropped = issues.add_notes(project, flood, file_id=issue_id)
    repo_ = hive_git.repository(project.paths.common_dir)
    tip = repo_.revparse_single("refs/heads/hive/state")
    blob = tip.tree[layout.notes_path(issue_id)]
    kept = blob.data.splitlines()
    assert 0 < dropped < 1000 and len(kept) + dropped == len(flood)
    assert blob.size <= trust.MAX_NOTES_BYTES
    assert [json.loads(line)["content"] for line in kept] == [n["content"] for n in flood[:len(kept)]]
    trust.check_tree(repo_, str(tip.tree.id))                 # what a fresh clone checks: passes

    assert issues.add_notes(project, _notes_of(issue_id, 1, size=3000), file_id=issue_id) == 1
    assert repo_.revparse_single("refs/heads/hive/state").id == tip.id   # nothing committed
    person = hive("note", "--issue", issue_id, "one more " + "y" * 3000, check=False)
    assert (person.returncode, person.stderr.count("\n")) == (2, 1), person.stderr
    assert f"no room for the note in notes/{issue_id}.jsonl" in person.stderr, person.stderr
    keys = {row["key"]: issue_id for row in json.loads(hive("notes", "--issue", issue_id, "--json").stdout)}
    with pytest.raises(BadInput, match=f"notes/archive/{issue_id}.jsonl would hold more than"):
        issues.archive_notes(project, keys, "all of them")   # each line gains its stamps: too big
    assert repo_.revparse_single("refs/heads/hive/state").id == tip.id


def test_hives_own_notes_never_make_a_state_a_fresh_clone_refuses(repo: Path, project, new_issue) -> None:
    """A fresh clone takes in every notes file at once, at most `trust.MAX_INCOMING_NOTES_BYTES`
    together: notes appended to a state near that total stop at it."""
    from hive import issues
    from hive.state import layout
    from hive.state.store import Change

    ids = [new_issue(f"noted {n}") for n in range(9)]
    line = json.dumps({"category": "context", "content": "z" * 2000}) + "\n"
    full = (line * (trust.MAX_NOTES_BYTES // len(line) - 3)).encode()  # one blob for eight files
    project.store.commit(lambda snap: Change({layout.notes_path(i): full for i in ids[:8]},
                                             summary="notes by the kilo", event="noted"))
    project.after_write()
    left = trust.MAX_INCOMING_NOTES_BYTES - 8 * len(full)
    notes = _notes_of(ids[8], left // 2000 + 5)
    dropped = issues.add_notes(project, notes, file_id=ids[8])
    assert 0 < dropped < len(notes)
    store = hive_git.repository(project.paths.common_dir)
    tree = store.revparse_single("refs/heads/hive/state").tree
    assert 8 * len(full) + tree[layout.notes_path(ids[8])].size <= trust.MAX_INCOMING_NOTES_BYTES
    trust.check_tree(store, str(tree.id))                       # what a fresh clone checks: passes


def test_a_hand_edit_of_notes_past_what_a_fresh_clone_takes_in_is_refused(repo: Path, project, new_issue,
                                                                           hive) -> None:
    from hive.state import layout
    from hive.state.store import Change

    ids = [new_issue(f"noted {n}") for n in range(9)]
    line = json.dumps({"category": "context", "content": "z" * 2000}) + "\n"
    full = (line * (trust.MAX_NOTES_BYTES // len(line) - 3)).encode()
    project.store.commit(lambda snap: Change({layout.notes_path(i): full for i in ids[:8]},
                                             summary="notes by the kilo", event="noted"))
    project.after_write()
    tip = hive_git.read_ref(project.paths.common_dir, hive_git.STATE_REF)
    path = repo / ".hive" / layout.notes_path(ids[8])
    path.write_text(line * 40)                              # 80 KB: within its file's bound, not the total's
    proc = hive("doctor", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f".hive/{layout.notes_path(ids[8])}:1: the notes files would hold" in proc.stdout, proc.stdout
    assert hive_git.read_ref(project.paths.common_dir, hive_git.STATE_REF) == tip
