"""Sharing the queue through a git remote: fetch, merge with the hive rules, push.

The network goes through the `git` CLI so that a person's own setup applies (credentials, SSH
config, proxies, URL rewrites). The push of `hive/state` is the compare-and-swap between machines:
a push that lost (someone pushed meanwhile) is answered by fetching, merging and pushing again.
When the two sides claimed the same issue, the side already on the remote wins — it was pushed
first, so its claim is the valid one (see `merging.merge_states(prefer_theirs_claims=True)`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Callable

from hive import git
from hive.errors import HiveError
from hive.project import Project
from hive.state import issue_file, layout, trust
from hive.state.store import Change

MAX_PUSH_ROUNDS = 8
# rejections of a push with the remote's tip where it was: a refusal, not a race (one could be a
# lock the remote held a moment)
REFUSED_AFTER = 2
NETWORK_TIMEOUT = 60

REJECTED_MARKERS = ("[rejected]", "non-fast-forward", "fetch first", "stale info", "[remote rejected]",
                    "failed to update ref", "cannot lock ref")
# git's words for a failure on this side (a lock, a ref it could not write): the remote may be
# perfectly reachable, and saying "unreachable" would send a person looking in the wrong place
LOCAL_FAILURE_MARKERS = ("cannot lock ref", ".lock': File exists", "unable to update local ref",
                         "Unable to create", "cannot update ref", "bad object")


@dataclass
class FetchResult:
    ok: bool
    reason: str = ""        # git's last words when not ok
    local: bool = False     # failed on this side (see LOCAL_FAILURE_MARKERS), not the remote's

    def __bool__(self) -> bool:
        return self.ok


MAX_REASON_CHARS = 300   # of a remote's words in one line of the log


@dataclass
class PushResult:
    ok: bool
    rejected: bool = False      # the remote moved: fetch, merge, try again
    offline: bool = False       # the remote could not be reached
    message: str = ""

    @property
    def reason(self) -> str:
        """git's reason for the failure, in one line: for a rejection, the remote's verdict (its
        porcelain status) and the first thing it said (a hook's words, a lock it could not take)."""
        lines = [line.strip() for line in self.message.splitlines() if line.strip()]
        verdict = next((line.rsplit("\t", 1)[-1] for line in lines if line.startswith("!")), "")
        said = next((line.removeprefix("remote:").strip() for line in lines
                     if line.startswith("remote:") and line.removeprefix("remote:").strip()), "")
        found = ": ".join(part for part in (verdict, said) if part) or _reason(self.message, "push rejected")
        return trust.printable(found)[:MAX_REASON_CHARS]   # the remote's words: anyone's


@dataclass
class SyncReport:
    remote: str
    incoming: int = 0                       # commits that came in
    outgoing: int = 0                       # commits that went out
    changed_issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)   # what a merge rule kept, one line each
    offline: bool = False
    rounds: int = 0

    def to_json(self) -> dict[str, object]:
        return {"remote": self.remote, "incoming": self.incoming, "outgoing": self.outgoing,
                "changed_issues": self.changed_issues, "warnings": self.warnings,
                "decisions": self.decisions,
                "offline": self.offline, "rounds": self.rounds}


def _git(project: Project, args: list[str], timeout: float = NETWORK_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """git in the person's worktree, for hive: with no hook when the hooks are files of the
    branch (`git.hooks_in_worktree`: a push ran the `pre-push` of the work hive had merged)."""
    try:
        return git.run(git.own_command(project.paths, args), project.paths.worktree, check=False, timeout=timeout,
                       env={"GIT_TERMINAL_PROMPT": "0", **git.private_stores_env(project.paths.common_dir)})
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", "timed out talking to the remote")


class Remote:
    def __init__(self, project: Project, name: str):
        self.project = project
        self.name = name
        self.log: Callable[[str], None] = lambda _: None   # where lock removals are told
        known = git.run(["remote"], project.paths.worktree).stdout.split()
        if name not in known:
            raise HiveError(f"no remote named {name!r} (git remote add {name} URL)")

    def tracking_ref(self, branch: str) -> str:
        return f"refs/remotes/{self.name}/{branch}"

    def track(self, branch: str, commit: str) -> None:
        """Move this side's remote-tracking ref of `branch` to `commit` (pushed there)."""
        _git(self.project, ["update-ref", self.tracking_ref(branch), commit])

    def remote_tip(self, branch: str = git.STATE_BRANCH) -> str | None:
        return git.read_ref(self.project.paths.common_dir, self.tracking_ref(branch))

    def contains(self, local: str, remote_tip: str | None) -> bool:
        """Whether `local` holds `remote_tip`: only then may a leased push replace it (a lease
        alone would let a push drop the remote's commits that this side never merged)."""
        if remote_tip is None or local == remote_tip:
            return True
        try:
            return self.project.store.repo.descendant_of(local, remote_tip)
        except Exception:  # noqa: BLE001 - unknown object: not merged here
            return False

    # -- the network ------------------------------------------------------------------------

    def clear_stale_locks(self) -> None:
        """Remove git locks a killed process left (`git.is_stale_lock`): one on a remote-tracking
        ref would fail every later fetch. Each removal is told to `self.log`."""
        git.clear_stale_locks(self.project.paths.common_dir, self.log)

    def fetch(self, *branches: str, work_branches: bool = False) -> FetchResult:
        """Fetch branches (and with `work_branches`, hive/work/*, pruning the tracking refs of
        deleted ones) into remote-tracking refs, in one round trip. Falsy when it failed, with
        git's reason and whether the failure was on this side."""
        self.clear_stale_locks()
        specs = [f"+refs/heads/{b}:{self.tracking_ref(b)}" for b in (branches or (git.STATE_BRANCH,))]
        prune = []
        if work_branches:
            specs.append(f"+refs/heads/hive/work/*:refs/remotes/{self.name}/hive/work/*")
            prune = ["--prune"]
        proc = _git(self.project, ["fetch", "--quiet", "--no-tags", *prune, self.name, *specs])
        if proc.returncode != 0 and "couldn't find remote ref" in proc.stderr:
            return FetchResult(True)  # the branch does not exist there yet
        if proc.returncode == 0:
            return FetchResult(True)
        local = any(marker in proc.stderr for marker in LOCAL_FAILURE_MARKERS)
        return FetchResult(False, _reason(proc.stderr, f"git fetch exited {proc.returncode}"), local)

    def push(self, local_ref: str, branch: str, expected: str | None, *, lease: bool = True) -> PushResult:
        """Push `local_ref` to the remote's `branch`, only if the remote still has `expected`
        (None: only if the branch does not exist there). `lease=False` forces."""
        self.clear_stale_locks()
        unsent = self._send_lfs_content(local_ref) if branch != git.STATE_BRANCH else ""
        if unsent:
            return PushResult(False, offline=True, message=unsent)
        guard = f"--force-with-lease=refs/heads/{branch}:{expected or ''}" if lease else "--force"
        proc = _git(self.project, ["push", "--quiet", "--porcelain", guard, self.name,
                                   f"{local_ref}:refs/heads/{branch}"])
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode == 0:
            return PushResult(True, message=text)
        if any(marker in text for marker in REJECTED_MARKERS):
            return PushResult(False, rejected=True, message=text)
        return PushResult(False, offline=True, message=_reason(text, "push failed"))

    def _send_lfs_content(self, local_ref: str) -> str:
        """Where hive's push runs no hook (the hooks are files of the branch: `git.own_command`)
        and the person uses git-lfs, what its `pre-push` hook sends on their own pushes: the
        content of the LFS files the pushed commits name (`git lfs push`), so that the remote never
        gets a pointer without its content. The reason when it could not ("" when sent or not
        needed)."""
        paths = self.project.paths
        if "lfs" not in git.filter_config(paths).drivers or not git.hooks_in_worktree(paths):
            return ""
        proc = _git(self.project, ["lfs", "push", self.name, local_ref])
        return "" if proc.returncode == 0 else _reason((proc.stdout + proc.stderr).strip(), "git lfs push failed")

    def delete_branches(self, branches: list[str]) -> bool:
        """Delete `branches` on the remote (one push) and their remote-tracking refs here."""
        if not branches:
            return True
        self.clear_stale_locks()
        proc = _git(self.project, ["push", "--quiet", self.name, *(f":refs/heads/{b}" for b in branches)])
        if proc.returncode != 0 and "remote ref does not exist" not in proc.stderr:
            return False
        for branch in branches:
            _git(self.project, ["update-ref", "-d", self.tracking_ref(branch)])
        return True

    def work_branches(self) -> list[str]:
        """The `hive/work/*` branches the remote has now (None-safe: [] when unreachable)."""
        proc = _git(self.project, ["ls-remote", "--heads", self.name, "refs/heads/hive/work/*"])
        return [line.split("\trefs/heads/", 1)[1] for line in proc.stdout.splitlines()
                if "\trefs/heads/" in line] if proc.returncode == 0 else []

    def tracked_work_branches(self) -> list[str]:
        """The remote's `hive/work/*` branches as of the last fetch (its remote-tracking refs)."""
        prefix = f"refs/remotes/{self.name}/"
        proc = git.run(["for-each-ref", "--format=%(refname)", prefix + "hive/work/"], self.project.paths.worktree,
                       check=False)
        return [ref.removeprefix(prefix) for ref in proc.stdout.split()]

    def prune_work_branches(self, listed: list[str] | None = None) -> list[str]:
        """Delete the remote's `hive/work/*` branches whose issue is finalized or canceled here
        (left by a machine that ended, or pushed late, after the issue was finalized); the ones
        deleted. `listed`: the branches known to be there (default: ask the remote)."""
        self.project.update_index()
        finished = []
        for branch in self.work_branches() if listed is None else listed:
            issue_id = branch.removeprefix("hive/work/")
            issue = self.project.index.get(issue_id) if issue_file.is_valid_id(issue_id) else None
            if issue is not None and issue.status in issue_file.TERMINAL_STATUSES:
                finished.append(branch)
        return finished if self.delete_branches(finished) else []

    # -- hive/state -------------------------------------------------------------------------

    def merge_remote_state(self, report: SyncReport | None = None) -> str | None:
        """Merge the fetched remote state into the local one (remote claims win). New local tip.

        Raises trust.Untrusted, and changes nothing, when the remote's tree breaks a rule.
        """
        remote_tip = self.remote_tip()
        if remote_tip is None:
            return None
        store = self.project.store
        self.project.update_index()   # what this side adopted so far: the trusted base
        before = store.tip()
        if before is None or not (before == remote_tip or store.repo.descendant_of(before, remote_tip)):
            self.check(remote_tip)
        change = Change({}, summary=f"sync with {self.name}", event="synced",
                        trailers={"Hive-Remote": self.name})
        decisions: list[str] = []
        new, warnings = store.merge(remote_tip, change, prefer_theirs_claims=True, decisions=decisions)
        if report is not None:
            report.warnings.extend(warnings)
            report.decisions.extend(decisions)
            if new is not None and before is not None:
                report.incoming += _count(self.project, before, remote_tip)
                report.changed_issues = sorted(set(report.changed_issues) | _issues_between(self.project, before, new))
        if new is not None:
            problems = self.project.after_write()
            if report is not None:
                # what came in and is not valid is said now: later commands find the index
                # already caught up (`git hive doctor` lists every problem at any time)
                report.warnings.extend(str(problem) for problem in problems)
        return new

    def check(self, commit: str) -> None:
        """Raise trust.Untrusted unless the remote's `commit` may be adopted (recorded for doctor).
        A partial clone brings the files of it, and of where it parted from this side's state
        (the merge reads both), first."""
        local = self.project.store.tip()
        base = self.project.store.repo.merge_base(local, commit) if local is not None else None
        git.fetch_missing_objects(self.project.paths, [commit, *([str(base)] if base is not None else [])])
        try:
            trust.check_commit(self.project.store.repo, commit, self.project.index.indexed_commit or None,
                               source=f"{self.name}/{git.STATE_BRANCH}")
        except trust.Untrusted as exc:
            self.project.index.record_refusal(str(exc))
            # nothing keeps the refused objects: not even the tracking ref (the next fetch brings
            # the remote's tip back, and it is checked again)
            _git(self.project, ["update-ref", "-d", self.tracking_ref(git.STATE_BRANCH), commit])
            raise

    def reset(self) -> list[str]:
        """Put back the remote's `hive/state` that this machine refused: this machine's state (the
        last adopted commit plus local changes) pushed in its place, with a lease on the refused
        tip. The lines to say first: what it drops (the remote's commits this side does not have,
        the first `MAX_DROPPED_SHOWN` named). HiveError when the remote's state is not refused."""
        if not self.fetch():
            raise HiveError(f"{self.name} is unreachable: nothing was reset")
        remote_tip, local = self.remote_tip(), self.project.store.tip()
        if local is None:
            raise HiveError("this repository has no hive/state to put in place: `git hive init` first")
        if remote_tip is not None and self.contains(local, remote_tip):
            raise HiveError(f"{self.name}/{git.STATE_BRANCH} holds nothing this machine refused: nothing to reset")
        dropped = self._dropped(local, remote_tip) if remote_tip is not None else []
        if remote_tip is not None:
            try:
                self.check(remote_tip)
            except trust.Untrusted as exc:
                dropped.insert(0, str(exc))
            else:
                raise HiveError(f"{self.name}/{git.STATE_BRANCH} is not refused: `git hive sync {self.name}` "
                                "merges it")
        result = self.push(git.STATE_REF, git.STATE_BRANCH, remote_tip)
        if not result.ok:
            raise HiveError(f"could not reset {self.name}/{git.STATE_BRANCH}: {result.message or 'push failed'}")
        self.track(git.STATE_BRANCH, local)
        return dropped

    def _dropped(self, local: str, remote_tip: str) -> list[str]:
        count = _count(self.project, local, remote_tip)
        shown = _git(self.project, ["log", f"--max-count={MAX_DROPPED_SHOWN}", "--format=%h %s",
                                    remote_tip, f"^{local}"]).stdout.splitlines()
        lines = [f"drops {count} commit(s) of {self.name}/{git.STATE_BRANCH} this machine does not have:"]
        lines += ["  " + trust.printable(line)[:120] for line in shown]
        if count > len(shown):
            lines.append(f"  ... and {count - len(shown)} more")
        return lines

    def sync(self) -> SyncReport:
        """fetch + merge + push of `hive/state`, retried while pushes lose; bounded."""
        report = SyncReport(self.name)
        rejected: list[tuple[str | None, PushResult]] = []   # each rejected push, with the tip it was leased on
        for round_no in range(1, MAX_PUSH_ROUNDS + 1):
            report.rounds = round_no
            if not self.fetch():
                report.offline = True
                return report
            if len(rejected) >= REFUSED_AFTER and {tip for tip, _ in rejected[-REFUSED_AFTER:]} == {self.remote_tip()}:
                # rejected again and again, and nobody pushed meanwhile: the remote refuses this
                # push (a hook, a protected branch, its checked-out branch), which no retry changes
                raise HiveError(f"{self.name} refused the push of {git.STATE_BRANCH}: {rejected[-1][1].reason}")
            self.merge_remote_state(report)
            local, remote_tip = self.project.store.tip(), self.remote_tip()
            if local is None or local == remote_tip:
                return report
            if not self.contains(local, remote_tip):
                continue  # the tracking ref moved (another fetch) since the merge: merge again
            outgoing = _count(self.project, remote_tip, local) if remote_tip else _count(self.project, None, local)
            result = self.push(git.STATE_REF, git.STATE_BRANCH, remote_tip)
            if result.ok:
                report.outgoing += outgoing
                self.track(git.STATE_BRANCH, local)
                return report
            if result.offline:
                report.offline = True
                return report
            rejected.append((remote_tip, result))
        raise HiveError(f"could not push {git.STATE_BRANCH} to {self.name}: it kept moving "
                        f"({MAX_PUSH_ROUNDS} rounds)")

    def unpushed(self, branch: str) -> int:
        """How many commits of the local `branch` the remote lacks, as of the last fetch (the
        landings hive merged into the target branch, which `sync` does not push: -1 when the
        remote has commits of its own there, so that only a person's merge can join them)."""
        local = git.read_ref(self.project.paths.common_dir, git.branch_ref(branch))
        if local is None:
            return 0
        theirs = self.remote_tip(branch)
        if theirs is not None and not self.contains(local, theirs):
            return -1
        return _count(self.project, theirs, local)

    def push_branch(self, branch: str) -> PushResult:
        """Fast-forward the remote's `branch` to the local one (refused if the remote moved)."""
        fetched = self.fetch(branch)
        if not fetched:
            return PushResult(False, offline=True, message=fetched.reason)
        local = git.read_ref(self.project.paths.common_dir, git.branch_ref(branch))
        theirs = self.remote_tip(branch)
        if local is None or not self.contains(local, theirs):
            return PushResult(False, rejected=True, message=f"{self.name}/{branch} has commits {branch} lacks")
        result = self.push(git.branch_ref(branch), branch, theirs)
        if result.ok:
            self.track(branch, local)
        return result


MAX_DROPPED_SHOWN = 20


def _reason(text: str, fallback: str) -> str:
    """git's reason for a failure: its first line naming a local failure, else its first
    `fatal:`/`error:` line, else its first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for wanted in (lambda line: any(m in line for m in LOCAL_FAILURE_MARKERS),
                   lambda line: line.startswith(("fatal:", "error:")), lambda line: True):
        found = next((line for line in lines if wanted(line)), "")
        if found:
            return found
    return fallback


def _count(project: Project, exclude: str | None, include: str) -> int:
    args = ["rev-list", "--count", include] + ([f"^{exclude}"] if exclude else [])
    proc = git.run(args, project.paths.worktree, check=False)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def _issues_between(project: Project, old: str, new: str) -> set[str]:
    changed = project.store.changes(old, new)
    return {layout.issue_id_of(p) for p, _, _ in changed if layout.issue_id_of(p)}
