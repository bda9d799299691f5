"""A task's rules, as pure functions over its state and events (task_events.py): the
`decide_*` functions turn a command and the state into the events to record (none when
nothing changes), `apply` folds one event into the state. The Task aggregate (task.py)
runs them; times come in as arguments (`at`), so a controllable clock decides them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from contracts.runs import RunOrigin, RunStatus
from contracts.tasks import ConditionTrigger, OnceTrigger, TaskSpec, TaskStatus, Trigger, UpdateTask
from services.kernel.errors import ServiceError
from services.kernel.pricing import PriceTable
from services.scheduler import failures
from services.scheduler.spec import SPEC_FIELDS, checked_spec, checked_trigger
from services.scheduler.task_events import (
    DayOpened,
    Defined,
    Deleted,
    KeyApplied,
    Paused,
    Redefined,
    Resumed,
    RunDispatched,
    RunFinished,
    RunOutcome,
    RunRequested,
    RunSkipped,
    RunStarted,
    TaskEvent,
    UntrackedRun,
    Updated,
)
from services.scheduler.triggers import TriggerState

# Origins that consume a schedule slot (a manual run leaves the schedule alone).
SCHEDULED_ORIGINS = ("schedule", "catch_up", "condition")
# How many finished run ids a task remembers, to recognise an outcome seen twice.
RECENT_RUNS = 32
# A run given up on; its real outcome, should it come after all, is still kept.
ABANDONED = "abandoned"
# How many intake keys a task remembers, to apply a command that comes twice (redelivered,
# or stored again past JetStream's duplicate window) only once.
RECENT_KEYS = 256

# The trigger a scheduled run fell due under, and since when (TaskState.trigger_in_force).
DueUnder = tuple[datetime, Trigger]


# --- state -------------------------------------------------------------------------------


class InFlight(msgspec.Struct, kw_only=True):
    """The run sent out and not yet finished."""

    run_id: str
    origin: RunOrigin
    dispatched_at: datetime
    started_at: datetime | None = None
    deadline_s: float
    # The delivery attempt a runner last said `started` of (0: none yet).
    attempt: int = 0


class PendingRun(msgspec.Struct, kw_only=True):
    """A run asked for, waiting to go out."""

    run_id: str
    origin: RunOrigin
    at: datetime


class TaskState(msgspec.Struct, kw_only=True):
    task_id: str
    created_at: datetime
    spec: TaskSpec
    status: TaskStatus = "active"
    status_reason: str | None = None
    updated_at: datetime
    trigger_set_at: datetime
    resumed_at: datetime | None = None
    last_fired_at: datetime | None = None
    # The schedule slot the last scheduled run used up (its due time, or the latest of
    # the slots it collapsed): the next one follows it, not the send-out time.
    last_slot: datetime | None = None
    # A `once` skipped for the budget runs from then on; a condition checks again.
    deferred_to: datetime | None = None
    pending: PendingRun | None = None
    in_flight: InFlight | None = None
    consecutive_failures: int = 0
    runs_dispatched: int = 0
    total_cost_usd: float = 0.0
    # Recently finished run ids -> their status ("abandoned": given up on).
    recent: dict[str, str] = {}
    last_run_id: str | None = None
    last_run_status: RunStatus | None = None
    intake_keys: list[str] = []

    @property
    def deleted(self) -> bool:
        return self.status == "deleted"

    def trigger_state(self, last_checked: datetime | None = None) -> TriggerState:
        return TriggerState(
            set_at=self.trigger_set_at,
            resumed_at=self.resumed_at,
            last_fired=self.last_fired_at,
            last_checked=last_checked,
            last_slot=self.last_slot,
            deferred_to=self.deferred_to,
        )

    def basis(self) -> tuple[object, ...]:
        """What a condition check's result stands on: the task's definition and status.
        An update, pause, resume, delete or redefinition changes it; runs and intake
        keys do not (a create or update that changed nothing leaves it as it was)."""
        return (self.status, self.spec, self.updated_at, self.resumed_at)

    def in_flight_since(self) -> datetime | None:
        """When the run in flight was last heard of (dispatched, or started)."""
        if self.in_flight is None:
            return None
        return self.in_flight.started_at or self.in_flight.dispatched_at

    def trigger_in_force(self) -> DueUnder:
        """The trigger as it is now, and since when: what a due run fell due under."""
        return self.trigger_set_at, self.spec.trigger

    def applied(self, key: str) -> bool:
        """Whether the intake command of this idempotency key was applied already."""
        return key in self.intake_keys

    def has_run(self, run_id: str) -> bool:
        """Whether the run id names a run of this task: pending, in flight or recent."""
        return self.pending_run(run_id) or self.flying(run_id) or run_id in self.recent

    def pending_run(self, run_id: str | None) -> bool:
        return self.pending is not None and self.pending.run_id == run_id

    def flying(self, run_id: str) -> bool:
        return self.in_flight is not None and self.in_flight.run_id == run_id


def start(event: Defined) -> TaskState:
    """A task as its Defined event leaves it."""
    return TaskState(
        task_id=event.task_id,
        created_at=event.at,
        spec=event.spec,
        updated_at=event.at,
        trigger_set_at=event.at,
    )


# --- apply: an event into the state ------------------------------------------------------


def apply(state: TaskState, event: TaskEvent) -> None:
    """Fold one event into the state (in place)."""
    match event:
        case Redefined():
            _start_over(state, event.spec, event.at)
        case Updated():
            if "trigger" in event.changed:
                state.trigger_set_at = event.at
                state.deferred_to = None
            state.spec, state.updated_at = event.spec, event.at
            _lift_condition_wait(state)
        case Paused():
            state.status, state.status_reason = "paused", event.reason
            state.updated_at = event.at
        case Resumed():
            state.status, state.status_reason = "active", None
            state.resumed_at = state.updated_at = event.at
            state.consecutive_failures = 0
            _lift_condition_wait(state)
        case Deleted():
            state.status, state.status_reason = "deleted", event.reason
            state.pending, state.updated_at = None, event.at
        case RunRequested():
            state.pending = PendingRun(run_id=event.run_id, origin=event.origin, at=event.at)
        case RunDispatched():
            _dispatched(state, event)
        case RunStarted():
            assert state.in_flight is not None
            state.in_flight.started_at, state.in_flight.attempt = event.at, event.attempt
            state.last_run_status = "running"
        case RunFinished():
            _finished(state, event)
        case RunSkipped():
            if event.run_id is not None and state.pending_run(event.run_id):
                state.pending = None
            if event.deferred_to is not None:
                state.deferred_to = event.deferred_to
            elif event.origin in SCHEDULED_ORIGINS and event.origin != "condition":
                _slot_used(state, event.at, event.slot)
        case KeyApplied():
            state.intake_keys = [*state.intake_keys, event.key][-RECENT_KEYS:]


def _start_over(state: TaskState, spec: TaskSpec, at: datetime) -> None:
    """A fresh definition, as a new task's (start): active, its trigger set now, no
    slot used, nothing pending. The history stays: created_at, the runs and their
    counts and cost, the intake keys."""
    state.spec, state.status, state.status_reason = spec, "active", None
    state.updated_at = state.trigger_set_at = at
    state.resumed_at = state.last_fired_at = state.last_slot = state.deferred_to = None
    state.pending = None
    state.consecutive_failures = 0


def _lift_condition_wait(state: TaskState) -> None:
    # A condition waiting out the budget's day checks again after an update or a
    # resume: the operator's word (a `once` keeps its deferral: it would only be
    # skipped again).
    if isinstance(state.spec.trigger, ConditionTrigger):
        state.deferred_to = None


def _dispatched(state: TaskState, event: RunDispatched) -> None:
    if state.pending_run(event.run_id):
        state.pending = None
    if event.origin in SCHEDULED_ORIGINS:
        _slot_used(state, event.at, event.slot)
    state.in_flight = InFlight(
        run_id=event.run_id,
        origin=event.origin,
        dispatched_at=event.at,
        deadline_s=event.spec.deadline_s,
    )
    state.runs_dispatched += 1
    # The run in flight is the task's last run: its status is its own, never the
    # previous run's (RunStatus, as runs.list shows it).
    state.last_run_id, state.last_run_status = event.run_id, "requested"


def _finished(state: TaskState, event: RunFinished) -> None:
    state.in_flight = None
    state.last_run_id = event.run_id
    state.last_run_status = event.status
    state.total_cost_usd += event.cost_usd
    if event.status != "failed":
        state.consecutive_failures = 0
    elif not event.infrastructure:
        state.consecutive_failures += 1
    state.recent[event.run_id] = ABANDONED if event.reason == ABANDONED else event.status
    while len(state.recent) > RECENT_RUNS:
        del state.recent[next(iter(state.recent))]


def _slot_used(state: TaskState, at: datetime, slot: datetime | None) -> None:
    state.last_fired_at, state.last_slot, state.deferred_to = at, slot, None


# --- decisions: command + state -> events to record --------------------------------------


def _must_exist(state: TaskState) -> None:
    if state.deleted:
        raise ServiceError("not_found", f"task {state.task_id!r} was deleted", field="task_id")


def decide_remember(state: TaskState, key: str) -> list[TaskEvent]:
    """Record that the intake command of this key was applied (even one that changed
    nothing: a copy arriving after later commands must not undo them)."""
    return [] if state.applied(key) else [KeyApplied(key=key)]


def decide_define_again(state: TaskState, spec: TaskSpec, at: datetime) -> list[TaskEvent]:
    """Create over a deleted task of the same id: a fresh definition, same history."""
    if not state.deleted:
        raise ServiceError(
            "conflict",
            f"task {state.task_id!r} already exists; update it, or choose another task_id",
            field="task_id",
        )
    return [Redefined(spec=spec, at=at)]


def decide_change(
    state: TaskState, command: UpdateTask, at: datetime, prices: PriceTable
) -> list[TaskEvent]:
    """Apply the fields the command sets (the event names those that changed). The
    models are checked whether or not they changed: a task stored with an unpriced one
    (before the check existed) escapes the daily budget until an edit names a priced one."""
    _must_exist(state)
    values = {name: getattr(state.spec, name) for name in SPEC_FIELDS}
    changed = []
    for name in SPEC_FIELDS:
        new = getattr(command, name)
        if name == "trigger" and new is not msgspec.UNSET and new != values[name]:
            # Compared as it would be stored: a `once` time sent again without an
            # offset is the same time, not a new one that fires again.
            new = checked_trigger(new)
        if new is not msgspec.UNSET and new != values[name]:
            values[name] = new
            changed.append(name)
    if not changed:
        return []
    # The trigger is the new one, checked above, or the stored one, checked when it
    # was set: checking that again under rules added since (a shell_exec `path`)
    # would refuse every edit of the prompt or limits until the trigger is fixed.
    spec = checked_spec(TaskSpec(**values), prices, trigger_checked=True)
    return [Updated(spec=spec, changed=changed, at=at)]


def decide_pause(state: TaskState, reason: str | None, at: datetime) -> list[TaskEvent]:
    _must_exist(state)
    if state.status == "paused":
        return []
    return _paused(state, reason, at)


def _paused(state: TaskState, reason: str | None, at: datetime) -> list[TaskEvent]:
    # A run queued before the pause must not go out after it.
    # (A run asked for while paused still goes out: that is an operator's choice.)
    by = reason or "by an operator"
    why = f"task paused before the queued run went out: {by}"
    return [*_skip_pending(state, why, at), Paused(reason=reason, at=at)]


def _skip_pending(state: TaskState, why: str, at: datetime) -> list[TaskEvent]:
    """A queued run that will never go out is skipped visibly, not dropped."""
    if state.pending is None:
        return []
    pending = state.pending
    skip = RunSkip(reason=why, origin=pending.origin, at=at, run_id=pending.run_id, queued=True)
    return decide_skip(state, skip)


def decide_resume(state: TaskState, at: datetime) -> list[TaskEvent]:
    _must_exist(state)
    return [] if state.status == "active" else [Resumed(at=at)]


def decide_delete(state: TaskState, reason: str | None, at: datetime) -> list[TaskEvent]:
    if state.deleted:
        return []
    by = reason or "by an operator"
    why = f"task deleted before the queued run went out: {by}"
    return [*_skip_pending(state, why, at), Deleted(reason=reason, at=at)]


def decide_request(
    state: TaskState, run_id: str, origin: RunOrigin, at: datetime, over_budget: str | None
) -> tuple[list[TaskEvent], tuple[str, bool]]:
    """Queue a run someone asked for (see Task.request_run); the events and the answer:
    (the run's id, queued behind another run)."""
    _must_exist(state)
    if over_budget is not None and not state.has_run(run_id):
        raise ServiceError("over_budget", over_budget)
    if state.pending is not None:
        return [], (state.pending.run_id, True)
    if run_id in state.recent or state.flying(run_id):
        return [], (run_id, False)
    return [RunRequested(run_id=run_id, origin=origin, at=at)], (
        run_id,
        state.in_flight is not None,
    )


def _still_due(
    state: TaskState, run_id: str | None, queued: bool, due_under: DueUnder | None
) -> bool:
    """Whether a run the caller chose from an earlier look at the task is still this
    task's to send or skip: a pause, a delete or a new trigger (`due_under`: the one the
    run fell due under) may have come in between."""
    if state.deleted:
        return False
    if queued:
        # Skipped meanwhile (a pause skips it): it must not go out after its skip.
        # Still queued, it goes even while paused: asking was an operator's choice.
        return state.pending_run(run_id)
    # Due under the old trigger, it would use up the new one (a `once` set for next
    # week counted as fired today); the next tick asks the new trigger.
    changed = due_under is not None and due_under != state.trigger_in_force()
    return state.status == "active" and not changed


def decide_dispatch(
    state: TaskState,
    run_id: str,
    origin: RunOrigin,
    at: datetime,
    slot: datetime | None = None,
    *,
    queued: bool = False,
    due_under: DueUnder | None = None,
    budget_left_usd: float | None = None,
) -> list[TaskEvent]:
    """Send a run out (see Task.dispatch_run); nothing when one is in flight or the run
    may no longer go."""
    if state.in_flight is not None or not _still_due(state, run_id, queued, due_under):
        return []
    return [
        RunDispatched(
            run_id=run_id,
            origin=origin,
            spec=state.spec,
            at=at,
            slot=slot,
            budget_left_usd=budget_left_usd,
        )
    ]


def decide_start(state: TaskState, run_id: str, at: datetime, attempt: int) -> list[TaskEvent]:
    """A runner started the run. A later attempt (the work was redelivered after a
    runner died) restarts the deadline clock; a repeated report changes nothing."""
    if state.in_flight is None or state.in_flight.run_id != run_id:
        return []
    if attempt <= state.in_flight.attempt:
        return []
    return [RunStarted(run_id=run_id, at=at, attempt=attempt)]


def decide_finish(
    state: TaskState, run_id: str, outcome: RunOutcome, at: datetime, reported_by: str
) -> list[TaskEvent]:
    """The outcome of the run in flight (nothing for any other run: see unrecorded)."""
    if not state.flying(run_id):
        return []
    fields = msgspec.structs.asdict(outcome)
    return [RunFinished(run_id=run_id, at=at, reported_by=reported_by, **fields)]


def unrecorded(state: TaskState, run_id: str, reason: str | None) -> str:
    """Why an outcome was not recorded: "duplicate" (recorded already) or "untracked" (not
    a run this task waits for, or the late outcome of a run it abandoned)."""
    late = state.recent.get(run_id) == ABANDONED and reason != ABANDONED
    return "duplicate" if run_id in state.recent and not late else "untracked"


def decide_pause_after(state: TaskState, finished: RunFinished) -> list[TaskEvent]:
    """max_failures failed runs in a row pause the task; a run failed by the
    infrastructure (a service could not serve it) says nothing about the task.
    Decided on the state `finished` left. A run that stopped because one of its
    actions may or may not have happened (`needs_attention`) pauses the task at once:
    the next run would face the same doubt, and a person must look first."""
    if finished.reason == "needs_attention" and state.status == "active":
        return _paused(state, f"a run needs attention: {finished.error}", finished.at)
    if (
        finished.status != "failed"
        or finished.infrastructure
        or state.status != "active"
        or not failures.should_pause(state.consecutive_failures, state.spec.max_failures)
    ):
        return []
    reason, error = finished.reason, finished.error
    last = f"{reason}: {error}" if reason and error else (reason or error)
    why = failures.pause_reason(state.consecutive_failures, state.spec.max_failures, last)
    return _paused(state, why, finished.at)


class RunSkip(msgspec.Struct, frozen=True, kw_only=True):
    """A due run that will not go out (over budget, task paused). It consumes its
    schedule slot (`slot`, as a dispatch does), or the pending request it came from
    (`queued`). Over budget (`budget_from`: when the budget allows runs again) a `once`
    is not used up but kept until then, and a condition is not checked again until then
    (nothing could go out before: one skip, not one per check) nor does its cooldown
    start: only a run that went out waits one out. `due_under`: the trigger a scheduled
    run fell due under (see _still_due)."""

    reason: str
    origin: RunOrigin
    at: datetime
    run_id: str | None = None
    slot: datetime | None = None
    budget_from: datetime | None = None
    queued: bool = False
    due_under: DueUnder | None = None


def decide_skip(state: TaskState, skip: RunSkip) -> list[TaskEvent]:
    """The skip, unless the caller's earlier look is stale: the queued run is gone, the
    task no longer active, or its trigger changed (nothing is recorded then)."""
    if not _still_due(state, skip.run_id, skip.queued, skip.due_under):
        return []
    reason, budget_from, deferred_to = skip.reason, skip.budget_from, None
    if budget_from is not None and skip.origin in SCHEDULED_ORIGINS:
        if isinstance(state.spec.trigger, OnceTrigger):
            deferred_to = budget_from
            reason = (
                f"{reason}; this once task is kept: it runs when the budget allows,"
                f" from {budget_from.isoformat()}"
            )
        elif isinstance(state.spec.trigger, ConditionTrigger):
            deferred_to = budget_from
            reason = (
                f"{reason}; the condition is checked again from"
                f" {budget_from.isoformat()} (or when the task is updated or resumed)"
            )
    skipped = RunSkipped(
        reason=reason,
        origin=skip.origin,
        at=skip.at,
        run_id=skip.run_id,
        slot=skip.slot,
        deferred_to=deferred_to,
    )
    return [skipped]


# --- untracked runs ----------------------------------------------------------------------


class UntrackedState(msgspec.Struct, kw_only=True):
    """The untracked runs of one UTC day."""

    day: str
    run_ids: list[str] = []


def start_untracked(event: DayOpened) -> UntrackedState:
    return UntrackedState(day=event.day)


def decide_untracked(
    state: UntrackedState, run_id: str, task_id: str, outcome: RunOutcome, at: datetime
) -> list[UntrackedRun]:
    if run_id in state.run_ids:
        return []
    return [UntrackedRun(run_id=run_id, task_id=task_id, outcome=outcome, at=at)]


def apply_untracked(state: UntrackedState, event: UntrackedRun) -> None:
    state.run_ids.append(event.run_id)


def outcome_of(fields: dict[str, Any]) -> RunOutcome:
    """A run's outcome from the keyword arguments callers give (tokens as ModelTokens or
    their dicts; none kept as None). A name that is not RunOutcome's is a TypeError, as
    a mistyped keyword argument is."""
    unknown = sorted(set(fields) - set(RunOutcome.__struct_fields__))
    if unknown:
        raise TypeError(f"not a field of a run's outcome: {', '.join(unknown)}")
    return msgspec.convert({**fields, "tokens": fields.get("tokens") or None}, RunOutcome)
