"""The process limit of a jail: a pids cgroup where hive may make one, and RLIMIT_NPROC.

RLIMIT_NPROC counts per user namespace (Linux 5.14+), and a namespace made while it is in force
bounds by it everything its maker's user runs: so it is set inside the jail, once its namespace
exists, where it bounds the jail alone. Set before (on the `bwrap` that makes the namespace) it
would count every process of the user, and a user already running more (a desktop's threads, a
sibling agent's fork bomb) would get no jail at all. Running as root (whose RLIMIT_NPROC the
kernel does not hold to), the bound is a child of the `pids` cgroup hive runs in (cgroup v2 with
`pids` delegated to its subtree, or the v1 `pids` hierarchy), made per jailed command, joined
before the jail is made and removed when it has ended.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "hive-jail-"
STALE_SECONDS = 60.0   # a jail's first process joins its cgroup at once: one this old and empty is left over
_last_sweep: dict[Path, float] = {}
# inside the jail: $1 the process bound, then the command; a lower limit already in force stays
# (only root may raise one)
BOUND = 'n=$1; shift; ulimit -u "$n" 2>/dev/null || ulimit -p "$n" 2>/dev/null; exec "$@"'
# outside: $1 the cgroup file to join by (`0`: the writer), then the jail's command line. This shell
# has one thread: where the cgroup has a `tasks` file (cgroup v1) it joins as that thread, a move
# without the lock a whole process's move takes (and the RCU grace period that lock waits for);
# cgroup v2 has its `cgroup.procs` alone.
JOIN = 'echo 0 > "$1" || { echo "hive jail: cannot enter $1" >&2; exit 126; }; shift; exec "$@"'


def _own_cgroup_dirs() -> list[Path]:
    """Where a child pids cgroup of this process would go, most likely first."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        path = path.lstrip("/")
        if "pids" in controllers.split(","):
            found.append(CGROUP_ROOT / "pids" / path)
        elif number == "0" and not controllers:
            for base in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
                if "pids" in _read(base / path / "cgroup.subtree_control").split():
                    found.append(base / path)
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@dataclass
class ProcessCap:
    """One jailed command's process bound. `preexec` runs in the child before it execs."""

    max_processes: int
    cgroup: Path | None = None

    @classmethod
    def make(cls, max_processes: int) -> ProcessCap:
        if os.geteuid() == 0:
            for parent in _own_cgroup_dirs():
                _sweep(parent)
                group = parent / f"{PREFIX}{uuid.uuid4().hex[:12]}"
                try:
                    group.mkdir()
                    (group / "pids.max").write_text(str(max_processes))
                except OSError:
                    _remove(group)
                    continue
                return cls(max_processes, group)
        return cls(max_processes)

    @property
    def mechanism(self) -> str:
        if self.cgroup is not None:
            return "pids cgroup"
        return "RLIMIT_NPROC" if os.geteuid() != 0 else ""

    def bounded(self, argv: list[str]) -> list[str]:
        """`argv` under RLIMIT_NPROC (soft and hard): a `/bin/sh` that sets it, then execs `argv`,
        run inside the jail. A shell and not a `preexec_fn`: Python forks (no vfork) for one,
        which costs more than the whole jail (bench/jail.py). With a cgroup (root, whom the
        kernel does not hold to RLIMIT_NPROC) `argv` as it is: the cgroup bounds it."""
        if self.cgroup is not None:
            return list(argv)
        return ["/bin/sh", "-c", BOUND, "hive-jail", str(self.max_processes), *argv]

    def joined(self, line: list[str]) -> list[str]:
        """The jail's command `line` started in the cgroup, when there is one."""
        if self.cgroup is None:
            return list(line)
        tasks = self.cgroup / "tasks"
        by = tasks if tasks.exists() else self.cgroup / "cgroup.procs"
        return ["/bin/sh", "-c", JOIN, "hive-jail", str(by), *line]

    def members(self) -> list[int] | None:
        """The live processes in the cgroup (zombies are not listed), or None without one."""
        if self.cgroup is None:
            return None
        try:
            return [int(pid) for pid in (self.cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        """Remove the cgroup once nothing runs in it (hive killed the jail's processes first)."""
        if self.cgroup is not None:
            _remove(self.cgroup)


def _sweep(parent: Path) -> None:
    """Remove the jail cgroups left in `parent` (at most once a minute): by a hive that was
    killed, or released while the jail's last process was still leaving (the cgroup was busy).
    Only old ones are tried, and the kernel removes only an empty one."""
    now = time.monotonic()
    if now - _last_sweep.get(parent, -STALE_SECONDS) < STALE_SECONDS:
        return
    _last_sweep[parent] = now
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    oldest = time.time() - STALE_SECONDS
    for entry in entries:
        try:
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and \
                    entry.stat(follow_symlinks=False).st_mtime < oldest:
                os.rmdir(entry.path)
        except OSError:
            pass   # busy (processes in it), or gone meanwhile


def _remove(group: Path) -> None:
    try:
        group.rmdir()
    except OSError:
        pass


def available_mechanism(max_processes: int = 64) -> str:
    """The mechanism that would bound a jail's processes here ("" when none would)."""
    cap = ProcessCap.make(max_processes)
    try:
        return cap.mechanism
    finally:
        cap.release()
