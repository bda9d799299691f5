"""The scheduler's moving part: commands, the tick (recover, find due runs, apply the
dispatch rules), condition checks (run by condition_watch.py) and run outcomes. No NATS
here: the clock, the condition probe (what reads a trigger's tool output) and the
"something was saved" signal are injected, so tests drive it with a manual clock and
the service with the real one.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import anyio
import msgspec
import structlog
from anyio.abc import TaskGroup

from contracts.runs import ListRuns, RunEvent, RunList, RunOrigin
from contracts.tasks import (
    ConditionTrigger,
    CreateTask,
    ListTasks,
    RunAccepted,
    RunTask,
    TaskList,
    TaskRef,
    TaskView,
    UpdateTask,
)
from services.kernel.codec import decoder, encode
from services.kernel.errors import ServiceError, validation_error
from services.kernel.ids import new_run_id
from services.kernel.logs import get_logger
from services.scheduler import recovery
from services.scheduler.application import Tasks, to_view
from services.scheduler.budget import next_utc_day, over_budget, skip_reason, utc_day
from services.scheduler.clock import Clock
from services.scheduler.condition_watch import ConditionWatch, Probe
from services.scheduler.dispatch import Candidate, plan
from services.scheduler.ids import run_id_for_key
from services.scheduler.task import Task
from services.scheduler.task_rules import RunSkip
from services.scheduler.triggers import TriggerError, next_due, passed_slots

log = get_logger("rote.scheduler")
T = TypeVar("T")

# Bound what a runner's error text can add to the event store.
MAX_ERROR_CHARS = 2000
# How much of tasks.list one reply carries: under NATS' 1 MB default max payload, and
# room for at least one whole task (a spec is at most MAX_SPEC_BYTES).
MAX_LIST_BYTES = 512 * 1024


@dataclass(frozen=True)
class SchedulerConfig:
    max_concurrent: int = 2
    daily_budget_usd: float | None = None
    grace_s: float = recovery.DEFAULT_GRACE_S
    tick_s: float = 1.0
    max_condition_checks: int = 8
    # After a completed full run, how long a task's next run may wait for the executor
    # compiled from it (see Scheduler.compiling).
    compile_wait_s: float = 30.0


@dataclass
class TickReport:
    dispatched: list[tuple[str, str]] = field(default_factory=list)  # (task_id, run_id)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (task_id, reason)
    abandoned: list[tuple[str, str]] = field(default_factory=list)  # (task_id, run_id)
    waiting: int = 0


# Intake verbs and endpoint commands: what each decodes.
COMMANDS: dict[str, type[msgspec.Struct]] = {
    "create": CreateTask,
    "update": UpdateTask,
    "pause": TaskRef,
    "resume": TaskRef,
    "delete": TaskRef,
    "run": RunTask,
}


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))


class Scheduler:
    def __init__(
        self,
        app: Tasks,
        clock: Clock,
        config: SchedulerConfig | None = None,
        *,
        probe: Probe | None = None,
        on_saved: Callable[[], None] = lambda: None,
    ) -> None:
        self.app = app
        self.clock = clock
        self.config = config or SchedulerConfig()
        self.on_saved = on_saved
        self.conditions = ConditionWatch(
            app,
            probe,
            max_checks=self.config.max_condition_checks,
            on_saved=on_saved,
            wake=self.wake,
        )
        # Tasks whose last run was a completed full run, its trace still compiling:
        # task_id -> (run_id, when it finished). Their next run waits for the executor
        # (or config.compile_wait_s), or it would be a second full run: an overdue slot
        # comes due the moment the run ends, a second or so before its executor.
        # Kept in memory: after a restart nothing waits, as before.
        self.compiling: dict[str, tuple[str, datetime]] = {}
        # The last run whose trace the compiler settled, per task: its word may come
        # before the run's outcome reaches this scheduler (another stream).
        self.settled: dict[str, str] = {}
        self._tick_lock = anyio.Lock()
        # Checking a chosen run_id is free and queuing the run are one step: two asks
        # at once for two tasks under one run_id must not both pass the check.
        self._run_lock = anyio.Lock()
        self._wake = anyio.Event()

    def wake(self) -> None:
        """Tick soon (a slot was freed, a run was asked for)."""
        self._wake.set()

    def _saved(self) -> None:
        self.on_saved()
        self.wake()

    def view(self, task: Task) -> TaskView:
        return to_view(task, self.conditions.last_checked.get(task.task_id))

    # --- commands --------------------------------------------------------------------

    # `key`: an intake command's idempotency key (service.intake_key): a command is
    # applied once per key, a copy answers with the task as it is.

    async def create(self, command: CreateTask, key: str | None = None) -> TaskView:
        task = await _in_thread(self.app.create, command, self.clock.now(), key)
        self.conditions.forget(task)
        self._saved()
        log.info("task_defined", task_id=task.task_id)
        return self.view(task)

    async def update(self, command: UpdateTask, key: str | None = None) -> TaskView:
        task = await _in_thread(self.app.update, command, self.clock.now(), key)
        self.conditions.forget(task)
        self._saved()
        return self.view(task)

    async def pause(self, ref: TaskRef, key: str | None = None) -> TaskView:
        task = await _in_thread(self.app.pause, ref.task_id, ref.reason, self.clock.now(), key)
        self.conditions.spent(ref.task_id)
        self._saved()
        return self.view(task)

    async def resume(self, ref: TaskRef, key: str | None = None) -> TaskView:
        task = await _in_thread(self.app.resume, ref.task_id, self.clock.now(), key)
        self._saved()
        return self.view(task)

    async def delete(self, ref: TaskRef, key: str | None = None) -> TaskView:
        task = await _in_thread(self.app.delete, ref.task_id, ref.reason, self.clock.now(), key)
        self.conditions.forget(task)
        self._saved()
        return self.view(task)

    async def get(self, ref: TaskRef) -> TaskView:
        return self.view(await _in_thread(self.app.get, ref.task_id))

    async def list(self, query: ListTasks) -> TaskList:
        """Tasks by task_id, a page at a time: up to `limit`, stopping early rather than
        go over MAX_LIST_BYTES (a reply must fit in one NATS message). `next_after` is
        the cursor for the next page (pass it as `after`)."""
        await _in_thread(self.app.catalog.catch_up)
        tasks = sorted(self.app.catalog.snapshot(), key=lambda t: t.task_id)
        if query.status is None:
            tasks = [t for t in tasks if not t.state.deleted]
        else:
            tasks = [t for t in tasks if t.state.status == query.status]
        if query.after is not None:
            tasks = [t for t in tasks if t.task_id > query.after]
        page: builtins.list[TaskView] = []
        size = 0
        for task in tasks[: query.limit]:
            view = self.view(task)
            size += len(encode(view))
            if page and size > MAX_LIST_BYTES:
                break
            page.append(view)
        more = len(page) < len(tasks)
        return TaskList(tasks=page, next_after=page[-1].task_id if more else None)

    async def run(self, command: RunTask, key: str | None = None) -> RunAccepted:
        """Ask for a run now. It goes out as soon as the task has nothing in flight and
        a slot is free; over the daily budget a new run is refused (asking again for a
        run the task already has answers as ever: the budget is no reason to forget it)."""
        now = self.clock.now()
        budget = self.config.daily_budget_usd
        spent = self.app.catalog.spent_on(now)
        refusal: str | None = None  # why a new run may not be queued now
        if over_budget(spent, budget):
            assert budget is not None
            refusal = skip_reason(spent, budget, utc_day(now))
        run_id = command.run_id or (run_id_for_key(key) if key else new_run_id(now))
        # A run id is global on the bus (the work queue's Nats-Msg-Id, run leases): one
        # another task already used would have its run request dropped as a duplicate.
        async with self._run_lock:
            await _in_thread(self.app.catalog.catch_up)
            owner = self.app.catalog.run_owner(run_id)
            if owner is not None and owner != command.task_id:
                raise ServiceError(
                    "conflict",
                    f"run_id {run_id!r} is already a run of task {owner!r}; choose another run_id",
                    field="run_id",
                )
            if self.app.catalog.run_finished(command.task_id, run_id):
                # Asked again long after (a producer retrying): the run happened once.
                # Sent again, the runner would only find it finished, and the task would
                # wait for an ending until the run is declared abandoned.
                return RunAccepted(task_id=command.task_id, run_id=run_id, queued=False)
            _, (run_id, queued) = await _in_thread(
                self.app.request_run,
                command.task_id,
                run_id,
                "manual",
                now,
                key,
                over_budget=refusal,
            )
        self._saved()
        return RunAccepted(task_id=command.task_id, run_id=run_id, queued=queued)

    async def runs(self, query: ListRuns) -> RunList:
        await _in_thread(self.app.catalog.catch_up)
        runs = self.app.catalog.runs(query.task_id, query.limit)
        # A mistyped task_id must not read as "this task never ran" (runs reported from
        # outside the scheduler are listed under their task_id, task or not).
        if not runs and query.task_id is not None and not self.app.catalog.defined(query.task_id):
            raise ServiceError("not_found", f"no task {query.task_id!r}", field="task_id")
        return RunList(runs=runs)

    async def handle(self, verb: str, data: bytes, key: str | None = None) -> msgspec.Struct:
        """One command from raw JSON (the durable intake): decode for the verb, apply.
        Raises ServiceError naming the bad field."""
        command_type = COMMANDS.get(verb)
        if command_type is None:
            raise ServiceError(
                "invalid_request",
                f"unknown verb {verb!r} (one of: {', '.join(COMMANDS)})",
                field="verb",
            )
        try:
            command = decoder(command_type).decode(data or b"{}")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise validation_error(exc) from None
        method: Callable[..., Awaitable[msgspec.Struct]] = getattr(self, verb)
        return await method(command, key)

    # --- run outcomes ----------------------------------------------------------------

    async def on_run_event(self, event: RunEvent) -> str:
        """A runner's report. `started` marks the run started; `completed`/`failed`
        record the outcome (status, cost) and free the slot."""
        with structlog.contextvars.bound_contextvars(task_id=event.task_id, run_id=event.run_id):
            if event.event == "started":
                started = await _in_thread(
                    self.app.start, event.task_id, event.run_id, event.at, event.attempt
                )
                if started:
                    self.on_saved()
                return "started" if started else "ignored"
            if event.event not in ("completed", "failed"):
                return "ignored"
            result = await _in_thread(
                self.app.finish,
                event.task_id,
                event.run_id,
                event.at,
                status="completed" if event.event == "completed" else "failed",
                cost_usd=max(event.cost_usd, 0.0),
                cost_saved_usd=event.cost_saved_usd,
                source=event.source,
                executor_version=event.executor_version,
                fell_back=event.fell_back,
                tokens=event.tokens,
                infrastructure=event.infrastructure,
                duration_ms=event.duration_ms,
                reason=event.reason,
                error=event.error[:MAX_ERROR_CHARS] if event.error else None,
                reported_by="runner",
            )
            log.info("run_outcome", outcome=event.event, recorded=result, cost_usd=event.cost_usd)
            if (
                result == "recorded"
                and event.event == "completed"
                and event.source == "full_llm"
                and self.settled.get(event.task_id) != event.run_id
            ):
                self.compiling[event.task_id] = (event.run_id, self.clock.now())
            if result != "duplicate":
                self._saved()
            return result

    def on_executor_event(self, task_id: str, run_id: str | None) -> None:
        """The compiler compiled (or skipped) the trace of `run_id`: if that is the run
        the task's next run waits for, it may go."""
        if run_id is not None:
            self.settled[task_id] = run_id
        waiting = self.compiling.get(task_id)
        if waiting is not None and waiting[0] == run_id:
            del self.compiling[task_id]
            self.wake()

    def _compiling(self, task_id: str, now: datetime) -> bool:
        waiting = self.compiling.get(task_id)
        if waiting is None:
            return False
        if (now - waiting[1]).total_seconds() < self.config.compile_wait_s:
            return True
        log.warning("compile_wait_over", task_id=task_id, run_id=waiting[0])
        del self.compiling[task_id]  # no executor event came: go on without it
        return False

    # --- the tick --------------------------------------------------------------------

    async def recover(self) -> builtins.list[tuple[str, str]]:
        """Mark runs that outlived their deadline (plus grace) as failed: abandoned."""
        now = self.clock.now()
        grace = self.config.grace_s
        abandoned = []
        for task in self.app.catalog.snapshot():
            in_flight, since = task.state.in_flight, task.state.in_flight_since()
            if since is None or in_flight is None:
                continue
            deadline_s = in_flight.deadline_s
            if not recovery.is_abandoned(since, deadline_s, now, grace):
                continue
            run_id = in_flight.run_id
            # A run no runner ever said `started` of (every runner down) says nothing
            # about the task: it must not count toward max_failures.
            started = in_flight.started_at is not None
            result = await _in_thread(
                self.app.finish,
                task.task_id,
                run_id,
                now,
                status="failed",
                reason="abandoned",
                error=recovery.abandoned_error(since, deadline_s, grace, started=started),
                reported_by="scheduler",
                infrastructure=not started,
            )
            if result == "recorded":
                log.warning("run_abandoned", task_id=task.task_id, run_id=run_id)
                abandoned.append((task.task_id, run_id))
        return abandoned

    def _candidates(
        self, tasks: builtins.list[Task], now: datetime, broken: builtins.list[tuple[str, str]]
    ) -> builtins.list[Candidate]:
        """What is due now; tasks whose trigger cannot be computed go to `broken`."""
        found = []
        for task in tasks:
            state = task.state
            if state.in_flight is not None or state.deleted or self._compiling(task.task_id, now):
                continue
            if state.pending is not None:
                pending = state.pending
                found.append(Candidate(task.task_id, pending.at, pending.origin, pending.run_id))
                continue
            if state.status != "active":
                continue
            trigger, due_under = state.spec.trigger, state.trigger_in_force()
            if isinstance(trigger, ConditionTrigger):
                held = self.conditions.held(task)
                if held is not None:
                    found.append(Candidate(task.task_id, held, "condition", due_under=due_under))
                continue
            timing = state.trigger_state()
            try:
                due = next_due(trigger, timing)
                if due is not None and due <= now:
                    missed, slot = passed_slots(trigger, timing, now)
                    origin = recovery.scheduled_origin(missed)
                    found.append(
                        Candidate(task.task_id, due, origin, slot=slot, due_under=due_under)
                    )
            except TriggerError as exc:
                # One task's schedule must not stop every other task's.
                broken.append((task.task_id, exc.message))
        return found

    async def tick(self) -> TickReport:
        """One pass: recover abandoned runs, then dispatch what is due within the limits."""
        async with self._tick_lock:
            report = TickReport()
            await _in_thread(self.app.catalog.catch_up)
            report.abandoned = await self.recover()
            now = self.clock.now()
            tasks = self.app.catalog.snapshot()
            in_flight = sum(1 for t in tasks if t.state.in_flight is not None)
            broken: builtins.list[tuple[str, str]] = []
            candidates = self._candidates(tasks, now, broken)
            for task_id, error in broken:
                await self._pause_broken(task_id, error, now)
            decision = plan(
                candidates,
                in_flight=in_flight,
                max_concurrent=self.config.max_concurrent,
                spent_today_usd=self.app.catalog.spent_on(now),
                budget_usd=self.config.daily_budget_usd,
                day=utc_day(now),
            )
            for candidate, reason in decision.skip:
                await self._skip(candidate, reason, now)
                report.skipped.append((candidate.task_id, reason))
            for candidate in decision.dispatch:
                run_id = await self._dispatch(candidate, now)
                if run_id is not None:
                    report.dispatched.append((candidate.task_id, run_id))
            report.waiting = len(decision.waiting)
            if report.dispatched or report.skipped or report.abandoned:
                self.on_saved()
            return report

    async def _pause_broken(self, task_id: str, error: str, now: datetime) -> None:
        with structlog.contextvars.bound_contextvars(task_id=task_id):
            log.error("trigger_broken", error=error)
            reason = f"trigger can no longer be scheduled: {error}"
            try:
                await _in_thread(self.app.pause, task_id, reason, now)
            except ServiceError as exc:  # deleted meanwhile: nothing left to pause
                log.info("trigger_broken_not_paused", error=exc.message)
                return
            self.on_saved()

    async def _skip(self, candidate: Candidate, reason: str, now: datetime) -> None:
        with structlog.contextvars.bound_contextvars(task_id=candidate.task_id):
            # Every skip the plan makes is over budget, which lifts the next UTC day. As
            # for a dispatch, the task has the last word: a pause since the tick's look
            # (which skips a queued run itself) leaves nothing to skip here.
            skip = RunSkip(
                reason=reason,
                origin=candidate.origin,
                at=now,
                run_id=candidate.run_id,
                slot=candidate.slot,
                budget_from=next_utc_day(now),
                queued=candidate.run_id is not None,
                due_under=candidate.due_under,
            )
            skipped = await _in_thread(self.app.skip, candidate.task_id, skip)
            if not skipped:
                log.info("run_not_skipped", origin=candidate.origin, reason="task changed")
                return
            self.conditions.spent(candidate.task_id)
            log.warning("run_skipped", reason=reason, origin=candidate.origin)

    def _budget_left(self, now: datetime) -> float | None:
        budget = self.config.daily_budget_usd
        if budget is None:
            return None
        return round(max(budget - self.app.catalog.spent_on(now), 0.0), 8)

    async def _dispatch(self, candidate: Candidate, now: datetime) -> str | None:
        run_id = candidate.run_id or new_run_id(now)
        origin: RunOrigin = candidate.origin
        with structlog.contextvars.bound_contextvars(task_id=candidate.task_id, run_id=run_id):
            # The candidate came from the tick's snapshot; the task decides whether the
            # run may still go (paused or its queued run skipped meanwhile). A refused
            # run records nothing, so nothing goes to the work queue (see outbox).
            sent = await _in_thread(
                self.app.dispatch,
                candidate.task_id,
                run_id,
                origin,
                now,
                candidate.slot,
                queued=candidate.run_id is not None,
                due_under=candidate.due_under,
                budget_left_usd=self._budget_left(now),
            )
            self.conditions.spent(candidate.task_id)
            if sent:
                log.info("run_dispatched", origin=origin, due_at=candidate.due_at.isoformat())
                return run_id
            log.info("run_not_dispatched", origin=origin, reason="task changed since the tick")
            return None

    # --- conditions ------------------------------------------------------------------

    async def check_due_conditions(self) -> dict[str, bool]:
        """Check every condition that is due, and wait for them all; a true one is
        queued for dispatch. Returns task_id -> whether it held. For stepping the engine
        by hand (tests, the fixture writer): the service runs run_condition_checks."""
        results: dict[str, bool] = {}
        async with anyio.create_task_group() as tg:
            await self.start_condition_checks(tg, results)
        return results

    async def start_condition_checks(
        self, task_group: TaskGroup, results: dict[str, bool] | None = None
    ) -> None:
        """Start, in `task_group`, the check of every condition that is due and not
        already out (concurrently, bounded), without waiting for them: a check that
        hangs (up to the tool's timeout) holds back its own task only. A true one is
        queued for dispatch; `results` gets task_id -> whether it held."""
        if self.conditions.probe is None:
            return
        await _in_thread(self.app.catalog.catch_up)
        now = self.clock.now()
        broken: builtins.list[tuple[str, str]] = []
        self.conditions.start(task_group, now, results, broken)
        for task_id, error in broken:
            await self._pause_broken(task_id, error, now)

    # --- loops (the service runs these) ------------------------------------------------

    async def run_ticks(self) -> None:
        while True:
            self._wake = anyio.Event()
            try:
                await self.tick()
            except Exception:
                log.exception("tick_failed")
            with anyio.move_on_after(self.config.tick_s):
                await self._wake.wait()

    async def run_condition_checks(self) -> None:
        # Each round starts the checks that are due and goes on: a check still out at
        # the next round is not waited for, nor started again.
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    await self.start_condition_checks(tg)
                except Exception:
                    log.exception("condition_checks_failed")
                await anyio.sleep(self.config.tick_s)
