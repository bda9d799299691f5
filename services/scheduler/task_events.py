"""The Task aggregate's events, and those of the untracked runs: one class per kind, with
typed fields. What each means for a task is task_rules.apply; how each is stored,
task.py. Values a runner reported (a run's source, its failure reason) are kept as
reported: what the contracts call them may change, and history must still read.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from contracts.runs import ModelTokens, RunOrigin, RunStatus
from contracts.tasks import TaskSpec


class Event(msgspec.Struct, kw_only=True):
    pass


class Defined(Event):
    """The task's first event."""

    task_id: str
    spec: TaskSpec
    at: datetime


class Redefined(Event):
    """Created again after a delete: a fresh definition, same history."""

    spec: TaskSpec
    at: datetime


class Updated(Event):
    spec: TaskSpec
    changed: list[str]
    at: datetime


class Paused(Event):
    reason: str | None
    at: datetime


class Resumed(Event):
    at: datetime


class Deleted(Event):
    reason: str | None
    at: datetime


class RunRequested(Event):
    """A run asked for (tasks.run), queued until the dispatch rules let it go."""

    run_id: str
    origin: RunOrigin
    at: datetime


class RunDispatched(Event):
    run_id: str
    origin: RunOrigin
    spec: TaskSpec
    at: datetime
    # The schedule slot the run uses up (see triggers.TriggerState); None for a run
    # someone asked for.
    slot: datetime | None
    # What the daily budget had left when it went out (None: no budget).
    budget_left_usd: float | None


class RunStarted(Event):
    run_id: str
    at: datetime
    attempt: int


class RunFinished(Event):
    run_id: str
    status: RunStatus  # completed | failed
    at: datetime
    cost_usd: float
    cost_saved_usd: float
    source: str | None
    executor_version: int | None
    duration_ms: int | None
    reason: str | None
    error: str | None
    reported_by: str  # runner | scheduler
    fell_back: bool
    tokens: dict[str, ModelTokens] | None
    # A service could not serve the run: it says nothing about the task.
    infrastructure: bool


class RunSkipped(Event):
    """A due run that did not go out; `run_id` only for a queued run (a slot has none)."""

    reason: str
    origin: RunOrigin
    at: datetime
    run_id: str | None
    slot: datetime | None
    # Over budget: a `once` or a condition waits until then.
    deferred_to: datetime | None


class KeyApplied(Event):
    """The intake command of this idempotency key was applied."""

    key: str


TaskEvent = (
    Defined
    | Redefined
    | Updated
    | Paused
    | Resumed
    | Deleted
    | RunRequested
    | RunDispatched
    | RunStarted
    | RunFinished
    | RunSkipped
    | KeyApplied
)


# --- untracked runs ----------------------------------------------------------------------


class RunOutcome(msgspec.Struct, kw_only=True):
    """A run's outcome as the ledger takes it (RunLedger.finished)."""

    status: RunStatus
    cost_usd: float = 0.0
    cost_saved_usd: float = 0.0
    source: str | None = None
    executor_version: int | None = None
    duration_ms: int | None = None
    reason: str | None = None
    error: str | None = None
    fell_back: bool = False
    tokens: dict[str, ModelTokens] | None = None
    infrastructure: bool = False


class DayOpened(Event):
    """The first untracked run of a UTC day (`day`: its ISO date)."""

    day: str


class UntrackedRun(Event):
    """The outcome of a run no task was waiting for."""

    run_id: str
    task_id: str
    outcome: RunOutcome
    at: datetime
