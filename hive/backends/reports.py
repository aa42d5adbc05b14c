"""Values from an agent's reports (token counts, costs, nested objects), made safe to use."""

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


def table(report: dict[str, Any], key: str) -> dict[str, Any]:
    """`report[key]` when it is a JSON object, else an empty one (an agent's report is not
    trusted to have the shape its protocol promises)."""
    value = report.get(key)
    return value if isinstance(value, dict) else {}
