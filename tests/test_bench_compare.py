"""`python -m bench.compare` reads the figures of a `python -m bench` report, whatever their unit."""

from __future__ import annotations

from bench import compare

REPORT = """\
| figure | target | median | p95 | CPU median | n | result |
|---|---|---:|---:|---:|---:|---|
| `git-hive list --json` wall, 100 issues | median ≤ 60 ms | 44 ms | 51 ms | 32 ms | 20 | pass |
| taking in 100,000 issues | median ≤ 15.00 s | 10.73 s | 10.73 s | 60 ms | 1 | pass |
| pipeline, DAG of 10 chains of 5: wall per finalized issue (60 ms = 1,000/min) — 953 finalized/min | median ≤ 60 ms | 63 ms | 74 ms | — | 3 | FAIL |
| own CPU over raw (target ≤ 1.2×) | median ≤ 1.2 × | 1.4 × | 1.9 × | — | 6 | FAIL |
| schedule, random DAGs of 20 issues: makespan over the best | — | 1.7 % | 15 % | — | 9 | info |
| touches: makespan with the rule over without | median ≤ 5.0 % | -18 % | -17 % | — | 3 | pass |
| touches: refinery hand-offs per 100 issues without the rule | — | 1,020 /100 | 1,173 /100 | — | 3 | info |
| notes: prompt tokens notes add per issue, 10 notes | — | 521 tokens | 521 tokens | — | 1 | info |
| daemon peak memory | median ≤ 150 MB | 58 MB | 58 MB | — | 1 | pass |
| unmeasured | — | — | — | — | 0 | info |
"""


def test_every_figure_of_a_report_is_read_with_its_unit_and_its_name_without_its_target():
    found = compare.medians(REPORT)
    assert found == {
        "`git-hive list --json` wall, 100 issues": (0.044, "s"),
        "taking in 100,000 issues": (10.73, "s"),
        "pipeline, DAG of 10 chains of 5: wall per finalized issue": (0.063, "s"),
        "own CPU over raw": (1.4, "×"),
        "schedule, random DAGs of 20 issues: makespan over the best": (1.7, "%"),
        "touches: makespan with the rule over without": (-18.0, "%"),
        "touches: refinery hand-offs per 100 issues without the rule": (1020.0, "/100"),
        "notes: prompt tokens notes add per issue, 10 notes": (521.0, "tokens"),
        "daemon peak memory": (58.0, "MB"),
    }
