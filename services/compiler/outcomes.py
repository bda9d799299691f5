"""What a run event tells the compiler about an executor's health: the replay outcome
it carries. (The cost of a full run, which replays are measured against, is
services/executor/cost.py.) Pure."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.runs import HealedStep, ModelTokens, RunEvent, Verification


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
    # The check of the replay's answer (None: it broke before one, or an older runner).
    verification: Verification | None = None
    # The steps the runner repaired in place (healed.py records a version with them).
    heals: tuple[HealedStep, ...] = ()


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
        verification=replay.verification,
        heals=tuple(replay.healed_steps),
    )
