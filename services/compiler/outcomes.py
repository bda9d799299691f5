"""What a run event tells the compiler: a replay outcome (for an executor's health) and
the cost of a full LLM run (for what replays save). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.runs import ModelTokens, RunEvent


@dataclass(frozen=True)
class ReplayReport:
    version: int
    ok: bool
    attempt: int
    step: int | None
    reason: str | None
    tokens: int
    cost_usd: float
    cost_saved_usd: float  # the run event's, the one figure health records


def total_tokens(tokens: dict[str, ModelTokens]) -> int:
    return sum(
        t.input_tokens + t.output_tokens + t.cache_write_tokens + t.cache_read_tokens
        for t in tokens.values()
    )


def replay_report(run: RunEvent) -> ReplayReport | None:
    """The replay outcome a run event carries, if any."""
    replay = run.replay
    # A replay that failed because a service was down says nothing about the executor.
    if replay is None or (not replay.ok and replay.infrastructure):
        return None
    return ReplayReport(
        version=replay.version,
        ok=replay.ok,
        # An earlier delivery's replay, carried to the run's end: its key is that
        # delivery's, so the failure its own replay_failed event reported counts once.
        attempt=replay.attempt if replay.attempt is not None else run.attempt,
        step=replay.step,
        reason=replay.reason or (run.error if not replay.ok else None),
        tokens=total_tokens(replay.tokens),
        cost_usd=replay.cost_usd,
        cost_saved_usd=run.cost_saved_usd if replay.ok else 0.0,
    )


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
