"""What a run spent and its caps (`max_tokens_per_run`, `max_cost_usd_per_run`)."""

from __future__ import annotations

from typing import Callable

from hive import lifecycle
from hive.backends.base import Usage
from hive.config import Config


class RunSpend:
    """The workers' spending in this run; once over a cap, no new agent starts (`capped`)."""

    def __init__(self, config: Config, log: Callable[[str], None]):
        self.config = config
        self.log = log
        self.usage = Usage()
        self.capped = False

    @property
    def tokens(self) -> int:
        """Tokens as max_tokens_per_issue counts them."""
        return self.usage.counted_tokens

    def add(self, delta: Usage) -> None:
        self.usage = self.usage.plus(delta)
        cap, cost_cap = self.config.max_tokens_per_run, self.config.max_cost_usd_per_run
        over = ((cap and self.tokens > cap and f"{self.tokens:,} > max_tokens_per_run {cap:,}")
                or (cost_cap and self.usage.cost_usd > cost_cap
                    and f"${self.usage.cost_usd:.4f} > max_cost_usd_per_run ${cost_cap:.2f}"))
        if over and not self.capped:
            self.capped = True
            self.log(f"budget of this run reached ({over}; {lifecycle.usage_figures(self.usage)}): no new agents")
