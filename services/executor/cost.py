"""What a replay is expected to cost: tokens of the small-model calls it makes, priced
with the price table (services/kernel/pricing.py), and what a full run cost, which
replays are measured against. Pure."""

from __future__ import annotations

import math

from contracts.llm import Usage
from contracts.runs import RunEvent
from services.kernel.pricing import PriceTable, cost, default_table

# A rough, model-independent rule of thumb for English and JSON: ~4 characters a token.
CHARS_PER_TOKEN = 4
# The request's framing (roles, the system line) on top of the prompt's own text.
PROMPT_OVERHEAD_TOKENS = 50
# Room for the short preamble a model writes around a requested JSON object or answer.
OUTPUT_OVERHEAD_TOKENS = 20
# The price used when the table has no entry for the small model (a local model).
FALLBACK_MODEL = "claude-haiku-5-5"


def tokens_for(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_call(
    prompt: str, expected_output: str, model: str, table: PriceTable | None = None
) -> tuple[Usage, float]:
    """The usage and USD cost of one small-model call with this prompt and an answer
    about as long as `expected_output`."""
    table = table or default_table()
    usage = Usage(
        input_tokens=tokens_for(prompt) + PROMPT_OVERHEAD_TOKENS,
        output_tokens=tokens_for(expected_output) + OUTPUT_OVERHEAD_TOKENS,
    )
    price = table.price(table.resolve(model)) or table.price(FALLBACK_MODEL)
    return usage, (cost(price, usage) if price is not None else 0.0)


def full_run_cost(run: RunEvent) -> float | None:
    """The cost of a completed full LLM run (a fallback's failed replay and a
    redelivered run's dead attempts not included), or None when the event is not one."""
    if run.event != "completed" or run.source != "full_llm":
        return None
    if run.loop_cost_usd is not None:
        return max(0.0, round(run.loop_cost_usd, 9))
    # An event from before loop_cost_usd: its cost_usd may hold dead attempts too.
    replay_cost = run.replay.cost_usd if run.replay is not None else 0.0
    return max(0.0, round(run.cost_usd - replay_cost, 9))
