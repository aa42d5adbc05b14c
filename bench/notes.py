"""Notes that earn their place (issue 34): scripted agents whose success needs a fact a note carries.

Real daemons (`bench.pipeline.run_daemon`) on one workload: a scout issue whose scripted agent
discovers a fact and writes it as a note (`{"note": FACT}`), and dependents (they wait for the
scout) whose agents fail any turn whose prompt lacks the fact (`{"needs_fact": ...}`, see
docs/SCRIPTED.md), among `NOISE` project notes that matter to no one. Three runs, one fresh
repository each, differing only in `notes_prompt_tokens`: on (no limit: every note), off (0) and
budgeted (the default). Budgets as `ENV`: a dependent that never gets the fact escalates after its
second attempt. Figures, read from what hive recorded: the dependents finalized, their attempts
(runtime.db `attempt_log`), the tokens they spent (what the scripted agents reported — a fixed
cost per turn — plus each prompt's estimate, hive's standing instructions included: the prompts
the agents received, recorded by the scripted backend) and the notes' tokens per prompt. Then,
in the off run's repository, the escalated dependents are retried with the default budget, and
`git hive notes --effect --json` must credit the fact note: seen by the retried attempts (all
done), unseen by the first ones (all failed), same epic and labels.

It proves the plumbing and the accounting — the note is harvested, chosen, delivered, counted
and judged — not a model's behaviour: a scripted agent succeeds exactly when its prompt says the
fact. The prompt tokens notes add per issue are measured separately in-process, at 10, 100 and
1,000 notes, with the default budget and without one.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import Benchmark, Context, Result
from bench.fixtures import environment, git_hive_executable
from bench.pipeline import new_repo, run_daemon

FACT = "the build needs FROB_LEVEL=7 in the environment, or every test fails"
NEEDED = "FROB_LEVEL=7"
NOISE = 150
DEPENDENTS = 6
WORK_TOKENS = {"input": 2_000, "output": 400}   # what each turn reports beside its prompt
ENV = {"HIVE_MAX_RETRIES": "1", "HIVE_MAX_AGENT_SWITCHES": "0", "HIVE_ANOMALY_FAILURE_THRESHOLD": "1000"}
UNLIMITED = 10_000_000
PLAINLY = "scripted agents: proves the plumbing and accounting, not a model's behaviour"


def _noise(k: int) -> str:
    return (f"noise {k}: the CI image caches wheels under /var/cache/ci-{k}; nothing in this project "
            f"reads it, and no issue needs to know")


def _work(file: str) -> list[dict[str, Any]]:
    return [{"write": file, "content": "work of {issue}\n"}, {"commit": "{issue}: work"},
            {"tokens": WORK_TOKENS}, {"result": "success", "summary": f"wrote {file}"}]


def _setup(ctx: Context, name: str) -> tuple[Path, str, list[str]]:
    """A repository with the workload and its script; (root, the scout, the dependents)."""
    from hive import issues
    from hive.project import Project

    root = new_repo(ctx, name, test_command="")
    project = Project.open(root)
    try:
        epic = issues.create(project, "Build", type="epic").id
        scout = issues.create(project, "Find out how the build runs", parent=epic, labels=["build"]).id
        dependents = [issues.create(project, f"Module {k}", parent=epic, labels=["build"], depends_on=[scout]).id
                      for k in range(DEPENDENTS)]
        issues.add_notes(project, [issues.note_line(_noise(k), "context") for k in range(NOISE)],
                         file_id=issues.PROJECT_NOTES)
    finally:
        project.close()
    script = {"issues": {scout: [{"note": FACT, "category": "discovery"}, *_work("scout.txt")],
                         **{d: [{"needs_fact": NEEDED, "summary": "tests fail: something in the build is missing"},
                                *_work(f"module-{k}.txt")] for k, d in enumerate(dependents)}}}
    (root.parent / f"{name}.script.json").write_text(json.dumps(script))
    return root, scout, dependents


def _run(root: Path, budget: int) -> None:
    script = root.parent / f"{root.name}.script.json"
    run_daemon(root, 3, timeout=600, env={**ENV, "HIVE_SCRIPTED_SCRIPT": str(script),
                                          "HIVE_NOTES_PROMPT_TOKENS": str(budget)})


def _figures(root: Path, dependents: list[str]) -> dict[str, float]:
    """Finalized share, attempts and tokens per dependent, notes' tokens per prompt."""
    from hive.agents.prompts import WORKER_SYSTEM_PROMPT
    from hive.project import Project
    from hive.runtime import Runtime
    from hive.state.note_record import estimate_tokens

    project = Project.open(root)
    runtime = Runtime(project.paths)
    try:
        finalized = sum(1 for d in dependents if (issue := project.index.get(d)) and issue.status == "finalized")
        rows = runtime.db.execute("SELECT count(*), sum(notes_tokens) FROM attempt_log WHERE issue_id IN "
                                  "(SELECT value FROM json_each(?))", (json.dumps(dependents),)).fetchone()
        system = estimate_tokens(WORKER_SYSTEM_PROMPT)
        spent = 0
        for d in dependents:
            turns = [p for p in _records(project.paths.hive_dir / "scripted" / f"{d}.prompts.jsonl")
                     if p.get("role") == "worker" and not p.get("fyi")]
            spent += sum(estimate_tokens(p["text"]) + system + WORK_TOKENS["input"] + WORK_TOKENS["output"]
                         for p in turns)
    finally:
        runtime.close()
        project.close()
    attempts = rows[0] or 0
    return {"ok": 100 * finalized / len(dependents), "attempts": attempts / len(dependents),
            "tokens": spent / len(dependents), "notes_tokens": (rows[1] or 0) / max(attempts, 1)}


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _effect(root: Path, dependents: list[str]) -> dict[str, Any]:
    """Retry the escalated dependents with the default budget; `notes --effect --json`."""
    from hive.config import Config

    env = environment()
    for d in dependents:
        subprocess.run([git_hive_executable(), "retry", d], cwd=root, env=env, check=True, capture_output=True)
    _run(root, Config().notes_prompt_tokens)
    shown = subprocess.run([git_hive_executable(), "notes", "--effect", "--json"], cwd=root, env=env,
                           check=True, capture_output=True, text=True)
    return json.loads(shown.stdout)


def scripted(ctx: Context) -> list[Result]:
    from hive.config import Config

    default = Config().notes_prompt_tokens
    modes = (("on (every note)", UNLIMITED), ("off (notes_prompt_tokens 0)", 0),
             (f"budgeted (notes_prompt_tokens {default:,})", default))
    label = f"1 scout + {DEPENDENTS} dependents that need its note, {NOISE} noise notes"
    results, off_root = [], None
    for what, budget in modes:
        root, _, dependents = _setup(ctx, f"notes-{budget}")
        _run(root, budget)
        found = _figures(root, dependents)
        if budget == 0:
            off_root = (root, dependents)
        results += [
            Result(f"notes ({PLAINLY}; {label}): dependents finalized, notes {what}", [found["ok"]], unit="%"),
            Result(f"notes ({label}): attempts per dependent, notes {what}", [found["attempts"]], unit="attempts"),
            Result(f"notes ({label}): tokens per dependent, notes {what}", [found["tokens"]], unit="tokens",
                   note=f"notes' share: ~{found['notes_tokens']:,.0f} tokens per prompt (estimated)"),
        ]
    assert off_root is not None
    report = _effect(*off_root)
    fact = [n for n in report["notes"] if n["content"] == FACT]
    noise = [n for n in report["notes"] if n["content"].startswith("noise ")]
    if not fact:
        return results + [Result(f"notes --effect ({PLAINLY})", [], error="the fact note was not credited")]
    seen, unseen = fact[0]["seen"], fact[0]["unseen"]
    results.append(Result(
        f"notes --effect ({PLAINLY}): the fact note, retried attempts that got it vs first ones that did not, "
        "Δ ok", [100 * (fact[0]["delta_ok"] or 0)], unit="points",
        note=f"seen {seen['attempts']} attempts, {seen['done']} done; unseen {unseen['attempts']}, {unseen['done']} done; "
             f"{len(noise)} noise notes rode along in the same prompts and get the same Δ: notes that always "
             "travel together cannot be told apart (a reader needs the counts, and prune --harmful a minimum)"))
    return results


def overhead(ctx: Context) -> list[Result]:
    """Prompt tokens notes add to one issue's prompt, and the time to choose them, at 10-1,000 notes."""
    from hive import issues
    from hive.agents.briefing import brief
    from hive.config import Config
    from hive.project import Project

    default, results = Config().notes_prompt_tokens, []
    for count in (10, 100, 1_000):
        root = new_repo(ctx, f"notes-scale-{count}", test_command="")
        project = Project.open(root)
        try:
            others = [issues.create(project, f"Earlier work {k}", labels=[f"area-{k % 5}"]).id for k in range(10)]
            for k, other in enumerate(others):
                issues.add_notes(project, [issues.note_line(f"{_noise(n)} (from {other})", "discovery", issue=other)
                                           for n in range(k, count, len(others))], file_id=other)
            issue = issues.create(project, "New work", labels=["area-1"])
            bare = brief(project, issue, 0).prompt_tokens
            found = {}
            for budget in (default, UNLIMITED):
                times = []
                for _ in range(3 if ctx.quick else 7):
                    start = time.perf_counter()
                    briefing = brief(project, issue, budget)
                    times.append(time.perf_counter() - start)
                found[budget] = (briefing.prompt_tokens - bare, sorted(times)[len(times) // 2], len(briefing.selection.chosen))
        finally:
            project.close()
        results.append(Result(f"notes: prompt tokens notes add per issue, {count:,} notes, budget {default:,}",
                              [float(found[default][0])], unit="tokens",
                              note=f"{found[default][2]} notes chosen; prompt built in {found[default][1] * 1000:.1f} ms"))
        results.append(Result(f"notes: prompt tokens notes add per issue, {count:,} notes, no budget (every note)",
                              [float(found[UNLIMITED][0])], unit="tokens",
                              note=f"{found[UNLIMITED][2]} notes; prompt built in {found[UNLIMITED][1] * 1000:.1f} ms; "
                                   f"the prompt without notes: ~{bare:,} tokens"))
    return results


METHOD = f"""### Notes (`bench/notes.py`)

- **What it proves**: the plumbing and the accounting of notes — a note is harvested, chosen by
  relevance within `notes_prompt_tokens`, delivered, recorded per attempt and judged by
  `git hive notes --effect` — with scripted agents, not a model's behaviour: a scripted dependent
  succeeds exactly when its prompt says the fact (`needs_fact`, docs/SCRIPTED.md).
- **Workload**: a fresh repository per run; an epic with a scout issue whose agent writes the
  fact as a `discovery` note and {DEPENDENTS} dependents (label `build`, waiting for the scout)
  that need it, among {NOISE} project notes of noise (~40 tokens each). `max_retries` 1, no agent
  switch: a dependent without the fact escalates after 2 attempts. Runs: notes on (no budget),
  off (0), budgeted (the default); then the off run's escalated dependents are retried with the
  default budget and `notes --effect --json` read.
- **Tokens**: per dependent, over its worker turns: the prompt's estimate (UTF-8 bytes / 3.5,
  hive's standing instructions included) plus the fixed {WORK_TOKENS['input']:,} input and
  {WORK_TOKENS['output']} output each scripted turn reports.
- **Prompt tokens notes add**: in-process `hive.agents.briefing.brief` for a new issue in a
  repository of 10 earlier issues carrying 10, 100 or 1,000 notes between them: the prompt's
  estimate with the notes minus without, with the default budget and with none; the time is the
  median of 7 builds.
- **Why `notes_prompt_tokens` is 2,000**: a note line as hive formats it costs ~50 tokens here
  (1,000 notes: 49,970 tokens). Before issue 34 a prompt carried the 30 latest notes (~1,500
  tokens of such notes, up to ~17,000 at the 2,000-character cap of a note); 2,000 keeps about as
  many (40), now the relevant ones first, caps the worst case at 1 % of `max_tokens_per_issue`
  per prompt and under a tenth of the ~25k-token prefix an agent CLI sends with every call, and
  at 1,000 notes cuts what every note would add 25-fold. The fact a dependent needs comes from
  its dependency chain, ranked before the noise: it is in every budgeted prompt.
- **The token estimate**: UTF-8 bytes / 3.5, rounded up (`hive/state/note_record.py`), checked
  once against a Claude BPE tokenizer (the `anthropic-tokenizer` package's embedded 65k
  vocabulary, installed outside the project) on 717 paragraphs of this repository's docs,
  prompts and code (80,764 tokens): bytes / 3.5 is 5.8 % over in total (median paragraph 5.6 %
  over); bytes / 4 is 7.4 % under; words × 2.07 matches the total but one paragraph ranges from
  0.37× to 2.07× its real count. Over is the safe side for a budget.
"""


BENCHMARKS = [
    Benchmark("notes", scripted, "notes that earn their place: scripted agents that need a note, on / off / budgeted"),
    Benchmark("notes-overhead", overhead, "the prompt tokens notes add per issue at 10, 100 and 1,000 notes"),
]
