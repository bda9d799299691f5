"""What earlier deliveries of a run left behind, for the delivery that runs it now.

A run request may be delivered up to MAX_DELIVERIES times (its runner died, stopped, or
lost NATS mid-run). A later delivery does not start the run afresh:

- its deadline counts from the run's FIRST start, not from this delivery
  (`PriorState.first_started_at`);
- when an earlier delivery's replay failed, this one goes on with the full LLM run it
  had fallen back to (`PriorState.failed_replay`): replaying again would redo the
  executor's actions and count the same failure twice;
- what earlier attempts' model calls cost is part of the run's cost (`spent_before`);
- when the deadline has already passed, this delivery runs nothing and keeps the
  earlier attempts' transcript (execution.py reads it back from the run store).

`PriorDeliveries.load` reads the run's events once, when the delivery starts, for the
first two. The spend is read only when the delivery ends (the llm service stamps a usage
event when its call returns, so a dead attempt's last call may still be landing as the
next delivery starts), or when the run is ended abandoned. A read that fails leaves that
part unknown, never the run unrunnable: the defaults are those of a first delivery.
`prior_state` reads the events themselves, with no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

from contracts import subjects as s
from contracts.llm import UsageEvent
from contracts.runs import ReplayOutcome, RunEvent, RunRequest
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.logs import get_logger
from services.kernel.replay_read import read_all
from services.kernel.run_store import read_run_event
from services.runner.accounting import Ledger, spent_before

log = get_logger("rote.runner")


def elapsed_since(first_started_at: datetime | None, now: datetime) -> float:
    """Seconds since the run first started (0 if it never did). The first start may be
    stamped by another runner host whose clock is ahead: a start "in the future" counts
    as just now, never as extra time beyond the deadline."""
    if first_started_at is None:
        return 0.0
    return max(0.0, (now - first_started_at).total_seconds())


@dataclass(frozen=True)
class PriorState:
    """What the run's events say earlier deliveries did (nothing, for a first one)."""

    # When the run first started; None if it never did (an earlier delivery broke
    # before starting it) or that is unknown.
    first_started_at: datetime | None = None
    # The replay an earlier delivery ran and saw fail, with the delivery it ran in.
    failed_replay: ReplayOutcome | None = None

    def elapsed_s(self, now: datetime) -> float:
        """How much of the run's deadline earlier deliveries used, as of `now`."""
        return elapsed_since(self.first_started_at, now)


def prior_state(request: RunRequest, events: list[tuple[str, bytes]]) -> PriorState:
    """The prior state in a run's events (subject, data; in stream order)."""
    started = s.run_event(request.task_id, request.run_id, "started")
    starts = []
    last_failed: tuple[str, bytes] | None = None
    for subject, data in events:
        if subject == started:
            try:
                starts.append(decode(data, RunEvent).at)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue  # not a run event rote wrote: the others still say when
        elif subject.rsplit(".", 1)[-1] == "replay_failed":
            last_failed = (subject, data)
    return PriorState(
        first_started_at=min(starts, default=None), failed_replay=_failed_replay(last_failed)
    )


def _failed_replay(last: tuple[str, bytes] | None) -> ReplayOutcome | None:
    """The replay the run's last `replay_failed` event reports, if it is readable."""
    if last is None:
        return None
    earlier = read_run_event(*last)
    if earlier is None:
        return None
    replay = earlier.replay
    if replay is None:
        return None
    return msgspec.structs.replace(replay, attempt=replay.attempt or earlier.attempt)


class PriorDeliveries:
    """Reads what earlier deliveries of a run left on the bus: its events and the llm
    service's usage events."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def load(self, request: RunRequest, attempt: int) -> PriorState:
        """The run's prior state, from one read of its events; a first delivery (no
        earlier one to look for) reads nothing."""
        if attempt <= 1:
            return PriorState()
        try:
            msgs = await read_all(
                self.bus.js, s.STREAM_RUNS, s.run_events_of(run_id=request.run_id)
            )
        except Exception as exc:
            # Better a run that may overrun, or replay again, than one that cannot run.
            log.warning("earlier_deliveries_unknown", error=str(exc))
            return PriorState()
        return prior_state(request, [(m.subject, m.data or b"") for m in msgs])

    async def spent_before(self, run_id: str, before: datetime) -> Ledger:
        """The run's model spend before `before`, as the llm service's usage events say
        (empty if they cannot be read: the run's ending matters more)."""
        try:
            msgs = await read_all(self.bus.js, s.STREAM_ACTIVITY, s.llm_event(run_id, "usage"))
            return spent_before((decode(m.data, UsageEvent) for m in msgs), before)
        except Exception as exc:
            log.warning("earlier_spend_unknown", error=str(exc))
            return Ledger()
