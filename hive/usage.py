"""What an agent's work costs, as the providers bill it: one value type, at the bottom of the
layers, so that counting it (the runtime's budgets, the run's caps) loads no backend."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Usage:
    """Tokens and money as the provider bills them. Input is split three ways, because the
    providers price them apart: `input_tokens` is uncached input only (OpenAI's `input_tokens`
    minus its `cached_tokens`; Anthropic's `input_tokens`), `cache_write_tokens` input written to
    the prompt cache, `cache_read_tokens` input read from it (cheap: ~10% of the input price)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    @property
    def counted_tokens(self) -> int:
        """What `max_tokens_per_issue` counts: uncached input + cache writes + output."""
        return self.input_tokens + self.cache_write_tokens + self.output_tokens

    @property
    def total_tokens(self) -> int:
        """Every token, cache reads included."""
        return self.counted_tokens + self.cache_read_tokens

    def plus(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cost_usd + other.cost_usd, self.cache_write_tokens + other.cache_write_tokens,
                     self.cache_read_tokens + other.cache_read_tokens)

    def growth_since(self, earlier: "Usage") -> "Usage":
        """What these totals added to `earlier` ones, per field, never negative."""
        return Usage(max(0, self.input_tokens - earlier.input_tokens),
                     max(0, self.output_tokens - earlier.output_tokens),
                     max(0.0, self.cost_usd - earlier.cost_usd),
                     max(0, self.cache_write_tokens - earlier.cache_write_tokens),
                     max(0, self.cache_read_tokens - earlier.cache_read_tokens))
