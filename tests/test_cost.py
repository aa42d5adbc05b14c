"""`git hive cost`: the usage records on hive/state added up, hostile records skipped.

A real run (scripted workers and refinery) writes the records; the figures `cost` prints are
checked against what the scripts spent. Hand-written commits on hive/state prove the reading
rules: a worker record is its issue's budget so far (so two records of one budget add up to the
last, not to their sum), a budget starts again after a retry, a refinery record is added as it
is, and a record that is not strictly numbers and names is skipped and counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from tests.daemon_helpers import write_script

RUN_TIMEOUT = 120
FAILING_TEST = "test ! -e code.txt || ! grep -q BAD code.txt"


def run_until_idle(repo: Path, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "hive", "run", "--backend", "scripted", "--until-idle",
                           "--max-agents", "2"], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def cost_json(hive, *args: str) -> dict:
    return json.loads(hive("cost", "--json", *args).stdout)


def figures(input_tokens=0, cache_write_tokens=0, cache_read_tokens=0, output_tokens=0, cost_usd=0.0) -> dict:
    return {"input_tokens": input_tokens, "cache_write_tokens": cache_write_tokens,
            "cache_read_tokens": cache_read_tokens, "output_tokens": output_tokens, "cost_usd": cost_usd}


def test_cost_adds_up_the_workers_and_the_refinery_of_a_real_run(repo, tmp_path, new_issue, hive, state_log):
    """Attempt 1 is rejected by the refinery (failing tests), attempt 2 merges: two worker records
    of one budget (the second holds both attempts) and one refinery record."""
    worker = [
        {"write": "code.txt", "content": "BAD\n", "on_attempts": [1]},
        {"write": "code.txt", "content": "GOOD\n", "on_attempts": [2, 3]},
        {"commit": "code, attempt {attempt}"},
        {"tokens": {"input": 100, "cache_write": 20, "cache_read": 1000, "output": 10, "cost_usd": 0.01}},
        {"result": "success", "summary": "wrote code.txt"},
    ]
    refinery = [{"cd": "{worktree}"}, {"tokens": {"input": 3000, "output": 300, "cost_usd": 0.5}},
                {"result": {"status": "rejected", "summary": "code.txt must never say BAD"}}]
    other = new_issue("Write the docs", labels=["docs"])
    issue = new_issue("Write the code", labels=["code"])
    docs = [{"write": "docs.txt", "content": "docs\n"}, {"commit": "docs"},
            {"tokens": {"input": 7, "output": 3, "cost_usd": 0.002}}, {"result": "success"}]
    script = write_script(tmp_path, {"labels": {"code": worker, "docs": docs}, "roles": {"refinery": refinery}})

    run_until_idle(repo, {"HIVE_SCRIPTED_SCRIPT": str(script), "HIVE_TEST_COMMAND": FAILING_TEST})

    log = [c for c in state_log() if c.issue == issue]
    done = [c for c in log if c.event == "done"]
    assert len(done) == 2 and done[1].trailers["Hive-Input-Tokens"] == "200"      # the budget so far
    assert {c.trailers["Hive-Role"] for c in done} == {"worker"}
    assert {c.trailers["Hive-Model"] for c in done} == {"claude-sonnet-4-6"}
    [rejected] = [c for c in log if c.event == "rejected"]
    assert rejected.trailers["Hive-Role"] == "refinery" and rejected.trailers["Hive-Model"] == "claude-opus-4-6"
    assert rejected.trailers["Hive-Input-Tokens"] == "3000" and rejected.trailers["Hive-Cost-USD"] == "0.5000"

    by_issue = cost_json(hive)
    assert by_issue["total"] == figures(3207, 40, 2000, 323, 0.522)
    rows = {row["issue"]: row for row in by_issue["rows"]}
    assert rows[issue] == {"issue": issue, **figures(3200, 40, 2000, 320, 0.52), "running": False}
    assert rows[other] == {"issue": other, **figures(7, 0, 0, 3, 0.002), "running": False}
    by_role = {row["role"]: row for row in cost_json(hive, "--by", "role")["rows"]}
    assert by_role["worker"]["input_tokens"] == 207 and by_role["refinery"]["input_tokens"] == 3000
    by_model = {row["model"]: row["cost_usd"] for row in cost_json(hive, "--by", "model")["rows"]}
    assert by_model == {"claude-opus-4-6": 0.5, "claude-sonnet-4-6": 0.022}
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert [row["day"] for row in cost_json(hive, "--by", "day")["rows"]] == [today]

    text = hive("cost").stdout
    assert "Write the code" in text and "3,200" in text and "$0.5200" in text
    assert "total: input 3,207" in text


def record(git, repo: Path, issue: str, event: str, **trailers: str) -> None:
    """A commit on hive/state carrying these trailers, made by hand in the `.hive/` checkout."""
    lines = [f"Hive-Event: {event}", f"Hive-Issue: {issue}",
             *(f"{name.replace('_', '-')}: {value}" for name, value in trailers.items())]
    git("commit", "-q", "--allow-empty", "-m", f"{event} {issue}\n\n" + "\n".join(lines), cwd=repo / ".hive")


def usage(input_tokens: int, cost: str, **more: str) -> dict[str, str]:
    return {"Hive_Input_Tokens": str(input_tokens), "Hive_Cache_Write_Tokens": "0", "Hive_Cache_Read_Tokens": "0",
            "Hive_Output_Tokens": "1", "Hive_Cost_USD": cost, **more}


def test_records_are_read_by_the_rules_and_hostile_ones_are_skipped(repo, git, hive):
    a, b = "hv-aaaaaa", "hv-bbbbbb"
    record(git, repo, a, "done", **usage(100, "1.0000"))                 # old record: no role, no model
    record(git, repo, a, "escalated", **usage(130, "1.3000", Hive_Role="worker", Hive_Model="m-1"))
    record(git, repo, a, "open")                                          # a person's retry: a new budget
    record(git, repo, a, "done", **usage(50, "0.5000", Hive_Role="worker", Hive_Model="m-1"))
    record(git, repo, b, "done", **usage(100, "1.0000", Hive_Role="worker", Hive_Model="m-2"))
    record(git, repo, b, "done", **usage(40, "0.4000", Hive_Role="worker", Hive_Model="m-2"))  # lower: new budget
    record(git, repo, b, "rejected", **usage(7, "0.0700", Hive_Role="refinery", Hive_Model="m-3"))
    c = "hv-cccccc"
    record(git, repo, c, "escalated", **usage(100, "1.0000", Hive_Role="worker", Hive_Model="m-2"))
    record(git, repo, c, "lease-expired")                                 # shared mode: another budget
    record(git, repo, c, "done", **usage(120, "1.2000", Hive_Role="worker", Hive_Model="m-2"))
    hostile = [usage(10**6, "1.0", Hive_Input_Tokens="1e9"), usage(10**6, "-5"),
               usage(10**6, "1.0", Hive_Role="admin"), usage(10**6, "1.0", Hive_Model="m\x1b]52;c;x\x07"),
               usage(10**6, "nan"), usage(10**6, "1.0", Hive_Output_Tokens="")]
    for trailers in hostile:
        record(git, repo, b, "done", **trailers)
    record(git, repo, "../../etc", "done", **usage(10**6, "1.0"))

    proc = hive("cost", "--json")
    data = json.loads(proc.stdout)
    rows = {row["issue"]: row for row in data["rows"]}
    assert rows[a]["input_tokens"] == 130 + 50 and rows[a]["cost_usd"] == 1.8
    assert rows[b]["input_tokens"] == 100 + 40 + 7 and rows[b]["cost_usd"] == 1.47
    assert rows[c]["input_tokens"] == 100 + 120
    assert data["total"]["input_tokens"] == 327 + 220 and data["total"]["output_tokens"] == 5 + 2
    assert set(rows) == {a, b, c}
    warning = proc.stderr.strip()
    assert len(warning.splitlines()) == 1 and "7 usage record(s) on hive/state skipped" in warning, proc.stderr
    assert "\x1b" not in warning
    roles = {row["role"]: row["input_tokens"] for row in cost_json(hive, "--by", "role")["rows"]}
    assert roles == {"worker": 320 + 220, "refinery": 7}
    models = {row["model"]: row["input_tokens"] for row in cost_json(hive, "--by", "model")["rows"]}
    assert models == {"unknown": 100, "m-1": 80, "m-2": 140 + 220, "m-3": 7}


def test_cost_without_records(repo, hive):
    assert cost_json(hive) == {"total": figures(), "rows": []}
    assert "no usage recorded yet" in hive("cost").stdout
    bad = hive("cost", "--by", "week", check=False)
    assert bad.returncode == 2 and "week" in bad.stderr
