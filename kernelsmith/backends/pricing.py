"""Approximate cost of a model call from its token counts.

The prices are the providers' public list prices in USD per million tokens as we last
read them; they change, and discounts (batch, committed use, long-context surcharges)
are ignored, so treat the result as an estimate. Unknown names (local models served by
vLLM, SGLang or Ollama, and anything newer than this table) cost None.
"""

from __future__ import annotations

from typing import NamedTuple

from kernelsmith.backends.base import Usage


class Price(NamedTuple):
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


# Matched by the longest prefix of the model name, so dated ids ("claude-sonnet-4-5-20250929")
# and later point releases of a family find their family's entry. Anthropic cache writes are
# the 5-minute ones (1.25x input); OpenAI caches automatically and charges no write premium.
PRICES: dict[str, Price] = {
    # Anthropic
    "claude-opus": Price(5.0, 25.0, 0.50, 6.25),  # Opus 4.5 and later
    "claude-opus-4-0": Price(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4-1": Price(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4-2": Price(15.0, 75.0, 1.50, 18.75),  # claude-opus-4-2025xxxx (Opus 4.0)
    "claude-3-opus": Price(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-5-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku": Price(1.0, 5.0, 0.10, 1.25),  # Haiku 4.5 and later
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.30),
    # OpenAI
    "gpt-5": Price(1.25, 10.0, 0.125, 1.25),
    "gpt-5-mini": Price(0.25, 2.0, 0.025, 0.25),
    "gpt-5-nano": Price(0.05, 0.40, 0.005, 0.05),
    "gpt-4.1": Price(2.0, 8.0, 0.50, 2.0),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.40),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.10),
    "gpt-4o": Price(2.50, 10.0, 1.25, 2.50),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.15),
    "o1": Price(15.0, 60.0, 7.50, 15.0),
    "o1-mini": Price(1.10, 4.40, 0.55, 1.10),
    "o3": Price(2.0, 8.0, 0.50, 2.0),
    "o3-mini": Price(1.10, 4.40, 0.55, 1.10),
    "o3-pro": Price(20.0, 80.0, 20.0, 20.0),
    "o4-mini": Price(1.10, 4.40, 0.275, 1.10),
}


def price_of(model: str) -> Price | None:
    """The table entry with the longest prefix of `model`, or None.

    A routing prefix such as "anthropic/" (OpenRouter-style names) is ignored.
    """
    name = model.lower().rsplit("/", 1)[-1]
    matches = [key for key in PRICES if name.startswith(key)]
    return PRICES[max(matches, key=len)] if matches else None


def cost_usd(model: str, usage: Usage) -> float | None:
    """Estimated USD for one call, or None when the model is not in the table.

    usage.input_tokens must exclude the cached tokens (the backends report it that way).
    """
    price = price_of(model)
    if price is None:
        return None
    total = (usage.input_tokens * price.input + usage.output_tokens * price.output
             + usage.cache_read_tokens * price.cache_read + usage.cache_write_tokens * price.cache_write)
    return total / 1e6
