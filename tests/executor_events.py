"""Executor health as pure rules over events (services/compiler/health.py), for the
tests that drive it by hand: the clock and rules they share, and a replay decided and
applied."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.runs import Verification
from services.compiler import executor_events as ev
from services.compiler import health as h

T0 = datetime(2025, 6, 1, tzinfo=UTC)
RULES = h.Rules()


def replay(
    state: h.Health,
    run_id: str,
    version: int,
    ok: bool,
    *,
    reason: str | None = None,
    attempt: int = 1,
    verification: Verification | None = None,
) -> list[ev.HealthEvent]:
    """The events a replay of `version` decides at T0 under the default rules, applied
    to `state`."""
    events = h.decide_replay(
        state,
        run_id=run_id,
        version=version,
        ok=ok,
        at=T0,
        rules=RULES,
        attempt=attempt,
        reason=reason,
        verification=verification,
    )
    for event in events:
        h.apply(state, event)
    return events
