"""What a late or skipped run does to a schedule: a late run uses up its slot, not the
schedule's phase (nor, on the night clocks go back, a second firing); a run skipped for
the budget does not use up a `once` nor start a condition's cooldown, and holds the
condition's checks until the budget's next day (one skip, not one per check); events stored
before slots were recorded still decode and schedule as they did."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from contracts.runs import RunEvent
from contracts.tasks import (
    Above,
    ConditionTrigger,
    CreateTask,
    CronTrigger,
    IntervalTrigger,
    ManualTrigger,
    OnceTrigger,
    RunTask,
    TaskRef,
    TaskSpec,
    UpdateTask,
)
from services.kernel.errors import ServiceError
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from services.scheduler.triggers import TriggerState, next_due, passed_slots
from tests.unit.conftest import T0

pytestmark = pytest.mark.anyio
NEW_YORK = "America/New_York"


def spec(name: str, **fields: Any) -> CreateTask:
    return CreateTask(name=name, prompt=f"do {name}", **fields)


def done(task_id: str, run_id: str, at: datetime, cost: float = 0.0) -> RunEvent:
    # A replay: nothing waits for a compiled executor after it.
    return RunEvent(
        task_id=task_id,
        run_id=run_id,
        event="completed",
        status="completed",
        at=at,
        cost_usd=cost,
        source="replay",
    )


def stored(app: Tasks, kind: type) -> list[Any]:
    events = (
        app.mapper.to_domain_event(n)
        for n in app.recorder.select_notifications(start=1, limit=10**6)
    )
    return [e for e in events if isinstance(e, kind)]


async def due_of(engine: Scheduler, task_id: str) -> datetime | None:
    return (await engine.get(TaskRef(task_id=task_id))).next_due_at


async def spend(engine: Scheduler, clock: ManualClock, cost: float) -> None:
    """Spend `cost` today with a manual run of its own task."""
    await engine.create(spec("spender", trigger=ManualTrigger()))
    run_id = (await engine.run(RunTask(task_id="spender"))).run_id
    assert ("spender", run_id) in (await engine.tick()).dispatched
    await engine.on_run_event(done("spender", run_id, clock.now(), cost))


async def test_a_daily_cron_sent_out_late_does_not_run_again_when_clocks_go_back(
    app: Tasks,
) -> None:
    clock = ManualClock(datetime(2025, 11, 2, 5, 0, tzinfo=UTC))  # 01:00 EDT
    engine = Scheduler(app, clock, SchedulerConfig(max_concurrent=1))
    await engine.create(spec("busy", trigger=ManualTrigger(), deadline_s=7200))
    busy = (await engine.run(RunTask(task_id="busy"))).run_id
    await engine.tick()
    await engine.create(spec("nightly", trigger=CronTrigger(expr="30 1 * * *", tz=NEW_YORK)))

    clock.set(datetime(2025, 11, 2, 5, 30, tzinfo=UTC))  # 01:30 EDT: no free slot
    assert (await engine.tick()).waiting == 1
    clock.set(datetime(2025, 11, 2, 6, 5, tzinfo=UTC))  # 01:05 EST, the hour again
    await engine.on_run_event(done("busy", busy, clock.now()))
    ((_, run_id),) = (await engine.tick()).dispatched
    clock.advance(60)
    await engine.on_run_event(done("nightly", run_id, clock.now()))

    clock.set(datetime(2025, 11, 2, 6, 31, tzinfo=UTC))  # 01:31 EST
    assert (await engine.tick()).dispatched == []
    assert await due_of(engine, "nightly") == datetime(2025, 11, 3, 6, 30, tzinfo=UTC)


async def test_a_late_interval_run_keeps_the_schedules_phase(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock)
    await engine.create(spec("poll", trigger=IntervalTrigger(every_s=60)))
    sent = []
    for _ in range(5):
        ((_, run_id),) = (await engine.tick()).dispatched
        sent.append((clock.now() - T0).total_seconds())
        clock.advance(5)
        await engine.on_run_event(done("poll", run_id, clock.now()))
        due = await due_of(engine, "poll")
        assert due is not None
        clock.set(due + timedelta(seconds=0.9))  # every tick lands a little late
    # Always 0.9 s after a slot, not 0.9 s more each time.
    assert sent == [0, 60.9, 120.9, 180.9, 240.9]


async def test_an_interval_down_for_many_slots_runs_once_then_at_the_next_slot(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock)
    await engine.create(spec("poll", trigger=IntervalTrigger(every_s=60)))
    ((_, run_id),) = (await engine.tick()).dispatched
    await engine.on_run_event(done("poll", run_id, clock.now()))

    clock.set(T0 + timedelta(seconds=1000))  # 16 slots missed
    ((_, run_id),) = (await engine.tick()).dispatched
    assert stored(app, Task.RunDispatched)[-1].origin == "catch_up"
    await engine.on_run_event(done("poll", run_id, clock.now()))
    assert (await engine.tick()).dispatched == []
    assert await due_of(engine, "poll") == T0 + timedelta(seconds=1020)


async def test_a_once_skipped_for_the_budget_runs_when_the_budget_allows(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig(daily_budget_usd=1.0))
    await spend(engine, clock, 5.0)
    await engine.create(spec("once", trigger=OnceTrigger(at=T0 + timedelta(hours=1))))

    clock.set(T0 + timedelta(hours=1))
    assert [t for t, _ in (await engine.tick()).skipped] == ["once"]
    (skipped,) = stored(app, Task.RunSkipped)
    assert "daily budget reached" in skipped.reason
    assert "runs when the budget allows, from 2025-01-07T00:00:00+00:00" in skipped.reason
    # A slot, not a run anyone holds an id for: a task event, no run event.
    assert [m.subject for m in messages_for(skipped, "once")] == ["rote.evt.task.once.run_skipped"]
    view = await engine.get(TaskRef(task_id="once"))
    assert view.status == "active" and view.next_due_at == datetime(2025, 1, 7, tzinfo=UTC)
    clock.advance(3600)
    assert (await engine.tick()).skipped == []  # said once, not every tick

    clock.set(datetime(2025, 1, 7, 0, 0, 1, tzinfo=UTC))
    ((_, run_id),) = (await engine.tick()).dispatched
    await engine.on_run_event(done("once", run_id, clock.now()))
    assert await due_of(engine, "once") is None  # used up by the run that went out


async def test_a_condition_skipped_for_the_budget_waits_for_the_next_day_without_a_cooldown(
    app: Tasks, clock: ManualClock
) -> None:
    checks: list[datetime] = []

    async def check(task_id: str, trigger: Any) -> Any:
        checks.append(clock.now())
        return "95"

    engine = Scheduler(app, clock, SchedulerConfig(daily_budget_usd=1.0), probe=check)
    await spend(engine, clock, 5.0)
    # A cooldown longer than the wait: had the skip started it, midnight would not check.
    trigger = ConditionTrigger(tool="t", predicate=Above(value=90), every_s=1, cooldown_s=86_400)
    await engine.create(spec("hot", trigger=trigger))
    assert await engine.check_due_conditions() == {"hot": True}
    assert [t for t, _ in (await engine.tick()).skipped] == ["hot"]
    midnight = datetime(2025, 1, 7, tzinfo=UTC)
    assert await due_of(engine, "hot") == midnight

    # Nothing could go out before the budget's day ends: no checks, one skip.
    for _ in range(100):
        clock.advance(60)
        assert await engine.check_due_conditions() == {}
        assert (await engine.tick()).skipped == []
    (skipped,) = stored(app, Task.RunSkipped)
    assert "checked again from 2025-01-07T00:00:00+00:00" in skipped.reason
    assert len(checks) == 1

    clock.set(midnight)
    assert await engine.check_due_conditions() == {"hot": True}
    assert [t for t, _ in (await engine.tick()).dispatched] == ["hot"]


@pytest.mark.parametrize("how", ["update", "resume"])
async def test_an_update_or_resume_ends_a_conditions_wait_for_the_budget(
    app: Tasks, clock: ManualClock, how: str
) -> None:
    async def check(task_id: str, trigger: Any) -> Any:
        return "95"

    engine = Scheduler(app, clock, SchedulerConfig(daily_budget_usd=1.0), probe=check)
    await spend(engine, clock, 5.0)
    trigger = ConditionTrigger(tool="t", predicate=Above(value=90), every_s=60)
    await engine.create(spec("hot", trigger=trigger))
    await engine.check_due_conditions()
    assert [t for t, _ in (await engine.tick()).skipped] == ["hot"]

    clock.advance(60)
    if how == "update":
        await engine.update(UpdateTask(task_id="hot", prompt="cool it down"))
    else:
        await engine.pause(TaskRef(task_id="hot"))
        await engine.resume(TaskRef(task_id="hot"))
    due = await due_of(engine, "hot")
    assert due is not None and due <= clock.now()
    assert await engine.check_due_conditions() == {"hot": True}
    assert [t for t, _ in (await engine.tick()).skipped] == ["hot"]  # still over it
    assert len(stored(app, Task.RunSkipped)) == 2


async def test_a_shell_exec_condition_with_a_path_its_output_never_has_is_refused(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock)
    trigger = ConditionTrigger(
        tool="shell_exec",
        input={"command": "df --output=pcent /"},
        predicate=Above(value=90, path="stdot"),
        every_s=60,
    )
    with pytest.raises(ServiceError) as caught:
        await engine.create(spec("disk", trigger=trigger))
    assert caught.value.field == "trigger.predicate.path"
    assert "exit_code, stdout, stderr" in caught.value.message


async def test_a_stored_trigger_a_later_rule_refuses_does_not_block_other_edits(
    app: Tasks, clock: ManualClock
) -> None:
    # Stored before shell_exec paths were checked (the aggregate, not a command).
    typo = ConditionTrigger(
        tool="shell_exec",
        input={"command": "df --output=pcent /"},
        predicate=Above(value=90, path="stdot"),
        every_s=60,
    )
    app.save(
        Task.open(
            Defined(task_id="disk", spec=TaskSpec(name="disk", prompt="p", trigger=typo), at=T0)
        )
    )
    engine = Scheduler(app, clock)
    view = await engine.update(UpdateTask(task_id="disk", prompt="clean up", max_failures=5))
    assert view.spec.prompt == "clean up" and view.spec.max_failures == 5
    # Sent again unchanged, the trigger is still not a change to refuse.
    view = await engine.update(UpdateTask(task_id="disk", trigger=typo, prompt="clean /tmp"))
    assert view.spec.prompt == "clean /tmp"
    # A trigger that changes is checked.
    with pytest.raises(ServiceError) as caught:
        await engine.update(
            UpdateTask(task_id="disk", trigger=msgspec.structs.replace(typo, every_s=30))
        )
    assert caught.value.field == "trigger.predicate.path"


def test_a_run_dispatched_before_slots_were_recorded_still_schedules(app: Tasks) -> None:
    # Stored by an earlier version: no `slot`. The schedule goes on from the time the
    # run went out, as it did then.
    app.create(spec("daily", trigger=CronTrigger(expr="0 9 * * *")), T0)
    app.dispatch(
        "daily", "r1", "schedule", T0 + timedelta(hours=1, minutes=5), T0 + timedelta(hours=1)
    )
    task = app.get("daily")
    (record,) = [
        n
        for n in app.recorder.select_notifications(start=1, limit=100)
        if n.topic.endswith("RunDispatched")
    ]
    state = app.mapper.transcoder.decode(record.state)
    # As that version stored it: no `slot`, no class_version, the spec itself.
    del state["slot"], state["class_version"]
    state["spec"] = msgspec.json.decode(state["spec"], type=TaskSpec)
    old = app.mapper.to_domain_event(
        dataclasses.replace(record, state=app.mapper.transcoder.encode(state))
    )
    rebuilt = app.repository.get(task.id, version=old.originator_version - 1)
    old.mutate(rebuilt)
    assert rebuilt.state.trigger_state().last_slot is None
    assert rebuilt.state.trigger_state().last_fired == T0 + timedelta(hours=1, minutes=5)


def test_a_catch_up_run_uses_up_every_missed_slot() -> None:
    hourly = CronTrigger(expr="0 * * * *")
    state = TriggerState(set_at=T0, last_fired=T0, last_slot=T0)
    now = T0 + timedelta(hours=5, minutes=30)
    assert passed_slots(hourly, state, now) == (5, T0 + timedelta(hours=5))
    after = TriggerState(set_at=T0, last_fired=now, last_slot=T0 + timedelta(hours=5))
    assert next_due(hourly, after) == T0 + timedelta(hours=6)
