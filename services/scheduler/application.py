"""The task store: commands on Task aggregates, and a catalog of every task, the run
ledger and the daily spend, folded from the store's notification log.

Synchronous, like the eventsourcing library under it: call it from worker threads.
Commands run through the kernel's CommandRunner: a save that lost a race with another
writer reloads the task and runs the command again, so concurrent writers (endpoints,
consumers, the tick, other scheduler processes on the same PostgreSQL) never lose a
command.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, get_args
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder

from contracts.runs import RunOrigin, RunView
from contracts.tasks import CreateTask, Prompt, TaskName, TaskSpec, TaskView, Trigger, UpdateTask
from services.kernel.commands import CommandRunner
from services.kernel.errors import ServiceError
from services.kernel.ids import slug
from services.kernel.logs import get_logger
from services.kernel.pricing import PriceTable, default_table
from services.kernel.secrets import redact, redact_struct, redact_value
from services.kernel.transcoding import StructAsText
from services.scheduler.budget import DailySpend, utc_day
from services.scheduler.ids import task_uuid, untracked_uuid
from services.scheduler.ledger import RunLedger
from services.scheduler.spec import checked_spec
from services.scheduler.task import Task, UntrackedRuns
from services.scheduler.task_events import (
    DayOpened,
    Defined,
    RunDispatched,
    RunFinished,
    RunOutcome,
    RunRequested,
    RunSkipped,
    RunStarted,
    UntrackedRun,
)
from services.scheduler.task_rules import DueUnder, RunSkip, TaskState, outcome_of
from services.scheduler.triggers import TriggerError, next_due

log = get_logger("rote.scheduler")

T = TypeVar("T")


def shown_spec(spec: TaskSpec) -> TaskSpec:
    """The spec as task views show it: secrets masked, as task events show it (a prompt
    may hold a URL with its password). Masking can lengthen the name or the prompt past
    its bound (a short password becomes the longer mask); then it is cut to fit rather
    than shown as written."""
    masked = redact_struct(spec)
    if masked is not None:
        return masked
    plain = redact_value(msgspec.to_builtins(spec))
    for name, bounded in (("name", TaskName), ("prompt", Prompt)):
        plain[name] = plain[name][: get_args(bounded)[1].max_length]
    return msgspec.convert(plain, TaskSpec)


def to_view(task: Task, last_checked: datetime | None = None) -> TaskView:
    state = task.state
    due = None
    if state.status == "active" and state.in_flight is None:
        try:
            due = next_due(state.spec.trigger, state.trigger_state(last_checked))
        except TriggerError:
            due = None  # the scheduler pauses such a task, saying why
    if state.pending is not None and state.in_flight is None:
        due = state.pending.at if due is None else min(due, state.pending.at)
    return TaskView(
        task_id=state.task_id,
        spec=shown_spec(state.spec),
        status=state.status,
        # As the paused event says it: an operator's reason may quote a secret.
        status_reason=None if state.status_reason is None else redact(state.status_reason),
        version=task.version,
        created_at=state.created_at,
        updated_at=state.updated_at,
        next_due_at=due,
        run_in_flight=state.in_flight.run_id if state.in_flight else None,
        run_pending=state.pending.run_id if state.pending else None,
        last_run_id=state.last_run_id,
        last_run_status=state.last_run_status,
        consecutive_failures=state.consecutive_failures,
        runs_dispatched=state.runs_dispatched,
        total_cost_usd=round(state.total_cost_usd, 10),
    )


class Catalog:
    """Every task's latest state, the run ledger and the daily spend, kept current by
    reading the notification log from where it last stopped. Writes from any process
    sharing the store show up here."""

    def __init__(self, app: Tasks, keep_runs_per_task: int = 500) -> None:
        self.app = app
        self.position = 0
        self.tasks: dict[str, Task] = {}
        self.ledger = RunLedger(keep_runs_per_task)
        self.spend = DailySpend()
        self._ids: dict[UUID, str] = {}
        self._lock = threading.Lock()

    def catch_up(self) -> int:
        """Fold everything recorded since the last call; return how many events."""
        with self._lock:
            total = 0
            while True:
                batch = self.app.recorder.select_notifications(start=self.position + 1, limit=500)
                if not batch:
                    return total
                changed: set[UUID] = set()
                for notification in batch:
                    try:
                        domain_event = self.app.mapper.to_domain_event(notification)
                        self._fold(domain_event)
                    except Exception:
                        # An event this code cannot read must not hide every later one.
                        log.exception("catalog_fold_failed", notification_id=notification.id)
                    else:
                        if isinstance(domain_event, Task.Event):
                            changed.add(domain_event.originator_id)
                    self.position = notification.id
                    total += 1
                for aggregate_id in changed:
                    self._reload(aggregate_id)

    def _reload(self, aggregate_id: UUID) -> None:
        try:
            task: Task = self.app.repository.get(aggregate_id)
        except Exception:
            # A task this code cannot load (one stored before a bound existed) must not
            # stop every other task's schedule, nor the scheduler from starting.
            task_id = self._ids.get(aggregate_id)
            log.exception("catalog_load_failed", task_id=task_id, aggregate_id=str(aggregate_id))
            if task_id is not None:
                self.tasks.pop(task_id, None)
            return
        self.tasks[task.task_id] = task

    def _fold(self, stored: Any) -> None:
        """Fold one stored event (a Task's or the untracked runs') into the ledger and
        the spend."""
        event = stored.event
        if isinstance(event, Defined):
            self._ids[stored.originator_id] = event.task_id
            return
        if isinstance(event, UntrackedRun):
            outcome = msgspec.structs.asdict(event.outcome)
            self.ledger.finished(event.task_id, event.run_id, at=event.at, **outcome)
            self.spend.add(event.run_id, event.at, event.outcome.cost_usd)
            return
        task_id = self._ids.get(stored.originator_id)
        if task_id is None:
            return
        if isinstance(event, RunRequested | RunDispatched):
            # Asked for (queued, not yet sent out) or sent out: `requested` either way,
            # since the first of them (when it was asked for).
            self.ledger.requested(task_id, event.run_id, event.origin, event.at)
        elif isinstance(event, RunStarted):
            self.ledger.started(task_id, event.run_id, event.at)
        elif isinstance(event, RunFinished):
            outcome = {name: getattr(event, name) for name in RunOutcome.__struct_fields__}
            self.ledger.finished(task_id, event.run_id, at=event.at, **outcome)
            self.spend.add(event.run_id, event.at, event.cost_usd)
        elif isinstance(event, RunSkipped) and event.run_id is not None:
            # Only a queued run has an id; its skip is its ending (see outbox). The
            # reason may quote an operator's pause reason: masked, as the event is.
            origin: RunOrigin = event.origin
            self.ledger.skipped(task_id, event.run_id, origin, event.at, redact(event.reason))

    def runs(self, task_id: str | None, limit: int) -> list[RunView]:
        with self._lock:
            return self.ledger.list(task_id, limit)

    def defined(self, task_id: str) -> bool:
        """Whether a task of this id was ever defined here (a deleted one too)."""
        with self._lock:
            return task_id in self.tasks or task_id in self._ids.values()

    def run_owner(self, run_id: str) -> str | None:
        """The task a run id belongs to (a run in the ledger, or one queued), if any."""
        with self._lock:
            owner = self.ledger.owner(run_id)
            if owner is not None:
                return owner
            for task in self.tasks.values():
                if task.state.pending_run(run_id):
                    return task.task_id
            return None

    def run_finished(self, task_id: str, run_id: str) -> bool:
        """Whether the ledger holds this run of the task as ended (completed or failed)."""
        with self._lock:
            view = self.ledger.get(task_id, run_id)
            return view is not None and view.status in ("completed", "failed")

    def snapshot(self) -> list[Task]:
        with self._lock:
            return list(self.tasks.values())

    def spent_on(self, when: datetime) -> float:
        with self._lock:
            return self.spend.spent_at(when)


class Tasks(Application[UUID]):
    """Commands on tasks; each returns the task as saved."""

    name = "scheduler"
    snapshotting_intervals = {Task: 100}
    # Keep loaded tasks in memory and read only the events recorded since (from any
    # process): rebuilding a busy task from its snapshot on every command is wasted work.
    env = {"AGGREGATE_CACHE_MAXSIZE": "10000"}

    def __init__(self, env: dict[str, str] | None = None, prices: PriceTable | None = None) -> None:
        super().__init__(env=env)
        # The models a spec may name (spec.checked_models): the service passes the table
        # of ROTE_PRICES_FILE, the one the llm service prices calls by.
        self.prices = prices or default_table()
        self.catalog = Catalog(self)
        self.commands = CommandRunner(self)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        # Snapshots hold the TaskState as JSON text: a condition's input is user data
        # (kernel.transcoding). What earlier versions stored held the TaskSpec itself.
        transcoder.register(StructAsText(TaskState, "rote_task_state"))
        transcoder.register(StructAsText(TaskSpec, "rote_task_spec"))

    # --- plumbing ----------------------------------------------------------------------

    def _load(self, task_id: str) -> Task:
        task: Task | None = self.commands.load(task_uuid(task_id))
        if task is None:
            raise ServiceError("not_found", f"no task {task_id!r}", field="task_id")
        return task

    def _command(self, task_id: str, command: Callable[[Task], T]) -> tuple[Task, T]:
        """Load, apply, save (kernel.commands: retried on a conflicting save)."""

        def run(task: Task | None) -> tuple[Task, tuple[Task, T]]:
            if task is None:
                raise ServiceError("not_found", f"no task {task_id!r}", field="task_id")
            return task, (task, command(task))

        done = self.commands.run(task_uuid(task_id), run, busy=_busy(task_id))
        self.catalog.catch_up()
        return done

    def _once(self, task_id: str, key: str | None, command: Callable[[Task], object]) -> Task:
        """`_command` for an intake command: applied once per idempotency key (see
        service.intake_key). A copy of one already applied finds its key on the task and
        changes nothing; its answer is the task as it is now."""

        def once(task: Task) -> None:
            if key is not None and task.state.applied(key):
                return
            command(task)
            if key is not None:
                task.remember(key)

        return self._command(task_id, once)[0]

    def get(self, task_id: str) -> Task:
        return self._load(task_id)

    # --- commands ----------------------------------------------------------------------

    def create(self, command: CreateTask, at: datetime, key: str | None = None) -> Task:
        spec = checked_spec(command, self.prices)
        task_id = command.task_id or slug(command.name)

        def run(task: Task | None) -> tuple[Task | None, Task]:
            if task is None:
                task = Task.open(Defined(task_id=task_id, spec=spec, at=at))
            elif key is not None and task.state.applied(key):
                return None, task  # a copy of this create (it must not revive a deleted task)
            elif task.state.deleted or task.state.spec != spec:
                task.define_again(spec, at)
            elif key is None:
                return None, task  # the same create again (a retry): nothing to do
            if key is not None:
                task.remember(key)
            return task, task

        # A conflict: created by someone else meanwhile; the next round says so.
        task = self.commands.run(task_uuid(task_id), run, busy=_busy(task_id))
        self.catalog.catch_up()
        return task

    # `key`: the intake command's idempotency key; endpoint callers have none.

    def update(self, command: UpdateTask, at: datetime, key: str | None = None) -> Task:
        return self._once(command.task_id, key, lambda t: t.change(command, at, self.prices))

    def pause(self, task_id: str, reason: str | None, at: datetime, key: str | None = None) -> Task:
        return self._once(task_id, key, lambda t: t.pause(reason, at))

    def pause_for_trigger(self, task_id: str, trigger: Trigger, reason: str, at: datetime) -> bool:
        """Pause an active task for a fault of `trigger`; not if its trigger changed
        meanwhile (an update that may have fixed it). Whether it paused."""

        def pause(task: Task) -> bool:
            if task.state.status != "active" or task.state.spec.trigger != trigger:
                return False
            return task.pause(reason, at)

        return self._command(task_id, pause)[1]

    def resume(self, task_id: str, at: datetime, key: str | None = None) -> Task:
        return self._once(task_id, key, lambda t: t.resume(at))

    def delete(
        self, task_id: str, reason: str | None, at: datetime, key: str | None = None
    ) -> Task:
        return self._once(task_id, key, lambda t: t.delete(reason, at))

    def request_run(
        self,
        task_id: str,
        run_id: str,
        origin: RunOrigin,
        at: datetime,
        key: str | None = None,
        *,
        over_budget: str | None = None,
    ) -> tuple[Task, tuple[str, bool]]:
        """`over_budget`: why a new run is refused today (Task.request_run)."""

        def once(task: Task) -> tuple[str, bool]:
            if key is not None and task.state.applied(key):
                return run_id, False  # the run this key asked for (its id comes from the key)
            result = task.request_run(run_id, origin, at, over_budget=over_budget)
            if key is not None:
                task.remember(key)
            return result

        return self._command(task_id, once)

    def dispatch(
        self,
        task_id: str,
        run_id: str,
        origin: RunOrigin,
        at: datetime,
        slot: datetime | None = None,
        *,
        queued: bool = False,
        due_under: DueUnder | None = None,
        budget_left_usd: float | None = None,
    ) -> bool:
        """Whether the run went out (Task.dispatch_run says when it may not)."""
        return self._command(
            task_id,
            lambda t: t.dispatch_run(
                run_id,
                origin,
                at,
                slot,
                queued=queued,
                due_under=due_under,
                budget_left_usd=budget_left_usd,
            ),
        )[1]

    def skip(self, task_id: str, skip: RunSkip) -> bool:
        """Whether the skip was recorded (Task.skip_run says when it is not)."""
        return self._command(task_id, lambda t: t.skip_run(skip))[1]

    def start(self, task_id: str, run_id: str, at: datetime, attempt: int = 1) -> bool:
        try:
            return self._command(task_id, lambda t: t.start_run(run_id, at, attempt))[1]
        except ServiceError:
            return False

    def finish(
        self,
        task_id: str,
        run_id: str,
        at: datetime,
        *,
        reported_by: str = "runner",
        **outcome: Any,
    ) -> str:
        """Record a run's outcome (task_events.RunOutcome's fields) on its task; an
        outcome no task waits for (a run from outside the scheduler, a late one after
        abandonment) is kept as untracked, so its cost still counts. Returns
        "recorded", "duplicate" or "untracked"."""

        def finish(task: Task) -> str:
            return task.finish_run(run_id, at=at, reported_by=reported_by, **outcome)

        try:
            result = self._command(task_id, finish)[1]
        except ServiceError:
            result = "untracked"
        if result == "untracked" and not self._record_untracked(
            task_id, run_id, at, outcome_of(outcome)
        ):
            result = "duplicate"
        return result

    def _record_untracked(
        self, task_id: str, run_id: str, at: datetime, outcome: RunOutcome
    ) -> bool:
        day = utc_day(at)

        def run(runs: UntrackedRuns | None) -> tuple[UntrackedRuns, bool]:
            runs = runs or UntrackedRuns.open(DayOpened(day=day.isoformat()))
            return runs, runs.record_run(run_id, task_id, outcome, at)

        busy = "untracked runs are changing too fast; try again"
        recorded = self.commands.run(untracked_uuid(day), run, busy=busy)
        self.catalog.catch_up()
        return recorded


def _busy(task_id: str) -> str:
    return f"task {task_id!r} is changing too fast; try again"
