"""The setups that trip a newcomer (issue 30): each one as they meet it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path


def _state_file(repo: Path, issue: str) -> bytes:
    return subprocess.run(["git", "show", f"hive/state:issues/{issue}.md"], cwd=repo, capture_output=True,
                          check=True).stdout


def test_an_issue_file_saved_with_crlf_is_read_and_kept_crlf(repo, hive, list_json) -> None:
    issue = hive("create", "Windows editor", cwd=repo).stdout.strip()
    path = repo / ".hive" / "issues" / f"{issue}.md"
    text = path.read_text().replace('title = "Windows editor"', 'title = "Saved with CRLF"')
    path.write_bytes(text.replace("\n", "\r\n").encode())
    listed = hive("list", cwd=repo)
    assert "broken TOML" not in listed.stderr and listed.stderr == "", listed.stderr
    assert [i["title"] for i in list_json(cwd=repo)] == ["Saved with CRLF"]
    hive("update", issue, "--priority", "1", cwd=repo)
    written = _state_file(repo, issue)
    assert b"priority = 1\r\n" in written and written.count(b"\r\n") == written.count(b"\n"), written


def test_a_hand_edit_bumps_updated_unless_the_person_set_it(repo, hive) -> None:
    issue = hive("create", "Edited by hand", cwd=repo).stdout.strip()
    path = repo / ".hive" / "issues" / f"{issue}.md"

    def updated() -> str:
        return re.search(rb'updated = (\S+)', _state_file(repo, issue)).group(1).decode()

    text = re.sub(r"updated = \S+", "updated = 2020-01-01T00:00:00Z", path.read_text())
    path.write_text(text)
    hive("list", cwd=repo)
    assert updated() == "2020-01-01T00:00:00Z"            # the person's own value stays
    path.write_text(path.read_text().replace('title = "Edited by hand"', 'title = "Edited again"'))
    hive("list", cwd=repo)
    assert updated() > "2025-01-01T00:00:00Z"               # a change of theirs: now
    assert "Edited again" in path.read_text() and updated() in path.read_text()   # the checkout shows it


def test_a_removed_hive_checkout_is_made_again_by_the_next_command(repo, hive, list_json) -> None:
    import shutil

    issue = hive("create", "Still here", cwd=repo).stdout.strip()
    shutil.rmtree(repo / ".hive")
    listed = hive("list", cwd=repo)
    assert listed.stderr == "git hive: .hive/ was missing: checked hive/state out there again\n", listed.stderr
    assert (repo / ".hive" / "issues" / f"{issue}.md").is_file()
    assert hive("list", cwd=repo).stderr == ""                       # said once
    hive("update", issue, "--priority", "0", cwd=repo)             # and usable again
    assert "priority = 0" in (repo / ".hive" / "issues" / f"{issue}.md").read_text()


def test_init_picks_a_branch_that_exists_or_says_how_to_choose(make_repo, git, hive) -> None:
    only = make_repo("only-trunk", commit=False)
    git("checkout", "-q", "-b", "trunk", cwd=only)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=only)
    git("checkout", "-q", "--detach", cwd=only)
    assert "target branch: trunk" in hive("init", cwd=only).stdout
    two = make_repo("two-branches", commit=False)
    git("checkout", "-q", "-b", "trunk", cwd=two)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=two)
    git("branch", "side", cwd=two)
    git("checkout", "-q", "--detach", cwd=two)
    refused = hive("init", cwd=two, check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "branches here: side, trunk" in refused.stderr and "git hive config set target_branch BRANCH" in refused.stderr
    assert git("branch", "--list", "hive/state", cwd=two).stdout.strip() == ""     # nothing half set up
    hive("config", "set", "target_branch", "side", cwd=two)
    assert "target branch: side" in hive("init", cwd=two).stdout


def test_a_worktree_of_a_bare_repository_is_refused_by_every_command(tmp_path: Path, git, hive) -> None:
    bare = tmp_path / "project.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git("clone", "-q", str(bare), str(seed))
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=seed)
    git("push", "-q", "origin", "HEAD:main", cwd=seed)
    git("worktree", "add", "-q", str(tmp_path / "work"), "main", cwd=bare)
    for args in (("init",), ("create", "x"), ("list",), ("list", "--json"), ("run", "--until-idle")):
        done = hive(*args, cwd=tmp_path / "work", check=False)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "is a worktree of the bare repository" in done.stderr and "git clone" in done.stderr, done.stderr


def test_a_command_run_inside_the_git_folder_says_where_to_run_it_instead(repo: Path, hive) -> None:
    """In `.git` (or a folder of it, such as hive's own `.git/hive`) no command takes the git
    folder for a bare repository: it says to run git hive in the worktree, and changes nothing."""
    refs = sorted(p.name for p in (repo / ".git" / "refs" / "heads").rglob("*"))
    for folder in (repo / ".git", repo / ".git" / "hive"):
        for args in (("list",), ("create", "x"), ("status",)):
            done = hive(*args, cwd=folder, check=False)
            assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
            assert f"is in the git folder of {repo}: run git hive in {repo}" in done.stderr, done.stderr
            assert "bare" not in done.stderr
    assert sorted(p.name for p in (repo / ".git" / "refs" / "heads").rglob("*")) == refs


def test_a_repository_of_another_user_is_refused_with_the_commands_that_mark_it_safe(
        make_repo, git, hive, tmp_path: Path) -> None:
    """Root in a container, on a repository mounted from the host: it belongs to another user,
    and git and libgit2 work in it only once it is marked safe, a linked worktree of it on its
    own. Every command says so in one line with the commands that do it, and makes nothing
    (before: "internal error: GitError"). Done as said, init and the commands after it work."""
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("making a repository another user's takes root (the suite runs as root in CI)")
    repo = make_repo("theirs")
    linked = tmp_path / "theirs-side"
    git("worktree", "add", "-q", str(linked), "-b", "side", cwd=repo)
    for top in (repo, linked):
        for folder, dirs, files in os.walk(top):
            for name in [".", *dirs, *files]:
                os.chown(os.path.join(folder, name), 65534, 65534, follow_symlinks=False)
    mark = "run `git config --global --add safe.directory {}`"
    for where, marks in ((repo, [repo]), (linked, [repo, linked])):
        for args in (("init",), ("list",), ("list", "--json"), ("create", "x"), ("status",)):
            done = hive(*args, cwd=where, check=False)
            assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
            assert f"{repo} belongs to another user (uid 65534; you are uid 0)" in done.stderr, done.stderr
            assert " and ".join(mark.format(m).removeprefix("run ") for m in marks) in done.stderr, done.stderr
    assert not (repo / ".hive").exists() and not (repo / ".git" / "hive").exists()
    assert sorted(p.name for p in (repo / ".git" / "refs" / "heads").iterdir()) == ["main", "side"]

    for folder in (repo, linked):
        git("config", "--global", "--add", "safe.directory", str(folder), cwd=tmp_path)
    hive("init", cwd=linked)
    issue = hive("create", "from the mounted volume", cwd=linked).stdout.strip()
    assert issue in hive("list", cwd=repo).stdout


def test_hive_in_a_submodule_keeps_its_queue_and_its_work_in_the_submodule(make_repo, git, hive) -> None:
    """A submodule's git folder lies in the superproject's `.git/modules`; its checkout is where
    `core.worktree` says. `.hive/` goes into that checkout, and a run lands there and leaves it
    clean (before: `.hive/` went into the superproject's `.git/modules`, and the merge never
    landed: it waited on an error naming an object id). The superproject sees only its
    submodule moved."""
    superproject = make_repo("super")
    _vendor_a_lib(superproject, make_repo, git)
    checkout = superproject / "vendor" / "lib"
    hive("init", cwd=checkout)
    issue = hive("create", "Work in the submodule", cwd=checkout).stdout.strip()
    assert (checkout / ".hive" / "issues" / f"{issue}.md").is_file()
    assert not [p for p in (superproject / ".git" / "modules").rglob(".hive")]
    hive("run", "--backend", "scripted", "--until-idle", cwd=checkout)
    assert issue in git("log", "-1", "--format=%s", cwd=checkout).stdout
    assert git("status", "--porcelain", cwd=checkout).stdout == ""      # the landing is checked out here
    assert git("status", "--porcelain", cwd=superproject).stdout == " M vendor/lib\n"


def test_hive_with_a_separate_git_folder_keeps_its_queue_in_the_worktree(git, hive, tmp_path: Path) -> None:
    """`git init --separate-git-dir`: the git folder lies apart from the worktree, whose `.git`
    file names it. `.hive/` goes into the worktree (before: beside the git folder, into the
    folder that holds it)."""
    worktree, git_folder = tmp_path / "work", tmp_path / "elsewhere" / "work.git"
    git_folder.parent.mkdir()
    git("init", "-q", "-b", "main", "--separate-git-dir", str(git_folder), str(worktree), cwd=tmp_path)
    (worktree / "README.md").write_text("apart\n")
    git("add", "README.md", cwd=worktree)
    git("commit", "-q", "-m", "first", cwd=worktree)
    hive("init", cwd=worktree)
    issue = hive("create", "Work here", cwd=worktree).stdout.strip()
    assert (worktree / ".hive" / "issues" / f"{issue}.md").is_file()
    assert not (git_folder.parent / ".hive").exists()
    assert issue in hive("list", cwd=worktree).stdout


def test_a_long_failure_reason_keeps_the_tests_verdict_not_its_banner() -> None:
    from hive.lifecycle import reason_line

    output = "`pytest -q` failed (exit 1):\n" + "=" * 30 + " test session starts " + "=" * 30 + "\n" + \
        "\n".join(f"collected line {n}" for n in range(200)) + "\nFAILED tests/test_sub.py::test_reads - FileNotFoundError: lib/x\n"
    line = reason_line(output, 400)
    assert len(line) <= 400 and "\n" not in line
    assert line.startswith("`pytest -q` failed (exit 1):")
    assert line.endswith("FAILED tests/test_sub.py::test_reads - FileNotFoundError: lib/x")
    assert reason_line("short\nreason") == "short reason"


def test_worktrees_have_the_submodules_from_the_local_copies_and_a_test_reading_one_passes(
        repo, make_repo, git, new_issue, state_log, tmp_path) -> None:
    from tests.daemon_helpers import RUN

    lib = _vendor_a_lib(repo, make_repo, git)
    config_before = (repo / ".git" / "config").read_bytes()
    (lib / "x.txt").unlink()                       # the "network" copy is gone: only the local one helps
    issue = new_issue("Use the vendored lib")
    env = _a_run_testing_the_lib(tmp_path)
    done = subprocess.run([*RUN, "--until-idle"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c.event for c in state_log(repo) if c.issue == issue][-1] == "finalized", done.stdout
    assert (repo / ".git" / "config").read_bytes() == config_before



def test_a_hostile_gitmodules_clones_nothing_runs_nothing_and_changes_no_config(repo, make_repo, git,
                                                                                tmp_path) -> None:
    """`.gitmodules` is the target's code, which an agent's landing may have written: a name
    climbing out of `modules/` and a submodule with no local copy (its url elsewhere) are left
    out, an `update = !command` runs nothing (git refuses it from `.gitmodules`); the shared
    config stays as it was."""
    from hive import git as hive_git
    from hive.workspace import worktrees

    outside = make_repo("outside")
    (outside / "secret.txt").write_text("fetched from outside\n")
    git("add", "secret.txt", cwd=outside)
    git("commit", "-q", "-m", "outside", cwd=outside)
    escaped = repo / ".git" / "escaped"           # `modules/../../escaped` would name this
    git("clone", "-q", "--bare", str(outside), str(escaped))
    git("clone", "-q", "--bare", str(outside), str(repo / ".git" / "modules" / "cmd"))   # the person's copy
    pwned = tmp_path / "pwned"
    (repo / ".gitmodules").write_text(
        f'[submodule "../escaped"]\n\tpath = climb\n\turl = {outside}\n'
        f'[submodule "gone"]\n\tpath = gone\n\turl = {outside}\n'
        f'[submodule "cmd"]\n\tpath = cmd\n\turl = {outside}\n\tupdate = !touch {pwned}\n')
    commit = git("rev-parse", "HEAD", cwd=outside).stdout.strip()
    for path in ("climb", "gone", "cmd"):
        git("update-index", "--add", "--cacheinfo", f"160000,{commit},{path}", cwd=repo)
    git("add", ".gitmodules", cwd=repo)
    git("commit", "-q", "-m", "hostile submodules", cwd=repo)
    config_before = (repo / ".git" / "config").read_bytes()
    worktree = tmp_path / "wt"
    git("worktree", "add", "-q", "--detach", str(worktree), "HEAD", cwd=repo)

    left_out = worktrees.init_submodules(hive_git.discover(repo), worktree)

    assert sorted(left_out) == ["../escaped", "gone"]
    assert not any((worktree / p / "secret.txt").exists() for p in ("climb", "gone"))
    assert not pwned.exists()
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert sorted(p.name for p in (repo / ".git" / "modules").iterdir()) == ["cmd"]

def test_plan_works_offline_with_the_scripted_queen(repo, hive, list_json) -> None:
    done = hive("plan", "--backend", "scripted", "--headless", "Add a health endpoint", cwd=repo)
    assert "approved: 1 issue(s)" in done.stdout, done.stdout + done.stderr
    assert [(i["title"], i["status"]) for i in list_json(cwd=repo)] == [("Add a health endpoint", "open")]
    # a spec with TOML's own characters in it is still one valid issue
    hive("plan", "--backend", "scripted", "--headless", 'Quote "it" and C:\\path', cwd=repo)
    assert 'Quote "it" and C:\\path' in [i["title"] for i in list_json(cwd=repo)]


def test_with_commit_signing_on_agents_still_commit_and_run_says_hives_commits_are_unsigned(
        repo, git, new_issue, state_log, tmp_path) -> None:
    import os

    from tests.daemon_helpers import RUN, write_script

    git("config", "commit.gpgsign", "true", cwd=repo)
    git("config", "gpg.program", "false", cwd=repo)          # any signature tried would fail
    issue = new_issue("Signed repository")
    script = write_script(tmp_path, {"default": [
        {"write": "work.txt", "content": "work\n"},
        {"run": "git add work.txt && git commit -q -m 'plain git commit, as a real agent makes it'", "must_succeed": True},
        {"result": "success", "summary": "committed"}]})
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script)}
    done = subprocess.run([*RUN, "--until-idle"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c.event for c in state_log(repo) if c.issue == issue][-1] == "finalized", done.stdout
    assert done.stderr.count("warning: commit.gpgsign is on, but the commits hive makes") == 1, done.stderr


def test_a_warning_during_a_run_goes_above_the_live_line(monkeypatch) -> None:
    import io
    import sys

    from hive.cli.progress import LiveLine
    from hive.orchestrator.progress import RunProgress

    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    live = LiveLine(terminal, terminal)
    live.progress(RunProgress(0.0, finalized=1, total=3, busy=2))
    print("warning: something to say", file=sys.stderr)
    live.log("hv-aaaaaa claimed")
    live.close()
    assert sys.stderr is terminal
    lines = terminal.getvalue().split("\r\x1b[K")
    said = [chunk for chunk in lines if "warning" in chunk]
    assert said == ["warning: something to say\n1 of 3 finalized · 2 agent(s) busy · 0 tokens · $0.0000"], lines


def test_status_watch_ages_tick_without_news(repo, hive, new_issue, tmp_path) -> None:
    import os
    import signal
    import sys
    import time

    from tests.daemon_helpers import write_script

    new_issue("Slow")
    script = write_script(tmp_path, {"default": [{"say": "started"}, {"sleep": 30},
                                                 {"result": "success", "summary": "x"}]})
    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script)}
    hive("run", "--backend", "scripted", "--detach", cwd=repo, env=env)
    try:
        deadline = time.monotonic() + 30
        while '"state": "busy"' not in hive("status", "--json", cwd=repo).stdout:
            assert time.monotonic() < deadline, "the agent never got busy"
        watch = subprocess.Popen([sys.executable, "-m", "hive", "status", "--watch"], cwd=repo, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ages: set[str] = set()
        deadline = time.monotonic() + 4.5    # a redraw a second: ages tick (not one per 5 s)
        assert watch.stdout is not None
        while len(ages) < 3 and time.monotonic() < deadline:
            line = watch.stdout.readline()
            found = re.match(r"\s+hv-\w+\s+\S+\s+worker\s+(\S+)", line)
            if found:
                ages.add(found.group(1))
        watch.send_signal(signal.SIGINT)
        watch.communicate(timeout=10)
        assert len(ages) >= 3, ages
    finally:
        hive("stop", cwd=repo, check=False)


def test_sync_and_status_say_the_target_has_landings_the_remote_lacks(repo, git, hive, new_issue, tmp_path) -> None:
    import os

    from tests.daemon_helpers import RUN

    remote = tmp_path / "origin.git"
    git("init", "-q", "--bare", str(remote))
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    hive("sync", cwd=repo)
    new_issue("Lands on main")
    subprocess.run([*RUN, "--until-idle"], cwd=repo, env=dict(os.environ), check=True, capture_output=True, timeout=300)
    synced = hive("sync", cwd=repo)
    assert "warning: main has 1 commit(s) origin/main lacks" in synced.stderr and "--push-target" in synced.stderr, synced.stderr
    assert "target: main has 1 commit(s) origin/main lacks" in hive("status", cwd=repo).stdout
    hive("sync", "--push-target", cwd=repo)                        # what the warning says, done
    assert git("rev-parse", "main", cwd=repo).stdout == git("--git-dir", str(remote), "rev-parse", "main").stdout
    assert "target:" not in hive("status", cwd=repo).stdout
    assert "lacks" not in hive("sync", cwd=repo).stderr


def test_submodules_come_into_the_worktree_whatever_repository_the_environment_names(
        repo, make_repo, git, new_issue, state_log, tmp_path) -> None:
    """`git --git-dir=.git --work-tree=. hive run`, or a hook's environment: GIT_DIR and
    GIT_WORK_TREE name the person's repository, GIT_INDEX_FILE an index of their own. The
    worker's worktree still gets its submodules (before, `git submodule update` ran on the
    person's checkout and the tests did not find them), and neither the person's submodule
    checkout nor that index is touched."""
    from tests.daemon_helpers import RUN

    _vendor_a_lib(repo, make_repo, git)
    (repo / "vendor" / "lib" / "x.txt").write_text("the person's own edit\n")
    their_index = tmp_path / "their-index"
    their_index.write_bytes((repo / ".git" / "index").read_bytes())
    issue = new_issue("Use the vendored lib")
    env = {**_a_run_testing_the_lib(tmp_path),
           "GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo), "GIT_INDEX_FILE": str(their_index)}
    index_before = their_index.read_bytes()
    done = subprocess.run([*RUN, "--until-idle"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c.event for c in state_log(repo) if c.issue == issue][-1] == "finalized", done.stdout
    assert (repo / "vendor" / "lib" / "x.txt").read_text() == "the person's own edit\n"
    assert their_index.read_bytes() == index_before


def _vendor_a_lib(repo, make_repo, git):
    """`vendor/lib`: a submodule of `repo` holding `x.txt`, added from a local repository, which
    is returned (git keeps its own copy under `.git/modules`)."""
    lib = make_repo("lib")
    (lib / "x.txt").write_text("from the submodule\n")
    git("add", "x.txt", cwd=lib)
    git("commit", "-q", "-m", "x", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib", cwd=repo)
    git("commit", "-q", "-m", "vendor lib", cwd=repo)
    return lib


def _a_run_testing_the_lib(tmp_path) -> dict[str, str]:
    """The environment of a run whose agent commits a file and whose test command reads the
    submodule's `x.txt`."""
    import os

    from tests.daemon_helpers import write_script

    script = write_script(tmp_path, {"default": [{"write": "uses.txt", "content": "uses lib\n"}, {"commit": "use lib"},
                                                 {"result": "success", "summary": "done"}]})
    return {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(script),
            "HIVE_TEST_COMMAND": "grep -q 'from the submodule' vendor/lib/x.txt"}


def test_a_repository_format_hive_cannot_read_is_refused_in_one_line_naming_the_setting(
        make_repo, git, hive, tmp_path: Path) -> None:
    """SHA-256 object names (`git init --object-format=sha256`), git 2.45's reftable, a format
    version above 1, an extension nobody knows: libgit2 reads none of them. Every command says
    which setting in one line, exits 1 and makes nothing (before: "internal error")."""
    sha256 = tmp_path / "sha256"
    git("init", "-q", "-b", "main", "--object-format=sha256", str(sha256))
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=sha256)
    cases = {sha256: "names its objects with sha256 (extensions.objectFormat)"}
    for name, settings, said in (
            ("reftable", {"core.repositoryformatversion": "1", "extensions.refStorage": "reftable"},
             "(extensions.refstorage = reftable)"),
            ("unknown", {"core.repositoryformatversion": "1", "extensions.somethingNew": "yes"},
             "(extensions.somethingnew = yes)"),
            ("future", {"core.repositoryformatversion": "2"}, "has repository format version 2")):
        made = make_repo(name)
        for key, value in settings.items():
            git("config", key, value, cwd=made)
        cases[made] = said
    for made, said in cases.items():
        for args in (("init",), ("create", "x"), ("list",), ("list", "--json")):
            done = hive(*args, cwd=made, check=False)
            assert done.returncode == 1 and done.stderr.count("\n") == 1, (made.name, args, done.stderr)
            assert said in done.stderr and "git hive" in done.stderr, done.stderr
        assert not (made / ".hive").exists() and not (made / ".git" / "hive").exists()


def test_a_partial_clone_an_older_git_marked_with_its_extension_is_worked_in(make_repo, git, hive) -> None:
    """git before 2.27 marked a partial clone `extensions.partialClone = <remote>`, which libgit2
    refuses unless told it may open one: `init`, `create`, `list` and a run work in it."""
    repo = make_repo("old-partial")
    git("config", "core.repositoryformatversion", "1", cwd=repo)
    git("config", "extensions.partialClone", "origin", cwd=repo)
    hive("init", cwd=repo)
    issue = hive("create", "Add a module", "-d", "Create it.", cwd=repo).stdout.strip()
    assert issue in hive("list", cwd=repo).stdout
    hive("run", "--backend", "scripted", "--until-idle", cwd=repo)
    assert json.loads(hive("show", issue, "--json", cwd=repo).stdout)["status"] == "finalized"


def test_a_blobless_clone_works_from_a_target_whose_files_it_never_fetched(make_repo, git, hive,
                                                                           tmp_path: Path) -> None:
    """In a blobless clone (`--filter=blob:none`) a person on a feature branch fetched `main`
    ahead (`git fetch origin main:main`): git fetches its files when it reads them, libgit2 never.
    Its `.hive.toml`, read from `main`, was "internal error: NotFoundError" for every command
    that reads the settings, and a worker's worktree from that `main` failed ("object not found")
    until the issue escalated; now both are brought from the promisor remote first, and the run
    finalizes onto that `main`."""
    upstream = make_repo("upstream")
    git("config", "uploadpack.allowFilter", "true", cwd=upstream)
    clone = tmp_path / "clone"
    git("clone", "-q", "--filter=blob:none", f"file://{upstream}", str(clone))
    git("checkout", "-q", "-b", "feature", cwd=clone)
    (upstream / "ahead.txt").write_text("fetched by nobody yet\n")
    (upstream / ".hive.toml").write_text("max_agents = 2\n")          # read from main, by libgit2
    git("add", "ahead.txt", ".hive.toml", cwd=upstream)
    git("commit", "-q", "-m", "main moves on", cwd=upstream)
    git("fetch", "-q", "origin", "main:main", cwd=clone)
    listed = git("rev-list", "--objects", "--no-walk", "--missing=print", "main", cwd=clone).stdout
    assert "?" in listed                                   # the new file's content is not here
    hive("init", cwd=clone)
    assert hive("config", "get", "max_agents", cwd=clone).stdout.strip() == "2"
    issue = hive("create", "Add a module", "-d", "Create it.", cwd=clone).stdout.strip()
    hive("run", "--backend", "scripted", "--until-idle", cwd=clone)
    assert json.loads(hive("show", issue, "--json", cwd=clone).stdout)["status"] == "finalized"
    assert git("show", "main:ahead.txt", cwd=clone).stdout == "fetched by nobody yet\n"
    assert git("rev-parse", "HEAD", cwd=clone).stdout.strip() != git("rev-parse", "main", cwd=clone).stdout.strip()
