"""Tokens and cost per model over a run, summed from the usage the llm service returned."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from contracts.llm import CompleteReply, Usage, UsageEvent
from contracts.runs import ModelTokens


class Ledger:
    def __init__(self) -> None:
        self.by_model: dict[str, ModelTokens] = {}

    def add(self, reply: CompleteReply) -> None:
        self.add_usage(reply.model, reply.usage, reply.cost_usd)

    def add_usage(self, model: str, usage: Usage, cost_usd: float) -> None:
        tokens = self.by_model.setdefault(model, ModelTokens())
        tokens.input_tokens += usage.input_tokens
        tokens.output_tokens += usage.output_tokens
        tokens.cache_write_tokens += usage.cache_write_tokens
        tokens.cache_read_tokens += usage.cache_read_tokens
        tokens.cost_usd += cost_usd
        tokens.calls += 1

    def merge(self, other: Ledger) -> None:
        for model, theirs in other.by_model.items():
            mine = self.by_model.setdefault(model, ModelTokens())
            mine.input_tokens += theirs.input_tokens
            mine.output_tokens += theirs.output_tokens
            mine.cache_write_tokens += theirs.cache_write_tokens
            mine.cache_read_tokens += theirs.cache_read_tokens
            mine.cost_usd += theirs.cost_usd
            mine.calls += theirs.calls

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.by_model.values())

    def snapshot(self) -> dict[str, ModelTokens]:
        return {
            model: ModelTokens(
                input_tokens=t.input_tokens,
                output_tokens=t.output_tokens,
                cache_write_tokens=t.cache_write_tokens,
                cache_read_tokens=t.cache_read_tokens,
                cost_usd=round(t.cost_usd, 8),
                calls=t.calls,
            )
            for model, t in self.by_model.items()
        }


def spent_before(events: Iterable[UsageEvent], before: datetime) -> Ledger:
    """What a run's model calls made before `before` cost, from the llm service's usage
    events: an attempt whose runner died never reported its calls, yet they were billed,
    and the run's cost (what the daily budget sums) must include them."""
    ledger = Ledger()
    for event in events:
        if event.at < before:
            ledger.add_usage(event.model, event.usage, event.cost_usd)
    return ledger
