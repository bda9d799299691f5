"""Which due runs go out now: one run in flight per task, at most `max_concurrent` in
flight overall, and nothing while the day's spend is at or over the budget.

Candidates are due runs of tasks with nothing in flight (the caller guarantees the
per-task rule by only offering such tasks). Over budget, every candidate is skipped with
the reason (a skip consumes its schedule slot, or holds a `once` or a condition's checks
until the next UTC day, so it is reported once, not every tick or check).
Otherwise the earliest due go first, up to the free slots; the rest wait for a slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from contracts.runs import RunOrigin
from contracts.tasks import Trigger
from services.scheduler.budget import over_budget, skip_reason


@dataclass(frozen=True)
class Candidate:
    task_id: str
    due_at: datetime
    origin: RunOrigin
    run_id: str | None = None  # set for runs someone asked for (they already have an id)
    slot: datetime | None = None  # the schedule slot a scheduled run uses up
    # The trigger a scheduled run fell due under (Task.trigger_in_force): due under one
    # changed since (an update beside the tick), it does not go out under the new one.
    due_under: tuple[datetime, Trigger] | None = None


@dataclass(frozen=True)
class Plan:
    dispatch: list[Candidate] = field(default_factory=list)
    skip: list[tuple[Candidate, str]] = field(default_factory=list)
    waiting: list[Candidate] = field(default_factory=list)


def free_slots(in_flight: int, max_concurrent: int) -> int:
    return max(0, max_concurrent - in_flight)


def plan(
    candidates: list[Candidate],
    *,
    in_flight: int,
    max_concurrent: int,
    spent_today_usd: float,
    budget_usd: float | None,
    day: date,
) -> Plan:
    if over_budget(spent_today_usd, budget_usd):
        assert budget_usd is not None
        reason = skip_reason(spent_today_usd, budget_usd, day)
        return Plan(skip=[(c, reason) for c in candidates])
    ordered = sorted(candidates, key=lambda c: (c.due_at, c.task_id))
    slots = free_slots(in_flight, max_concurrent)
    return Plan(dispatch=ordered[:slots], waiting=ordered[slots:])
