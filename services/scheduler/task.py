"""The Task aggregate: a task's definition, status, and the runs it asked for; and the
untracked runs of a day. Each one's state is folded from its events by pure rules
(task_rules.py; services/kernel/aggregate.py tells the idiom). A new task is
`Task.open(Defined(...))`, a new day's untracked runs `UntrackedRuns.open(DayOpened(...))`.

Public methods are commands: each records what the rules decide on the state (nothing,
when nothing changes) and answers what its caller needs to know.

What is stored has changed over time; the library upcasts what earlier versions
stored (`upcast_vN_vM`): the spec, once stored through a registered transcoding, is
JSON text in its event, as user data (a condition's input) is everywhere; fields added
to an event are set in events recorded before them; a snapshot's attributes became one
TaskState.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, ClassVar
from uuid import UUID

import msgspec

from contracts.runs import RunOrigin
from contracts.tasks import TaskSpec, UpdateTask
from services.kernel.aggregate import Folded, Stored, StoredCreation
from services.kernel.codec import encode
from services.kernel.pricing import PriceTable
from services.scheduler import task_events as ev
from services.scheduler import task_rules as rules
from services.scheduler.ids import task_uuid, untracked_uuid
from services.scheduler.task_rules import DueUnder, TaskState, UntrackedState


def _spec_as_text(state: dict[str, Any]) -> None:
    # v1 held the TaskSpec itself (the registered "rote_task_spec" transcoding read it).
    state["spec"] = encode(state["spec"]).decode()


class _WithSpec:
    text_fields: ClassVar[tuple[str, ...]] = ("spec",)  # a condition's input is user data
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        _spec_as_text(state)


class Task(Folded[TaskState, ev.Defined, ev.TaskEvent]):
    class Defined(_WithSpec, StoredCreation):
        event_type = ev.Defined

    class Redefined(_WithSpec, Stored):
        event_type = ev.Redefined

    class Updated(_WithSpec, Stored):
        event_type = ev.Updated

    class Paused(Stored):
        event_type = ev.Paused

    class Resumed(Stored):
        event_type = ev.Resumed

    class Deleted(Stored):
        event_type = ev.Deleted

    class RunRequested(Stored):
        event_type = ev.RunRequested

    class RunDispatched(_WithSpec, Stored):
        event_type = ev.RunDispatched
        class_version = 3

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _spec_as_text(state)
            state.setdefault("slot", None)  # recorded before slots were

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state.setdefault("budget_left_usd", None)  # recorded before runs were told

    class RunStarted(Stored):
        event_type = ev.RunStarted

    class RunFinished(Stored):
        event_type = ev.RunFinished
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            # Recorded before these were: no fallback, no tokens, not the infrastructure.
            state.setdefault("fell_back", False)
            state.setdefault("tokens", None)
            state.setdefault("infrastructure", False)

    class RunSkipped(Stored):
        event_type = ev.RunSkipped
        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state.setdefault("slot", None)  # recorded before slots and deferrals were
            state.setdefault("deferred_to", None)

    class KeyApplied(Stored):
        event_type = ev.KeyApplied

    # Snapshots: v1 held the task's attributes one by one; v2 holds `state`.
    class_version = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        old = {k: state.pop(k) for k in list(state) if k not in ("_created_on", "_modified_on")}
        # Taken before these attributes existed: none yet.
        old.setdefault("intake_keys", [])
        old.setdefault("last_slot", None)
        old.setdefault("deferred_to", None)
        state["state"] = msgspec.convert(old, TaskState)

    @classmethod
    def start(cls, event: ev.Defined) -> TaskState:
        return rules.start(event)

    def fold(self, event: ev.TaskEvent) -> None:
        rules.apply(self.state, event)

    @classmethod
    def id_of(cls, opening: ev.Defined) -> UUID:
        return task_uuid(opening.task_id)

    @property
    def task_id(self) -> str:
        return self.state.task_id

    # --- commands ------------------------------------------------------------------------

    def remember(self, key: str) -> None:
        """Record that the intake command of this key was applied."""
        self.record(rules.decide_remember(self.state, key))

    def define_again(self, spec: TaskSpec, at: datetime) -> None:
        self.record(rules.decide_define_again(self.state, spec, at))

    def change(self, command: UpdateTask, at: datetime, prices: PriceTable) -> list[str]:
        """Apply the fields the command sets; return the names that changed."""
        events = self.record(rules.decide_change(self.state, command, at, prices))
        return [name for e in events if isinstance(e, ev.Updated) for name in e.changed]

    def pause(self, reason: str | None, at: datetime) -> bool:
        return bool(self.record(rules.decide_pause(self.state, reason, at)))

    def resume(self, at: datetime) -> bool:
        return bool(self.record(rules.decide_resume(self.state, at)))

    def delete(self, reason: str | None, at: datetime) -> bool:
        return bool(self.record(rules.decide_delete(self.state, reason, at)))

    def request_run(
        self, run_id: str, origin: RunOrigin, at: datetime, *, over_budget: str | None = None
    ) -> tuple[str, bool]:
        """Queue a run someone asked for; it goes out when the dispatch rules allow.
        Returns (run_id, queued behind another run). Asking again with a run id the
        task already has in hand changes nothing; while one run is pending, further
        requests return that one. `over_budget` (why) refuses any other request: a
        retry of a run already asked for gets its answer, not the budget's."""
        events, answer = rules.decide_request(self.state, run_id, origin, at, over_budget)
        self.record(events)
        return answer

    def dispatch_run(
        self,
        run_id: str,
        origin: RunOrigin,
        at: datetime,
        slot: datetime | None = None,
        *,
        queued: bool = False,
        due_under: DueUnder | None = None,
        budget_left_usd: float | None = None,
    ) -> bool:
        """Send a run out; `slot`: the schedule slot it uses up (see TriggerState);
        `queued`: the run is the one request_run queued; `budget_left_usd`: what the
        daily budget has left (the run is told). False (nothing recorded) when one is
        already in flight, or the run may no longer go: the caller chose it from an
        earlier look at the task, and a pause, a delete or a new trigger may have come
        in between."""
        decided = rules.decide_dispatch(
            self.state,
            run_id,
            origin,
            at,
            slot,
            queued=queued,
            due_under=due_under,
            budget_left_usd=budget_left_usd,
        )
        return bool(self.record(decided))

    def start_run(self, run_id: str, at: datetime, attempt: int = 1) -> bool:
        return bool(self.record(rules.decide_start(self.state, run_id, at, attempt)))

    def finish_run(
        self, run_id: str, *, at: datetime, reported_by: str = "runner", **outcome: Any
    ) -> str:
        """Record the outcome (task_events.RunOutcome's fields) of the run in flight and
        free its slot; max_failures failures in a row pause the task. Returns
        "recorded", "duplicate" (already recorded) or "untracked" (not a run this task
        is waiting for, or the late outcome of a run it abandoned)."""
        finished = self.record(
            rules.decide_finish(self.state, run_id, rules.outcome_of(outcome), at, reported_by)
        )
        if not finished:
            return rules.unrecorded(self.state, run_id, outcome.get("reason"))
        assert isinstance(finished[0], ev.RunFinished)
        self.record(rules.decide_pause_after(self.state, finished[0]))
        return "recorded"

    def skip_run(self, skip: rules.RunSkip) -> bool:
        """A due run that will not go out (rules.RunSkip says how). False (nothing
        recorded) when, as for dispatch_run, the caller's earlier look is stale."""
        return bool(self.record(rules.decide_skip(self.state, skip)))


class UntrackedRuns(Folded[UntrackedState, ev.DayOpened, ev.UntrackedRun]):
    """Outcomes of runs no task was waiting for, one aggregate per UTC day: runs started
    by rote.api.runs.start (no task) and late outcomes of abandoned runs.
    They cost money too, so the daily budget and the ledger must see them."""

    class Opened(StoredCreation):
        event_type = ev.DayOpened

    class Recorded(Stored):
        # The outcome, a plain object in every version: keys a caller left out read as
        # the ledger's defaults (RunOutcome).
        event_type = ev.UntrackedRun

    @classmethod
    def start(cls, event: ev.DayOpened) -> UntrackedState:
        return rules.start_untracked(event)

    def fold(self, event: ev.UntrackedRun) -> None:
        rules.apply_untracked(self.state, event)

    @classmethod
    def id_of(cls, opening: ev.DayOpened) -> UUID:
        return untracked_uuid(date.fromisoformat(opening.day))

    def record_run(self, run_id: str, task_id: str, outcome: ev.RunOutcome, at: datetime) -> bool:
        """Whether the run's outcome was new here."""
        decided = rules.decide_untracked(self.state, run_id, task_id, outcome, at)
        return bool(self.record(decided))
