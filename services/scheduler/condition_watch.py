"""When each task's condition is checked: which conditions are due a check, the checks
themselves (concurrent, bounded, one per task at a time), and what a check found, for as
long as it stands. A check is a probe (the trigger's tool output, read by a `Probe`:
condition_probe.ToolsProbe in the service) and a test of the predicate on that output
(conditions.holds, pure).

A check is awaited outside any lock, so a pause or update can land while it is out: what
it found (a condition that held, and when it was checked) holds only while the task is
still the task it checked (TaskState.basis).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from contracts.tasks import ConditionTrigger
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.secrets import redact
from services.kernel.text import cut_text
from services.scheduler import conditions
from services.scheduler.application import Tasks
from services.scheduler.task import Task
from services.scheduler.triggers import TriggerError, next_due

log = get_logger("rote.scheduler")

# What a check reads: (task_id, trigger) -> the trigger's tool output. Raising means
# the check could not be made (treated as "not true", tried again next time). A probe
# the tools service refuses outright (conditions.BrokenCheck), or a predicate that
# cannot be tested on the output it got (conditions.NeedsPath), pauses the task
# instead: every later check would fail the same way.
Probe = Callable[[str, ConditionTrigger], Awaitable[Any]]
# How much of an error a pause reason or a log line quotes.
MAX_ERROR_CHARS = 500


def _quoted(exc: Exception) -> str:
    """An error's text as a pause reason (kept in the task's events) quotes it: masked,
    since it may echo the trigger's input (a command, a URL with its password), and cut."""
    return cut_text(redact(str(exc)), MAX_ERROR_CHARS)


class ConditionWatch:
    """The condition tasks' checks: due when their trigger says, probed through `probe`
    (None: none are checked), and what each found."""

    def __init__(
        self,
        app: Tasks,
        probe: Probe | None,
        *,
        max_checks: int,
        on_saved: Callable[[], None],
        wake: Callable[[], None],
    ) -> None:
        self.app = app
        self.probe = probe
        self.on_saved = on_saved
        self.wake = wake
        self.last_checked: dict[str, datetime] = {}  # condition tasks: last check
        self.fired: dict[str, datetime] = {}  # condition held; waiting to dispatch
        # TaskState.basis() as the last check began.
        self.checked_on: dict[str, tuple[object, ...]] = {}
        # Condition tasks whose check is out (or waiting for a slot): one per task at a
        # time, and at most max_checks out at once, across rounds.
        self._checking: set[str] = set()
        self._slots = anyio.CapacityLimiter(max_checks)

    def forget(self, task: Task) -> None:
        """A changed definition starts its condition checks afresh; the same one again
        (a create retried, an update that changed nothing) keeps a condition that held."""
        if self.checked_on.get(task.task_id) == task.state.basis():
            return
        self.fired.pop(task.task_id, None)
        self.last_checked.pop(task.task_id, None)
        self.checked_on.pop(task.task_id, None)

    def spent(self, task_id: str) -> None:
        """The held condition led to a run or a skip (or the task paused): it is used."""
        self.fired.pop(task_id, None)

    def held(self, task: Task) -> datetime | None:
        """When the task's condition was found to hold, if that result still stands: one
        checked before a pause, resume or update of the task is dropped, not dispatched."""
        held = self.fired.get(task.task_id)
        if held is not None and self.checked_on.get(task.task_id) != task.state.basis():
            del self.fired[task.task_id]
            log.info("condition_result_dropped", task_id=task.task_id, reason="task changed")
            return None
        return held

    def due(
        self, now: datetime, broken: list[tuple[str, str]]
    ) -> list[tuple[Task, ConditionTrigger]]:
        """Conditions whose check is due and not out; tasks whose trigger cannot be
        computed go to `broken`."""
        due = []
        for task in self.app.catalog.snapshot():
            state = task.state
            trigger = state.spec.trigger
            if (
                not isinstance(trigger, ConditionTrigger)
                or task.task_id in self._checking
                or state.status != "active"
                or state.in_flight is not None
                or state.pending is not None
                or self.held(task) is not None
            ):
                continue
            try:
                when = next_due(trigger, state.trigger_state(self.last_checked.get(task.task_id)))
            except TriggerError as exc:
                broken.append((task.task_id, exc.message))
                continue
            if when is not None and when <= now:
                due.append((task, trigger))
        return due

    def start(
        self,
        task_group: TaskGroup,
        now: datetime,
        results: dict[str, bool] | None,
        broken: list[tuple[str, str]],
    ) -> None:
        """Start, in `task_group`, the check of every condition that is due (see
        Scheduler.start_condition_checks); tasks whose trigger cannot be computed go to
        `broken`."""

        async def one(task: Task, trigger: ConditionTrigger) -> None:
            try:
                async with self._slots:
                    held = await self._check(task, trigger, now)
            except Exception:  # one task's check must not stop the others'
                log.exception("condition_check_crashed", task_id=task.task_id)
                return
            finally:
                self._checking.discard(task.task_id)
            if results is not None:
                results[task.task_id] = held
            if held:
                self.wake()

        due = self.due(now, broken)
        self._checking.update(task.task_id for task, _ in due)
        for task, trigger in due:
            task_group.start_soon(one, task, trigger)

    async def _check(self, task: Task, trigger: ConditionTrigger, now: datetime) -> bool:
        assert self.probe is not None
        task_id = task.task_id
        with structlog.contextvars.bound_contextvars(task_id=task_id):
            self.last_checked[task_id] = now
            self.checked_on[task_id] = task.state.basis()
            try:
                output = await self.probe(task_id, trigger)
            except conditions.BrokenCheck as exc:
                # Every later check would be refused the same way, silently.
                why = f"the condition's check ({trigger.tool}) cannot be made: {_quoted(exc)}"
                await self._pause_for_trigger(task_id, trigger, why, "condition_check_refused", now)
                return False
            except Exception as exc:  # the tool call failed: it may work next time
                log.warning("condition_check_failed", tool=trigger.tool, error=_quoted(exc))
                return False
            try:
                held = conditions.holds(trigger.predicate, output)
            except conditions.NeedsPath as exc:
                # Left active it would check forever and never fire.
                why = (
                    f"the condition's predicate cannot be tested on {trigger.tool}'s output:"
                    f" {_quoted(exc)}"
                )
                await self._pause_for_trigger(task_id, trigger, why, "condition_untestable", now)
                return False
            except Exception as exc:  # this output lacks it (no number yet): the next may not
                log.warning("condition_check_failed", tool=trigger.tool, error=_quoted(exc))
                return False
            log.info("condition_checked", tool=trigger.tool, held=held)
            if held:
                self.fired[task_id] = now
            return held

    async def _pause_for_trigger(
        self, task_id: str, trigger: ConditionTrigger, why: str, event: str, now: datetime
    ) -> None:
        """Pause a task whose trigger is wrong (`why`), saying so and what to do."""
        log.error(event, tool=trigger.tool, error=why)
        reason = f"{why}; update the trigger, then resume the task"
        pause = partial(self.app.pause_for_trigger, task_id, trigger, reason, now)
        try:
            paused = await anyio.to_thread.run_sync(pause)
        except ServiceError as exc:  # gone meanwhile: nothing left to pause
            log.info("condition_pause_skipped", error=exc.message)
            return
        if paused:
            self.on_saved()
