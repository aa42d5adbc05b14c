"""`git hive sync [REMOTE] [--json]`: two clones of one bare remote, through the real CLI.

Issue 7: fetch `hive/state`, merge it with the hive rules, push (retried when someone pushed
meanwhile); concurrent edits to different fields or different issues merge with no conflict; the
same field changed on both sides resolves by the driver's deterministic rule; notes from both
sides are all kept, once; both clones converge to the same commits; an unreachable remote is a
one-line failure that leaves the local state alone; a plain `git fetch` brings origin's state.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.repo_helpers import commit_hooks

pytestmark = pytest.mark.timeout(120)

# An $EDITOR for `git hive edit`: sets `key = value` lines of the front matter from $HIVE_TEST_EDITS
# ("key=value;key=value", values in TOML), as a person editing the file would.
EDITOR = """\
import os, re, sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
for item in os.environ["HIVE_TEST_EDITS"].split(";"):
    key, value = item.split("=", 1)
    text, n = re.subn(rf"(?m)^{key} *=.*$", lambda m: f"{key} = {value}", text, count=1)
    assert n == 1, key
open(path, "w", encoding="utf-8").write(text)
"""


def sync_json(cli: Callable[..., Any], clone: Path) -> dict[str, Any]:
    return json.loads(cli("sync", "--json", cwd=clone).stdout)


def tip(git: Callable[..., Any], where: Path, ref: str = "hive/state") -> str:
    return git("rev-parse", ref, cwd=where).stdout.strip()


def tree(git: Callable[..., Any], where: Path) -> str:
    return tip(git, where, "hive/state^{tree}")


def show(cli: Callable[..., Any], clone: Path, issue_id: str) -> dict[str, Any]:
    return json.loads(cli("show", issue_id, "--json", cwd=clone).stdout)


def notes_of(cli: Callable[..., Any], clone: Path, issue_id: str) -> list[str]:
    return [n["content"] for n in json.loads(cli("notes", "--issue", issue_id, "--json", cwd=clone).stdout)]


def edit(cli: Callable[..., Any], clone: Path, tmp_path: Path, issue_id: str, edits: str) -> None:
    """`git hive edit ID` with an editor that sets front-matter fields (`key=value;...`)."""
    script = tmp_path / "editor.py"
    script.write_text(EDITOR, encoding="utf-8")
    cli("edit", issue_id, cwd=clone, env={"EDITOR": f"{sys.executable} {script}", "HIVE_TEST_EDITS": edits})


def converge(cli: Callable[..., Any], git: Callable[..., Any], remote: Path, a: Path, b: Path) -> None:
    """Sync A, B, A; then both clones and the remote hold the same hive/state commit."""
    for clone in (a, b, a):
        cli("sync", cwd=clone)
    assert tip(git, a) == tip(git, b) == tip(git, remote)
    assert tree(git, a) == tree(git, b)


def test_concurrent_edits_to_different_fields_and_issues_merge_and_converge(clones, cli, git):
    remote, (a, b) = clones("A", "B")
    x = cli("create", "issue x", "-p", "2", cwd=a).stdout.strip()
    y = cli("create", "issue y", cwd=a).stdout.strip()
    z = cli("create", "issue z", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    assert sync_json(cli, b)["incoming"] == 3

    # A: x's priority, a label on y, a note on x — B: x's title, z's description, a note on x
    cli("update", x, "--priority", "0", cwd=a)
    cli("update", y, "-l", "from-a", cwd=a)
    cli("note", "seen on A", "--issue", x, cwd=a)
    cli("update", x, "--title", "issue x, renamed on B", cwd=b)
    cli("update", z, "-d", "described on B", cwd=b)
    cli("note", "seen on B", "--issue", x, cwd=b)
    cli("note", "a project-wide note from B", cwd=b)

    converge(cli, git, remote, a, b)

    for clone in (a, b):
        shown = show(cli, clone, x)
        assert (shown["priority"], shown["title"]) == (0, "issue x, renamed on B")
        assert show(cli, clone, y)["labels"] == ["from-a"]
        assert show(cli, clone, z)["body"].strip() == "described on B"
        assert sorted(notes_of(cli, clone, x)) == ["seen on A", "seen on B"]
        everything = [n["content"] for n in json.loads(cli("notes", "--json", cwd=clone).stdout)]
        assert everything.count("a project-wide note from B") == 1
    # no conflict markers anywhere, the files parse (list reads them all)
    state = git("grep", "-l", "-e", "<<<<<<<", "hive/state", "--", ".", cwd=a, check=False)
    assert state.stdout == ""
    assert {i["id"] for i in json.loads(cli("list", "--json", cwd=b).stdout)} == {x, y, z}

    # converged: more syncs exchange nothing, and notes stay once
    for clone in (a, b):
        report = sync_json(cli, clone)
        assert (report["incoming"], report["outgoing"]) == (0, 0)
        assert sorted(notes_of(cli, clone, x)) == ["seen on A", "seen on B"]


def test_same_field_on_both_sides_resolves_by_the_driver_rule(clones, cli, git, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    x = cli("create", "issue x", cwd=a).stdout.strip()
    w = cli("create", "issue w", cwd=a).stdout.strip()
    y = cli("create", "issue y", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    cli("sync", cwd=b)

    # x: the title changed on both sides; B's change is the later one (`updated`) and wins;
    # w: the same, with A's change the later one (the merge runs on B: ours loses this time)
    edit(cli, a, tmp_path, x, 'title="title from A";updated=2020-01-01T00:00:01Z')
    edit(cli, b, tmp_path, x, 'title="title from B";updated=2020-01-01T00:00:02Z')
    edit(cli, a, tmp_path, w, 'priority=0;updated=2020-01-01T00:00:05Z')
    edit(cli, b, tmp_path, w, 'priority=4;updated=2020-01-01T00:00:04Z')
    # y: canceled on A (terminal), escalated later on B: the terminal status wins all the same
    cli("cancel", y, cwd=a)
    edit(cli, b, tmp_path, y, 'status="escalated";updated=2021-01-01T00:00:00Z')

    converge(cli, git, remote, a, b)

    for clone in (a, b):
        shown_x, shown_y = show(cli, clone, x), show(cli, clone, y)
        assert shown_x["title"] == "title from B"
        assert show(cli, clone, w)["priority"] == 0
        assert shown_y["status"] == "canceled"
    # a canceled issue lives under the archive layout; it is one file on both sides
    from hive.state import layout

    files = git("ls-tree", "-r", "--name-only", "hive/state", cwd=a).stdout.split()
    assert [f for f in files if f.endswith(f"{y}.md")] == [layout.archive_path(y)]
    for clone in (a, b):   # which neither checkout has on disk; git there knows (skip-worktree)
        assert not (clone / ".hive" / layout.archive_path(y)).exists()
        assert git("ls-files", "-v", layout.archive_path(y), cwd=clone / ".hive").stdout.startswith("S ")
        assert git("status", "--porcelain", cwd=clone / ".hive").stdout == ""


def test_json_reports_what_came_in_and_went_out(clones, cli, git):
    remote, (a, b) = clones("A", "B")
    first = cli("create", "one", cwd=a).stdout.strip()
    cli("create", "two", cwd=a)
    report = sync_json(cli, a)
    assert (report["incoming"], report["outgoing"], report["offline"]) == (0, 2, False)
    report = sync_json(cli, b)
    assert (report["incoming"], report["outgoing"]) == (2, 0)
    assert first in report["changed_issues"]

    from_b = cli("create", "from B", cwd=b).stdout.strip()
    assert sync_json(cli, b)["outgoing"] == 1
    cli("create", "from A", cwd=a)
    report = sync_json(cli, a)
    # in: B's commit; out: A's commit and the merge
    assert (report["incoming"], report["outgoing"]) == (1, 2)
    assert report["changed_issues"] == [from_b]
    assert report["remote"] == "origin" and report["rounds"] == 1
    assert tip(git, a) == tip(git, remote)
    text = cli("sync", cwd=b).stdout
    assert text.startswith("origin: 2 commit(s) in")


def test_a_push_that_loses_is_retried(clones, cli, git, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    cli("create", "from A", cwd=a)
    from_b = cli("create", "from B", cwd=b).stdout.strip()
    # A's pre-push hook makes B push first, once: A's push then loses and must go round again
    marker = tmp_path / "b-pushed"
    hook = a / ".git" / "hooks" / "pre-push"
    hook.write_text(f"""#!{sys.executable}
import os, pathlib, subprocess, sys
sys.stdin.read()
marker = pathlib.Path({str(marker)!r})
if not marker.exists():
    marker.write_text("once")
    env = {{k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") or k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}}
    subprocess.run([{sys.executable!r}, "-m", "hive", "sync"], cwd={str(b)!r}, env=env, check=True,
                   stdout=subprocess.DEVNULL)
""", encoding="utf-8")
    hook.chmod(0o755)

    report = sync_json(cli, a)

    assert marker.exists()
    assert report["rounds"] == 2 and not report["offline"]
    assert report["incoming"] == 1 and from_b in report["changed_issues"]
    assert tip(git, a) == tip(git, remote)
    titles = {i["title"] for i in json.loads(cli("list", "--json", cwd=a).stdout)}
    assert titles == {"from A", "from B"}
    converge(cli, git, remote, a, b)


def test_an_unreachable_remote_fails_in_one_line_and_keeps_local_state(clones, cli, hive, git, tmp_path: Path):
    remote, (a,) = clones("A")
    issue = cli("create", "made offline", cwd=a).stdout.strip()
    before = tip(git, a)
    away = tmp_path / "remote-away.git"
    remote.rename(away)

    proc = hive("sync", cwd=a, check=False)   # the real command, in its own process
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and "origin" in lines[0], proc.stderr
    proc = hive("sync", "--json", cwd=a, check=False)
    assert proc.returncode == 1 and json.loads(proc.stdout)["offline"] is True
    assert tip(git, a) == before
    assert json.loads(cli("show", issue, "--json", cwd=a).stdout)["title"] == "made offline"
    # an unknown remote is an error too, not a crash
    proc = cli("sync", "nowhere", cwd=a, check=False)
    assert proc.returncode == 1 and "nowhere" in proc.stderr

    away.rename(remote)
    report = sync_json(cli, a)
    assert report["outgoing"] == 1 and tip(git, remote) == before


def test_a_remote_that_refuses_the_push_is_named_with_its_reason_not_retried(clones, cli, hive, git):
    """A hook of the remote's (a protected branch) refuses every push of hive/state, and nobody
    pushed meanwhile: sync stops at once with the remote's words (before: 8 rounds, then "it kept
    moving", sending the person looking for another writer)."""
    remote, (a,) = clones("A")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'hive/state is protected here: ask an admin' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    cli("create", "made while protected", cwd=a)
    before = tip(git, remote)
    proc = hive("sync", cwd=a, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "origin refused the push of hive/state" in lines[0] and "protected here: ask an admin" in lines[0], lines
    assert tip(git, remote) == before
    hook.unlink()
    assert sync_json(cli, a)["outgoing"] == 1


def test_a_push_the_remote_rejects_once_with_its_tip_unmoved_is_tried_again(clones, cli, git, tmp_path: Path):
    """One rejection with the remote's tip where it was may be a moment's trouble there (a ref
    lock it held): sync tries again, and names a refusal only when it comes back."""
    remote, (a,) = clones("A")
    once = tmp_path / "refused-once"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\n[ -e "{once}" ] && exit 0\ntouch "{once}"\necho "busy" >&2\nexit 1\n',
                    encoding="utf-8")
    hook.chmod(0o755)
    cli("create", "pushed on the second try", cwd=a)
    report = sync_json(cli, a)
    assert report["outgoing"] >= 1 and report["rounds"] == 2, report
    assert once.exists() and tip(git, remote) == tip(git, a)


def test_sync_runs_no_hook_of_the_branch_and_the_persons_own_hooks_as_before(clones, cli, git, tmp_path: Path):
    """husky's setup: `core.hooksPath` names a tracked folder, so its `pre-push` is a file of the
    checked-out branch, into which hive merges agents' work. `git hive sync` ran it as the
    person on every push. Hive's own git commands there now run no hook of the branch; hooks
    kept outside the worktree (a global folder: a secret scanner, say) still run."""
    remote, (a,) = clones("A")
    ran = tmp_path / "ran"

    commit_hooks(git, a, ".githooks", {"pre-push": f'#!/bin/sh\necho "the branch\'s" >> "{ran}"\n'})
    cli("create", "while the hooks are the branch's", cwd=a)
    assert sync_json(cli, a)["outgoing"] >= 1
    assert not ran.exists(), ran.read_text()
    git("push", "-q", "origin", "HEAD:refs/heads/person", cwd=a)       # the person's own push runs it
    assert ran.read_text() == "the branch's\n"

    ran.unlink()
    own = tmp_path / "global-hooks"
    own.mkdir()
    (own / "pre-push").write_text(f'#!/bin/sh\necho "the person\'s" >> "{ran}"\n', encoding="utf-8")
    (own / "pre-push").chmod(0o755)
    git("config", "core.hooksPath", str(own), cwd=a)
    cli("create", "while the hooks are the person's", cwd=a)
    assert sync_json(cli, a)["outgoing"] >= 1
    assert ran.read_text() == "the person's\n"


def _partial_clone(git: Callable[..., Any], remote: Path, clone: Path, *options: str) -> None:
    """`git clone <options>` over the file:// transport, which honours a filter (a local path
    is copied whole)."""
    git("config", "uploadpack.allowFilter", "true", cwd=remote)
    git("clone", "-q", *options, f"file://{remote}", str(clone))


def test_a_blobless_clone_takes_the_shared_queue_in_and_syncs_both_ways(clones, cli, git, tmp_path: Path):
    """`git clone --filter=blob:none` (a big monorepo's usual clone) fetches no file content
    until git reads it, and libgit2 never fetches one: init refused origin's queue ("a file
    whose blob is missing") and started an empty one of its own. Now the files of the state are
    brought from the promisor remote before they are checked, at init and at every sync."""
    remote, (a,) = clones("A")
    first = cli("create", "made on A", "-d", "before B cloned", cwd=a).stdout.strip()
    cli("note", "a note from A", "--issue", first, cwd=a)
    cli("sync", cwd=a)
    b = tmp_path / "B"
    _partial_clone(git, remote, b, "--filter=blob:none")
    assert git("config", "remote.origin.promisor", cwd=b).stdout.strip() == "true"
    init = cli("init", cwd=b)
    assert "created hive/state from origin/hive/state" in init.stdout, init.stdout + init.stderr
    assert tip(git, b) == tip(git, a)
    assert show(cli, b, first)["body"].strip() == "before B cloned"
    assert notes_of(cli, b, first) == ["a note from A"]

    second = cli("create", "made on A after", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    assert sync_json(cli, b)["incoming"] >= 1
    assert show(cli, b, second)["title"] == "made on A after"
    third = cli("create", "made on B", cwd=b).stdout.strip()
    converge(cli, git, remote, a, b)
    assert show(cli, a, third)["title"] == "made on B"
    missing = git("rev-list", "--objects", "--no-walk", "--missing=print", "hive/state", cwd=b).stdout
    assert "?" not in missing


def test_a_shallow_clone_of_every_branch_takes_the_shared_queue_in(clones, cli, git, tmp_path: Path):
    """`git clone --depth 1 --no-single-branch` (CI's habit) cuts hive/state's history too: its
    first commit's parents were never fetched. The trust check took that for "a commit that is
    missing" and init started an empty queue; now a cut commit has no parents, as git reads it,
    and `git hive log` walks back to it."""
    remote, (a,) = clones("A")
    issue = cli("create", "made on A", cwd=a).stdout.strip()
    cli("update", issue, "--priority", "1", cwd=a)
    cli("sync", cwd=a)
    b = tmp_path / "B"
    _partial_clone(git, remote, b, "--depth", "1", "--no-single-branch")
    assert (b / ".git" / "shallow").is_file()
    init = cli("init", cwd=b)
    assert "created hive/state from origin/hive/state" in init.stdout, init.stdout + init.stderr
    assert show(cli, b, issue)["priority"] == 1
    assert cli("log", issue, cwd=b).stdout.strip()   # walked to the cut commit, no further
    cli("update", issue, "--priority", "0", cwd=b)
    converge(cli, git, remote, a, b)
    assert show(cli, a, issue)["priority"] == 0


def test_a_plain_git_fetch_brings_origins_state(clones, cli, git, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    cli("create", "new on A", cwd=a)
    cli("sync", cwd=a)
    git("fetch", "-q", cwd=b)
    assert tip(git, b, "refs/remotes/origin/hive/state") == tip(git, remote)

    # a clone that fetches only main: init adds the refspec for hive/state
    narrow = tmp_path / "narrow"
    git("clone", "-q", "--single-branch", "-b", "main", str(remote), str(narrow))
    assert "hive/state" not in git("config", "--get-all", "remote.origin.fetch", cwd=narrow).stdout
    cli("init", cwd=narrow)
    assert "+refs/heads/hive/state:refs/remotes/origin/hive/state" in \
        git("config", "--get-all", "remote.origin.fetch", cwd=narrow).stdout.split()
    cli("create", "second on A", cwd=a)
    cli("sync", cwd=a)
    git("fetch", "-q", cwd=narrow)
    assert tip(git, narrow, "refs/remotes/origin/hive/state") == tip(git, remote)
    cli("sync", cwd=narrow)
    assert {i["title"] for i in json.loads(cli("list", "--json", cwd=narrow).stdout)} == {"new on A", "second on A"}
    assert tip(git, narrow) == tip(git, remote)


# -- sync says what it decided; a body conflict is flagged until resolved; a plain git merge ---------------

def test_sync_reports_every_field_a_rule_decided(clones, cli, git, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    x = cli("create", "issue x", cwd=a).stdout.strip()
    y = cli("create", "issue y", cwd=a).stdout.strip()
    quiet = cli("create", "issue quiet", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    cli("sync", cwd=b)
    edit(cli, a, tmp_path, x, 'title="title from A";updated=2020-01-01T00:00:01Z')
    edit(cli, b, tmp_path, x, 'title="title from B";updated=2020-01-01T00:00:02Z')
    cli("cancel", y, cwd=a)
    edit(cli, b, tmp_path, y, 'status="escalated";updated=2021-01-01T00:00:00Z')
    cli("update", quiet, "--priority", "0", cwd=a)          # one side only: no rule, nothing said
    cli("update", quiet, "-l", "b-side", cwd=b)
    cli("sync", cwd=a)

    out = cli("sync", cwd=b).stdout.splitlines()
    merged = sorted(line for line in out if line.startswith("merged: "))   # in the order of the ids
    assert merged == sorted([
        f'merged: {x}: title changed on both sides ("title from B" here, "title from A" there): '
        f'kept "title from B", the later change (here, updated 2020-01-01T00:00:02Z)',
        f'merged: {y}: status changed on both sides ("escalated" here, "canceled" there): '
        f'kept "canceled", a finished or canceled issue stays so',
    ]), out
    assert sync_json(cli, a)["decisions"] == []              # A takes the merge as it is: nothing decided
    assert show(cli, a, x)["title"] == "title from B"


def test_a_body_conflict_is_flagged_by_status_and_doctor_until_resolved(clones, cli, hive, git, tmp_path: Path):
    remote, (a, b) = clones("A", "B")
    x = cli("create", "issue x", "-d", "the one line", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    cli("sync", cwd=b)
    cli("update", x, "-d", "the line as A has it", cwd=a)
    cli("update", x, "-d", "the line as B has it", cwd=b)
    cli("sync", cwd=a)
    synced = cli("sync", cwd=b)
    assert "both sides changed the same lines of the description; kept both with markers" in synced.stderr

    path = f"issues/{x}.md"
    body = show(cli, b, x)["body"]
    assert "<<<<<<<" in body and "the line as A has it" in body and "the line as B has it" in body
    line = git("show", f"hive/state:{path}", cwd=b).stdout.splitlines().index("<<<<<<< ours") + 1
    flagged = f"{path}:{line}: conflict markers in the description"
    for clone in (a, b):
        if clone == a:
            cli("sync", cwd=a)                               # A gets the merge, markers and all
        status = hive("status", cwd=clone)
        assert flagged in status.stdout, status.stdout
        doctor = hive("doctor", cwd=clone, check=False)
        assert doctor.returncode == 2 and flagged in doctor.stdout, doctor.stdout

    # a person resolves it: the flag goes
    checkout = b / ".hive" / path
    text = checkout.read_text(encoding="utf-8")
    start, end = text.index("<<<<<<< ours"), text.index(">>>>>>> theirs\n") + len(">>>>>>> theirs\n")
    checkout.write_text(text[:start] + "the line as both agree\n" + text[end:], encoding="utf-8")
    assert flagged not in hive("status", cwd=b).stdout
    assert "conflict markers" not in hive("doctor", cwd=b, check=False).stdout
    cli("sync", cwd=b)
    cli("sync", cwd=a)
    assert "conflict markers" not in hive("status", cwd=a).stdout
    assert show(cli, a, x)["body"].strip() == "the line as both agree"


def test_a_plain_git_merge_in_hive_works_without_hive_on_path(clones, cli, hive, git, tmp_path: Path):
    import shlex

    remote, (a, b) = clones("A", "B")
    for clone in (a, b):
        driver = git("config", "--get", "merge.hive.driver", cwd=clone).stdout.strip()
        assert driver == f"{shlex.quote(sys.executable)} -P -m hive merge-driver %O %A %B %P"
    x = cli("create", "issue x", cwd=a).stdout.strip()
    cli("sync", cwd=a)
    cli("sync", cwd=b)
    edit(cli, a, tmp_path, x, 'title="title from A";updated=2020-01-01T00:00:01Z')
    edit(cli, b, tmp_path, x, 'title="title from B";updated=2020-01-01T00:00:02Z')
    cli("sync", cwd=a)

    # a shell with nothing of hive's on PATH (no git-hive, no python): git and sh only
    bare_path = os.pathsep.join(sorted({os.path.dirname(p) for p in ("/bin/sh", git_binary())}))
    env = {"PATH": bare_path}
    git("fetch", "-q", "origin", cwd=b, env=env)
    merged = git("merge", "--no-edit", "origin/hive/state", cwd=b / ".hive", env=env, check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"hive merge-driver: {x}: title changed on both sides" in merged.stderr
    text = git("show", f"hive/state:issues/{x}.md", cwd=b).stdout
    assert 'title = "title from B"' in text and "<<<<<<<" not in text
    assert show(cli, b, x)["title"] == "title from B"

    # an old registration by name (as hive did before): doctor says so, doctor --fix refreshes it
    git("config", "merge.hive.driver", "git-hive merge-driver %O %A %B %P", cwd=b)
    doctor = hive("doctor", cwd=b, check=False)
    assert doctor.returncode == 1 and "which a shell without hive on PATH cannot run" in doctor.stdout
    hive("doctor", "--fix", cwd=b, check=False)
    assert git("config", "--get", "merge.hive.driver", cwd=b).stdout.strip() == driver
    assert "which a shell without hive on PATH" not in hive("doctor", cwd=b, check=False).stdout


def git_binary() -> str:
    import shutil

    found = shutil.which("git")
    assert found, "git is not on PATH"
    return os.path.realpath(found)


@pytest.mark.parametrize("theirs_holder", ["w-new222", "w-old111"])
def test_a_claim_pushed_first_survives_a_merge_with_a_reopen_of_the_same_lease(project, theirs_holder) -> None:
    """Two machines see the same lease expire: each reopens the issue, and one of them claims it
    and pushes first. Merging that into the other's state must keep the claim (field by field the
    other's `open` won: theirs' status went in_progress → open → in_progress, back to the base's).
    A reopen here of a claim theirs merely still has (the same holder as the base) stays a reopen."""
    import pygit2

    from hive.state.issue_file import update_text
    from hive.state.merging import merge_states
    from hive.state.trees import write_tree
    from tests.conftest import _issue_text

    repo = project.store.repo
    path = "issues/hv-clm001.md"
    held = update_text(_issue_text("Contested", status="in_progress", assignee="w-old111"),
                       {"lease_expires": "2026-01-01T00:00:10Z", "machine": "vm:a"}, path)
    reopened = update_text(held, {"status": "open", "assignee": "", "lease_expires": None, "machine": None}, path)
    claimed = update_text(held, {"assignee": theirs_holder, "lease_expires": "2026-01-01T00:09:00Z",
                                 "machine": "vm:b", "updated": "2026-01-01T00:08:00Z"}, path)
    signature = pygit2.Signature("t", "t@example.invalid")

    def commit(parent: str | None, text: str) -> str:
        tip = repo[parent].peel(pygit2.Commit) if parent else repo[project.store.tip()].peel(pygit2.Commit)
        tree = write_tree(repo, tip.tree, {path: text.encode()})
        return str(repo.create_commit(None, signature, signature, "x", tree, [tip.id]))

    base = commit(None, held)
    ours, theirs = commit(base, reopened), commit(base, claimed)
    merged = merge_states(repo, ours, theirs, prefer_theirs_claims=True)
    text = repo[repo[merged.tree][path].id].data.decode()   # type: ignore[index]
    if theirs_holder == "w-new222":
        assert 'status = "in_progress"' in text and 'assignee = "w-new222"' in text and 'machine = "vm:b"' in text
        assert any("kept w-new222, the claim pushed first" in d for d in merged.decisions)
    else:
        assert 'status = "open"' in text and 'assignee = ""' in text, text
