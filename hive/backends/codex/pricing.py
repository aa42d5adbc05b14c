"""What Codex's tokens cost: Codex reports tokens, never money, so hive estimates USD.

A price table ($ per million tokens: input, output, cached input) by model slug — exact match,
else the longest known prefix, else the default. The `[codex]` table's `hive_prices` overrides or
extends it (see the package docstring).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

PRICE_KEY = "hive_prices"

# USD per million tokens: (input, output, cached input). Estimates; override with [codex.hive_prices].
DEFAULT_PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-5": (1.25, 10.0, 0.125),
    "gpt-5-mini": (0.25, 2.0, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "gpt-5-codex-mini": (0.25, 2.0, 0.025),
    "gpt-5.1-codex-mini": (0.25, 2.0, 0.025),
    "codex-mini": (1.50, 6.0, 0.375),
    "gpt-4.1": (2.0, 8.0, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    "gpt-4o": (2.50, 10.0, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "o3": (2.0, 8.0, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
}
DEFAULT_PRICE = (1.25, 10.0, 0.125)

Price = tuple[float, float, float]


def price_table(user: Any) -> dict[str, Price]:
    """The default prices with the user's `hive_prices` table over them (bad entries skipped)."""
    table = dict(DEFAULT_PRICES)
    if not isinstance(user, dict):
        if user is not None:
            log.warning("codex backend: [codex] %s must be a table of model = [input, output]", PRICE_KEY)
        return table
    for slug, value in user.items():
        try:
            numbers = [float(v) for v in value]
            if len(numbers) == 2:
                numbers.append(numbers[0] / 10)
            if len(numbers) != 3 or min(numbers) < 0:
                raise ValueError
        except (TypeError, ValueError):
            log.warning("codex backend: ignoring [codex.%s] %s = %r (want [input, output(, cached)] "
                        "in $ per million tokens)", PRICE_KEY, slug, value)
            continue
        table[str(slug)] = (numbers[0], numbers[1], numbers[2])
    return table


def price_of(table: dict[str, Price], model: str) -> Price:
    if model in table:
        return table[model]
    best = ""
    for slug in table:
        if slug != "default" and model.startswith(slug) and len(slug) > len(best):
            best = slug
    return table[best] if best else table.get("default", DEFAULT_PRICE)


def estimate_cost(price: Price, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
    price_in, price_out, price_cached = price
    cached = min(max(0, cached_tokens), max(0, input_tokens))
    return ((input_tokens - cached) * price_in + cached * price_cached
            + output_tokens * price_out) / 1_000_000
