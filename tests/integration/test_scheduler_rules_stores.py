"""The scheduler's rules on a SQLite file and on PostgreSQL (the `event_store` fixture
runs every test on both): max_failures pauses, the daily budget skips, a restart marks
an abandoned run failed and collapses missed schedules into one run, and an intake
command is applied once, even when it comes back past JetStream's duplicate window to a
scheduler that restarted in between."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from contracts import subjects as s
from contracts.runs import ListRuns, RunEvent
from contracts.tasks import (
    CreateTask,
    CronTrigger,
    IntervalTrigger,
    RunTask,
    TaskEvent,
    TaskRef,
    TaskView,
)
from services.kernel.bus import Bus
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env
from services.kernel.replay_read import read_all
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.service import intake_key
from services.scheduler.task import Task
from tests.integration.test_scheduler_intake import scheduler as running_scheduler
from tests.integration.test_scheduler_intake import task_stream

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)

OpenApp = Callable[[], Tasks]


@pytest.fixture
def store_settings(tmp_path: Path, event_store: str) -> Settings:
    return Settings(data_dir=tmp_path, event_store=event_store)


@pytest.fixture
def open_app(store_settings: Settings) -> Iterator[OpenApp]:
    """Opens the scheduler's store; each call is a fresh process's view of it."""
    opened: list[Tasks] = []

    def make() -> Tasks:
        app = Tasks(env=application_env(store_settings, "scheduler"))
        opened.append(app)
        return app

    yield make
    for app in opened:
        app.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def scheduler(app: Tasks, clock: ManualClock, **config: Any) -> Scheduler:
    # No compiler here: a full run's next run does not wait for an executor.
    return Scheduler(app, clock, SchedulerConfig(**{"compile_wait_s": 0, **config}))


def stored(app: Tasks, kind: type) -> list[Any]:
    events = (
        app.mapper.to_domain_event(n)
        for n in app.recorder.select_notifications(start=1, limit=10**6)
    )
    return [e for e in events if isinstance(e, kind)]


def outcome(
    task_id: str, run_id: str, at: datetime, *, ok: bool = True, cost: float = 0.0
) -> RunEvent:
    return RunEvent(
        task_id=task_id,
        run_id=run_id,
        event="completed" if ok else "failed",
        status="completed" if ok else "failed",
        at=at,
        cost_usd=cost,
        source="full_llm",
        reason=None if ok else "tool_error",
        error=None if ok else "selector #price vanished",
    )


def spec(name: str, **fields: Any) -> CreateTask:
    return CreateTask(name=name, prompt=f"do {name}", **fields)


async def test_max_failures_in_a_row_pause_the_task_and_say_why(
    open_app: OpenApp, clock: ManualClock
) -> None:
    engine = scheduler(open_app(), clock)
    await engine.create(spec("flaky", trigger=IntervalTrigger(every_s=60), max_failures=3))
    for i, ok in enumerate([False, True, False, False, False]):
        (_, run_id), *_ = (await engine.tick()).dispatched
        clock.advance(60)
        await engine.on_run_event(outcome("flaky", run_id, clock.now(), ok=ok))
        view = await engine.get(TaskRef(task_id="flaky"))
        assert view.status == ("paused" if i == 4 else "active")
    assert view.consecutive_failures == 3  # the success in between reset the count
    assert view.status_reason is not None
    assert "3 failed runs in a row" in view.status_reason
    assert "selector #price vanished" in view.status_reason
    # The pause is in the store, not only in this process.
    rebuilt = await scheduler(open_app(), clock).get(TaskRef(task_id="flaky"))
    assert (rebuilt.status, rebuilt.status_reason) == ("paused", view.status_reason)
    clock.advance(600)
    assert (await engine.tick()).dispatched == []  # paused: nothing due
    resumed = await engine.resume(TaskRef(task_id="flaky"))
    assert resumed.status == "active" and resumed.consecutive_failures == 0
    assert len((await engine.tick()).dispatched) == 1


async def test_runs_failed_by_an_outage_neither_count_toward_max_failures_nor_reset_it(
    open_app: OpenApp, clock: ManualClock
) -> None:
    engine = scheduler(open_app(), clock)
    await engine.create(spec("outage", trigger=IntervalTrigger(every_s=60), max_failures=2))
    # The task's own failure, three runs no tools service answered, its own failure again.
    for i, infrastructure in enumerate([False, True, True, True, False]):
        (_, run_id), *_ = (await engine.tick()).dispatched
        clock.advance(60)
        failed = outcome("outage", run_id, clock.now(), ok=False, cost=0.01)
        failed.infrastructure = infrastructure
        await engine.on_run_event(failed)
        view = await engine.get(TaskRef(task_id="outage"))
        assert (view.status, view.consecutive_failures) == (
            ("paused", 2) if i == 4 else ("active", 1)
        )
    assert view.total_cost_usd == pytest.approx(0.05)  # every run's cost counts
    runs = (await engine.runs(ListRuns(task_id="outage"))).runs
    assert [(r.status, r.infrastructure) for r in runs] == [
        ("failed", False), ("failed", True), ("failed", True), ("failed", True), ("failed", False),
    ]  # fmt: skip
    # A fresh process rebuilds the same task from the stored events.
    rebuilt = await scheduler(open_app(), clock).get(TaskRef(task_id="outage"))
    assert (rebuilt.status, rebuilt.consecutive_failures) == ("paused", 2)


async def test_over_budget_the_next_due_run_is_skipped_with_an_event(
    open_app: OpenApp, clock: ManualClock
) -> None:
    app = open_app()
    engine = scheduler(app, clock, daily_budget_usd=1.0)
    await engine.create(spec("costly", trigger=IntervalTrigger(every_s=60)))
    for cost in (0.6, 0.5):  # 1.1 spent: the budget is reached
        (_, run_id), *_ = (await engine.tick()).dispatched
        clock.advance(60)
        await engine.on_run_event(outcome("costly", run_id, clock.now(), cost=cost))
    report = await engine.tick()
    assert report.dispatched == []
    assert [t for t, _ in report.skipped] == ["costly"]
    skipped = stored(app, Task.RunSkipped)
    assert len(skipped) == 1 and "daily budget reached" in skipped[0].reason
    assert "$1.1000" in skipped[0].reason
    # The skip used up that slot: no second event at the next tick.
    assert (await engine.tick()).skipped == []
    with pytest.raises(ServiceError) as refused:
        await engine.run(RunTask(task_id="costly"))
    assert refused.value.code == "over_budget"
    # A restarted scheduler folds the same spend from the store and refuses too.
    clock.advance(60)
    restarted = scheduler(open_app(), clock, daily_budget_usd=1.0)
    assert [t for t, _ in (await restarted.tick()).skipped] == ["costly"]
    # A new UTC day, a fresh budget.
    clock.set(datetime(2025, 1, 7, 0, 0, 30, tzinfo=UTC))
    assert [t for t, _ in (await restarted.tick()).dispatched] == ["costly"]


async def test_restart_marks_a_run_past_its_deadline_abandoned(
    open_app: OpenApp, clock: ManualClock
) -> None:
    first = open_app()
    engine = scheduler(first, clock, grace_s=30)
    await engine.create(spec("slow", deadline_s=120))
    accepted = await engine.run(RunTask(task_id="slow"))
    assert (await engine.tick()).dispatched == [("slow", accepted.run_id)]
    first.close()  # the scheduler goes down; the run never reports

    clock.advance(149)
    second = open_app()
    restarted = scheduler(second, clock, grace_s=30)
    assert (await restarted.tick()).abandoned == []  # deadline + grace not yet over
    clock.advance(2)
    assert (await restarted.tick()).abandoned == [("slow", accepted.run_id)]
    view = await restarted.get(TaskRef(task_id="slow"))
    assert view.run_in_flight is None and view.last_run_status == "failed"
    (run,) = (await restarted.runs(ListRuns(task_id="slow"))).runs
    assert (run.status, run.reason) == ("failed", "abandoned")
    # Its slot is free again: a new run goes out.
    await restarted.run(RunTask(task_id="slow"))
    assert len((await restarted.tick()).dispatched) == 1
    # A late outcome of the abandoned run still counts its cost.
    late = await restarted.on_run_event(outcome("slow", accepted.run_id, clock.now(), cost=0.3))
    assert late == "untracked"
    assert second.catalog.spent_on(clock.now()) == pytest.approx(0.3)


async def test_schedules_missed_while_down_run_once(open_app: OpenApp, clock: ManualClock) -> None:
    first = open_app()
    engine = scheduler(first, clock)
    clock.set(datetime(2025, 1, 6, 8, 59, tzinfo=UTC))
    await engine.create(spec("hourly", trigger=CronTrigger(expr="0 * * * *")))
    clock.set(datetime(2025, 1, 6, 9, 0, 1, tzinfo=UTC))
    (_, run_id), *_ = (await engine.tick()).dispatched
    await engine.on_run_event(outcome("hourly", run_id, clock.now()))
    first.close()

    clock.set(datetime(2025, 1, 6, 14, 20, tzinfo=UTC))  # down through 10:00 .. 14:00
    second = open_app()
    restarted = scheduler(second, clock)
    report = await restarted.tick()
    assert len(report.dispatched) == 1
    (_, again), *_ = report.dispatched
    await restarted.on_run_event(outcome("hourly", again, clock.now()))
    assert (await restarted.tick()).dispatched == []
    assert [e.origin for e in stored(second, Task.RunDispatched)] == ["schedule", "catch_up"]
    view = await restarted.get(TaskRef(task_id="hourly"))
    assert view.next_due_at == datetime(2025, 1, 6, 15, 0, tzinfo=UTC)


async def test_intake_commands_sent_again_after_a_restart_are_applied_once(
    open_app: OpenApp, clock: ManualClock
) -> None:
    """Every verb, not only `run`: a copy of a command (a redelivery, or the same
    Nats-Msg-Id stored again past the duplicate window) finds its key in the store."""
    first = open_app()
    engine = scheduler(first, clock)
    create = b'{"task_id": "x", "name": "x", "prompt": "p"}'
    await engine.handle("create", create, key="c-1")
    await engine.handle("update", b'{"task_id": "x", "prompt": "A"}', key="u-1")
    # Enough commands for snapshots to be taken: the keys are in them too.
    for i in range(60):
        await engine.handle("pause", b'{"task_id": "x"}', key=f"p-{i}")
        await engine.handle("resume", b'{"task_id": "x"}', key=f"r-{i}")
    await engine.handle("delete", b'{"task_id": "x"}', key="d-1")
    first.close()

    restarted = scheduler(open_app(), clock)
    view = await restarted.handle("create", create, key="c-1")
    assert view.status == "deleted"  # type: ignore[attr-defined]  # not revived
    await restarted.handle("create", create, key="c-2")
    for verb, body, key in [
        ("update", b'{"task_id": "x", "prompt": "A"}', "u-1"),
        ("pause", b'{"task_id": "x"}', "p-0"),
        ("delete", b'{"task_id": "x"}', "d-1"),
    ]:
        view = await restarted.handle(verb, body, key=key)
    assert (view.status, view.spec.prompt) == ("active", "p")  # type: ignore[attr-defined]
    assert len(stored(open_app(), Task.Deleted)) == 1


# --- the durable intake over a real NATS -------------------------------------------------


async def task_events(bus: Bus, task_id: str) -> list[str]:
    """Every event of a task so far, read from the start of its stream to its end."""
    return [e.event for e in await task_stream(bus, s.task_event(task_id, "*"), TaskEvent)]


async def rejected(bus: Bus) -> list[bytes]:
    """Every refusal the intake published so far."""
    return [m.data for m in await read_all(bus.js, s.STREAM_TASKS, s.TASK_REJECTED)]


async def published_so_far(bus: Bus, marker: str) -> None:
    """A command sent through the intake after the others: once its task's event is on
    the stream, every command before it was applied (one at a time, in order) and what
    each stored was published (the relay publishes in the store's order)."""
    await bus.js.publish(s.intake_task("create"), f'{{"name": "{marker}", "prompt": "p"}}'.encode())
    with anyio.fail_after(30):
        while not await task_events(bus, marker):
            await anyio.sleep(0.1)


async def get(bus: Bus) -> TaskView:
    return await bus.request(s.TASKS_GET, TaskRef(task_id="dup"), TaskView)


async def intake_drained(bus: Bus) -> None:
    # Work-queue retention: an intake message leaves the stream once it was applied.
    with anyio.fail_after(10):
        while (await bus.js.stream_info(s.STREAM_INTAKE)).state.messages:
            await anyio.sleep(0.05)


async def test_an_intake_command_is_applied_once_even_past_the_duplicate_window(
    settings: Settings, bus: Bus, event_store: str
) -> None:
    settings = settings.with_(event_store=event_store)
    await ensure_streams(bus.js)
    create = b'{"name": "dup", "prompt": "p"}'
    run = b'{"task_id": "dup"}'
    async with running_scheduler(settings, bus):
        for _ in range(2):
            await bus.js.publish(s.intake_task("create"), create, headers={"Nats-Msg-Id": "c-1"})
        acks = [
            await bus.js.publish(s.intake_task("run"), run, headers={"Nats-Msg-Id": "run-1"})
            for _ in range(3)
        ]
        assert [bool(a.duplicate) for a in acks] == [False, True, True]
        await intake_drained(bus)
        with anyio.fail_after(10):
            while (view := await get(bus)).run_in_flight is None:
                await anyio.sleep(0.05)
        run_id = view.run_in_flight
        assert run_id.startswith("k-")  # derived from the message id
        # The run finishes, as a runner would report it.
        await bus.publish_event(
            s.run_event("dup", run_id, "completed"),
            outcome("dup", run_id, datetime.now(UTC)),
            msg_id=f"{run_id}:completed",
        )
        with anyio.fail_after(10):
            while (await get(bus)).run_in_flight:
                await anyio.sleep(0.05)

    # Past the window JetStream stores the same message again; only the store (read by
    # a scheduler that restarted in between) can tell it was already applied.
    info = await bus.js.stream_info(s.STREAM_INTAKE)
    info.config.duplicate_window = 0.2
    await bus.js.update_stream(info.config)
    # The server forgets message ids on a timer of its own: on a busy machine that can
    # take longer than the window, so ask until the same message is stored again.
    with anyio.fail_after(15):
        while (
            await bus.js.publish(s.intake_task("run"), run, headers={"Nats-Msg-Id": "run-1"})
        ).duplicate:
            await anyio.sleep(0.2)
    async with running_scheduler(settings, bus):
        await intake_drained(bus)
        # Time for a wrongly queued run to go out, and for all that was stored to be
        # published: a later command's event is on the stream.
        await published_so_far(bus, "marker")
        after = await get(bus)
        assert (after.runs_dispatched, after.run_in_flight, after.run_pending) == (1, None, None)
    names = await task_events(bus, "dup")
    assert names.count("defined") == 1
    assert names.count("run_requested") == 1
    assert names.count("run_dispatched") == 1
    work = await bus.js.stream_info(s.STREAM_WORK)
    assert work.state.messages == 1  # one run request ever (nobody consumes it here)
    assert await rejected(bus) == []  # nothing was refused


async def test_a_command_sent_without_a_message_id_is_applied_once_when_redelivered(
    settings: Settings, bus: Bus, event_store: str
) -> None:
    """`nats pub rote.intake.tasks.run` sends no Nats-Msg-Id. A scheduler that applied
    the command and stopped before its ack sees it again: it must not ask for a second run."""
    settings = settings.with_(event_store=event_store)
    await ensure_streams(bus.js)
    async with running_scheduler(settings, bus):
        await bus.js.publish(s.intake_task("create"), b'{"name": "dup", "prompt": "p"}')
        await intake_drained(bus)
    await bus.js.publish(s.intake_task("run"), b'{"task_id": "dup"}')

    # First delivery: applied by a scheduler that stops before acking it.
    sub = await bus.js.pull_subscribe_bind(
        durable=s.CONSUMER_SCHEDULER_INTAKE, stream=s.STREAM_INTAKE
    )
    (first,) = await sub.fetch(1, timeout=5)
    app = Tasks(env=application_env(settings, "scheduler"))
    try:
        accepted = await scheduler(app, ManualClock(datetime.now(UTC))).handle(
            "run", first.data, key=intake_key(first)
        )
    finally:
        app.close()
    await first.nak()
    await sub.unsubscribe()

    # The redelivery reaches the restarted scheduler.
    async with running_scheduler(settings, bus):
        await intake_drained(bus)
        # Time for a wrongly queued run to go out, and for all that was stored to be
        # published: a later command's event is on the stream.
        await published_so_far(bus, "marker")
        view = await get(bus)
    assert view.run_in_flight == accepted.run_id  # type: ignore[attr-defined]
    assert view.run_pending is None
    names = await task_events(bus, "dup")
    assert names.count("run_requested") == 1
