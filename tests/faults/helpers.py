"""What the fault scenarios share: sizes from the environment, scripts, daemons, processes and the
invariants checked at the end of a scenario.

Everything works from the outside, on real repositories: `python -m hive run --backend scripted`
subprocesses, real scripted agent processes, the commits of `hive/state` and of the target branch,
`/proc` for processes. Nothing here sleeps for a fixed time to wait for a state: waits poll with a
deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

from tests.daemon_helpers import alive, hive_dir, start_daemon, stop_daemon


# -- sizes ----------------------------------------------------------------------------------------

def env_int(name: str, default: int) -> int:
    """A size from the environment (`FAULTS_*`), read at import: the `git_env` fixture of a test
    removes HIVE_*/GIT_* variables, these are not among them anyway."""
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


# -- repositories, scripts, issues ----------------------------------------------------------------

def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def publish_to_origin(git: Callable[..., Any], hive: Callable[..., Any], repo: Path, remote: Path) -> Path:
    """Make `remote` a new bare repository, `repo`'s origin, holding its main and hive/state."""
    git("init", "-q", "--bare", "-b", "main", str(remote))
    git("remote", "add", "origin", str(remote), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    hive("sync", "origin", cwd=repo)
    return remote


def daemon_env(script: Path | None = None, **config: Any) -> dict[str, str]:
    """HIVE_* settings for a daemon subprocess: the script, then config keys (`stall_seconds=3`)."""
    env = {"HIVE_ANOMALY_FAILURE_THRESHOLD": "1000"}
    if script is not None:
        env["HIVE_SCRIPTED_SCRIPT"] = str(script)
    env.update({f"HIVE_{key.upper()}": str(value) for key, value in config.items()})
    return env


def work_steps(extra: Iterable[dict] = (), *, after: Iterable[dict] = ()) -> list[dict]:
    """A worker that writes `hive-work/<issue>.txt`, commits it and succeeds (`extra` first)."""
    return [*extra,
            {"write": "hive-work/{issue}.txt", "content": "work of {issue}\n"},
            *after,
            {"commit": "{issue}: work"},
            {"tokens": {"input": 100, "output": 10}},
            {"result": "success", "summary": "wrote hive-work/{issue}.txt"}]


def bulk_issues(project: Any, specs: list[dict[str, Any]]) -> list[str]:
    """Create many issues in one `hive/state` commit (set-up speed; hive itself writes one each).

    Each spec: `title`, optional `deps` (indexes of earlier specs), `labels`, `priority`, `type`.
    Returns the ids, in the order of the specs.
    """
    from hive.state import issue_file, layout
    from hive.state.issue_file import Issue
    from hive.state.store import Change

    ids: list[str] = []
    while len(ids) < len(specs):
        new = issue_file.new_id()
        if new not in ids:
            ids.append(new)
    stamp = issue_file.format_time(issue_file.now())
    files: dict[str, bytes | None] = {}
    for issue_id, spec in zip(ids, specs):
        issue = Issue(id=issue_id, title=spec["title"], priority=spec.get("priority", 2),
                      type=spec.get("type", "task"), depends_on=[ids[d] for d in spec.get("deps", ())],
                      labels=list(spec.get("labels", ())), created=stamp, updated=stamp,
                      body=spec.get("body", "Fault-injection issue.\n"))
        files[layout.live_path(issue_id)] = issue_file.render(issue).encode()
    project.store.commit(lambda snap: Change(files, summary=f"{len(specs)} issues", event="created"))
    project.after_write()
    return ids


# -- processes ------------------------------------------------------------------------------------

def processes_under(root: Path, match: bytes | None = b"scripted_agent") -> list[int]:
    """Live processes whose command line contains `match` and whose cwd is under `root`
    (a deleted cwd counts: its path still names where the process was started)."""
    prefix = str(Path(root).resolve())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if match is not None and match not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd.startswith(prefix) and alive(int(entry)):
            found.append(int(entry))
    return sorted(found)


def wait_until(predicate: Callable[[], Any], timeout: float, step: float = 0.02) -> Any:
    """Poll `predicate` until truthy or the deadline; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class Daemons:
    """`git hive run` subprocesses a test started; all of them (and agents left under `root`)
    are killed at the end whatever happened."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.popens: list[subprocess.Popen] = []
        self.pid_files: list[Path] = []      # children agents started on purpose (fork bombs)

    def start(self, repo: Path, env: dict[str, str], *args: str, log: Path) -> subprocess.Popen:
        proc = start_daemon(repo, env, *args, log=log)
        self.popens.append(proc)
        return proc

    def run_until_idle(self, repo: Path, env: dict[str, str], *, max_agents: int, timeout: float,
                       log: Path) -> int:
        proc = self.start(repo, env, "--until-idle", "--max-agents", str(max_agents), log=log)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"`git hive run --until-idle` did not finish within {timeout}s; "
                                 f"log tail:\n{tail(log)}") from None

    def cleanup(self) -> None:
        for proc in self.popens:
            stop_daemon(proc)
        kill_all(processes_under(self.root))
        for pid_file in self.pid_files:     # only if still what was started: a `sleep`
            for pid in (int(p) for p in pid_file.read_text().split()) if pid_file.exists() else ():
                try:
                    if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- invariants -----------------------------------------------------------------------------------

def finalized_counts(state_log: Callable[..., list], repo: Path) -> Counter:
    return Counter(c.issue for c in state_log(repo) if c.event == "finalized")


def additions_on(git: Callable[..., Any], repo: Path, ref: str = "main", folder: str = "hive-work/") -> Counter:
    """How many commits of `ref` add each file under `folder` (one `git log` for all files)."""
    out = git("log", "--format=", "--name-status", "--diff-filter=A", ref, "--", folder, cwd=repo).stdout
    return Counter(line.split("\t", 1)[1] for line in out.splitlines() if "\t" in line)


def fsck_problems(git: Callable[..., Any], repo: Path) -> list[str]:
    proc = git("fsck", "--no-dangling", "--no-progress", cwd=repo, check=False)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return lines if proc.returncode != 0 or lines else []


def git_locks(repo: Path) -> list[str]:
    """Git lock files (`*.lock`) left in the repository's git dir — not hive's own flock files
    under `.git/hive/`, which stay by design."""
    git_dir = repo / ".git"
    return sorted(str(p.relative_to(git_dir)) for p in git_dir.rglob("*.lock")
                  if p.relative_to(git_dir).parts[0] != "hive")


def leftovers(git: Callable[..., Any], repo: Path) -> dict[str, list[str]]:
    """Worker worktree dirs, `hive/work/*` branches and registered hive worktrees still there."""
    root = hive_dir(repo) / "worktrees"
    dirs = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    branches = git("for-each-ref", "--format=%(refname:short)", "refs/heads/hive/work/", cwd=repo).stdout.split()
    registered = [line.split(" ", 1)[1] for line in
                  git("worktree", "list", "--porcelain", cwd=repo).stdout.splitlines()
                  if line.startswith("worktree ") and "/hive/worktrees/" in line]
    return {key: value for key, value in
            (("worktree dirs", dirs), ("work branches", branches), ("registered worktrees", registered))
            if value}


def reflog(git: Callable[..., Any], repo: Path, ref: str) -> list[tuple[str, str]]:
    """(new oid, message) of each entry of `ref`'s reflog, oldest first."""
    out = git("reflog", "show", "--format=%H%x1f%gs", ref, "--", cwd=repo, check=False).stdout
    return [tuple(line.split("\x1f", 1)) for line in reversed(out.splitlines()) if "\x1f" in line]


def target_history_problems(git: Callable[..., Any], repo: Path, state_log: Callable[..., list],
                            before: str, ref: str = "main") -> list[str]:
    """Check that `ref` only ever moved through the merge pipeline since it pointed at `before`.

    Every position the reflog records after `before` is a commit that a `finalized` state commit
    names as merged (`Hive-Merged`), each is a fast-forward of the previous one, and the tip is the
    last of them. A move that bypassed git (a file written under refs/) is caught by the last check.
    """
    merged = {c.trailers.get("Hive-Merged") for c in state_log(repo) if c.event == "finalized"}
    merged.discard(None)
    entries = reflog(git, repo, ref)
    oids = [oid for oid, _ in entries]
    if before not in oids:
        return [f"{ref}'s reflog lost its starting point {before[:10]}"]
    start = len(oids) - 1 - oids[::-1].index(before)
    problems = []
    previous = before
    for oid, message in entries[start + 1:]:
        if oid not in merged:
            problems.append(f"{ref} moved to {oid[:10]} ({message!r}), which no finalize commit names")
        elif git("merge-base", "--is-ancestor", previous, oid, cwd=repo, check=False).returncode != 0:
            problems.append(f"{ref} moved from {previous[:10]} to {oid[:10]}: not a fast-forward")
        previous = oid
    tip = git("rev-parse", ref, cwd=repo).stdout.strip()
    if tip != previous:
        problems.append(f"{ref} is at {tip[:10]} but its reflog ends at {previous[:10]} (moved outside git)")
    return problems


def double_claims(repo: Path) -> list[str]:
    from hive import git as hive_git
    from hive.state import history

    return history.double_claims(hive_git.discover(repo))
