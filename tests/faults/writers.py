"""The writer processes of the concurrent-writers scenario (tests/faults/test_concurrent_writers.py).

    python tests/faults/writers.py ROLE ARGS_JSON

Each waits for the `go` file, works until the `end` time (epoch seconds), then writes what it did
to the `out` file as JSON — only what succeeded, so that the test can check each of it is still
there at the end. Roles:

    claimer   on shared ticks, all claimers claim the head of the ready queue at the same instant
              (`hive.lifecycle.claim`, in-process): {"won": [[issue, agent], ...], "lost": N}
    cli       `git hive update ID --add-label L` on any issue, `--priority P` on its own issues
              (subprocesses): {"labels": [[issue, label]], "priorities": [[issue, p]], "failures": []}
    editor    saves `.hive/issues/<own issue>.md` with a new title the way an editor does (read,
              write a temp file, check the file did not change meanwhile, rename over it), then
              waits for the save to reach `hive/state`: {"titles": [[issue, title, landed]]}
    remote    in another clone: adds labels in-process, `git hive sync`s them to the bare remote
              every 4 labels, and once more at the end: {"labels": [...], "synced": bool, "errors": []}
    syncer    `git hive sync origin` in a loop in the repository under test: {"codes": [...]}
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

TICK = 0.25


def wait_go(args: dict) -> None:
    while not os.path.exists(args["go"]):
        time.sleep(0.005)


def claimer(args: dict) -> dict:
    from hive.project import Project
    from hive.lifecycle import claim

    project = Project.open(args["repo"])
    won, lost, n = [], 0, 0
    wait_go(args)
    while time.time() < args["end"]:
        # every claimer wakes on the same tick: they race for the same issue
        time.sleep(TICK - (time.time() % TICK))
        project.update_index()
        head = project.index.ready(limit=1)
        if not head:
            continue
        n += 1
        agent = f"{args['name']}-{n}"
        if claim(project, head[0].id, agent):
            won.append([head[0].id, agent])
        else:
            lost += 1
    return {"won": won, "lost": lost}


def cli(args: dict) -> dict:
    rng = random.Random(args["name"])
    labels, priorities, failures = [], [], []
    wait_go(args)
    n = 0
    while time.time() < args["end"]:
        n += 1
        if n % 2:
            issue, label = rng.choice(args["ids"]), f"{args['name']}-{n}"
            argv = ["update", issue, "--add-label", label]
        else:
            issue, priority = rng.choice(args["own"]), rng.randint(0, 4)
            argv = ["update", issue, "--priority", str(priority)]
        proc = subprocess.run([sys.executable, "-m", "hive", *argv], cwd=args["repo"], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0:
            failures.append([argv, proc.returncode, proc.stderr.strip()[-300:]])
        elif n % 2:
            labels.append([issue, label])
        else:
            priorities.append([issue, priority])
    return {"labels": labels, "priorities": priorities, "failures": failures}


TITLE = re.compile(r'^title = .*$', re.MULTILINE)


def editor(args: dict) -> dict:
    from hive.project import Project

    rng = random.Random(args["name"])
    project = Project.open(args["repo"])
    checkout = Path(args["repo"]) / ".hive" / "issues"
    titles = []
    wait_go(args)
    n = 0
    while time.time() < args["end"]:
        n += 1
        issue = rng.choice(args["own"])
        title = f"{args['name']} save {n}"
        path = checkout / f"{issue}.md"
        tmp = checkout / f".{issue}.md.swp"
        while True:
            original = path.read_text(encoding="utf-8")
            time.sleep(rng.uniform(0, 0.05))                    # "typing"
            tmp.write_text(TITLE.sub(f'title = "{title}"', original, count=1), encoding="utf-8")
            if path.read_text(encoding="utf-8") == original:    # the editor's "changed on disk?"
                os.replace(tmp, path)
                break
        landed = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            data = project.store.snapshot().read(f"issues/{issue}.md") or b""
            if f'title = "{title}"'.encode() in data:
                landed = True
                break
            time.sleep(0.1)
        titles.append([issue, title, landed])
    return {"titles": titles}


def remote(args: dict) -> dict:
    from hive.project import Project
    from hive.remote import Remote
    from hive import issues

    rng = random.Random(args["name"])
    project = Project.open(args["clone"])
    labels, errors = [], []
    wait_go(args)
    n = 0
    while time.time() < args["end"]:
        n += 1
        issue, label = rng.choice(args["ids"]), f"{args['name']}-{n}"
        project.sync(warn=False)
        issues.update(project, issue, lambda current, label=label: {"labels": [*current.labels, label]},
                      summary=f"label {issue} {label}")
        labels.append([issue, label])
        if n % 4 == 0:
            try:
                Remote(project, "origin").sync()
            except Exception as exc:  # noqa: BLE001 - a sync that loses a race is tried again later
                errors.append(repr(exc)[:300])
        time.sleep(rng.uniform(0.1, 0.3))
    synced = False
    for _ in range(20):
        try:
            report = Remote(project, "origin").sync()
            if not report.offline:
                synced = True
                break
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc)[:300])
        time.sleep(0.2)
    return {"labels": labels, "synced": synced, "errors": errors}


def syncer(args: dict) -> dict:
    codes = []
    wait_go(args)
    while time.time() < args["end"]:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "hive", "sync", "origin"], cwd=args["repo"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        codes.append([proc.returncode, proc.stderr.strip()[-300:], round(time.monotonic() - started, 2)])
        time.sleep(0.2)
    return {"codes": codes}


def main() -> int:
    role, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        result = globals()[role](args)
    except Exception:  # noqa: BLE001 - reported to the test
        result = {"crashed": traceback.format_exc()}
    Path(args["out"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
