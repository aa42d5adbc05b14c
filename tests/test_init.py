"""`git hive init`: state branch, `.hive/` checkout, excludes, fetch refspec, merge driver, hooks."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from hive.initialize import hook_sources
from tests.repo_helpers import commit_hooks

STATE_REFSPEC = "+refs/heads/hive/state:refs/remotes/origin/hive/state"


def tree_files(git, ref: str, cwd: Path) -> set[str]:
    return set(git("ls-tree", "-r", "--name-only", ref, cwd=cwd).stdout.split())


def snapshot_setup(repo: Path) -> dict[str, bytes]:
    """Every file init may touch, outside the object store, by path."""
    files: dict[str, bytes] = {}
    git_dir = repo / ".git"
    for root in (git_dir / "refs", git_dir / "hooks", git_dir / "info", repo / ".hive"):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames:
                path = Path(dirpath, name)
                files[str(path.relative_to(repo))] = path.read_bytes()
    for name in ("config", "HEAD", "packed-refs"):
        if (git_dir / name).exists():
            files[f".git/{name}"] = (git_dir / name).read_bytes()
    return files


def one_line_error(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_init_creates_the_orphan_state_branch_with_its_files(repo, git, state_log):
    files = tree_files(git, "hive/state", repo)
    assert {".gitattributes", "context.md"} <= files
    assert any(f.startswith("issues/") for f in files) and any(f.startswith("notes/") for f in files)
    attributes = git("show", "hive/state:.gitattributes", cwd=repo).stdout
    assert "issues/** merge=hive" in attributes and "notes/** merge=hive" in attributes
    assert git("show", "hive/state:context.md", cwd=repo).stdout.strip()
    history = state_log(repo)
    assert len(history) == 1 and history[0].parents == []
    assert history[0].event == "initialized"
    # an orphan: nothing in common with the project's history, and main is untouched
    assert git("merge-base", "main", "hive/state", cwd=repo, check=False).returncode == 1
    assert git("rev-list", "--count", "main", cwd=repo).stdout.strip() == "1"
    assert git("symbolic-ref", "HEAD", cwd=repo).stdout.strip() == "refs/heads/main"


def test_init_makes_hive_a_linked_worktree_that_git_status_ignores(repo, git):
    checkout = repo / ".hive"
    assert (checkout / ".git").is_file()
    assert (checkout / "context.md").read_bytes() == git("show", "hive/state:context.md", cwd=repo).stdout.encode()
    assert (checkout / "issues").is_dir() and (checkout / "notes").is_dir()
    worktrees = git("worktree", "list", "--porcelain", cwd=repo).stdout
    assert f"worktree {checkout}\nHEAD " in worktrees
    assert "branch refs/heads/hive/state" in worktrees
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=checkout).stdout.strip() == "hive/state"
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert "/.hive/" in exclude
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo).stdout == ""
    assert git("status", "--porcelain", cwd=checkout).stdout == ""


def test_init_registers_the_merge_driver_for_state_files(repo, git):
    driver = git("config", "--get", "merge.hive.driver", cwd=repo).stdout.strip()
    assert driver.endswith("merge-driver %O %A %B %P")
    assert "hive" in driver
    checked = git("check-attr", "merge", "--", "issues/hv-abc123.md", "notes/hv-abc123.jsonl",
                  "context.md", cwd=repo / ".hive").stdout.splitlines()
    assert checked == ["issues/hv-abc123.md: merge: hive", "notes/hv-abc123.jsonl: merge: hive",
                       "context.md: merge: unspecified"]


def test_init_installs_executable_hooks(repo):
    for name, content in hook_sources().items():
        hook = repo / ".git" / "hooks" / name
        assert hook.read_bytes() == content
        assert hook.stat().st_mode & stat.S_IXUSR


def test_hook_reports_ref_updates_made_by_plain_git(repo, git):
    events = repo / ".git" / "hive" / "ref-events"
    before = events.read_text() if events.exists() else ""
    git("branch", "topic", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    after = events.read_text()
    assert after.startswith(before)
    assert f"{'0' * 40} {head} refs/heads/topic" in after[len(before):]


def test_a_workers_commit_is_reported_and_guarded_by_a_hook_that_starts_no_program(repo, git, tmp_path):
    """The hook runs twice for every commit of every agent: in a worker worktree it reports the
    branch's move, and refuses a move of `hive/state`, without starting any program — git runs
    here with nothing on PATH, where a `cat`, `dirname` or `git` in the hook would fail."""
    worktree = repo / ".git" / "hive" / "worktrees" / "hv-hook01"
    git("worktree", "add", "-q", str(worktree), "-b", "hive/work/hv-hook01", cwd=repo)
    events = repo / ".git" / "hive" / "ref-events"
    before = events.read_text() if events.exists() else ""
    nothing = tmp_path / "no-programs"
    nothing.mkdir()

    def bare_git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([shutil.which("git") or "git", *args], cwd=worktree, capture_output=True,
                              text=True, env={**os.environ, "PATH": str(nothing)}, timeout=30)

    committed = bare_git("commit", "-q", "--allow-empty", "-m", "work")
    assert committed.returncode == 0, committed.stderr
    head = git("rev-parse", "HEAD", cwd=worktree).stdout.strip()
    assert events.read_text().startswith(before)
    assert f" {head} refs/heads/hive/work/hv-hook01\n" in events.read_text()[len(before):]
    refused = bare_git("update-ref", "refs/heads/hive/state", "HEAD")
    assert refused.returncode != 0
    assert "refused: a worker worktree may not update refs/heads/hive/state" in refused.stderr
    # the target's name is asked of git (`hive.targetBranch`) only for a branch that might be it
    git("config", "hive.targetBranch", "trunk", cwd=repo)
    git("branch", "trunk", cwd=repo)
    refused = git("update-ref", "refs/heads/trunk", "HEAD", cwd=worktree, check=False)
    assert "refused: a worker worktree may not update refs/heads/trunk" in refused.stderr
    assert git("update-ref", "refs/heads/main", "HEAD", cwd=worktree, check=False).returncode == 0


def test_second_init_changes_nothing_and_says_so(repo, hive):
    before = snapshot_setup(repo)
    again = hive("init", cwd=repo)
    assert "nothing to change" in again.stdout
    assert again.stderr == ""
    assert snapshot_setup(repo) == before


def test_init_works_from_a_subdirectory(make_repo, hive, git):
    path = make_repo()
    sub = path / "src" / "deep"
    sub.mkdir(parents=True)
    hive("init", cwd=sub)
    assert (path / ".hive" / ".git").is_file()
    assert not (sub / ".hive").exists()
    assert git("rev-parse", "--verify", "-q", "hive/state", cwd=path).returncode == 0
    issue = hive("create", "from below", cwd=sub).stdout.strip()
    assert (path / ".hive" / "issues" / f"{issue}.md").is_file()


def test_init_works_from_inside_a_linked_worktree(make_repo, hive, git, tmp_path):
    path = make_repo()
    linked = tmp_path / "linked"
    git("worktree", "add", "-q", "-b", "feature", str(linked), cwd=path)
    (linked / "pkg").mkdir()
    hive("init", cwd=linked / "pkg")
    # the checkout belongs to the main worktree; the linked one stays clean
    assert (path / ".hive" / ".git").is_file()
    assert not (linked / ".hive").exists()
    assert git("status", "--porcelain", cwd=linked).stdout == ""
    issue = hive("create", "made in a linked worktree", cwd=linked).stdout.strip()
    assert (path / ".hive" / "issues" / f"{issue}.md").is_file()
    listed = hive("list", "--json", cwd=path).stdout
    assert issue in listed
    assert "nothing to change" in hive("init", cwd=path).stdout


def test_repo_without_a_commit_gets_a_one_line_error(make_repo, hive, git):
    path = make_repo(commit=False)
    proc = hive("init", cwd=path, check=False)
    assert proc.returncode == 1
    assert "no commit" in one_line_error(proc)
    assert git("rev-parse", "--verify", "-q", "refs/heads/hive/state", cwd=path, check=False).returncode != 0
    assert not (path / ".hive").exists()


def test_bare_repo_gets_a_one_line_error(tmp_path, hive, git):
    bare = tmp_path / "bare.git"
    git("init", "-q", "--bare", str(bare), cwd=tmp_path)
    proc = hive("init", cwd=bare, check=False)
    assert proc.returncode == 1
    assert "bare" in one_line_error(proc)
    assert not (bare / "refs" / "heads" / "hive").exists()


def test_command_outside_a_repository_fails_with_one_line(tmp_path, hive):
    outside = tmp_path / "plain"
    outside.mkdir()
    proc = hive("list", cwd=outside, check=False)
    assert proc.returncode == 1
    assert "not a git repository" in one_line_error(proc)


def test_command_before_init_says_to_run_init(make_repo, hive):
    proc = hive("list", cwd=make_repo(), check=False)
    assert proc.returncode == 1
    assert "git hive init" in one_line_error(proc)


# -- hooks ----------------------------------------------------------------------------------------

RECORDING_HOOK = """#!/bin/sh
log="$(dirname "$0")/../../chained.log"
echo "args: $*" >> "$log"
cat >> "$log"
"""


def test_existing_hook_is_kept_chained_and_still_gets_stdin(make_repo, hive, git):
    path = make_repo()
    hooks = path / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "reference-transaction"
    hook.write_text(RECORDING_HOOK)
    hook.chmod(0o755)
    done = hive("init", cwd=path).stdout
    assert "reference-transaction.hive-chained" in done
    chained = hooks / "reference-transaction.hive-chained"
    assert chained.read_text() == RECORDING_HOOK
    assert hook.read_bytes() == hook_sources()["reference-transaction"]

    log = path / "chained.log"
    log.unlink(missing_ok=True)
    git("branch", "chained-topic", cwd=path)
    head = git("rev-parse", "HEAD", cwd=path).stdout.strip()
    recorded = log.read_text()
    line = f"{'0' * 40} {head} refs/heads/chained-topic"
    assert "args: prepared" in recorded and "args: committed" in recorded
    assert recorded.count(line) >= 2  # stdin reached the old hook, in every phase
    # and hive's own part still ran
    assert line in (path / ".git" / "hive" / "ref-events").read_text()
    # a second init keeps both as they are
    assert "nothing to change" in hive("init", cwd=path).stdout
    assert chained.read_text() == RECORDING_HOOK


def test_failing_chained_hook_still_fails_the_transaction(make_repo, hive, git):
    path = make_repo()
    hook = path / ".git" / "hooks" / "reference-transaction"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text('#!/bin/sh\ncat >/dev/null\n[ "$1" = prepared ] && exit 1\nexit 0\n')
    hook.chmod(0o755)
    hive("init", cwd=path)
    proc = git("branch", "refused", cwd=path, check=False)
    assert proc.returncode != 0
    assert git("rev-parse", "--verify", "-q", "refs/heads/refused", cwd=path, check=False).returncode != 0


def test_core_hooks_path_is_respected(make_repo, hive, git):
    path = make_repo()
    git("config", "core.hooksPath", ".githooks", cwd=path)
    custom = path / ".githooks"
    custom.mkdir()
    (custom / "reference-transaction").write_text(RECORDING_HOOK.replace("../../", "../"))
    (custom / "reference-transaction").chmod(0o755)
    hive("init", cwd=path)
    assert (custom / "reference-transaction").read_bytes() == hook_sources()["reference-transaction"]
    assert (custom / "reference-transaction.hive-chained").exists()
    assert not (path / ".git" / "hooks" / "reference-transaction").exists()
    git("branch", "via-hooks-path", cwd=path)
    assert "refs/heads/via-hooks-path" in (path / "chained.log").read_text()
    assert "refs/heads/via-hooks-path" in (path / ".git" / "hive" / "ref-events").read_text()


def test_a_hooks_folder_outside_the_repository_is_named_as_shared(make_repo, hive, git, tmp_path):
    """A `core.hooksPath` outside the repository (a global setting, hooks shared by all of a
    person's repositories): init says where it put its hook, and that other repositories that use
    that folder run it too; a repository there without hive is left as it was by it."""
    shared = tmp_path / "shared-hooks"
    shared.mkdir()
    git("config", "--global", "core.hooksPath", str(shared), cwd=tmp_path)
    path = make_repo()
    out = hive("init", cwd=path).stdout
    assert (f"installed the reference-transaction hook in {shared}, the hooks folder core.hooksPath "
            "names: other repositories that use that folder run it too") in out, out
    assert (shared / "reference-transaction").read_bytes() == hook_sources()["reference-transaction"]
    other = make_repo("other")
    git("branch", "elsewhere", cwd=other)
    assert not (other / ".git" / "hive").exists()
    git("branch", "here", cwd=path)
    assert "refs/heads/here" in (path / ".git" / "hive" / "ref-events").read_text()


# -- remotes --------------------------------------------------------------------------------------

def hived_upstream(make_repo, title: str) -> tuple[Path, str]:
    """A repository set up for hive, with one issue (in-process: only the clone is under test)."""
    from hive.initialize import initialize
    from hive.project import Project
    from hive import issues

    upstream = make_repo("upstream")
    initialize(upstream)
    project = Project.open(upstream)
    issue = issues.create(project, title).id
    project.close()
    return upstream, issue


def test_single_branch_clone_gets_a_fetch_refspec_for_the_state_branch(make_repo, hive, git, tmp_path):
    upstream, issue = hived_upstream(make_repo, "shared work")
    clone = tmp_path / "clone"
    git("clone", "-q", "--single-branch", "--branch", "main", f"file://{upstream}", str(clone), cwd=tmp_path)
    assert git("config", "--get-all", "remote.origin.fetch", cwd=clone).stdout.split() == [
        "+refs/heads/main:refs/remotes/origin/main"]
    hive("init", cwd=clone)
    specs = git("config", "--get-all", "remote.origin.fetch", cwd=clone).stdout.split()
    assert specs == ["+refs/heads/main:refs/remotes/origin/main", STATE_REFSPEC]
    git("fetch", "-q", cwd=clone)
    assert (git("rev-parse", "refs/remotes/origin/hive/state", cwd=clone).stdout
            == git("rev-parse", "hive/state", cwd=upstream).stdout)
    assert issue in git("ls-tree", "-r", "--name-only", "refs/remotes/origin/hive/state", cwd=clone).stdout
    # idempotent: the refspec is not added twice
    hive("init", cwd=clone)
    assert git("config", "--get-all", "remote.origin.fetch", cwd=clone).stdout.split() == specs


def test_clone_of_a_hive_repo_adopts_the_shared_state_branch(make_repo, hive, git, tmp_path):
    upstream, issue = hived_upstream(make_repo, "already shared")
    clone = tmp_path / "clone"
    git("clone", "-q", f"file://{upstream}", str(clone), cwd=tmp_path)
    done = hive("init", cwd=clone).stdout
    assert "origin" in done
    assert (git("rev-parse", "hive/state", cwd=clone).stdout
            == git("rev-parse", "hive/state", cwd=upstream).stdout)
    assert (clone / ".hive" / "issues" / f"{issue}.md").is_file()
    assert issue in hive("list", "--json", cwd=clone).stdout
    # the default wildcard refspec already fetches hive/state: nothing added
    assert git("config", "--get-all", "remote.origin.fetch", cwd=clone).stdout.split() == [
        "+refs/heads/*:refs/remotes/origin/*"]
    # and a plain `git fetch` brings new shared state
    git("commit", "-q", "--allow-empty", "-m", "more shared state", cwd=upstream / ".hive")
    git("fetch", "-q", cwd=clone)
    assert (git("rev-parse", "origin/hive/state", cwd=clone).stdout
            == git("rev-parse", "hive/state", cwd=upstream).stdout)


def test_a_relative_tracked_hooks_path_stays_as_set_and_git_status_stays_clean(repo: Path, git, hive) -> None:
    """husky and pre-commit setups: `core.hooksPath` names a tracked folder of the repository."""
    hooks = commit_hooks(git, repo, ".husky",
                         {"pre-commit": '#!/bin/sh\necho ran >> "$(git rev-parse --git-common-dir)/pre-commit.log"\n'})
    hive("init", cwd=repo)
    assert git("config", "core.hooksPath", cwd=repo).stdout.strip() == ".husky"        # as the person set it
    assert (hooks / "reference-transaction").exists()
    assert git("status", "--porcelain", "--untracked-files=all", cwd=repo).stdout == ""   # nothing to commit by mistake
    (repo / "file.txt").write_text("x\n")
    git("add", "file.txt", cwd=repo)
    git("commit", "-q", "-m", "a person's commit", cwd=repo)
    assert (repo / ".git" / "pre-commit.log").read_text() == "ran\n"                   # their hook still runs
    assert "refs/heads/main" in (repo / ".git" / "hive" / "ref-events").read_text()   # and hive's
    again = hive("init", cwd=repo)
    assert "hook" not in again.stdout and git("status", "--porcelain", cwd=repo).stdout == ""


def test_the_runtime_folder_is_private(repo: Path) -> None:
    assert (repo / ".git" / "hive").stat().st_mode & 0o777 == 0o700


def test_init_in_a_clone_approves_the_projects_test_command_and_warns_of_nothing(make_repo, hive, git, tmp_path):
    """The first init approves what the target branch's `.hive.toml` sets (DESIGN §7), whatever
    that branch is called. It read the settings before approving them, and printed "changes
    test_command, not approved on this machine: ignored" beside its own "approved" line."""
    for target, named in (("main", False), ("release/v2", False), ("main", True)):
        upstream = make_repo(f"upstream-{target.replace('/', '-')}-{named}")
        if target != "main":
            git("branch", "-q", "-m", "main", target, cwd=upstream)
        settings = f'target_branch = "{target}"\n' if named else ""   # named by the file itself
        (upstream / ".hive.toml").write_text(settings + 'test_command = "true"\n', encoding="utf-8")
        git("add", ".hive.toml", cwd=upstream)
        git("commit", "-q", "-m", "hive settings", cwd=upstream)
        clone = tmp_path / f"clone-{target.replace('/', '-')}-{named}"
        git("clone", "-q", f"file://{upstream}", str(clone), cwd=tmp_path)
        done = hive("init", cwd=clone)
        assert "approved on this machine: test_command = 'true'" in done.stdout, (target, done.stdout)
        assert f"target branch: {target}" in done.stdout
        assert done.stderr == "", done.stderr
        shown = hive("config", "get", "test_command", cwd=clone)
        assert shown.stdout.strip() == "true" and shown.stderr == "", (target, shown.stderr)
