"""Concurrent writers: 16 processes change `hive/state` at once, for a bounded time.

    4 claimers   `hive.lifecycle.claim` in-process, all on the same ticks, for the head of the ready
                 queue — so they really race for the same issue
    4 CLI        `git hive update --add-label` on any issue, `--priority` on issues of their own
    4 editors    save `.hive/issues/<id>.md` with a new title like an editor does (temp file,
                 "changed on disk?" check, rename), on issues of their own — while `git hive
                 watch` (1 process) runs and commits the saves
    2 remote     in a second clone: add labels and `git hive sync` to a bare remote
    1 syncer     `git hive sync origin` in a loop here: the remote's commits are merged into the
                 local `hive/state` while everything else writes to it (a `git pull`)

Exact checks, made on this repository's `hive/state` after a last sync: every label any writer
added (and was told succeeded) is there; every issue's priority is the last one its CLI writer set;
every editor save reached the branch and each issue's title is the last one its editor saved
(titles and priorities have a single writer each, so "the last" is well defined); every claim that
returned True is the only `claimed` commit of its issue, with that agent, and the issue is still
held by it; no claim returned True twice for an issue; `double_claims()` is empty. No CLI call fails;
a sync may only fail by losing all its bounded push rounds to the other clone ("it kept moving").

FAULTS_WRITERS_SECONDS (20) sets the duration; the number of issues grows with it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from .helpers import bulk_issues, double_claims, env_float, publish_to_origin

SECONDS = env_float("FAULTS_WRITERS_SECONDS", 20)
WRITERS = Path(__file__).with_name("writers.py")


@pytest.mark.slow
@pytest.mark.timeout(int(SECONDS * 4 + 180))
def test_sixteen_writers_lose_no_update_and_claim_nothing_twice(repo: Path, project, tmp_path: Path, git, hive,
                                                               state_log):
    from hive.project import Project

    # an issue per claim tick and then some, so that claims go on for the whole run
    ids = bulk_issues(project, [{"title": f"shared {n}"} for n in range(int(SECONDS / 0.25) + 20)])
    remote = publish_to_origin(git, hive, repo, tmp_path / "origin.git")
    clone = tmp_path / "clone"
    git("clone", "-q", str(remote), str(clone))
    hive("init", cwd=clone)

    go, end = tmp_path / "go", time.time() + SECONDS + 3   # + start-up of 16 interpreters
    editor_ids = [ids[n::4] for n in range(4)]
    cli_ids = [ids[n::4] for n in range(4)]
    roles = ([("claimer", {"name": f"c{n}"}) for n in range(4)]
             + [("cli", {"name": f"u{n}", "ids": ids, "own": cli_ids[n]}) for n in range(4)]
             + [("editor", {"name": f"e{n}", "own": editor_ids[n]}) for n in range(4)]
             + [("remote", {"name": f"r{n}", "ids": ids, "clone": str(clone)}) for n in range(2)]
             + [("syncer", {"name": "s0"})])
    watcher = subprocess.Popen([sys.executable, "-m", "hive", "watch"], cwd=repo, stdin=subprocess.DEVNULL,
                               stdout=open(tmp_path / "watch.out", "wb"), stderr=open(tmp_path / "watch.err", "wb"))
    procs = []
    try:
        for n, (role, args) in enumerate(roles):
            args.update(repo=str(repo), go=str(go), end=end, out=str(tmp_path / f"{n:02}-{role}.json"))
            procs.append((role, args, subprocess.Popen([sys.executable, str(WRITERS), role, json.dumps(args)],
                                                       cwd=repo, stdin=subprocess.DEVNULL)))
        go.touch()
        for _, _, proc in procs:
            proc.wait(SECONDS * 3 + 120)
    finally:
        for _, _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.wait(15)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()

    results = {}
    for role, args, _ in procs:
        result = json.loads(Path(args["out"]).read_text())
        assert "crashed" not in result, f"{args['name']}: {result.get('crashed')}"
        results[args["name"]] = result
    hive("sync", "origin", cwd=repo)      # the remote writers' last labels
    hive("list", cwd=repo)                # absorbs anything the watcher had not committed yet
    final = Project.open(repo)
    final.sync(warn=False)
    now = {i: final.index.get(i) for i in ids}

    # the writers did write, and did race
    wins = [tuple(w) for n in range(4) for w in results[f"c{n}"]["won"]]
    losses = sum(results[f"c{n}"]["lost"] for n in range(4))
    saves = [t for n in range(4) for t in results[f"e{n}"]["titles"]]
    print(f"\n{len(wins)} claims won, {losses} lost; "
          f"{sum(len(r['labels']) + len(r['priorities']) for r in (results[f'u{n}'] for n in range(4)))} CLI updates; "
          f"{len(saves)} editor saves; "
          f"{sum(len(results[f'r{n}']['labels']) for n in range(2))} remote labels; "
          f"{len(results['s0']['codes'])} syncs; {len(state_log(repo))} state commits")
    assert wins and losses and saves

    # CLI updates: none failed, no label lost, each priority the last one set
    assert [f for n in range(4) for f in results[f"u{n}"]["failures"]] == []
    missing = [(i, label) for n in range(4) for i, label in results[f"u{n}"]["labels"]
               if label not in now[i].labels]
    assert missing == []
    for n in range(4):
        last = dict((i, p) for i, p in results[f"u{n}"]["priorities"])
        assert {i: (now[i].priority, p) for i, p in last.items() if now[i].priority != p} == {}
    # remote labels, pulled in by `git hive sync`
    for n in range(2):
        assert results[f"r{n}"]["synced"], results[f"r{n}"]["errors"]
        missing = [(i, label) for i, label in results[f"r{n}"]["labels"] if label not in now[i].labels]
        assert missing == []
    # a sync may lose every one of its bounded push rounds to the other clone's pushes; it then
    # fails honestly (exit 1, one line) and the next one catches up — but never anything else
    syncs = results["s0"]["codes"]
    assert [(c, e) for c, e, _ in syncs if c != 0 and "it kept moving" not in e] == [], syncs
    assert any(c == 0 for c, *_ in syncs), syncs
    # editor saves: all committed; each issue's title the last save of its editor
    assert [s for s in saves if not s[2]] == []
    last_title = {i: title for i, title, _ in saves}
    assert {i: (now[i].title, t) for i, t in last_title.items() if now[i].title != t} == {}

    # claims: each won once, the history agrees, and the issue is still held by its winner
    assert [i for i, count in Counter(i for i, _ in wins).items() if count > 1] == []
    claims = [(c.issue, c.trailers.get("Hive-Agent")) for c in state_log(repo) if c.event == "claimed"]
    assert sorted(claims) == sorted(wins)
    assert {i: (now[i].status, now[i].assignee, a) for i, a in wins
            if (now[i].status, now[i].assignee) != ("in_progress", a)} == {}
    unclaimed = set(ids) - {i for i, _ in wins}
    assert {i: now[i].status for i in unclaimed if (now[i].status, now[i].assignee) != ("open", "")} == {}
    assert double_claims(repo) == []
