"""What one task can do to the scheduler: a spec too large for the bus is refused with
`too_large` (on create, update and the intake's raw JSON), and a trigger whose next time
is out of the datetime range is refused (or, when stored by an older version, pauses
that task alone) instead of failing every tick and every list."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from contracts.runs import RunEvent
from contracts.tasks import (
    MAX_SPEC_BYTES,
    ConditionTrigger,
    Contains,
    CreateTask,
    IntervalTrigger,
    ListTasks,
    RunTask,
    TaskRef,
    TaskSpec,
)
from services.kernel.errors import ServiceError
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from tests.unit.conftest import T0

pytestmark = pytest.mark.anyio


def completed(task_id: str, run_id: str, at: datetime) -> RunEvent:
    return RunEvent(task_id=task_id, run_id=run_id, event="completed", status="completed", at=at)


# --- specs too large for the bus ---------------------------------------------------------

# Each is far under NATS' 1 MiB as a request, and over the spec limit once encoded; the
# prompts stay under the contract's own length limit (100 000 characters).
TOO_LARGE: dict[str, dict[str, Any]] = {
    "multibyte prompt": {"prompt": "€" * 90_000},  # 3 bytes a character
    "escaped prompt": {"prompt": "\x01" * 50_000},  # 6 bytes a character as JSON
    "condition input": {
        "trigger": {
            "kind": "condition",
            "tool": "browser_extract",
            "input": {"selector": "x" * 300_000},
            "url": "https://shop.example/item",
            "predicate": {"op": "contains", "text": "in stock"},
            "every_s": 60,
        }
    },
    "allowed_tools": {"allowed_tools": [f"tool_{i:03d}_" + "x" * 3_000 for i in range(100)]},
}


@pytest.mark.parametrize("fields", TOO_LARGE.values(), ids=TOO_LARGE.keys())
async def test_a_spec_too_large_for_the_bus_is_refused_with_its_size(
    app: Tasks, clock: ManualClock, fields: dict[str, Any]
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig())
    body = json.dumps({"name": "big", "prompt": "p", **fields}).encode()
    with pytest.raises(ServiceError) as caught:
        await engine.handle("create", body)  # the intake's path; the endpoint's is create()
    error = caught.value
    assert (error.code, error.status, error.field) == ("too_large", 413, "spec")
    assert error.details is not None and error.details["limit"] == MAX_SPEC_BYTES
    assert error.details["size"] > MAX_SPEC_BYTES
    assert f"{error.details['size']} bytes" in error.message and str(MAX_SPEC_BYTES) in (
        error.message
    )
    assert app.catalog.snapshot() == []  # nothing recorded
    assert (await engine.list(ListTasks())).tasks == []


async def test_an_update_that_makes_the_spec_too_large_is_refused(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig())
    # Each half fits; together they do not.
    half = MAX_SPEC_BYTES // 2 + 1_000
    created = await engine.create(CreateTask(name="grows", prompt="€" * (half // 3)))
    tools = json.dumps({"task_id": "grows", "allowed_tools": ["y" * half]}).encode()
    with pytest.raises(ServiceError) as caught:
        await engine.handle("update", tools)
    assert (caught.value.code, caught.value.field) == ("too_large", "spec")
    assert await engine.get(TaskRef(task_id="grows")) == created


# --- triggers out of the datetime range --------------------------------------------------

OUT_OF_RANGE = {
    "interval 1e12": ({"kind": "interval", "every_s": 1e12}, "trigger.every_s"),
    "interval 1e308": ({"kind": "interval", "every_s": 1e308}, "trigger.every_s"),
    "condition every_s": (
        {
            "kind": "condition",
            "tool": "shell_exec",
            "predicate": {"op": "above", "value": 90},
            "every_s": 1e12,
        },
        "trigger.every_s",
    ),
    "condition cooldown_s": (
        {
            "kind": "condition",
            "tool": "shell_exec",
            "predicate": {"op": "above", "value": 90},
            "every_s": 60,
            "cooldown_s": 1e308,
        },
        "trigger.cooldown_s",
    ),
    "once at year 0": ({"kind": "once", "at": "0001-01-01T00:00:00+14:00"}, "trigger.at"),
    "once at year 10000": ({"kind": "once", "at": "9999-12-31T23:59:59-14:00"}, "trigger.at"),
}


@pytest.mark.parametrize(("trigger", "field"), OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
async def test_a_trigger_out_of_the_datetime_range_is_refused_naming_the_field(
    app: Tasks, clock: ManualClock, trigger: dict[str, Any], field: str
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig())
    body = json.dumps({"name": "far", "prompt": "p", "trigger": trigger}).encode()
    with pytest.raises(ServiceError) as caught:
        await engine.handle("create", body)
    assert (caught.value.code, caught.value.status, caught.value.field) == (
        "invalid_request",
        400,
        field,
    )
    await engine.create(CreateTask(name="near", prompt="p"))
    with pytest.raises(ServiceError) as update:
        await engine.handle("update", json.dumps({"task_id": "near", "trigger": trigger}).encode())
    assert (update.value.code, update.value.field) == ("invalid_request", field)


async def test_a_stored_interval_too_long_to_compute_pauses_only_its_task(
    app: Tasks, clock: ManualClock
) -> None:
    # Saved by a version without the bounds: after the first run, `last run + every_s`
    # is past the year 9999.
    engine = Scheduler(app, clock, SchedulerConfig(max_concurrent=10))
    for every in (1e12, 1e308):
        app.save(
            Task.open(
                Defined(
                    task_id=f"far-{every:g}",
                    spec=TaskSpec(name="far", prompt="p", trigger=IntervalTrigger(every_s=every)),
                    at=T0,
                )
            )
        )
    await engine.create(CreateTask(name="fine", prompt="p", trigger=IntervalTrigger(every_s=60)))
    first = (await engine.tick()).dispatched
    assert sorted(t for t, _ in first) == ["far-1e+12", "far-1e+308", "fine"]
    clock.advance(5)
    for task_id, run_id in first:
        await engine.on_run_event(completed(task_id, run_id, clock.now()))

    clock.advance(55)
    ((task_id, run_id),) = (await engine.tick()).dispatched
    assert task_id == "fine"
    views = {v.task_id: v for v in (await engine.list(ListTasks(status="paused"))).tasks}
    assert sorted(views) == ["far-1e+12", "far-1e+308"]
    for view in views.values():
        assert "every_s" in (view.status_reason or "") and view.next_due_at is None
    assert (await engine.get(TaskRef(task_id="fine"))).status == "active"
    assert len((await engine.list(ListTasks())).tasks) == 3
    await engine.on_run_event(completed("fine", run_id, clock.now()))
    clock.advance(60)
    assert [t for t, _ in (await engine.tick()).dispatched] == ["fine"]


async def test_a_stored_condition_cooldown_too_long_to_compute_pauses_its_task(
    app: Tasks, clock: ManualClock
) -> None:
    async def check(task_id: str, trigger: Any) -> Any:
        return {"text": "In stock"}

    engine = Scheduler(app, clock, SchedulerConfig(), probe=check)
    trigger = ConditionTrigger(
        tool="browser_extract",
        url="https://shop.example/item",
        predicate=Contains(text="In stock", path="text"),
        every_s=60,
        cooldown_s=1e308,
    )
    app.save(
        Task.open(
            Defined(
                task_id="restock", spec=TaskSpec(name="restock", prompt="p", trigger=trigger), at=T0
            )
        )
    )
    assert await engine.check_due_conditions() == {"restock": True}
    ((_, run_id),) = (await engine.tick()).dispatched
    await engine.on_run_event(completed("restock", run_id, clock.now()))
    clock.advance(60)
    assert await engine.check_due_conditions() == {}  # paused, not checked; no error raised
    view = await engine.get(TaskRef(task_id="restock"))
    assert view.status == "paused" and "cooldown_s" in (view.status_reason or "")
    assert (await engine.list(ListTasks(status="paused"))).tasks == [view]


async def test_a_huge_deadline_does_not_stop_the_tick(app: Tasks, clock: ManualClock) -> None:
    # Recovery asks whether a run outlived its deadline on every tick.
    engine = Scheduler(app, clock, SchedulerConfig(max_concurrent=10))
    await engine.create(CreateTask(name="slow", prompt="p", deadline_s=1e308))
    await engine.create(CreateTask(name="fine", prompt="p", trigger=IntervalTrigger(every_s=60)))
    await engine.run(RunTask(task_id="slow"))
    dispatched = dict((await engine.tick()).dispatched)
    assert sorted(dispatched) == ["fine", "slow"]
    await engine.on_run_event(completed("fine", dispatched["fine"], clock.now()))
    clock.advance(60)
    report = await engine.tick()
    assert report.abandoned == [] and [t for t, _ in report.dispatched] == ["fine"]
