"""The OS jail against a hostile agent: a corpus of escape attempts, each a scripted worker.

Every attempt is one issue whose agent runs the attempt as a shell command it needs to succeed
(`must_succeed`), so the issue fails with the command's own last words: what the jail refused.
One daemon run works them all, plus an honest worker beside them (the other agents unaffected).
Afterwards: the user's files, the repository's config, hooks and refs, the remote and another
repository are as they were; no ref moved but the agents' own work branches and what hive itself
merged (the honest one); no secret appears in anything hive recorded or printed; nothing an agent
started is still running.

Skipped, with the reason, where no jail can be built; in CI (`CI=true`) that is a failure.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import pytest

from hive.jail import JailSpec, mechanisms, prepare, support
from hive.jail.environment import jail_environment
from hive.jail.mechanisms import Support
from tests.daemon_helpers import RUN, hive_dir, write_script
from tests.hostile import (FORKED, GONE, READ_ONLY, SLEEPER, Scene, attempts, leftovers, processes_with,
                           require_jail)

READ_ONLY_OR_GONE = READ_ONLY + "|" + GONE

# a worker whose own test_command (its result names it; the merge gate runs it) tries to move main
TEST_COMMAND_ATTEMPTS = {
    "test-command-push": "git push origin HEAD:main",
    "test-command-loop": "i=0; while [ $i -lt 50 ]; do git update-ref refs/heads/main HEAD || exit 1; i=$((i+1)); done",
    "test-command-unset": "env -u HIVE_AGENT_ID git -c core.hooksPath=/dev/null update-ref refs/heads/main HEAD",
}


@pytest.mark.parametrize("mechanism", mechanisms.names())
def test_the_hostile_agent_corpus_escapes_nothing(mechanism: str, repo: Path, tmp_path: Path, git_env: Path, git,
                                                  new_issue, state_log, make_repo, wait_for) -> None:
    require_jail(mechanism)
    scene = Scene.build(repo, git_env, tmp_path, git, make_repo)
    victim = new_issue("An honest worker beside the hostile ones")
    corpus = attempts(scene.home, repo, scene.other, hive_dir(repo), victim)
    assert len(corpus) >= 30
    ids = {label: new_issue(f"attempt {label}", labels=[label]) for label, _, _ in corpus}
    script: dict[str, Any] = {"labels": {label: [{"run": command, "must_succeed": True, "timeout": 60},
                                                 {"commit": f"{label}: got through"},
                                                 {"result": "success", "summary": f"{label} got through"}]
                                         for label, command, _ in corpus}}
    script["labels"]["sleeper"] = [{"run": f"setsid sleep {SLEEPER} >/dev/null 2>&1 </dev/null &"},
                                   {"result": "failure", "summary": "left a sleeper behind"}]
    script["labels"]["symlink-result"] = [{"run": f"ln -s {scene.home}/.ssh/id_rsa .hive-result.jsonl",
                                           "must_succeed": True}]
    for label, command in TEST_COMMAND_ATTEMPTS.items():
        script["labels"][label] = [{"write": f"{label}.txt", "content": "work\n"}, {"commit": label},
                                   {"result": "success", "summary": "done", "test_command": command}]
    for label in ("sleeper", "symlink-result", *TEST_COMMAND_ATTEMPTS):
        ids[label] = new_issue(f"attempt {label}", labels=[label])
    scene.snapshot(git)

    env = {**os.environ, "HIVE_SCRIPTED_SCRIPT": str(write_script(tmp_path, script)), "HIVE_SANDBOX": mechanism,
           "HIVE_MAX_RETRIES": "0", "HIVE_MAX_AGENT_SWITCHES": "0", "HIVE_ANOMALY_FAILURE_THRESHOLD": "1000"}
    daemon = subprocess.run([*RUN, "--until-idle", "--max-agents", "3"], cwd=repo, capture_output=True,
                            text=True, env=env, timeout=600)
    assert daemon.returncode == 3, daemon.stdout + daemon.stderr   # the daemon unaffected; attempts escalated
    assert "Traceback" not in daemon.stdout + daemon.stderr

    log = state_log(repo)

    def status(issue_id: str) -> str:
        return [c.event for c in log if c.issue == issue_id][-1]

    def reason(issue_id: str) -> str:
        return " ".join(c.trailers.get("Hive-Reason", "") for c in log if c.issue == issue_id)

    assert status(victim) == "finalized", daemon.stdout              # the other agents unaffected
    got_through = [(label, status(ids[label]), reason(ids[label])) for label, _, refused in corpus
                   if status(ids[label]) != "escalated" or not re.search(refused, reason(ids[label]))]
    assert not got_through, got_through
    assert "symbolic link" in reason(ids["symlink-result"])
    assert status(ids["sleeper"]) == "escalated"
    for label in TEST_COMMAND_ATTEMPTS:        # the merge gate ran it jailed: refused, not merged
        assert status(ids[label]) == "escalated", (label, reason(ids[label]), daemon.stdout)
        # the refinery (scripted: "merged") cannot make it pass; hive escalates with the test's words
        assert re.search(READ_ONLY_OR_GONE, reason(ids[label])), (label, reason(ids[label]))
    # what an agent started ends with its jail's PID namespace: the kernel kills it all as the
    # namespace's first process exits (3000 sleepers take it a moment)
    wait_for(lambda: not processes_with(SLEEPER), "the sleeper that tried to outlive its agent to end")
    wait_for(lambda: not processes_with(FORKED), "the fork bomb's processes to end with their agent")

    scene.assert_nothing_escaped(git, daemon.stdout + daemon.stderr, main_may_move=True)
    # main moved by hive's merge of the honest work only
    subjects = git("log", "--format=%s", f"{scene.before['refs']['refs/heads/main']}..main", cwd=repo).stdout.split("\n")
    assert [s for s in subjects if s] == [f"{victim}: # Issue {victim}: An honest worker beside the hostile ones"], \
        subjects
    assert not (git("rev-parse", "--verify", "-q", "refs/heads/hive/work/" + victim, cwd=repo, check=False)
                .stdout.strip())                                  # merged and cleaned up, not moved by another


def test_a_test_command_runs_in_the_jail_with_the_jails_environment(tmp_path: Path, git_env: Path,
                                                                    monkeypatch) -> None:
    require_jail()
    from hive.merge.mechanical import run_test

    (git_env / ".ssh").mkdir()
    (git_env / ".ssh" / "id_rsa").write_text("SECRET-SSH-KEY-1f2e")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HIVE_SECRET_SETTING", "hive-own")
    monkeypatch.setenv("GIT_DIR", "/somewhere")
    jail = JailSpec(writable=(str(work),), hidden=(str(git_env),), scratch=("/tmp",))
    result = run_test('env; cat ~/.ssh/id_rsa; echo made > here; echo x > "$HOME/x"', work, 30, jail)
    assert "HIVE_SECRET_SETTING" not in result.output and "GIT_DIR" not in result.output
    assert "SECRET-SSH-KEY" not in result.output and "No such file" in result.output
    assert "Read-only file system" in result.output
    assert (work / "here").read_text() == "made\n" and not (git_env / "x").exists()


def test_a_credential_inside_a_folder_shown_again_is_hidden_again_through_a_link_too(tmp_path: Path,
                                                                                      git_env: Path) -> None:
    """A tool folder in the hidden home is shown again (`~/.cargo` for `~/.cargo/bin` on PATH);
    the credentials in it stay hidden, and so does a file a credential's name links to there."""
    require_jail()
    from hive.merge.mechanical import run_test

    cargo = git_env / ".cargo"
    (cargo / "bin").mkdir(parents=True)
    (cargo / "bin" / "tool").write_text("the tool runs\n")
    (cargo / "credentials.toml").write_text("SECRET-CARGO-5d1e")
    (cargo / "npm-token").write_text("SECRET-NPM-8a2b")
    (git_env / ".npmrc").symlink_to(cargo / "npm-token")
    work = tmp_path / "work"
    work.mkdir()
    jail = JailSpec(writable=(str(work),), readable=(str(cargo),), hidden=(str(git_env),), scratch=("/tmp",),
                    home=str(git_env))
    result = run_test(f"cat {cargo}/bin/tool {cargo}/credentials.toml {cargo}/npm-token {git_env}/.npmrc",
                      work, 30, jail)
    assert "the tool runs" in result.output
    assert "SECRET" not in result.output, result.output


def test_the_tools_on_path_show_their_own_folders_and_never_one_holding_the_repository(tmp_path: Path) -> None:
    """A launcher folder shows its tool, any other folder itself; a folder that holds the
    repository (and the person's other projects beside it), the home, a relative entry or one
    outside the home shows nothing more."""
    from hive.jail.roles import tool_folders

    home = tmp_path / "home"
    project = home / "code" / "proj"
    linked = home / "apps" / "current"
    for folder in (".pyenv/shims", ".cargo/bin", "bin", "code/bin", "code/proj/.venv/bin",
                   "code/proj/node_modules/.bin", "code/proj/scripts", ".local/bin", "apps/v2/bin"):
        (home / folder).mkdir(parents=True)
    linked.symlink_to(home / "apps" / "v2")
    entries = [home / ".pyenv/shims", home / ".cargo/bin", home / "bin", home / "code/bin",
               project / ".venv/bin", project / "node_modules/.bin", project / "scripts", home / ".local/bin",
               linked / "bin", home / "code", project, home, Path("/usr/bin")]
    search_path = os.pathsep.join([*map(str, entries), "node_modules/.bin", "", "."])
    assert tool_folders(search_path, str(home), (str(project), str(project / ".git"))) == [
        str(home / ".pyenv"), str(home / ".cargo"), str(home / "bin"), str(home / "code/bin"),
        str(project / ".venv"), str(project / "node_modules"), str(project / "scripts"), str(home / ".local"),
        str(home / "apps/v2")]


def _project(make_repo, git, name: str, files: dict[str, str]) -> Path:
    """A repository `name` whose `main` has `files` (path: text) committed."""
    project = make_repo(name)
    for path, text in files.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(text)
    git("add", "-A", cwd=project)
    git("commit", "-q", "-m", f"the {name} project", cwd=project)
    return project


def _in_a_worker_jail(project: Path, git, argv: list[str],
                      change: Callable[[Path], object] = lambda tree: None) -> tuple[Path, str]:
    """`argv` run in the jail of a worker's worktree of `project` (where hive is set up), made at
    `main` and changed by `change(tree)` first: the worktree, and what the command printed."""
    from hive import git as hive_git
    from hive.jail import roles
    from hive.workspace import worktrees

    paths = hive_git.discover(project)
    tree = worktrees.create(paths, "hv-j4i1ed", git("rev-parse", "main", cwd=project).stdout.strip()).path
    change(tree)
    launch = prepare(argv, cwd=str(tree), env={"PATH": os.environ["PATH"]}, jail=roles.worktree_jail(paths, tree))
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True)
    launch.release()
    return tree, done.stdout + done.stderr


def test_a_venv_of_the_project_on_path_shows_that_venv_and_not_the_persons_other_projects(
        make_repo, git, hive, git_env: Path, monkeypatch) -> None:
    """With the project's venv activated (`~/code/proj/.venv/bin` on PATH), a worker's commands
    run that venv's tools; `~/code`, with the person's other projects and their `.env` files,
    stays hidden, and so do the project's own untracked files. (The whole first folder under the
    home was shown before: every `.env` in `~/code` was readable to every agent.)"""
    require_jail()
    code = git_env / "code"
    other = code / "other"
    other.mkdir(parents=True)
    (other / ".env").write_text("SECRET-OTHER-PROJECT-7c3a\n")
    project = make_repo("project")
    project.rename(code / "proj")
    project = code / "proj"
    (project / ".env").write_text("SECRET-OWN-ENV-2b9d\n")
    tool = project / ".venv" / "bin" / "venv-tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho the venv tool runs\n")
    tool.chmod(0o755)
    hive("init", cwd=project)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    _, output = _in_a_worker_jail(project, git, ["sh", "-c", f'venv-tool; cat "{other}/.env" "{project}/.env"; '
                                                 f'ls -a "{code}"; true'])
    assert "the venv tool runs" in output, output
    assert "SECRET" not in output
    assert "other" not in output.split()


def _require_node() -> str:
    npm = shutil.which("npm")
    if npm and shutil.which("node"):
        return npm
    if os.environ.get("CI") == "true":
        pytest.fail("CI must run the Node tests: node and npm come with the agent CLIs (.ci/run)")
    pytest.skip("node and npm are not installed")


@pytest.mark.parametrize("linked", [False, True], ids=["installed", "a-link"])
def test_a_worker_uses_the_node_modules_installed_in_the_main_worktree(make_repo, git, hive, tmp_path: Path,
                                                                       linked: bool) -> None:
    """`npm test` in a worktree finds the packages and their commands installed in the main
    worktree (Node looks in every folder above, and the worktree lies inside the main worktree's
    `.git`), read-only. Before, the hidden main worktree hid them: every landing of a JavaScript
    project failed ("check-greet: not found"). A `node_modules` that is a link is not followed."""
    require_jail()
    _require_node()
    project = _project(make_repo, git, "web", {
        "package.json": json.dumps({"name": "web", "version": "1.0.0",
                                    "scripts": {"test": "check-greet && node test.js"}}),
        "test.js": 'console.log(require("greet")("worktree"));\n', ".gitignore": "node_modules/\n"})
    installed = tmp_path / "elsewhere" if linked else project / "node_modules"
    (installed / "greet").mkdir(parents=True)
    (installed / "greet" / "index.js").write_text('module.exports = (who) => "hello " + who;\n')
    (installed / ".bin").mkdir()
    (installed / ".bin" / "check-greet").write_text("#!/bin/sh\necho greet is installed\n")
    (installed / ".bin" / "check-greet").chmod(0o755)
    if linked:
        (project / "node_modules").symlink_to(installed)
    hive("init", cwd=project)
    tree, output = _in_a_worker_jail(project, git, [
        "sh", "-c", "npm test --offline --no-update-notifier; node_modules/.bin/check-greet; "
        "git add -A; echo \"staged:$(git diff --cached --name-only)\"; "
        "touch ../../../../node_modules/greet/index.js node_modules/greet/index.js"])
    if linked:
        assert "check-greet: not found" in output, output
        return
    assert output.count("greet is installed") == 2 and "hello worktree" in output, output
    assert "staged:\n" in output, output                       # ignored, as in the person's checkout
    assert output.count("Read-only file system") == 2, output   # read-only: the person's install
    assert not any((tree / "node_modules").iterdir())         # what the jail left: its mount point


def test_a_workspace_package_linked_in_node_modules_is_the_worktrees_own(make_repo, git, hive) -> None:
    """npm workspaces link each package of the repository into `node_modules`
    (`node_modules/greet -> ../packages/greet`, relative): in a worktree, `require` finds the
    worktree's version of the package — the code under test — not the person's checkout's."""
    require_jail()
    _require_node()
    project = _project(make_repo, git, "workspaces", {"packages/greet/index.js": 'module.exports = "the target";\n',
                                                      ".gitignore": "node_modules/\n"})
    (project / "node_modules").mkdir()
    (project / "node_modules" / "greet").symlink_to(Path("..") / "packages" / "greet")
    hive("init", cwd=project)
    _, output = _in_a_worker_jail(project, git, ["node", "-e", 'console.log(require("greet"))'], change=lambda tree: (
        tree / "packages" / "greet" / "index.js").write_text('module.exports = "the worktree";\n'))
    assert output == "the worktree\n", output


def _editable_project(make_repo, git) -> Path:
    """A Python project (`src/mypkg`, its `WHO` "the target") installed editable in a venv of its
    checkout, `.venv` (ignored), as `pip install -e .` installs one: a `.pth` naming `src`."""
    project = _project(make_repo, git, "lib", {"src/mypkg/__init__.py": 'WHO = "the target"\n',
                                               ".gitignore": ".venv/\n"})
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project / ".venv")], check=True)
    purelib = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "__editable__.mypkg-0.pth").write_text(f"{project / 'src'}\n")
    return project


def test_an_editable_install_in_the_projects_venv_imports_the_worktrees_code(make_repo, git, hive,
                                                                            git_env: Path) -> None:
    """A Python project installed editable (`pip install -e .`, `uv sync`) in a venv of its
    checkout: the venv's `.pth` names the main worktree's `src`. A worktree's command runs
    `.venv/bin/python` as in the person's checkout, and imports the worktree's version of the
    package, not the target's (nor nothing: the hidden main worktree failed every landing with
    "No module named ..."). The person's own untracked files stay hidden."""
    require_jail()
    project = _editable_project(make_repo, git)
    (project / ".env").write_text("SECRET-PERSONS-ENV-41f0\n")
    hive("init", cwd=project)
    _, output = _in_a_worker_jail(project, git, [
        "sh", "-c", '.venv/bin/python -c "import mypkg; print(mypkg.WHO)"; '
        f'cat "{project}/.env"; git add -A; echo "staged:$(git diff --cached --name-only)"; '
        'echo "no-sync:$UV_NO_SYNC"; mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/uv" && echo cache-made'],
        change=lambda tree: (tree / "src" / "mypkg" / "__init__.py").write_text('WHO = "the worktree"\n'))
    assert "the worktree\n" in output and "the target" not in output, output
    assert "SECRET" not in output, output
    assert "staged:src/mypkg/__init__.py\n" in output, output   # the venv is not the agent's to add
    # uv uses the person's venv as it is (a sync would install the worktree's copy into it), and
    # a tool's cache goes to the jail's own /tmp (the home is read-only: "Failed to initialize cache")
    assert "no-sync:1\n" in output and "cache-made\n" in output, output
    assert not (git_env / ".cache").exists()


def test_a_link_an_agent_leaves_in_its_worktree_is_not_shown_at_the_main_worktrees_place(
        repo: Path, git, git_env: Path) -> None:
    """The worktree's files are shown at the main worktree's place by the descriptors hive opened
    without following a link: a link the agent left there (to the person's home, hidden in the
    jail) shows nothing, and neither does one put in place of a folder after hive opened it."""
    require_jail()
    from hive import git as hive_git
    from hive.jail import roles
    from hive.workspace import worktrees

    secret = git_env / "private"
    secret.mkdir()
    (secret / "notes.txt").write_text("SECRET-HOME-NOTES-9e2c\n")
    paths = hive_git.discover(repo)
    issue = "hv-f0rged"
    worktrees.create(paths, issue, git("rev-parse", "main", cwd=repo).stdout.strip())
    tree = worktrees.worktree_path(paths, issue)
    (tree / "leak").symlink_to(secret)
    (tree / "swapped").mkdir()
    (tree / "swapped" / "mine.txt").write_text("the agent's own\n")
    (tree / "pkg").mkdir()
    (tree / "pkg" / "code.py").write_text("print('the worktree's code')\n")
    launch = prepare(["sh", "-c", f'cat "{repo}/leak/notes.txt" "{repo}/swapped/notes.txt" "{repo}/pkg/code.py" '
                      f'"{repo}/swapped/mine.txt"; ls -a "{repo}"'],
                     cwd=str(tree), env={"PATH": os.environ["PATH"]}, jail=roles.worktree_jail(paths, tree))
    (tree / "swapped").rename(tree / "aside")                  # after hive opened it: a link instead
    (tree / "swapped").symlink_to(secret)
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True)
    launch.release()
    output = done.stdout + done.stderr
    assert "SECRET" not in output, output
    assert "the worktree's code" in output, output             # its folders, at the main worktree's place
    assert "the agent's own\n" in output, output               # what hive opened, moved since
    shown = output.split()
    assert "leak" not in shown and "README.md" not in shown, output   # not a link, nor a file


def test_a_jail_built_over_the_hostile_leftovers_starts_and_shows_none_of_them_elsewhere(
        repo: Path, git, git_env: Path, tmp_path: Path) -> None:
    """The corpus of what an agent leaves in its worktree and git folder (`hostile.leftovers`:
    FIFOs where git reads, links out) is there when the next jail of that worktree is built (its
    next turn, its own test command): the jail starts, waiting on no FIFO, and what it shows at
    the main worktree's place leads to none of the user's files."""
    require_jail()
    host_fifo = tmp_path / "host-fifo"
    os.mkfifo(host_fifo)
    outside = git_env / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("SECRET-USERS-FILE-3b7a\n")

    def leave(tree: Path) -> None:
        for label, command in leftovers(host_fifo, outside):
            done = subprocess.run(["sh", "-c", command], cwd=tree, capture_output=True, text=True)
            assert done.returncode == 0, (label, done.stderr)

    _, output = _in_a_worker_jail(repo, git, ["sh", "-c", f'cat "{repo}/out/keep.txt"; ls "{repo}"; echo started'],
                                  change=leave)
    assert "started" in output and "SECRET" not in output, output
    assert "out" not in output.split(), output


def test_the_environment_is_an_allowlist_and_a_providers_keys_reach_only_its_own_cli() -> None:
    host = {"PATH": "/bin", "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "OPENAI_BASE_URL": "u",
            "HTTPS_PROXY": "p", "https_proxy": "p", "LC_ALL": "C", "HIVE_MAX_AGENTS": "3", "GIT_DIR": "/x",
            "GITHUB_TOKEN": "t", "HIVE_AGENT_ID": "w-1", "SSH_AUTH_SOCK": "/s", "GROQ_API_KEY": "g"}
    common = {"PATH": "/bin", "LC_ALL": "C", "HIVE_AGENT_ID": "w-1", "TMPDIR": "/tmp", "HIVE_COMMAND_SERVER": "0"}
    assert jail_environment(host) == common                  # a test command, a scripted agent
    assert jail_environment(host, ("ANTHROPIC_*", "CLAUDE_*")) == {**common, "ANTHROPIC_API_KEY": "k"}
    assert jail_environment(host, ("OPENAI_*", "GROQ_API_KEY")) == {
        **common, "OPENAI_API_KEY": "o", "OPENAI_BASE_URL": "u", "GROQ_API_KEY": "g"}


def test_starting_a_jail_needs_the_mechanism_or_says_why(tmp_path: Path, monkeypatch) -> None:
    """`prepare` wraps a command in bwrap; with no bwrap it refuses (strict) naming the fix."""
    from hive.jail import NoJail, detect

    require_jail()
    launch = prepare(["true"], cwd=str(tmp_path), env={"PATH": "/bin"}, jail=JailSpec(writable=(str(tmp_path),)))
    assert launch.cap is not None                           # the command last, inside, under the bound
    bounded = ["--", *launch.cap.bounded(["true"])]
    assert support().program in launch.argv and launch.argv[-len(bounded):] == bounded
    assert subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds).returncode == 0
    launch.release()
    monkeypatch.setenv("HIVE_BWRAP", str(tmp_path / "no-bwrap"))
    detect.support.cache_clear()
    try:
        with pytest.raises(NoJail, match="HIVE_BWRAP names no executable bwrap"):
            prepare(["true"], cwd=str(tmp_path), env={}, jail=JailSpec(writable=()))
        unjailed = prepare(["true"], cwd=str(tmp_path), env={"HIVE_X": "1", "PATH": "/bin"},
                           jail=JailSpec(writable=()), strict=False)
        assert unjailed.argv == ["true"] and unjailed.env == {"PATH": "/bin", "TMPDIR": "/tmp", "HIVE_COMMAND_SERVER": "0"}
    finally:
        detect.support.cache_clear()


def test_the_network_relay_starts_from_its_modules_bytecode_and_execs_the_command(tmp_path: Path) -> None:
    """The relay runs before every real agent: imported from the bytecode beside its module, not
    compiled anew as a program named by path would be (hive.module_process)."""
    import py_compile

    from hive import module_process
    from hive.jail import network

    require_jail()
    bytecode = module_process.bytecode(network.RELAY)
    py_compile.compile(network.RELAY, cfile=bytecode, doraise=True)
    launch = prepare(["/bin/echo", "relayed"], cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"},
                     jail=JailSpec(writable=(str(tmp_path),), endpoints=("http://127.0.0.1:9999",)))
    try:
        python = launch.argv.index("-I") - 1
        assert launch.argv[python] == sys.executable and "relay.py" not in launch.argv[python + 3]
        verbose = [*launch.argv[:python + 1], "-v", *launch.argv[python + 1:]]
        done = subprocess.run(verbose, env=launch.env, capture_output=True, text=True, timeout=30)
    finally:
        launch.release()
    assert done.returncode == 0 and done.stdout == "relayed\n", done.stderr[-2000:]
    assert f"code object from '{bytecode}'" in done.stderr
    # it execs the command as execvp does: found on PATH by name, or it says why not
    for command, code, said in ((["echo", "by name"], 0, "by name\n"), (["no-such-agent"], 127, "")):
        launch = prepare(command, cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"},
                         jail=JailSpec(writable=(str(tmp_path),), endpoints=("http://127.0.0.1:9999",)))
        try:
            done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True, timeout=30)
        finally:
            launch.release()
        assert (done.returncode, done.stdout) == (code, said), done.stderr
    assert done.stderr == "hive jail: cannot run no-such-agent: No such file or directory\n"


def test_the_mechanisms_registry_decides_the_jail_and_names_the_fix_when_it_cannot(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """`sandbox = "on"` takes the first mechanism that works here; a named one is that one or a
    refusal naming the fix (never another one); a name no mechanism has says the choices."""
    from hive.jail import NoJail, detect

    require_jail()
    for name in mechanisms.names():
        named = support(name)
        assert named.ok and named.mechanism == name, named
        launch = prepare(["true"], cwd=str(tmp_path), env={"PATH": "/bin"},
                         jail=JailSpec(writable=(str(tmp_path),), mechanism=name))
        assert named.program in launch.argv and subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds).returncode == 0
        launch.release()
    assert support().mechanism == mechanisms.names()[0]
    unknown = support("chroot")
    assert not unknown.ok and "no jail mechanism 'chroot'" in unknown.reason
    assert all(choice in unknown.fix for choice in mechanisms.choices())
    with pytest.raises(NoJail, match="no jail mechanism 'chroot'"):
        prepare(["true"], cwd=str(tmp_path), env={}, jail=JailSpec(writable=(), mechanism="chroot"))
    monkeypatch.setenv("HIVE_BWRAP", str(tmp_path / "no-bwrap"))
    detect.support.cache_clear()
    try:
        broken = support("bubblewrap")
        assert not broken.ok and "HIVE_BWRAP names no executable bwrap" in broken.reason and broken.fix
    finally:
        detect.support.cache_clear()


@pytest.mark.parametrize("name", mechanisms.names())
def test_every_mechanism_follows_the_protocol(name: str) -> None:
    """Each registered module has the protocol's names with its signatures, and its probe says
    it is that mechanism, built or not (the reason and fix when not)."""
    module = mechanisms.module(name)
    for member in ("probe", "command", "programs"):
        wanted = list(inspect.signature(getattr(mechanisms.JailMechanism, member)).parameters.values())[1:]
        assert list(inspect.signature(getattr(module, member)).parameters.values()) == wanted, (name, member)
    assert isinstance(module.PROGRAM_ENV, str) and module.PROGRAM_ENV
    found = module.probe()
    assert found.mechanism == name and (found.ok or (found.reason and found.fix)), found
    assert module.programs() and all(isinstance(p, mechanisms.Program) and p.label for p in module.programs())


def _registered(monkeypatch: pytest.MonkeyPatch, *probed: Support) -> None:
    """A registry of mechanisms whose probes found `probed` (nothing is ever built by them)."""
    registry = {}
    for found in probed:
        module = types.ModuleType(f"tests.mechanism_{found.mechanism}")
        module.__dict__.update(PROGRAM_ENV="X", probe=lambda found=found: found, programs=lambda: (),
                               command=lambda program, spec, argv, cwd, env, gate_folder="", views=(): [program, *argv])
        monkeypatch.setitem(sys.modules, module.__name__, module)
        registry[found.mechanism] = mechanisms.Mechanism(found.mechanism, module.__name__)
    monkeypatch.setattr(mechanisms, "MECHANISMS", registry)


def test_on_takes_the_first_mechanism_that_works_and_a_named_one_is_that_or_none(monkeypatch) -> None:
    broken = Support(False, "first", reason="first cannot here", fix="fix the first")
    _registered(monkeypatch, broken, Support(True, "second", "/bin/second"), Support(True, "third", "/bin/third"))
    assert mechanisms.choices() == ("on", "off", "first", "second", "third")
    assert support().mechanism == "second" and support("third").mechanism == "third"
    assert support("first") == broken                                # never another one
    assert mechanisms.command(support(), JailSpec(writable=()), ["true"], "/", {}) == ["/bin/second", "true"]
    _registered(monkeypatch, broken, Support(False, "second", reason="nor the second", fix="x"))
    assert support() == broken                                       # none: the first one's reason and fix
    monkeypatch.setitem(sys.modules, "tests.mechanism_second", types.ModuleType("tests.mechanism_second"))
    with pytest.raises(TypeError, match="is no jail mechanism"):
        support("second")


def test_sandbox_accepts_on_off_and_every_mechanism_and_nothing_else(repo: Path, hive) -> None:
    for choice in mechanisms.choices():
        hive("config", "set", "sandbox", choice, cwd=repo)
        assert hive("config", "get", "sandbox", cwd=repo).stdout.strip() == choice
    refused = hive("config", "set", "sandbox", "chroot", cwd=repo, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert all(choice in refused.stderr for choice in mechanisms.choices()), refused.stderr


def test_a_named_mechanism_that_cannot_be_built_stops_real_agents_with_one_line(repo: Path, hive,
                                                                               new_issue) -> None:
    new_issue("Would be worked")
    env = {**NO_BWRAP, "HIVE_SANDBOX": "bubblewrap", "HIVE_CLAUDE_COMMAND": "true"}
    done = hive("run", "--backend", "claude", "--until-idle", cwd=repo, env=env, check=False)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stdout + done.stderr
    assert f"cannot jail the claude agents: {NO_BWRAP_REASON}" in lines[0]


# -- no jail, no real agents ----------------------------------------------------------------------

NO_BWRAP = {"HIVE_BWRAP": "/nonexistent/bwrap"}          # a machine where no jail can be built
NO_BWRAP_REASON = "HIVE_BWRAP names no executable bwrap (/nonexistent/bwrap)"


@pytest.mark.parametrize("backend", ["claude", "codex"])
def test_no_jail_no_real_agents_run_and_plan_stop_with_one_line(repo: Path, hive, new_issue, backend) -> None:
    """Where no jail can be built, `run` (also `--detach`) and `plan` with a real agent CLI stop
    before anything starts: exit 1, one line naming the cause and the fix, no agent, no branch."""
    new_issue("Would be worked")
    env = {**NO_BWRAP, f"HIVE_{backend.upper()}_COMMAND": "true"}     # the CLI itself is found
    for args in (("run", "--backend", backend, "--until-idle"), ("run", "--backend", backend, "--detach"),
                 ("plan", "--backend", backend, "--headless", "Build a thing")):
        done = hive(*args, cwd=repo, env=env, check=False)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 1 and len(lines) == 1, (args, done.stdout, done.stderr)
        assert f"cannot jail the {backend} agents: {NO_BWRAP_REASON}" in lines[0]
        assert "point HIVE_BWRAP at a bwrap or unset it" in lines[0] and 'sandbox = "off"' in lines[0]
        assert "Traceback" not in done.stdout + done.stderr
    assert not (hive_dir(repo) / "daemon.log").exists() or "claimed" not in (hive_dir(repo) / "daemon.log").read_text()
    branches = subprocess.run(["git", "branch", "--list", "hive/plan/*"], cwd=repo, capture_output=True, text=True)
    assert branches.stdout.strip() == ""


def test_sandbox_off_is_warned_at_every_start_and_doctor_says_so(repo: Path, hive, new_issue) -> None:
    new_issue("Worked unjailed")
    env = {**NO_BWRAP, "HIVE_SANDBOX": "off", "HIVE_CLAUDE_COMMAND": "true"}
    for _ in range(2):
        done = hive("run", "--until-idle", "--backend", "scripted", cwd=repo, env=env, check=False)
        assert done.returncode == 0, done.stderr
        assert 'sandbox = "off": agents run without the OS jail' in done.stdout + done.stderr
    doctor = hive("doctor", cwd=repo, env=env, check=False)
    assert 'jail: OFF (warning: sandbox = "off"' in doctor.stdout


def test_an_editable_install_is_a_path_line_of_a_venvs_pth_into_the_checkout(tmp_path: Path) -> None:
    """What `run` warns of unjailed: the folders of the checkout a venv's `.pth` names — not its
    `import` lines, relative lines, the venv's own folders or places outside the checkout."""
    from hive.jail.roles import dependency_folders, editable_installs

    main = tmp_path / "proj"
    site = main / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (main / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (main / "src").mkdir()
    (main / "node_modules").mkdir()
    (site / "__editable__.mine-1.pth").write_text(f"{main / 'src'}\n")
    (site / "other.pth").write_text(f"import _virtualenv\nrelative/path\n{main / 'venv' / 'extra'}\n{tmp_path}\n")
    assert dependency_folders(main) == ["node_modules", "venv"]
    assert editable_installs(main, dependency_folders(main)) == [("venv", "src")]


def test_unjailed_an_editable_install_is_warned_of_and_the_advice_tests_the_worktrees_code(
        make_repo, git, hive, tmp_path: Path) -> None:
    """Unjailed (`sandbox = "off"`, or no jail here), a worktree's test command imports what an
    editable install names: the person's checkout, not the code under test. `run` says so at its
    start, and its advice (the worktree's folder first on PYTHONPATH) lands the work."""
    project = _editable_project(make_repo, git)
    venv = project / ".venv"
    hive("init", cwd=project)
    script = write_script(tmp_path, {"labels": {"who": [
        {"write": "src/mypkg/__init__.py", "content": 'WHO = "{issue}"\n'}, {"commit": "{issue}: who"},
        {"result": "success", "summary": "done"}]}})
    check = "python -c 'import mypkg, sys; sys.exit(mypkg.WHO == \"the target\")'"   # the work is under test
    env = {"HIVE_SANDBOX": "off", "HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_MAX_RETRIES": "0",
           "HIVE_MAX_AGENT_SWITCHES": "0", "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    for test_command, lands in ((check, False), (f"PYTHONPATH=src {check}", True)):
        hive("config", "set", "test_command", test_command, cwd=project)
        issue = hive("create", "say who", "-l", "who", cwd=project).stdout.strip()
        done = hive("run", "--until-idle", "--backend", "scripted", cwd=project, env=env, check=False)
        said = done.stdout + done.stderr
        assert ".venv/ installs src/ of your checkout editable and agents run unjailed" in said, said
        assert "(PYTHONPATH=src ...)" in said, said
        status = json.loads(hive("show", issue, "--json", cwd=project).stdout)["status"]
        assert (status == "finalized") == lands, said


def test_scripted_agents_run_unjailed_with_a_warning_where_no_jail_can_be_built(repo: Path, hive, new_issue,
                                                                                 state_log) -> None:
    issue = new_issue("Worked by a scripted agent")
    done = hive("run", "--until-idle", "--backend", "scripted", cwd=repo, env=NO_BWRAP, check=False)
    assert done.returncode == 0, done.stderr
    assert f"scripted agents run unjailed: {NO_BWRAP_REASON}" in done.stdout + done.stderr
    assert [c.event for c in state_log(repo) if c.issue == issue][-1] == "finalized"
    doctor = hive("doctor", cwd=repo, env={**NO_BWRAP, "HIVE_BACKEND": "scripted"}, check=False)
    assert f"jail: none here, the scripted agents run unjailed: {NO_BWRAP_REASON}" in doctor.stdout


def test_doctor_reports_the_jail_and_fails_for_real_agents_that_cannot_have_one(repo: Path, hive) -> None:
    env = {**NO_BWRAP, "HIVE_BACKEND": "claude", "HIVE_CLAUDE_COMMAND": "true"}
    doctor = hive("doctor", cwd=repo, env=env, check=False)
    assert doctor.returncode == 1
    assert f"jail: cannot jail the claude agents: {NO_BWRAP_REASON}" in doctor.stdout
    if support().ok:
        jailed = hive("doctor", cwd=repo, check=False)
        assert f"jail: agents run jailed ({mechanisms.names()[0]} " in jailed.stdout


# -- the private object store ---------------------------------------------------------------------

def test_a_jailed_commit_lands_through_the_private_object_store_rehashed(repo: Path, git) -> None:
    """A worker's git writes its objects to its own store (the shared one is read-only in the
    jail); hive copies them over, each hashed again, so a file named as another object plants
    nothing, and moves the work branch to the worktree's HEAD."""
    from hive import git as hive_git
    from hive.jail import roles
    from hive.workspace import worktrees

    require_jail()
    paths = hive_git.discover(repo)
    issue = "hv-0bj3ct"
    base = git("rev-parse", "main", cwd=repo).stdout.strip()
    worktrees.create(paths, issue, base)
    tree = worktrees.worktree_path(paths, issue)
    jail = roles.worktree_jail(paths, tree)
    launch = prepare(["sh", "-c", 'echo made > made.txt && git add made.txt && git commit -q -m "made" '
                      '&& test ! -w "$(git rev-parse --git-common-dir)/objects"'],
                     cwd=str(tree), env={"PATH": os.environ["PATH"]}, jail=jail)
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True)
    launch.release()
    assert done.returncode == 0, done.stderr
    private = hive_git.private_objects(paths.common_dir, issue)
    head = git("rev-parse", "HEAD", cwd=tree).stdout.strip()
    assert (private / head[:2] / head[2:]).is_file()                     # written where the agent may
    assert git("cat-file", "-e", head, cwd=repo, check=False).returncode != 0   # not in the shared store yet
    forged = "ab" * 20                                                 # a loose object under a name not its own
    real = private / head[:2] / head[2:]
    (private / forged[:2]).mkdir(exist_ok=True)
    (private / forged[:2] / forged[2:]).write_bytes(real.read_bytes())

    assert worktrees.adopt_head(paths, issue) == head
    assert git("log", "-1", "--format=%s", f"hive/work/{issue}", cwd=repo).stdout.strip() == "made"
    assert git("cat-file", "-e", forged, cwd=repo, check=False).returncode != 0   # the forged name planted nothing
    assert git("show", f"hive/work/{issue}:made.txt", cwd=repo).stdout == "made\n"
    assert [p.name for p in private.iterdir()] == ["pack"]           # emptied for the next turn


def test_the_queens_jail_writes_only_its_plan_directory(repo: Path, tmp_path: Path, git_env: Path) -> None:
    """The Queen reads the repository (main worktree included) and writes its plan directory only."""
    from hive import git as hive_git
    from hive.jail import roles

    require_jail()
    (git_env / ".ssh").mkdir()
    (git_env / ".ssh" / "id_rsa").write_text("SECRET-SSH-KEY-1f2e")
    paths = hive_git.discover(repo)
    plan = paths.hive_dir / "plans" / "a-plan"
    plan.mkdir(parents=True)
    script = (f'echo planned > "{plan}/PLAN.md" && cat "{repo}/README.md" && '
              f'{{ echo evil >> "{repo}/README.md"; echo evil > "{paths.common_dir}/refs/heads/main"; '
              f'cat ~/.ssh/id_rsa; touch "{paths.hive_dir}/pwned"; true; }}')
    launch = prepare(["sh", "-c", script], cwd=str(plan), env={"PATH": os.environ["PATH"]},
                     jail=roles.queen_jail(paths, plan))
    done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, capture_output=True, text=True)
    launch.release()
    assert done.returncode == 0, done.stderr
    assert (plan / "PLAN.md").read_text() == "planned\n"
    assert (repo / "README.md").read_text() in done.stdout            # read, not written
    assert "evil" not in (repo / "README.md").read_text()
    assert done.stderr.count("Read-only file system") == 3, done.stderr
    assert "SECRET-SSH-KEY" not in done.stdout and "No such file" in done.stderr
    assert not (paths.hive_dir / "pwned").exists()


def test_jail_cgroups_left_over_are_removed_by_a_later_jail_and_busy_ones_kept(monkeypatch) -> None:
    """A hive killed mid-run, or a jail released while its last process was still leaving, leaves
    an empty cgroup behind; the next jail made removes the old empty ones, never a busy one."""
    from hive.jail import limits

    probe = limits.ProcessCap.make(8)
    if probe.cgroup is None:
        pytest.skip("no pids cgroup hive may make here (not root, or not delegated)")
    parent = probe.cgroup.parent
    probe.release()
    left = parent / f"{limits.PREFIX}leftover0001"
    busy = parent / f"{limits.PREFIX}busy00000001"
    left.mkdir()
    busy.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (busy / "cgroup.procs").write_text(str(sleeper.pid))
        an_hour_ago = time.time() - 3600                     # both old (other jails made now are not)
        for group in (left, busy):
            os.utime(group, (an_hour_ago, an_hour_ago))
        monkeypatch.setattr(limits, "_last_sweep", {})
        cap = limits.ProcessCap.make(8)
        cap.release()
        assert not left.exists()
        assert busy.exists() and str(sleeper.pid) in (busy / "cgroup.procs").read_text()
    finally:
        sleeper.kill()
        sleeper.wait()
        for group in (left, busy):
            if group.exists():
                group.rmdir()


def test_the_end_of_a_jailed_command_asks_its_cgroup_not_every_process(monkeypatch) -> None:
    """Whether anything of an ended agent still lives is asked at every agent's end: where its
    jail has a pids cgroup, the cgroup lists what lives (zombies are not listed) — no process's
    stat but theirs is read. A child that outlived the jail's first process is still found."""
    from hive.backends import processes
    from hive.jail import limits

    cap = limits.ProcessCap.make(8)
    if cap.cgroup is None:
        pytest.skip("no pids cgroup hive may make here (not root, or not delegated)")
    leader = subprocess.Popen(cap.joined(["/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $!; exit 0"]),
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        leader.wait(10)                                   # the first process has exited: reaped
        real_listdir = os.listdir

        def no_scan(path: Any = ".") -> list[str]:
            assert str(path) != "/proc", "every process's stat was read"
            return real_listdir(path)

        monkeypatch.setattr(processes.os, "listdir", no_scan)
        assert cap.members() == [child]
        assert processes.group_alive(leader.pid, cap.members())          # the child left behind
        processes.killpg(leader.pid, 9)
        deadline = time.monotonic() + 10
        while processes.group_alive(leader.pid, cap.members()):
            assert time.monotonic() < deadline, cap.members()
            time.sleep(0.01)
        assert cap.members() == []
    finally:
        processes.killpg(leader.pid, 9)
        cap.release()
    assert not cap.cgroup.exists()


def test_a_worktree_jail_never_makes_again_the_git_admin_folder_of_a_removed_worktree(tmp_path: Path, git) -> None:
    """Removed meanwhile (another machine took the issue): building its jail fails; it does not
    leave a half admin folder that git would take for a broken worktree."""
    import shutil

    from hive import git as hive_git
    from hive.jail import roles

    root = tmp_path / "repo"
    git("init", "-q", "-b", "main", str(root), cwd=tmp_path)
    git("commit", "-q", "--allow-empty", "-m", "initial", cwd=root)
    worktree = root / ".git" / "hive" / "worktrees" / "hv-gone01"
    git("worktree", "add", "-q", "--detach", str(worktree), cwd=root)
    admin = root / ".git" / "worktrees" / "hv-gone01"
    shutil.rmtree(admin)
    with pytest.raises(FileNotFoundError):
        roles.worktree_jail(hive_git.discover(root), worktree)
    assert not admin.exists()


def test_a_jails_paths_are_resolved_by_the_kernel_as_python_resolves_them(tmp_path: Path) -> None:
    """`bubblewrap.real_path` gives `os.path.realpath`'s answer for a folder, a chain of links
    (relative ones, `..` inside), a link to a FIFO (not waited on), a dangling link and a path
    that does not exist."""
    from hive.jail import bubblewrap

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "file").write_text("x")
    os.symlink("a/b", tmp_path / "to_b")
    os.symlink("to_b/../b/file", tmp_path / "chain")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", tmp_path / "to_fifo")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for path in ("a/b", "to_b", "chain", "to_b/file", "to_fifo", "dangling", "missing/x", "a/../to_b"):
        assert bubblewrap.real_path(str(tmp_path / path)) == os.path.realpath(tmp_path / path), path
