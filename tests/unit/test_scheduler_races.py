"""Commands that land while the scheduler is between looking and acting: during a
condition's tool call, or between the tick's snapshot and a run's dispatch. What the
operator said last wins: a paused or changed task sends out nothing decided before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.runs import ListRuns, RunEvent
from contracts.tasks import (
    ConditionTrigger,
    Contains,
    CreateTask,
    IntervalTrigger,
    ManualTrigger,
    OnceTrigger,
    RunTask,
    TaskRef,
    UpdateTask,
)
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.task import Task

pytestmark = pytest.mark.anyio


def spec(name: str, **fields: Any) -> CreateTask:
    return CreateTask(name=name, prompt=f"do {name}", **fields)


def in_stock(text: str = "In stock") -> ConditionTrigger:
    return ConditionTrigger(
        tool="browser_extract",
        input={"selector": "#stock"},
        url="https://shop.example/item",
        predicate=Contains(text=text),
        every_s=60,
        cooldown_s=0,
    )


def events_of(app: Tasks, run_id: str) -> list[str]:
    return [
        type(e).__name__
        for e in (
            app.mapper.to_domain_event(n)
            for n in app.recorder.select_notifications(start=1, limit=10**6)
        )
        if isinstance(e, Task.Event) and getattr(e, "run_id", None) == run_id
    ]


def dispatched(app: Tasks) -> int:
    return sum(
        1
        for n in app.recorder.select_notifications(start=1, limit=10**6)
        if n.topic.endswith("RunDispatched")
    )


class Page:
    """The condition's tool: returns `text`; `during` runs while the call is out."""

    def __init__(self, text: str = "In stock") -> None:
        self.text = text
        self.calls = 0
        self.during: Callable[[], Awaitable[object]] | None = None

    async def __call__(self, task_id: str, trigger: ConditionTrigger) -> str:
        self.calls += 1
        if self.during is not None:
            during, self.during = self.during, None
            await during()
        return self.text


async def test_a_condition_that_held_before_a_pause_does_not_run_after_the_resume(
    app: Tasks, clock: ManualClock
) -> None:
    page = Page()
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0), probe=page)
    await engine.create(spec("restock", trigger=in_stock()))
    page.during = lambda: engine.pause(TaskRef(task_id="restock"))
    await engine.check_due_conditions()
    assert (await engine.tick()).dispatched == []  # paused

    clock.advance(3600)
    await engine.resume(TaskRef(task_id="restock"))
    # An hour-old answer is not the condition now: it is checked again first.
    assert (await engine.tick()).dispatched == []
    page.text = "Sold out"
    assert await engine.check_due_conditions() == {"restock": False}
    assert (await engine.tick()).dispatched == []
    assert dispatched(app) == 0


async def test_a_condition_checked_under_the_old_trigger_does_not_run_after_an_update(
    app: Tasks, clock: ManualClock
) -> None:
    page = Page("In stock")
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0), probe=page)
    await engine.create(spec("restock", trigger=in_stock()))
    new = in_stock("Back in stock next week")
    page.during = lambda: engine.update(UpdateTask(task_id="restock", trigger=new))
    await engine.check_due_conditions()
    assert (await engine.tick()).dispatched == []
    # Checked under the new trigger, the same page does not satisfy it.
    assert await engine.check_due_conditions() == {"restock": False}
    assert (await engine.tick()).dispatched == []
    assert dispatched(app) == 0


async def test_a_pause_between_the_tick_and_the_dispatch_sends_no_run(
    app: Tasks, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0))
    await engine.create(spec("poll", trigger=IntervalTrigger(every_s=60)))
    dispatch = app.dispatch

    def paused_first(task_id: str, *args: Any, **kwargs: Any) -> bool:
        app.pause(task_id, "maintenance", clock.now())  # an endpoint's pause lands here
        return dispatch(task_id, *args, **kwargs)

    monkeypatch.setattr(app, "dispatch", paused_first)
    assert (await engine.tick()).dispatched == []
    view = await engine.get(TaskRef(task_id="poll"))
    assert view.status == "paused" and view.run_in_flight is None
    assert dispatched(app) == 0
    assert (await engine.runs(ListRuns(task_id="poll"))).runs == []

    monkeypatch.setattr(app, "dispatch", dispatch)
    clock.advance(30)
    await engine.resume(TaskRef(task_id="poll"))
    assert [task for task, _ in (await engine.tick()).dispatched] == ["poll"]


async def test_a_queued_run_skipped_by_a_pause_before_its_dispatch_does_not_go_out(
    app: Tasks, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0))
    await engine.create(spec("manual", trigger=ManualTrigger()))
    await engine.run(RunTask(task_id="manual", run_id="r-b"))
    dispatch = app.dispatch

    def paused_first(task_id: str, *args: Any, **kwargs: Any) -> bool:
        app.pause(task_id, "maintenance", clock.now())
        return dispatch(task_id, *args, **kwargs)

    monkeypatch.setattr(app, "dispatch", paused_first)
    assert (await engine.tick()).dispatched == []
    monkeypatch.setattr(app, "dispatch", dispatch)
    # Pausing skips a run still queued: skipped, and never sent out after its skip.
    assert events_of(app, "r-b") == ["RunRequested", "RunSkipped"]
    await engine.resume(TaskRef(task_id="manual"))
    assert (await engine.tick()).dispatched == []
    assert dispatched(app) == 0


def finished(task_id: str, run_id: str, at: datetime) -> RunEvent:
    return RunEvent(task_id=task_id, run_id=run_id, event="completed", status="completed", at=at)


async def test_a_create_or_update_that_changes_nothing_keeps_a_condition_that_held(
    app: Tasks, clock: ManualClock
) -> None:
    page = Page()
    engine = Scheduler(app, clock, SchedulerConfig(max_concurrent=1, compile_wait_s=0), probe=page)
    await engine.create(spec("busy", trigger=ManualTrigger()))
    busy = await engine.run(RunTask(task_id="busy"))
    await engine.tick()  # the one slot is taken
    restock = spec("restock", trigger=in_stock())
    await engine.create(restock)
    assert await engine.check_due_conditions() == {"restock": True}  # waits for the slot

    await engine.create(restock)  # a producer's retry
    await engine.create(restock, key="intake-1")  # ... through the intake
    await engine.update(UpdateTask(task_id="restock", prompt="do restock"), key="intake-2")
    clock.advance(10)
    await engine.on_run_event(finished("busy", busy.run_id, clock.now()))
    assert [task for task, _ in (await engine.tick()).dispatched] == ["restock"]
    assert page.calls == 1  # went out on the check that held, not a second one


def skipped(app: Tasks) -> list[str]:
    """The reasons of every RunSkipped recorded, in order."""
    return [
        e.reason
        for e in (
            app.mapper.to_domain_event(n)
            for n in app.recorder.select_notifications(start=1, limit=10**6)
        )
        if type(e).__name__ == "RunSkipped"
    ]


@pytest.mark.parametrize("queued", [False, True], ids=["scheduled", "queued"])
async def test_a_pause_between_the_tick_and_an_over_budget_skip_records_one_skip(
    app: Tasks, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, queued: bool
) -> None:
    """Over budget, the tick skips what is due; a pause landing first has the last
    word: the queued run is skipped once (by the pause), a paused task's slot not at all."""
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0, daily_budget_usd=0.0))
    trigger = ManualTrigger() if queued else IntervalTrigger(every_s=60)
    await engine.create(spec("poll", trigger=trigger))
    if queued:  # queued before the budget ran out (the endpoint would refuse it now)
        app.request_run("poll", "r-b", "manual", clock.now())
    skip = app.skip

    def paused_first(task_id: str, *args: Any, **kwargs: Any) -> bool:
        app.pause(task_id, "maintenance", clock.now())  # an endpoint's pause lands here
        return skip(task_id, *args, **kwargs)

    monkeypatch.setattr(app, "skip", paused_first)
    await engine.tick()
    reasons = skipped(app)
    if queued:
        assert len(reasons) == 1 and "task paused" in reasons[0]
    else:
        assert reasons == []
    assert dispatched(app) == 0


@pytest.mark.parametrize("act", ["dispatch", "skip"])
async def test_an_update_of_the_trigger_between_the_tick_and_acting_waits_for_the_new_one(
    app: Tasks, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, act: str
) -> None:
    """The tick found the interval due; the operator moves the task to a `once` next
    week before the run goes out (or, over budget, is skipped). Sent under the new
    trigger, the run would use it up: the once would count as fired today and never run."""
    budget = 0.0 if act == "skip" else None
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0, daily_budget_usd=budget))
    await engine.create(spec("poll", trigger=IntervalTrigger(every_s=60)))
    next_week = clock.now() + timedelta(days=7)
    acting = getattr(app, act)

    def updated_first(task_id: str, *args: Any, **kwargs: Any) -> bool:
        # An endpoint's update lands here, at the very time the task was created.
        app.update(UpdateTask(task_id=task_id, trigger=OnceTrigger(at=next_week)), clock.now())
        return acting(task_id, *args, **kwargs)

    monkeypatch.setattr(app, act, updated_first)
    report = await engine.tick()
    monkeypatch.setattr(app, act, acting)
    assert (report.dispatched, skipped(app), dispatched(app)) == ([], [], 0)
    assert (await engine.tick()).dispatched == []  # the new trigger is not due yet

    clock.set(next_week + timedelta(minutes=1))
    engine.config = SchedulerConfig(compile_wait_s=0)  # the budget allows runs again
    assert [task for task, _ in (await engine.tick()).dispatched] == ["poll"]


async def test_a_run_id_asked_for_again_long_after_its_run_ended_does_not_run_again(
    app: Tasks, clock: ManualClock
) -> None:
    """A producer retries its old request (same run_id) after the task has had many
    other runs: the run happened once. Sent again, the runner would only find it ended
    and the task would hold its slot until the run was declared abandoned."""
    engine = Scheduler(app, clock, SchedulerConfig(compile_wait_s=0))
    await engine.create(spec("report", trigger=ManualTrigger()))
    await engine.run(RunTask(task_id="report", run_id="nightly-0106"))
    await engine.tick()
    clock.advance(5)
    await engine.on_run_event(finished("report", "nightly-0106", clock.now()))
    for _ in range(40):  # more than the task remembers itself
        later = await engine.run(RunTask(task_id="report"))
        await engine.tick()
        clock.advance(5)
        await engine.on_run_event(finished("report", later.run_id, clock.now()))

    again = await engine.run(RunTask(task_id="report", run_id="nightly-0106"))
    assert (again.run_id, again.queued) == ("nightly-0106", False)
    assert (await engine.tick()).dispatched == []
    assert events_of(app, "nightly-0106") == ["RunRequested", "RunDispatched", "RunFinished"]
    view = await engine.get(TaskRef(task_id="report"))
    assert view.run_in_flight is None
