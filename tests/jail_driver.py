"""Runs one shell command in a worker's jail, as whoever starts this script (tests/test_jail_escapes.py
starts it as root and, through `setpriv`, as nobody):

    python tests/jail_driver.py REPO ISSUE_ID COMMAND [ENDPOINT_URL ...]

The jail is hive's own for the worktree of ISSUE_ID (`hive.jail.roles.worktree_jail`), given the
network ways out a backend would give it for the ENDPOINT_URLs. Prints one JSON line:
{"returncode": N, "output": "stdout+stderr"}; a jail that cannot be built: {"refused": "why"}.
HIVE_TEST_JAIL_MAX_PROCESSES sets the jail's process bound; HIVE_TEST_JAIL_BUSY starts that many
processes of the user outside the jail first (ended when it has run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

from hive import git
from hive.jail import JailSpec, NoJail, prepare, roles
from hive.workspace.worktrees import worktree_path


def main(argv: list[str]) -> int:
    repo, issue_id, command, *endpoints = argv
    paths = git.discover(repo)
    worktree = worktree_path(paths, issue_id)
    mechanism = os.environ.get("HIVE_TEST_JAIL_MECHANISM", "on")        # the one under test
    jail = replace(roles.worktree_jail(paths, worktree), mechanism=mechanism).extended(endpoints=tuple(endpoints))
    if "HIVE_TEST_JAIL_MAX_PROCESSES" in os.environ:
        jail = replace(jail, max_processes=int(os.environ["HIVE_TEST_JAIL_MAX_PROCESSES"]))
    busy = [subprocess.Popen(["sleep", "120"]) for _ in range(int(os.environ.get("HIVE_TEST_JAIL_BUSY", "0")))]
    try:
        print(json.dumps(_run_jailed(command, str(worktree), jail)))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    return 0


def _run_jailed(command: str, worktree: str, jail: JailSpec) -> dict[str, object]:
    try:
        launch = prepare(["sh", "-c", command], cwd=worktree, env=dict(os.environ), jail=jail)
    except NoJail as e:
        return {"refused": str(e)}
    try:
        done = subprocess.run(launch.argv, env=launch.env, pass_fds=launch.fds, cwd=worktree, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    finally:
        launch.release()
    return {"returncode": done.returncode, "output": done.stdout.decode(errors="replace")}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
