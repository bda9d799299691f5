"""The Task aggregate: a task's definition, status, and the runs it asked for.

Public methods are commands: they check the rules and, when something changes, call a
private `@event` method, whose body is how that event changes the task (the same body
runs when the task is rebuilt from its events). Times come in as arguments (`at`) so a
controllable clock decides them, not the library.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event

from contracts.runs import RunOrigin
from contracts.tasks import (
    ConditionTrigger,
    OnceTrigger,
    TaskSpec,
    Trigger,
    UpdateTask,
)
from services.kernel.errors import ServiceError
from services.scheduler import failures
from services.scheduler.ids import task_uuid, untracked_uuid
from services.scheduler.spec import SPEC_FIELDS, checked_spec, checked_trigger
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


def plain_tokens(tokens: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """A run's tokens per model (ModelTokens or their dicts) as plain dicts, the form
    stored in events; None when there are none."""
    if not tokens:
        return None
    return {model: msgspec.to_builtins(used) for model, used in tokens.items()}


class Task(Aggregate):
    @staticmethod
    def create_id(task_id: str) -> UUID:
        return task_uuid(task_id)

    @event("Defined")
    def __init__(self, task_id: str, spec: TaskSpec, at: datetime) -> None:
        self.task_id = task_id
        self.created_at = at
        self.runs_dispatched = 0
        self.total_cost_usd = 0.0
        self.in_flight: dict[str, Any] | None = None
        self.recent: dict[str, str] = {}
        self.last_run_id: str | None = None
        self.last_run_status: str | None = None
        self.intake_keys: list[str] = []
        self._start_over(spec, at)

    def _start_over(self, spec: TaskSpec, at: datetime) -> None:
        self.spec = spec
        self.status = "active"
        self.status_reason: str | None = None
        self.updated_at = at
        self.trigger_set_at = at
        self.resumed_at: datetime | None = None
        self.last_fired_at: datetime | None = None
        # The schedule slot the last scheduled run used up (its due time, or the latest
        # of the slots it collapsed): the next one follows it, not the send-out time.
        self.last_slot: datetime | None = None
        # A `once` skipped for the budget runs from then on; a condition checks again.
        self.deferred_to: datetime | None = None
        self.pending: dict[str, Any] | None = None
        self.consecutive_failures = 0

    # --- queries ---------------------------------------------------------------------

    @property
    def deleted(self) -> bool:
        return self.status == "deleted"

    def trigger_state(self, last_checked: datetime | None = None) -> TriggerState:
        return TriggerState(
            set_at=self.trigger_set_at,
            resumed_at=self.resumed_at,
            last_fired=self.last_fired_at,
            last_checked=last_checked,
            # Absent from a task rebuilt from a snapshot taken before they existed.
            last_slot=self.__dict__.get("last_slot"),
            deferred_to=self.__dict__.get("deferred_to"),
        )

    def basis(self) -> tuple[object, ...]:
        """What a condition check's result stands on: the task's definition and status.
        An update, pause, resume, delete or redefinition changes it; runs and intake
        keys do not (a create or update that changed nothing leaves it as it was)."""
        return (self.status, self.spec, self.updated_at, self.resumed_at)

    def in_flight_since(self) -> datetime | None:
        if self.in_flight is None:
            return None
        return self.in_flight.get("started_at") or self.in_flight["dispatched_at"]

    def _must_exist(self) -> None:
        if self.deleted:
            raise ServiceError("not_found", f"task {self.task_id!r} was deleted", field="task_id")

    def _keys(self) -> list[str]:
        # A task rebuilt from a snapshot taken before keys were remembered has none.
        keys: list[str] = self.__dict__.get("intake_keys", [])
        return keys

    def applied(self, key: str) -> bool:
        """Whether the intake command of this idempotency key was applied already."""
        return key in self._keys()

    # --- intake keys -----------------------------------------------------------------

    def remember(self, key: str) -> None:
        """Record that the intake command of this key was applied (even one that changed
        nothing: a copy arriving after later commands must not undo them)."""
        if not self.applied(key):
            self._key_applied(key=key)

    @event("KeyApplied")
    def _key_applied(self, key: str) -> None:
        self.intake_keys = [*self._keys(), key][-RECENT_KEYS:]

    # --- definition ------------------------------------------------------------------

    def define_again(self, spec: TaskSpec, at: datetime) -> None:
        """Create over a deleted task of the same id: a fresh definition, same history."""
        if not self.deleted:
            raise ServiceError(
                "conflict",
                f"task {self.task_id!r} already exists; update it, or choose another task_id",
                field="task_id",
            )
        self._redefined(spec=spec, at=at)

    @event("Redefined")
    def _redefined(self, spec: TaskSpec, at: datetime) -> None:
        self._start_over(spec, at)

    def change(self, command: UpdateTask, at: datetime) -> list[str]:
        """Apply the fields the command sets; return the names that changed."""
        self._must_exist()
        values = {name: getattr(self.spec, name) for name in SPEC_FIELDS}
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
        spec = checked_spec(TaskSpec(**values), trigger_checked=True)
        self._updated(spec=spec, changed=changed, at=at)
        return changed

    @event("Updated")
    def _updated(self, spec: TaskSpec, changed: list[str], at: datetime) -> None:
        if "trigger" in changed:
            self.trigger_set_at = at
            self.deferred_to = None
        self.spec = spec
        self.updated_at = at
        self._lift_condition_wait()

    def _lift_condition_wait(self) -> None:
        # A condition waiting out the budget's day checks again after an update or a
        # resume: the operator's word (a `once` keeps its deferral: it would only be
        # skipped again).
        if isinstance(self.spec.trigger, ConditionTrigger):
            self.deferred_to = None

    def pause(self, reason: str | None, at: datetime) -> bool:
        self._must_exist()
        if self.status == "paused":
            return False
        self._pause(reason, at)
        return True

    def _pause(self, reason: str | None, at: datetime) -> None:
        # A run queued before the pause must not go out after it.
        # (A run asked for while paused still goes out: that is an operator's choice.)
        by = reason or "by an operator"
        self._skip_pending(f"task paused before the queued run went out: {by}", at)
        self._paused(reason=reason, at=at)

    def _skip_pending(self, why: str, at: datetime) -> None:
        """A queued run that will never go out is skipped visibly, not dropped."""
        if self.pending is not None:
            self.skip_run(why, self.pending["origin"], at, self.pending["run_id"], queued=True)

    @event("Paused")
    def _paused(self, reason: str | None, at: datetime) -> None:
        self.status = "paused"
        self.status_reason = reason
        self.updated_at = at

    def resume(self, at: datetime) -> bool:
        self._must_exist()
        if self.status == "active":
            return False
        self._resumed(at=at)
        return True

    @event("Resumed")
    def _resumed(self, at: datetime) -> None:
        self.status = "active"
        self.status_reason = None
        self.resumed_at = at
        self.consecutive_failures = 0
        self.updated_at = at
        self._lift_condition_wait()

    def delete(self, reason: str | None, at: datetime) -> bool:
        if self.deleted:
            return False
        by = reason or "by an operator"
        self._skip_pending(f"task deleted before the queued run went out: {by}", at)
        self._deleted(reason=reason, at=at)
        return True

    @event("Deleted")
    def _deleted(self, reason: str | None, at: datetime) -> None:
        self.status = "deleted"
        self.status_reason = reason
        self.pending = None
        self.updated_at = at

    # --- runs ------------------------------------------------------------------------

    def request_run(
        self, run_id: str, origin: RunOrigin, at: datetime, *, over_budget: str | None = None
    ) -> tuple[str, bool]:
        """Queue a run someone asked for; it goes out when the dispatch rules allow.
        Returns (run_id, queued behind another run). Asking again with a run id the
        task already has in hand changes nothing; while one run is pending, further
        requests return that one. `over_budget` (why) refuses any other request: a
        retry of a run already asked for gets its answer, not the budget's."""
        self._must_exist()
        if over_budget is not None and not self._has_run(run_id):
            raise ServiceError("over_budget", over_budget)
        if self.pending is not None:
            return self.pending["run_id"], True
        if run_id in self.recent or (self.in_flight and self.in_flight["run_id"] == run_id):
            return run_id, False
        self._run_requested(run_id=run_id, origin=origin, at=at)
        return run_id, self.in_flight is not None

    def _has_run(self, run_id: str) -> bool:
        """Whether the run id names a run of this task: pending, in flight or recent."""
        pending = self.pending is not None and self.pending["run_id"] == run_id
        in_flight = self.in_flight is not None and self.in_flight["run_id"] == run_id
        return pending or in_flight or run_id in self.recent

    @event("RunRequested")
    def _run_requested(self, run_id: str, origin: str, at: datetime) -> None:
        self.pending = {"run_id": run_id, "origin": origin, "at": at}

    def trigger_in_force(self) -> tuple[datetime, Trigger]:
        """The trigger as it is now, and since when: what a due run fell due under."""
        return self.trigger_set_at, self.spec.trigger

    def _still_due(
        self, run_id: str | None, queued: bool, due_under: tuple[datetime, Trigger] | None = None
    ) -> bool:
        """Whether a run the caller chose from an earlier look at the task is still
        this task's to send or skip: a pause, a delete or a new trigger (`due_under`:
        the one the run fell due under) may have come in between."""
        if self.deleted:
            return False
        if queued:
            # Skipped meanwhile (a pause skips it): it must not go out after its skip.
            # Still queued, it goes even while paused: asking was an operator's choice.
            return self.pending is not None and self.pending["run_id"] == run_id
        # Due under the old trigger, it would use up the new one (a `once` set for next
        # week counted as fired today); the next tick asks the new trigger.
        changed = due_under is not None and due_under != self.trigger_in_force()
        return self.status == "active" and not changed

    def dispatch_run(
        self,
        run_id: str,
        origin: RunOrigin,
        at: datetime,
        slot: datetime | None = None,
        *,
        queued: bool = False,
        due_under: tuple[datetime, Trigger] | None = None,
    ) -> bool:
        """Send a run out; `slot`: the schedule slot it uses up (see TriggerState);
        `queued`: the run is the one request_run queued. False (nothing recorded) when
        one is already in flight, or the run may no longer go: the caller chose it from
        an earlier look at the task, and a pause, a delete or a new trigger may have
        come in between."""
        if self.in_flight is not None or not self._still_due(run_id, queued, due_under):
            return False
        self._run_dispatched(run_id=run_id, origin=origin, spec=self.spec, at=at, slot=slot)
        return True

    @event("RunDispatched")
    def _run_dispatched(
        self,
        run_id: str,
        origin: str,
        spec: TaskSpec,
        at: datetime,
        # Added later: a RunDispatched recorded before carries none.
        slot: datetime | None = None,
    ) -> None:
        if self.pending is not None and self.pending["run_id"] == run_id:
            self.pending = None
        if origin in SCHEDULED_ORIGINS:
            self._slot_used(at, slot)
        self.in_flight = {
            "run_id": run_id,
            "origin": origin,
            "dispatched_at": at,
            "started_at": None,
            "deadline_s": spec.deadline_s,
        }
        self.runs_dispatched += 1
        # The run in flight is the task's last run: its status is its own, never the
        # previous run's (RunStatus, as runs.list shows it).
        self.last_run_id = run_id
        self.last_run_status = "requested"

    def start_run(self, run_id: str, at: datetime, attempt: int = 1) -> bool:
        """A runner started the run. A later attempt (the work was redelivered after a
        runner died) restarts the deadline clock; a repeated report changes nothing."""
        if not self.in_flight or self.in_flight["run_id"] != run_id:
            return False
        if attempt <= self.in_flight.get("attempt", 0):
            return False
        self._run_started(run_id=run_id, at=at, attempt=attempt)
        return True

    @event("RunStarted")
    def _run_started(self, run_id: str, at: datetime, attempt: int) -> None:
        assert self.in_flight is not None
        self.in_flight = {**self.in_flight, "started_at": at, "attempt": attempt}
        self.last_run_status = "running"

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        at: datetime,
        cost_usd: float = 0.0,
        cost_saved_usd: float = 0.0,
        source: str | None = None,
        executor_version: int | None = None,
        duration_ms: int | None = None,
        reason: str | None = None,
        error: str | None = None,
        reported_by: str = "runner",
        fell_back: bool = False,
        tokens: dict[str, Any] | None = None,
        infrastructure: bool = False,
    ) -> str:
        """Record the outcome of the run in flight and free its slot; max_failures
        failures in a row pause the task. A run failed by `infrastructure` (a service
        could not serve it) says nothing about the task: it neither counts
        toward that nor resets it. Returns "recorded", "duplicate" (already recorded) or
        "untracked" (not a run this task is waiting for, or the late outcome of a run
        it abandoned)."""
        if not self.in_flight or self.in_flight["run_id"] != run_id:
            late = self.recent.get(run_id) == ABANDONED and reason != ABANDONED
            return "duplicate" if run_id in self.recent and not late else "untracked"
        self._run_finished(
            run_id=run_id,
            status=status,
            at=at,
            cost_usd=cost_usd,
            cost_saved_usd=cost_saved_usd,
            source=source,
            executor_version=executor_version,
            duration_ms=duration_ms,
            reason=reason,
            error=error,
            reported_by=reported_by,
            fell_back=fell_back,
            tokens=plain_tokens(tokens),
            infrastructure=infrastructure,
        )
        if (
            status == "failed"
            and not infrastructure
            and self.status == "active"
            and failures.should_pause(self.consecutive_failures, self.spec.max_failures)
        ):
            last = f"{reason}: {error}" if reason and error else (reason or error)
            self._pause(
                failures.pause_reason(self.consecutive_failures, self.spec.max_failures, last),
                at,
            )
        return "recorded"

    @event("RunFinished")
    def _run_finished(
        self,
        run_id: str,
        status: str,
        at: datetime,
        cost_usd: float,
        cost_saved_usd: float,
        source: str | None,
        executor_version: int | None,
        duration_ms: int | None,
        reason: str | None,
        error: str | None,
        reported_by: str,
        # Added later: a RunFinished recorded before carries none, so they default.
        fell_back: bool = False,
        tokens: dict[str, dict[str, Any]] | None = None,
        infrastructure: bool = False,
    ) -> None:
        self.in_flight = None
        self.last_run_id = run_id
        self.last_run_status = status
        self.total_cost_usd += cost_usd
        if status != "failed":
            self.consecutive_failures = 0
        elif not infrastructure:
            self.consecutive_failures += 1
        self.recent[run_id] = ABANDONED if reason == ABANDONED else status
        while len(self.recent) > RECENT_RUNS:
            del self.recent[next(iter(self.recent))]

    def skip_run(
        self,
        reason: str,
        origin: RunOrigin,
        at: datetime,
        run_id: str | None,
        slot: datetime | None = None,
        budget_from: datetime | None = None,
        *,
        queued: bool = False,
        due_under: tuple[datetime, Trigger] | None = None,
    ) -> bool:
        """A due run that will not go out (over budget, task paused). It consumes its
        schedule slot (`slot`, as in dispatch_run), or the pending request it came from
        (`queued`). False (nothing recorded) when, as for dispatch_run, the caller's
        earlier look is stale: the queued run is gone, the task no longer active, or its
        trigger changed.
        Over budget (`budget_from`: when the budget allows runs again) a `once` is not
        used up but kept until then, and a condition is not checked again until then
        (nothing could go out before: one skip, not one per check) nor does its cooldown
        start: only a run that went out waits one out."""
        if not self._still_due(run_id, queued, due_under):
            return False
        deferred_to = None
        if budget_from is not None and origin in SCHEDULED_ORIGINS:
            if isinstance(self.spec.trigger, OnceTrigger):
                deferred_to = budget_from
                reason = (
                    f"{reason}; this once task is kept: it runs when the budget allows,"
                    f" from {budget_from.isoformat()}"
                )
            elif isinstance(self.spec.trigger, ConditionTrigger):
                deferred_to = budget_from
                reason = (
                    f"{reason}; the condition is checked again from"
                    f" {budget_from.isoformat()} (or when the task is updated or resumed)"
                )
        self._run_skipped(
            reason=reason, origin=origin, at=at, run_id=run_id, slot=slot, deferred_to=deferred_to
        )
        return True

    @event("RunSkipped")
    def _run_skipped(
        self,
        reason: str,
        origin: str,
        at: datetime,
        run_id: str | None,
        # Added later: a RunSkipped recorded before carries neither.
        slot: datetime | None = None,
        deferred_to: datetime | None = None,
    ) -> None:
        if run_id is not None and self.pending is not None and self.pending["run_id"] == run_id:
            self.pending = None
        if deferred_to is not None:
            self.deferred_to = deferred_to
        elif origin in SCHEDULED_ORIGINS and origin != "condition":
            self._slot_used(at, slot)

    def _slot_used(self, at: datetime, slot: datetime | None) -> None:
        self.last_fired_at = at
        self.last_slot = slot
        self.deferred_to = None


class UntrackedRuns(Aggregate):
    """Outcomes of runs no task was waiting for, one aggregate per UTC day: runs started
    by rote.api.runs.start (no task) and late outcomes of abandoned runs.
    They cost money too, so the daily budget and the ledger must see them."""

    @staticmethod
    def create_id(day: str) -> UUID:
        return untracked_uuid(datetime.fromisoformat(day).date())

    @event("Opened")
    def __init__(self, day: str) -> None:
        self.day = day
        self.run_ids: list[str] = []

    def record(self, run_id: str, task_id: str, outcome: dict[str, Any], at: datetime) -> bool:
        if run_id in self.run_ids:
            return False
        self._recorded(run_id=run_id, task_id=task_id, outcome=outcome, at=at)
        return True

    @event("Recorded")
    def _recorded(self, run_id: str, task_id: str, outcome: dict[str, Any], at: datetime) -> None:
        self.run_ids.append(run_id)
