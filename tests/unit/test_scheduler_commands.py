"""Task commands against what a user of the scheduler would trip over: a condition input
too deep to load, run ids shared between tasks, a `once` time sent again, a queued run
dropped by a delete, a resumed interval, a long task list, and intake commands that come
twice. On the in-memory store with a manual clock; the rules that must hold on every
store are also in tests/integration/test_scheduler_rules_stores.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.runs import ListRuns, RunEvent
from contracts.tasks import (
    ConditionTrigger,
    Contains,
    CreateTask,
    IntervalTrigger,
    ListTasks,
    OnceTrigger,
    RunTask,
    TaskRef,
    TaskSpec,
    UpdateTask,
)
from services.kernel.codec import encode
from services.kernel.errors import ServiceError
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from services.scheduler.triggers import MAX_INPUT_NESTING
from tests.unit.conftest import T0
from tests.unit.test_scheduler_engine import outcome, scheduler, stored

pytestmark = pytest.mark.anyio


def nested(depth: int) -> Any:
    """A JSON value `depth` lists deep."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def condition(tool_input: dict[str, Any]) -> ConditionTrigger:
    return ConditionTrigger(
        tool="shell_exec", input=tool_input, predicate=Contains(text="x"), every_s=60
    )


# --- 1. a condition input nested too deeply ------------------------------------------------


async def test_a_condition_input_nested_too_deeply_is_refused_naming_the_field(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    deep = {"name": "deep", "prompt": "p", "trigger": {
        "kind": "condition", "tool": "shell_exec", "input": {"a": nested(600)},
        "predicate": {"op": "contains", "text": "x"}, "every_s": 60,
    }}  # fmt: skip
    with pytest.raises(ServiceError) as refused:
        await engine.handle("create", json.dumps(deep).encode())
    assert (refused.value.code, refused.value.field) == ("invalid_request", "trigger.input")
    assert str(MAX_INPUT_NESTING) in refused.value.message
    # At the limit it is fine; one level more is refused on update too.
    at_limit = condition({"a": nested(MAX_INPUT_NESTING - 1)})
    view = await engine.create(CreateTask(task_id="c", name="c", prompt="p", trigger=at_limit))
    with pytest.raises(ServiceError) as too_deep:
        await engine.update(
            UpdateTask(task_id="c", trigger=condition({"a": nested(MAX_INPUT_NESTING)}))
        )
    assert too_deep.value.field == "trigger.input"
    assert (await engine.get(TaskRef(task_id="c"))).version == view.version
    assert stored(app, Task.Defined) and not stored(app, Task.Updated)


async def test_a_stored_task_that_cannot_be_loaded_does_not_stop_the_others(
    app: Tasks, clock: ManualClock
) -> None:
    # Saved by a version without the nesting bound: loading it exhausts the stack.
    deep = TaskSpec(name="deep", prompt="p", trigger=condition({"a": nested(600)}))
    app.save(Task.open(Defined(task_id="deep", spec=deep, at=T0)))
    engine = scheduler(app, clock)
    await engine.create(CreateTask(name="fine", prompt="p", trigger=IntervalTrigger(every_s=60)))
    assert [t for t, _ in (await engine.tick()).dispatched] == ["fine"]
    assert [v.task_id for v in (await engine.list(ListTasks())).tasks] == ["fine"]
    # A scheduler starting on that store starts too.
    restarted = Tasks(env=dict(app.env))
    try:
        restarted.catalog.catch_up()
        assert set(restarted.catalog.tasks) == {"fine"}
    finally:
        restarted.close()


# --- 2. run ids are global -----------------------------------------------------------------


async def test_a_run_id_another_task_used_is_refused(app: Tasks, clock: ManualClock) -> None:
    engine = scheduler(app, clock)
    for name in ("a", "b", "c"):
        await engine.create(CreateTask(name=name, prompt="p"))
    await engine.run(RunTask(task_id="a", run_id="nightly-1"))
    assert (await engine.tick()).dispatched == [("a", "nightly-1")]
    with pytest.raises(ServiceError) as taken:
        await engine.run(RunTask(task_id="b", run_id="nightly-1"))
    assert (taken.value.code, taken.value.field) == ("conflict", "run_id")
    assert "'a'" in taken.value.message
    # Still taken once the run finished; the task that owns it may ask again (a no-op).
    await engine.on_run_event(outcome("a", "nightly-1", clock.now()))
    with pytest.raises(ServiceError):
        await engine.run(RunTask(task_id="b", run_id="nightly-1"))
    assert (await engine.run(RunTask(task_id="a", run_id="nightly-1"))).run_id == "nightly-1"
    # A run id only queued (waiting behind a run in flight) is taken too.
    await engine.run(RunTask(task_id="b", run_id="b-1"))
    await engine.tick()
    assert (await engine.run(RunTask(task_id="b", run_id="b-2"))).queued
    with pytest.raises(ServiceError):
        await engine.run(RunTask(task_id="c", run_id="b-2"))
    view = await engine.get(TaskRef(task_id="b"))
    assert (view.run_in_flight, view.run_pending) == ("b-1", "b-2")
    assert (await engine.get(TaskRef(task_id="c"))).runs_dispatched == 0


async def test_a_queued_run_skipped_by_a_pause_keeps_its_run_id(
    app: Tasks, clock: ManualClock
) -> None:
    """The skip published the run's terminal event (`<run_id>:finished`): a second run
    under that id would have its own ending dropped by the stream as a duplicate, and
    the runner takes the id for a run already ended."""
    engine = scheduler(app, clock, compile_wait_s=0)
    for name in ("a", "b"):
        await engine.create(CreateTask(name=name, prompt="p"))
    first = await engine.run(RunTask(task_id="a"))
    await engine.tick()
    assert (await engine.run(RunTask(task_id="a", run_id="nightly-2"))).queued
    await engine.pause(TaskRef(task_id="a", reason="maintenance"))
    await engine.resume(TaskRef(task_id="a"))
    await engine.on_run_event(outcome("a", first.run_id, clock.now()))
    # Asked again (a producer retrying): the run ended, skipped; it does not go again.
    again = await engine.run(RunTask(task_id="a", run_id="nightly-2"))
    assert (again.run_id, again.queued) == ("nightly-2", False)
    assert (await engine.tick()).dispatched == []
    # Another task cannot take the id either, and the ledger says how the run ended.
    with pytest.raises(ServiceError) as taken:
        await engine.run(RunTask(task_id="b", run_id="nightly-2"))
    assert (taken.value.code, taken.value.field) == ("conflict", "run_id")
    (skipped,) = [
        r for r in (await engine.runs(ListRuns(task_id="a"))).runs if r.run_id == "nightly-2"
    ]
    assert (skipped.status, skipped.reason, skipped.origin) == ("failed", "skipped", "manual")
    assert skipped.error is not None and "maintenance" in skipped.error


# --- 3. a `once` time sent again -----------------------------------------------------------


async def test_an_update_resending_a_once_time_without_offset_does_not_fire_it_again(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    naive = datetime(2025, 1, 6, 7, 0)  # no offset: read as UTC
    trigger = OnceTrigger(at=naive)
    await engine.create(CreateTask(task_id="once", name="once", prompt="p", trigger=trigger))
    ((_, run_id),) = (await engine.tick()).dispatched
    await engine.on_run_event(outcome("once", run_id, clock.now()))
    clock.advance(60)
    # A client sends the whole spec back with only the name changed.
    await engine.update(UpdateTask(task_id="once", name="renamed", trigger=trigger))
    assert stored(app, Task.Updated)[-1].changed == ["name"]
    assert (await engine.tick()).dispatched == []
    assert (await engine.get(TaskRef(task_id="once"))).runs_dispatched == 1


# --- 4. a delete skips the queued run, visibly -----------------------------------------------


async def test_deleting_a_task_skips_its_queued_run_with_an_event(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, compile_wait_s=0)  # (no compiler here to wait for)
    await engine.create(CreateTask(name="m", prompt="p"))
    first = await engine.run(RunTask(task_id="m"))
    await engine.tick()
    queued = await engine.run(RunTask(task_id="m"))
    assert queued.queued
    await engine.delete(TaskRef(task_id="m", reason="not needed"))
    (skipped,) = stored(app, Task.RunSkipped)
    assert skipped.run_id == queued.run_id
    assert "deleted" in skipped.reason and "not needed" in skipped.reason
    ended, told = messages_for(skipped, "m")
    assert told.subject == "rote.evt.task.m.run_skipped"
    # Whoever asked for the run holds its id: its own events say it ended, and why.
    assert ended.subject == f"rote.evt.run.m.{queued.run_id}.failed"
    assert isinstance(ended.event, RunEvent)
    assert (ended.event.status, ended.event.reason, ended.event.origin) == (
        "failed",
        "skipped",
        "manual",
    )
    assert ended.event.error == skipped.reason
    await engine.on_run_event(outcome("m", first.run_id, clock.now()))
    assert (await engine.tick()).dispatched == []


# --- 5. an interval task resumed after a long pause ----------------------------------------


async def test_a_resumed_interval_task_skips_the_slots_missed_while_paused(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    await engine.create(CreateTask(name="iv", prompt="p", trigger=IntervalTrigger(every_s=3600)))
    ((_, run_id),) = (await engine.tick()).dispatched  # 08:00
    await engine.on_run_event(outcome("iv", run_id, clock.now()))
    await engine.pause(TaskRef(task_id="iv"))
    clock.advance(10 * 3600 + 20 * 60)  # 18:20
    resumed = await engine.resume(TaskRef(task_id="iv"))
    # The first slot of the schedule (08:00 + k hours) at or after the resume.
    assert resumed.next_due_at == T0 + timedelta(hours=11)
    assert (await engine.tick()).dispatched == []
    clock.advance(40 * 60)  # 19:00
    ((_, again),) = (await engine.tick()).dispatched
    await engine.on_run_event(outcome("iv", again, clock.now()))
    runs = (await engine.runs(ListRuns(task_id="iv"))).runs
    assert [r.origin for r in runs] == ["schedule", "schedule"]
    # A scheduler down for hours (not a pause) still runs the missed schedule once.
    clock.advance(5 * 3600 + 30 * 60)
    report = await engine.tick()
    assert len(report.dispatched) == 1
    assert stored(app, Task.RunDispatched)[-1].origin == "catch_up"


# --- 6. tasks.list, a page at a time ----------------------------------------------------------


async def test_the_task_list_pages_by_task_id_and_fits_in_one_message(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    for i in range(12):
        await engine.create(CreateTask(task_id=f"t{i:02d}", name=f"t{i}", prompt="x" * 95_000))
    await engine.create(CreateTask(task_id="z", name="z", prompt="p"))
    await engine.pause(TaskRef(task_id="t03"))

    first = await engine.list(ListTasks())
    assert 0 < len(first.tasks) < 13 and first.next_after == first.tasks[-1].task_id
    assert len(encode(first)) < 1024 * 1024  # fits in a NATS message

    seen: list[str] = []
    page = ListTasks(limit=5)
    while True:
        reply = await engine.list(page)
        assert len(reply.tasks) <= 5
        seen += [t.task_id for t in reply.tasks]
        if reply.next_after is None:
            break
        page = ListTasks(limit=5, after=reply.next_after)
    assert seen == [*(f"t{i:02d}" for i in range(12)), "z"]
    paused = await engine.list(ListTasks(status="paused", after="t02"))
    assert ([t.task_id for t in paused.tasks], paused.next_after) == (["t03"], None)
    assert (await engine.list(ListTasks(after="t03", limit=1))).tasks[0].task_id == "t04"


# --- 8. intake commands that come twice --------------------------------------------------------


async def test_an_intake_command_sent_again_is_applied_once_whatever_its_verb(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    create = b'{"task_id": "x", "name": "x", "prompt": "p"}'
    await engine.handle("create", create, key="c-1")
    await engine.handle("update", b'{"task_id": "x", "prompt": "A"}', key="u-1")
    await engine.handle("update", b'{"task_id": "x", "prompt": "B"}', key="u-2")
    # u-1 again (redelivered, or stored again past the duplicate window): not undone.
    view = await engine.handle("update", b'{"task_id": "x", "prompt": "A"}', key="u-1")
    assert view.spec.prompt == "B"  # type: ignore[attr-defined]
    await engine.handle("pause", b'{"task_id": "x"}', key="p-1")
    await engine.handle("resume", b'{"task_id": "x"}', key="r-1")
    view = await engine.handle("pause", b'{"task_id": "x"}', key="p-1")
    assert view.status == "active"  # type: ignore[attr-defined]
    await engine.handle("delete", b'{"task_id": "x"}', key="d-1")
    # A copy of the create after the delete does not bring the task back...
    view = await engine.handle("create", create, key="c-1")
    assert view.status == "deleted"  # type: ignore[attr-defined]
    # ...and the delete sent again after a new create does not delete it.
    await engine.handle("create", create, key="c-2")
    view = await engine.handle("delete", b'{"task_id": "x"}', key="d-1")
    assert view.status == "active"  # type: ignore[attr-defined]
    assert len(stored(app, Task.Updated)) == 2 and len(stored(app, Task.Deleted)) == 1
    # A command that changed nothing counts as applied too: its copy cannot undo later ones.
    await engine.handle("resume", b'{"task_id": "x"}', key="r-2")  # already active
    await engine.handle("pause", b'{"task_id": "x"}', key="p-2")
    view = await engine.handle("resume", b'{"task_id": "x"}', key="r-2")
    assert view.status == "paused"  # type: ignore[attr-defined]
    # Endpoint commands carry no key: each is applied.
    assert (await engine.resume(TaskRef(task_id="x"))).status == "active"


async def test_a_run_command_sent_again_after_its_run_is_long_gone_does_not_run_again(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, compile_wait_s=0)  # (no compiler here to wait for)
    await engine.create(CreateTask(name="m", prompt="p"))
    first = await engine.run(RunTask(task_id="m"))
    await engine.tick()
    # Asked for while another run is pending: the answer names the pending run.
    await engine.run(RunTask(task_id="m"))
    queued = await engine.handle("run", b'{"task_id": "m"}', key="run-9")
    assert queued.queued  # type: ignore[attr-defined]
    await engine.on_run_event(outcome("m", first.run_id, clock.now()))
    ((_, pending),) = (await engine.tick()).dispatched
    await engine.on_run_event(outcome("m", pending, clock.now()))
    dispatched = len(stored(app, Task.RunDispatched))
    await engine.handle("run", b'{"task_id": "m"}', key="run-9")  # the copy
    assert (await engine.tick()).dispatched == []
    assert len(stored(app, Task.RunDispatched)) == dispatched
