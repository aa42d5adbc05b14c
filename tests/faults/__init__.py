"""Fault injection: the product under crashes, races, bad input, misbehaving agents and hostile state.

One file per scenario (see docs/RELIABILITY.md); `helpers.py` holds what they share. Every test is
bounded by pytest-timeout; the long ones are marked `slow` (CI runs them too). Sizes come from
`FAULTS_*` environment variables so that a bigger local run needs no code change.
"""
