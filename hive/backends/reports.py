"""Numbers from an agent's reports (token counts, costs), made safe to add up."""

from __future__ import annotations

from typing import Any


def count(value: Any) -> int:
    """A token count from an agent's report: a non-negative int, 0 when absent or garbage."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def amount(value: Any) -> float:
    """A cost from an agent's report: a non-negative float, 0.0 when absent or garbage."""
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0
