"""Files a filter driver of the person's config writes on checkout (git-lfs's `lfs`, or any
`filter.<name>.smudge`): hive's worktrees hold them as git's own checkout does, not as their
blobs hold them (libgit2 runs no external filter)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pygit2
import pytest

from hive import git as hive_git
from hive.workspace import worktrees

ISSUE = "hv-filt01"


@pytest.fixture
def filtered_repo(repo: Path, git) -> Path:
    """The repository, with a driver in the person's global config that writes files upper-case
    (and stores them lower-case), and a `notes.txt` that `.gitattributes` sends through it."""
    git("config", "--global", "filter.upper.smudge", "tr a-z A-Z")
    git("config", "--global", "filter.upper.clean", "tr A-Z a-z")
    (repo / ".gitattributes").write_text("*.txt filter=upper\n", encoding="utf-8")
    (repo / "notes.txt").write_text("hello filtered world\n", encoding="utf-8")
    git("add", ".gitattributes", "notes.txt", cwd=repo)
    git("commit", "-q", "-m", "filtered notes", cwd=repo)
    assert git("show", "HEAD:notes.txt", cwd=repo).stdout == "hello filtered world\n"   # the blob
    return repo


def test_a_worktree_holds_filtered_files_as_git_writes_them_and_nothing_looks_changed(filtered_repo: Path, git):
    """Made fresh, then reset to a commit with one more such file (what a test checkout does):
    each time the files are what the driver writes, git and libgit2 see no change, and retiring
    the worktree keeps nothing as "uncommitted" (the content is not the blob's, but stands for it)."""
    paths = hive_git.discover(filtered_repo)
    base = git("rev-parse", "main", cwd=filtered_repo).stdout.strip()
    tree = worktrees.create(paths, ISSUE, base).path
    assert (tree / "notes.txt").read_text() == "HELLO FILTERED WORLD\n"
    assert (tree / "README.md").read_text() == "hello\n"            # no filter: as its blob
    assert git("status", "--porcelain", cwd=tree).stdout == ""
    assert pygit2.Repository(str(tree)).status() == {}

    (filtered_repo / "more.txt").write_text("more words\n", encoding="utf-8")
    git("add", "more.txt", cwd=filtered_repo)
    git("commit", "-q", "-m", "more", cwd=filtered_repo)
    worktrees.check_out_for_tests(paths, ISSUE, git("rev-parse", "main", cwd=filtered_repo).stdout.strip())
    assert (tree / "more.txt").read_text() == "MORE WORDS\n"
    assert (tree / "notes.txt").read_text() == "HELLO FILTERED WORLD\n"
    assert git("status", "--porcelain", cwd=tree).stdout == ""
    assert pygit2.Repository(str(tree)).status() == {}

    worktrees.retire(paths, ISSUE, "main")
    assert git("for-each-ref", f"refs/hive/attempts/{ISSUE}", cwd=filtered_repo).stdout == ""


def test_a_filter_named_in_the_persons_own_attributes_file_is_run_too(repo: Path, git, git_env: Path):
    """The attributes come from `core.attributesFile` (the person's, no `.gitattributes` in the
    project): git's own checkout runs the filter, so hive's does."""
    git("config", "--global", "filter.upper.smudge", "tr a-z A-Z")
    git("config", "--global", "filter.upper.clean", "tr A-Z a-z")
    attributes = git_env / "attributes"
    attributes.write_text("*.txt filter=upper\n", encoding="utf-8")
    git("config", "--global", "core.attributesFile", str(attributes))
    (repo / "notes.txt").write_text("quiet words\n", encoding="utf-8")
    git("add", "notes.txt", cwd=repo)
    git("commit", "-q", "-m", "notes", cwd=repo)
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=repo).stdout.strip()).path
    assert (tree / "notes.txt").read_text() == "QUIET WORDS\n"
    assert git("status", "--porcelain", cwd=tree).stdout == ""
    worktrees.retire(paths, ISSUE, "main")


def test_a_filter_named_in_a_sub_folders_attributes_is_run_too(repo: Path, git):
    """`git lfs track` run in `assets/` writes `assets/.gitattributes`: the filter named there
    applies there, as for git; each folder's answer is kept by its tree id, so the next commit,
    which changes another folder, still finds it."""
    git("config", "--global", "filter.upper.smudge", "tr a-z A-Z")
    git("config", "--global", "filter.upper.clean", "tr A-Z a-z")
    (repo / "assets").mkdir()
    (repo / "assets" / ".gitattributes").write_text("*.txt filter=upper\n", encoding="utf-8")
    (repo / "assets" / "words.txt").write_text("deep words\n", encoding="utf-8")
    (repo / "top.txt").write_text("top words\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "assets", cwd=repo)
    paths = hive_git.discover(repo)
    tree = worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=repo).stdout.strip()).path
    assert (tree / "assets" / "words.txt").read_text() == "DEEP WORDS\n"
    assert (tree / "top.txt").read_text() == "top words\n"            # not under assets/
    (repo / "other").mkdir()
    (repo / "other" / "file.md").write_text("x\n", encoding="utf-8")
    (repo / "assets" / "more.txt").write_text("more words\n", encoding="utf-8")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "more", cwd=repo)
    worktrees.check_out_for_tests(paths, ISSUE, git("rev-parse", "main", cwd=repo).stdout.strip())
    assert (tree / "assets" / "more.txt").read_text() == "MORE WORDS\n"
    assert git("status", "--porcelain", cwd=tree).stdout == ""
    worktrees.retire(paths, ISSUE, "main")


def test_a_filter_that_fails_leaves_the_file_as_its_blob_holds_it(filtered_repo: Path, git):
    """The driver fails (git-lfs offline, its object fetched nowhere): the worktree is made all
    the same, the file holding its blob's bytes, as before hive ran filters at all."""
    git("config", "--global", "filter.upper.smudge", "false")
    paths = hive_git.discover(filtered_repo)
    tree = worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=filtered_repo).stdout.strip()).path
    assert (tree / "notes.txt").read_text() == "hello filtered world\n"
    worktrees.retire(paths, ISSUE, "main")


def test_no_filter_is_run_where_the_person_configured_none(filtered_repo: Path, git, tmp_path: Path):
    """`.gitattributes` names a filter this person's config does not define (a filter of the
    branch's naming, such as an agent could add): nothing is run, the file is its blob."""
    git("config", "--global", "--remove-section", "filter.upper")
    ran = tmp_path / "ran"
    git("config", "--global", "filter.other.smudge", f"sh -c 'touch {ran}; cat'")
    paths = hive_git.discover(filtered_repo)
    tree = worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=filtered_repo).stdout.strip()).path
    assert (tree / "notes.txt").read_text() == "hello filtered world\n"
    assert not ran.exists()
    worktrees.retire(paths, ISSUE, "main")


def test_what_an_agent_leaves_in_its_lfs_store_is_taken_only_as_its_name_says(repo: Path, git, tmp_path: Path):
    """The files a jailed agent's git-lfs stored are copied into the shared LFS store hashed again:
    one whose bytes are not its name's SHA-256, a link, a FIFO, a name of the wrong folder are
    not taken (each a way to plant bytes another worktree's checkout would then write); the
    agent's store is emptied either way."""
    import hashlib

    paths = hive_git.discover(repo)
    worktrees.create(paths, ISSUE, git("rev-parse", "main", cwd=repo).stdout.strip())
    private = hive_git.private_lfs(paths.common_dir, ISSUE) / "objects"

    def put(name: str, data: bytes, folder: str = "") -> Path:
        place = private / (folder or f"{name[:2]}/{name[2:4]}")
        place.mkdir(parents=True, exist_ok=True)
        (place / name).write_bytes(data)
        return place / name

    genuine = b"weights the agent made\n"
    good = hashlib.sha256(genuine).hexdigest()
    put(good, genuine)
    forged = hashlib.sha256(b"what the name promises").hexdigest()
    put(forged, b"something else")
    misplaced = hashlib.sha256(b"misplaced").hexdigest()
    put(misplaced, b"misplaced", folder="00/00")
    secret = tmp_path / "secret"
    secret.write_bytes(b"a file of the person's")
    linked = hashlib.sha256(secret.read_bytes()).hexdigest()
    (private / linked[:2] / linked[2:4]).mkdir(parents=True, exist_ok=True)
    (private / linked[:2] / linked[2:4] / linked).symlink_to(secret)
    fifo = hashlib.sha256(b"").hexdigest()
    (private / fifo[:2] / fifo[2:4]).mkdir(parents=True, exist_ok=True)
    os.mkfifo(private / fifo[:2] / fifo[2:4] / fifo)

    worktrees.absorb_objects(paths, ISSUE)
    shared = paths.common_dir / "lfs" / "objects"
    taken = sorted(p.name for p in shared.rglob("*") if p.is_file() or p.is_symlink())
    assert taken == [good]
    assert (shared / good[:2] / good[2:4] / good).read_bytes() == genuine
    assert [p for p in private.rglob("*") if not p.is_dir()] == []
    worktrees.retire(paths, ISSUE, "main")


def _require_git_lfs() -> None:
    if shutil.which("git-lfs"):
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI must run the git-lfs tests: install git-lfs (.ci/run does)")
    pytest.skip("git-lfs is not installed")


@pytest.mark.timeout(120)
def test_with_git_lfs_agents_read_and_change_the_content_and_the_target_keeps_pointers(make_repo, git, hive,
                                                                                         tmp_path: Path):
    """A project that keeps its model in git-lfs, set up as `git lfs install` does (the person's
    global config). Every worker's worktree held the pointer: the agent read three lines of
    metadata, and every landing whose tests read the file failed. Now the jailed agent reads the
    content and the tests pass on the candidate. An agent that changes the file commits a new
    pointer (its global config was hidden from the jail, so git stored the content itself as a
    plain blob; then git-lfs could not write its store there), its content reaches the shared
    LFS store through hive, checked against its name, and the person's checkout gets the new
    content; the target holds pointers only."""
    _require_git_lfs()
    repo = make_repo("lfs-project")
    git("lfs", "install", cwd=repo)
    git("lfs", "track", "*.bin", cwd=repo)
    (repo / "model.bin").write_bytes(b"REAL MODEL WEIGHTS\n")
    git("add", ".gitattributes", "model.bin", cwd=repo)
    git("commit", "-q", "-m", "the model", cwd=repo)
    pointer = git("show", "HEAD:model.bin", cwd=repo).stdout
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1")
    hive("init", cwd=repo)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"labels": {
        "read": [{"run": "grep -q 'REAL MODEL' model.bin"},
                 # git-lfs inside finds the content in the shared store, through the alternate
                 {"run": "rm model.bin && git checkout -- model.bin && grep -q 'REAL MODEL' model.bin"},
                 {"write": "result-{issue}.txt", "content": "read the model\n"},
                 {"commit": "{issue}: result"}, {"result": "success", "summary": "done"}],
        "retrain": [{"run": "grep -q 'REAL MODEL' model.bin"},
                    {"write": "model.bin", "content": "REAL MODEL WEIGHTS, RETRAINED\n"},
                    {"commit": "{issue}: retrained"}, {"result": "success", "summary": "done"}]}}), encoding="utf-8")
    read = hive("create", "use the model", "-l", "read", cwd=repo).stdout.strip()
    hive("run", "--backend", "scripted", "--until-idle", cwd=repo,
         env={"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": "grep -q 'REAL MODEL' model.bin"})
    assert json.loads(hive("show", read, "--json", cwd=repo).stdout)["status"] == "finalized"
    assert git("show", "main:model.bin", cwd=repo).stdout == pointer
    assert git("show", f"main:result-{read}.txt", cwd=repo).stdout == "read the model\n"

    retrain = hive("create", "retrain the model", "-l", "retrain", cwd=repo).stdout.strip()
    hive("run", "--backend", "scripted", "--until-idle", cwd=repo,
         env={"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": "grep -q RETRAINED model.bin"})
    shown = json.loads(hive("show", retrain, "--json", cwd=repo).stdout)
    assert shown["status"] == "finalized", shown
    new_pointer = git("show", "main:model.bin", cwd=repo).stdout
    assert new_pointer.startswith("version https://git-lfs.github.com/spec/v1") and new_pointer != pointer
    assert (repo / "model.bin").read_bytes() == b"REAL MODEL WEIGHTS, RETRAINED\n"   # the person's checkout
    assert git("lfs", "fsck", cwd=repo).returncode == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("hooks", ["git-dir", "worktree"])
def test_with_git_lfs_a_shared_run_pushes_the_new_content_with_the_pointer(git, hive, tmp_path: Path, hooks: str):
    """`git hive run --remote origin`: the pointer an agent committed reaches the remote's target,
    and so does its content: a fresh clone checks the retrained model out, not a pointer it cannot
    resolve. With the hooks in `.git/hooks`, git-lfs's pre-push hook sends it, on hive's push as
    on the person's; with the hooks a folder of the branch (`core.hooksPath = .githooks`, as husky
    sets one up), hive's push runs no hook, and hive sends the content itself (`git lfs push`)."""
    _require_git_lfs()
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    person = tmp_path / "person"
    git("clone", "-q", str(remote), str(person))
    if hooks == "worktree":
        git("config", "core.hooksPath", ".githooks", cwd=person)
    git("lfs", "install", cwd=person)
    git("lfs", "track", "*.bin", cwd=person)
    (person / "model.bin").write_bytes(b"REAL MODEL WEIGHTS\n")
    git("add", "-A", cwd=person)
    git("commit", "-q", "-m", "the model", cwd=person)
    git("push", "-q", "origin", "main", cwd=person)
    hive("init", cwd=person)
    hive("sync", cwd=person)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": [
        {"write": "model.bin", "content": "RETRAINED WEIGHTS\n"},
        {"commit": "{issue}: retrained"}, {"result": "success", "summary": "done"}]}), encoding="utf-8")
    issue = hive("create", "retrain the model", cwd=person).stdout.strip()
    hive("run", "--backend", "scripted", "--remote", "origin", "--until-idle", cwd=person,
         env={"HIVE_SCRIPTED_SCRIPT": str(script)})
    assert json.loads(hive("show", issue, "--json", cwd=person).stdout)["status"] == "finalized"
    fresh = tmp_path / "fresh"
    git("clone", "-q", str(remote), str(fresh))
    assert (fresh / "model.bin").read_bytes() == b"RETRAINED WEIGHTS\n"


def test_the_filter_gate_walks_a_tree_nested_deeper_than_pythons_stack(repo: Path):
    """A tree of the branch (an agent's landed work) nested 3,000 folders deep, a `.gitattributes`
    naming a filter at the bottom: the gate finds it, with no RecursionError (hive would have
    failed every worktree made from that commit)."""
    import sys

    from hive.workspace import filters

    odb_repo = pygit2.Repository(str(repo))
    attributes = odb_repo.create_blob(b"*.bin filter=lfs\n")
    builder = odb_repo.TreeBuilder()
    builder.insert(".gitattributes", attributes, pygit2.GIT_FILEMODE_BLOB)
    tree = builder.write()
    depth = sys.getrecursionlimit() * 3
    for _ in range(depth):
        builder = odb_repo.TreeBuilder()
        builder.insert("d", tree, pygit2.GIT_FILEMODE_TREE)
        tree = builder.write()
    assert filters._tree_names_filter(odb_repo.odb, str(tree)) is True
    plain = odb_repo.TreeBuilder()
    plain.insert("d", odb_repo.create_blob(b"nothing\n"), pygit2.GIT_FILEMODE_BLOB)
    assert filters._tree_names_filter(odb_repo.odb, str(plain.write())) is False
