"""The scheduler engine on a real (in-memory SQLite) event store with a manual clock:
dispatch limits, conditions, manual runs, commands and idempotency keys. The rules that
must hold on every store (max_failures, the daily budget, recovery, catch-up, intake
de-duplication) run on SQLite and PostgreSQL in
tests/integration/test_scheduler_rules_stores.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import msgspec
import pytest

from contracts.runs import ListRuns, ModelTokens, RunEvent, RunRequest
from contracts.tasks import (
    Below,
    ConditionTrigger,
    Contains,
    CreateTask,
    CronTrigger,
    IntervalTrigger,
    ListTasks,
    ManualTrigger,
    RunAccepted,
    RunTask,
    TaskRef,
    TaskSpec,
    UpdateTask,
)
from services.kernel.errors import ServiceError
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.conditions import BrokenCheck, ConditionError, refused_check
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from tests.unit.conftest import T0

pytestmark = pytest.mark.anyio


def scheduler(app: Tasks, clock: ManualClock, **config: Any) -> Scheduler:
    return Scheduler(app, clock, SchedulerConfig(**config))


def stored(app: Tasks, kind: type) -> list[Any]:
    events = (
        app.mapper.to_domain_event(n)
        for n in app.recorder.select_notifications(start=1, limit=10**6)
    )
    return [e for e in events if isinstance(e, kind)]


def outcome(task_id: str, run_id: str, at: datetime, *, ok: bool = True, cost: float = 0.0):
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


async def test_interval_task_runs_at_creation_then_every_interval(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    view = await engine.create(spec("Watch price", trigger=IntervalTrigger(every_s=300)))
    assert view.task_id == "watch-price" and view.next_due_at == T0

    report = await engine.tick()
    assert [t for t, _ in report.dispatched] == ["watch-price"]
    run_id = report.dispatched[0][1]
    assert (await engine.tick()).dispatched == []  # one run in flight per task

    clock.advance(30)
    assert await engine.on_run_event(outcome("watch-price", run_id, clock.now())) == "recorded"
    assert (await engine.tick()).dispatched == []  # next slot is 300 s after the last
    clock.advance(270)
    assert [t for t, _ in (await engine.tick()).dispatched] == ["watch-price"]
    dispatched = stored(app, Task.RunDispatched)
    assert [e.origin for e in dispatched] == ["schedule", "schedule"]


async def test_twenty_due_tasks_with_max_two_in_flight_all_run(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, max_concurrent=2)
    for i in range(20):
        await engine.create(spec(f"task {i:02d}", trigger=IntervalTrigger(every_s=86_400)))
    in_flight: dict[str, str] = {}
    finished: list[str] = []
    most = 0
    for _ in range(100):
        report = await engine.tick()
        in_flight.update({run_id: task_id for task_id, run_id in report.dispatched})
        most = max(most, len(in_flight))
        assert len(in_flight) <= 2
        if not in_flight:
            break
        clock.advance(5)
        run_id, task_id = next(iter(in_flight.items()))
        await engine.on_run_event(outcome(task_id, run_id, clock.now()))
        del in_flight[run_id]
        finished.append(task_id)
    assert most == 2
    assert sorted(finished) == [f"task-{i:02d}" for i in range(20)]
    views = (await engine.list(ListTasks())).tasks
    assert all(v.runs_dispatched == 1 and v.last_run_status == "completed" for v in views)


async def test_condition_true_false_and_cooldown(app: Tasks, clock: ManualClock) -> None:
    page = {"text": "Sold out"}
    checks: list[datetime] = []

    async def check(task_id: str, trigger: Any) -> Any:
        checks.append(clock.now())
        return dict(page)

    engine = Scheduler(app, clock, SchedulerConfig(), probe=check)
    await engine.create(
        CreateTask(name="restock", prompt="buy it", trigger=_condition(every_s=60, cooldown_s=600))
    )
    assert await engine.check_due_conditions() == {"restock": False}
    assert (await engine.tick()).dispatched == []
    assert await engine.check_due_conditions() == {}  # next check not due yet
    clock.advance(60)
    page["text"] = "In stock now"
    assert await engine.check_due_conditions() == {"restock": True}
    (_, run_id), *_ = (await engine.tick()).dispatched
    assert stored(app, Task.RunDispatched)[0].origin == "condition"
    clock.advance(30)
    await engine.on_run_event(outcome("restock", run_id, clock.now()))
    # Still true, but inside the cooldown: no check, no run.
    for _ in range(9):
        clock.advance(60)
        assert await engine.check_due_conditions() == {}
        assert (await engine.tick()).dispatched == []
    clock.advance(60)  # 630 s after the run went out
    assert await engine.check_due_conditions() == {"restock": True}
    assert len((await engine.tick()).dispatched) == 1
    assert len(checks) == 3


def _condition(every_s: float, cooldown_s: float) -> ConditionTrigger:
    return ConditionTrigger(
        tool="browser_extract",
        input={"selector": "#stock"},
        url="https://shop.example/item",
        predicate=Contains(text="In stock", path="text"),
        every_s=every_s,
        cooldown_s=cooldown_s,
    )


async def _until(done: Any, timeout_s: float = 5.0) -> None:
    """Wait (real time) for the service loop to get somewhere."""
    with anyio.fail_after(timeout_s):
        while not done():
            await anyio.sleep(0.01)


async def test_a_hanging_condition_check_holds_back_only_its_own_task(
    app: Tasks, clock: ManualClock
) -> None:
    # A check that hangs (a page that never answers, up to the tool's 30 s timeout)
    # must not hold back the other conditions' checks, nor be made again while it is out.
    hang = anyio.Event()
    calls = {"slow": 0, "fast": 0}
    page = {"text": "Sold out"}

    async def check(task_id: str, trigger: Any) -> Any:
        calls[task_id] += 1
        if task_id == "slow":
            await hang.wait()
        return dict(page)

    engine = Scheduler(app, clock, SchedulerConfig(tick_s=0.01), probe=check)
    await engine.create(spec("slow", trigger=_condition(every_s=10, cooldown_s=0)))
    await engine.create(spec("fast", trigger=_condition(every_s=10, cooldown_s=0)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run_condition_checks)
        await _until(lambda: calls == {"slow": 1, "fast": 1})
        for n in (2, 3, 4):
            clock.advance(10)
            await _until(lambda n=n: calls["fast"] == n)
        page["text"] = "In stock"
        clock.advance(10)
        await _until(lambda: calls["fast"] == 5)
        with anyio.fail_after(5):
            while not (report := await engine.tick()).dispatched:
                await anyio.sleep(0.01)
        assert [task for task, _ in report.dispatched] == ["fast"]
        assert calls["slow"] == 1  # due four times over, but its check is still out
        page["text"] = "Sold out"
        hang.set()  # back at last: checked again on its own schedule
        clock.advance(10)
        await _until(lambda: calls["slow"] == 2)
        tg.cancel_scope.cancel()


async def test_condition_checks_out_at_once_stay_within_the_bound(
    app: Tasks, clock: ManualClock
) -> None:
    release = anyio.Event()
    calls: list[str] = []

    async def check(task_id: str, trigger: Any) -> Any:
        calls.append(task_id)
        await release.wait()
        return {"text": "Sold out"}

    config = SchedulerConfig(tick_s=0.01, max_condition_checks=2)
    engine = Scheduler(app, clock, config, probe=check)
    for name in ("a", "b", "c"):
        await engine.create(spec(name, trigger=_condition(every_s=10, cooldown_s=0)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run_condition_checks)
        await _until(lambda: len(calls) == 2)
        for _ in range(3):  # rounds go on while both are out; the third waits its turn
            clock.advance(10)
            await anyio.sleep(0.05)
        assert len(calls) == 2
        release.set()
        await _until(lambda: set(calls) == {"a", "b", "c"})
        tg.cancel_scope.cancel()


async def test_a_failing_condition_check_is_not_true(app: Tasks, clock: ManualClock) -> None:
    async def broken(task_id: str, trigger: Any) -> Any:
        raise RuntimeError("tools service unavailable")

    engine = Scheduler(app, clock, SchedulerConfig(), probe=broken)
    await engine.create(CreateTask(name="c", prompt="p", trigger=_condition(60, 0)))
    assert await engine.check_due_conditions() == {"c": False}
    assert (await engine.tick()).dispatched == []


# browser_extract of several prices: no main text, no one number (issue: `path`).
PRICES = {"items": [{"price": "$12"}, {"price": "$15"}]}


def _cheap(predicate: Any = None) -> ConditionTrigger:
    return ConditionTrigger(
        tool="browser_extract",
        input={"selector": ".price"},
        url="https://shop.example/prices",
        predicate=predicate or Below(value=20),
        every_s=60,
    )


async def test_a_predicate_that_cannot_be_tested_on_the_output_pauses_the_task(
    app: Tasks, clock: ManualClock
) -> None:
    async def extract(task_id: str, trigger: Any) -> Any:
        return PRICES

    engine = Scheduler(app, clock, SchedulerConfig(), probe=extract)
    await engine.create(spec("cheap", trigger=_cheap()))
    assert await engine.check_due_conditions() == {"cheap": False}
    view = await engine.get(TaskRef(task_id="cheap"))
    assert view.status == "paused"
    assert view.status_reason is not None
    assert "cannot be tested on browser_extract's output" in view.status_reason
    assert "set the predicate's `path` to one of: items" in view.status_reason
    (paused,) = stored(app, Task.Paused)
    assert paused.reason == view.status_reason
    clock.advance(60)
    assert await engine.check_due_conditions() == {}  # paused: no more checks


@pytest.mark.parametrize(
    "output",
    [
        ConditionError("browser_extract failed: timed out"),  # how the service says it
        {"text": "Sold out"},  # no number this time
        [],  # nothing found this time
    ],
)
async def test_a_check_that_may_work_next_time_leaves_the_task_active(
    app: Tasks, clock: ManualClock, output: Any
) -> None:
    async def extract(task_id: str, trigger: Any) -> Any:
        if isinstance(output, Exception):
            raise output
        return output

    engine = Scheduler(app, clock, SchedulerConfig(), probe=extract)
    await engine.create(spec("cheap", trigger=_cheap()))
    assert await engine.check_due_conditions() == {"cheap": False}
    assert (await engine.get(TaskRef(task_id="cheap"))).status == "active"
    clock.advance(60)
    assert await engine.check_due_conditions() == {"cheap": False}  # checked again
    assert stored(app, Task.Paused) == []


async def test_a_check_the_tools_service_refuses_pauses_the_task(
    app: Tasks, clock: ManualClock
) -> None:
    async def refuse(task_id: str, trigger: Any) -> Any:
        raise refused_check("not_found", "no tool 'browser_extract'", "tool")

    engine = Scheduler(app, clock, SchedulerConfig(), probe=refuse)
    await engine.create(spec("cheap", trigger=_cheap()))
    assert await engine.check_due_conditions() == {"cheap": False}
    view = await engine.get(TaskRef(task_id="cheap"))
    assert view.status == "paused" and view.status_reason is not None
    assert "check (browser_extract) cannot be made" in view.status_reason
    assert "no tool 'browser_extract'" in view.status_reason
    (paused,) = stored(app, Task.Paused)
    assert paused.reason == view.status_reason
    clock.advance(60)
    assert await engine.check_due_conditions() == {}  # paused: no more checks


async def test_the_error_a_pause_reason_quotes_is_masked_and_cut(
    app: Tasks, clock: ManualClock
) -> None:
    # The refusal may echo the trigger's input: the reason is kept in the task's events.
    denied = "curl https://ops:hunter22-pw@status.example/health " + "x" * 2000

    async def refuse(task_id: str, trigger: Any) -> Any:
        raise refused_check("command_denied", f"not allowed: {denied}", "input.command")

    engine = Scheduler(app, clock, SchedulerConfig(), probe=refuse)
    await engine.create(spec("cheap", trigger=_cheap()))
    assert await engine.check_due_conditions() == {"cheap": False}
    (paused,) = stored(app, Task.Paused)
    assert paused.reason is not None and "not allowed: curl https://ops:" in paused.reason
    assert "hunter22-pw" not in paused.reason and "[redacted]" in paused.reason
    assert len(paused.reason) < 700


@pytest.mark.parametrize(
    ("code", "field", "broken"),
    [
        ("not_found", "tool", True),  # no such tool
        ("invalid_request", "input", True),  # the tool refuses the input
        ("invalid_request", "input.command", True),
        ("command_denied", "input.command", True),  # the tools policy refuses it
        ("tool_not_allowed", "tool", True),
        ("unavailable", None, False),  # no tools service right now
        ("timeout", None, False),
        ("internal", None, False),
        ("invalid_request", "source", False),  # a tools service of another version
    ],
)
def test_which_refusals_of_the_tools_service_mean_the_check_is_wrong(
    code: str, field: str | None, broken: bool
) -> None:
    error = refused_check(code, "why", field)
    assert isinstance(error, ConditionError)
    assert isinstance(error, BrokenCheck) is broken
    assert code in str(error) and "why" in str(error)


async def test_a_long_name_masked_past_its_bound_is_cut_not_shown_as_written(
    app: Tasks, clock: ManualClock
) -> None:
    # "[redacted]" is longer than "pw": masked, the name would be over 200 characters.
    name = "n" * 170 + " https://u:pw@example.com/x"
    assert len(name) <= 200
    engine = scheduler(app, clock)
    await engine.create(CreateTask(task_id="long", name=name, prompt="p"))
    view = await engine.get(TaskRef(task_id="long"))
    assert len(view.spec.name) == 200
    assert view.spec.name.startswith("n" * 170 + " https://u:[redacted]@")
    assert "pw@" not in view.spec.name


async def test_a_trigger_fixed_during_the_check_is_not_paused_for_the_old_one(
    app: Tasks, clock: ManualClock
) -> None:
    fixed = _cheap(Below(value=20, path="items.0.price"))

    async def extract(task_id: str, trigger: Any) -> Any:
        await engine.update(UpdateTask(task_id="cheap", trigger=fixed))
        return PRICES

    engine = Scheduler(app, clock, SchedulerConfig(), probe=extract)
    await engine.create(spec("cheap", trigger=_cheap()))
    assert await engine.check_due_conditions() == {"cheap": False}
    view = await engine.get(TaskRef(task_id="cheap"))
    assert view.status == "active" and view.spec.trigger == fixed


async def test_a_manual_run_waits_behind_the_run_in_flight(app: Tasks, clock: ManualClock) -> None:
    engine = scheduler(app, clock, compile_wait_s=0)  # (no compiler here to wait for)
    await engine.create(spec("m", trigger=ManualTrigger()))
    first = await engine.run(RunTask(task_id="m"))
    assert not first.queued
    assert (await engine.tick()).dispatched == [("m", first.run_id)]
    second = await engine.run(RunTask(task_id="m"))
    third = await engine.run(RunTask(task_id="m"))
    assert second.queued and third.run_id == second.run_id  # one pending at a time
    assert (await engine.tick()).dispatched == []
    await engine.on_run_event(outcome("m", first.run_id, clock.now()))
    assert (await engine.tick()).dispatched == [("m", second.run_id)]
    # The same idempotency key asks for the same run.
    await engine.on_run_event(outcome("m", second.run_id, clock.now()))
    keyed = await engine.run(RunTask(task_id="m", run_id="my-key-1"))
    again = await engine.run(RunTask(task_id="m", run_id="my-key-1"))
    assert keyed.run_id == again.run_id == "my-key-1"
    assert (await engine.tick()).dispatched == [("m", "my-key-1")]
    await engine.on_run_event(outcome("m", "my-key-1", clock.now()))
    replay = await engine.run(RunTask(task_id="m", run_id="my-key-1"))
    assert replay.run_id == "my-key-1"
    assert (await engine.tick()).dispatched == []  # already ran: not again


async def test_over_budget_asking_again_for_a_run_answers_as_before_the_budget(
    app: Tasks, clock: ManualClock
) -> None:
    # The budget refuses new runs only: a producer retrying a run_id, or an intake
    # `run` redelivered after it was applied, gets the idempotent answer, and a wrong
    # task or run_id is named as such.
    engine = scheduler(app, clock, daily_budget_usd=1.0, compile_wait_s=0)
    for name in ("m", "other"):
        await engine.create(spec(name, trigger=ManualTrigger()))
    keyed = await engine.handle("run", b'{"task_id": "m"}', key="msg-1")
    assert isinstance(keyed, RunAccepted)
    assert (await engine.tick()).dispatched == [("m", keyed.run_id)]
    await engine.on_run_event(outcome("m", keyed.run_id, clock.now(), cost=0.6))
    named = await engine.run(RunTask(task_id="m", run_id="r-1"))
    assert (await engine.tick()).dispatched == [("m", "r-1")]
    await engine.on_run_event(outcome("m", "r-1", clock.now(), cost=0.6))  # $1.20 spent

    assert await engine.run(RunTask(task_id="m", run_id="r-1")) == named
    assert await engine.handle("run", b'{"task_id": "m"}', key="msg-1") == keyed
    for ask, code in [
        (RunTask(task_id="gone"), "not_found"),
        (RunTask(task_id="other", run_id="r-1"), "conflict"),
        (RunTask(task_id="m"), "over_budget"),
        (RunTask(task_id="m", run_id="r-2"), "over_budget"),
    ]:
        with pytest.raises(ServiceError) as refused:
            await engine.run(ask)
        assert refused.value.code == code, ask
    assert (await engine.tick()).dispatched == []


async def test_the_run_ledger_shows_a_queued_run_from_when_it_was_asked_for(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, compile_wait_s=0)
    await engine.create(spec("m", trigger=ManualTrigger()))
    first = await engine.run(RunTask(task_id="m"))
    await engine.tick()
    clock.advance(5)
    queued = await engine.run(RunTask(task_id="m"))
    assert queued.queued
    (run, _) = (await engine.runs(ListRuns(task_id="m"))).runs
    assert (run.run_id, run.status, run.origin) == (queued.run_id, "requested", "manual")
    assert run.requested_at == clock.now()
    # Sent out later, it keeps the time it was asked for.
    clock.advance(5)
    await engine.on_run_event(outcome("m", first.run_id, clock.now()))
    assert (await engine.tick()).dispatched == [("m", queued.run_id)]
    (run, _) = (await engine.runs(ListRuns(task_id="m"))).runs
    assert (run.status, run.requested_at) == ("requested", clock.now() - timedelta(seconds=5))
    # A queued run a pause skips ends as failed, `skipped`.
    clock.advance(5)
    skipped = await engine.run(RunTask(task_id="m"))
    await engine.pause(TaskRef(task_id="m", reason="holiday"))
    (run, *_) = (await engine.runs(ListRuns(task_id="m"))).runs
    assert (run.run_id, run.status, run.reason) == (skipped.run_id, "failed", "skipped")
    assert run.requested_at == run.finished_at == clock.now()


async def test_a_run_id_belongs_to_one_task_even_when_asked_at_once(
    app: Tasks, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = scheduler(app, clock)
    for name in ("a", "b"):
        await engine.create(spec(name, trigger=ManualTrigger()))
    # A slow store: queuing a run takes a while, so the second ask comes meanwhile.
    request_run = app.request_run

    def slow_request_run(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return request_run(*args, **kwargs)

    monkeypatch.setattr(app, "request_run", slow_request_run)
    outcomes: dict[str, str] = {}

    async def ask(task_id: str) -> None:
        try:
            outcomes[task_id] = (await engine.run(RunTask(task_id=task_id, run_id="k1"))).run_id
        except ServiceError as exc:
            outcomes[task_id] = f"{exc.code}:{exc.field}"

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "a")
        tg.start_soon(ask, "b")
    assert sorted(outcomes.values()) == ["conflict:run_id", "k1"], outcomes
    winner = next(task for task, said in outcomes.items() if said == "k1")
    assert (await engine.tick()).dispatched == [(winner, "k1")]


async def test_commands_on_tasks(app: Tasks, clock: ManualClock) -> None:
    engine = scheduler(app, clock)
    created = await engine.create(spec("Daily report", trigger=CronTrigger(expr="0 9 * * *")))
    assert created.next_due_at == datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
    # The same create again is a no-op; a different one under the same id conflicts.
    assert (await engine.create(spec("Daily report", trigger=CronTrigger(expr="0 9 * * *")))) == (
        created
    )
    with pytest.raises(ServiceError) as conflict:
        await engine.create(spec("Daily report"))
    assert (conflict.value.code, conflict.value.field) == ("conflict", "task_id")

    clock.advance(10)
    updated = await engine.update(
        UpdateTask(task_id="daily-report", trigger=CronTrigger(expr="0 9 * * *", tz="Asia/Tokyo"))
    )
    assert updated.version == 2 and updated.next_due_at == datetime(2025, 1, 7, 0, 0, tzinfo=UTC)
    unchanged = await engine.update(UpdateTask(task_id="daily-report", model="sonnet"))
    assert unchanged.version == 2  # nothing changed, nothing recorded
    with pytest.raises(ServiceError) as bad:
        await engine.update(UpdateTask(task_id="daily-report", trigger=CronTrigger(expr="nope")))
    assert (bad.value.code, bad.value.field) == ("invalid_request", "trigger.expr")

    paused = await engine.pause(TaskRef(task_id="daily-report", reason="holidays"))
    assert (paused.status, paused.status_reason, paused.next_due_at) == (
        "paused",
        "holidays",
        None,
    )
    assert (await engine.pause(TaskRef(task_id="daily-report"))).version == paused.version
    assert [v.task_id for v in (await engine.list(ListTasks(status="paused"))).tasks] == [
        "daily-report"
    ]
    assert (await engine.resume(TaskRef(task_id="daily-report"))).status == "active"
    deleted = await engine.delete(TaskRef(task_id="daily-report"))
    assert deleted.status == "deleted"
    assert (await engine.list(ListTasks())).tasks == []
    with pytest.raises(ServiceError) as gone:
        await engine.run(RunTask(task_id="daily-report"))
    assert gone.value.code == "not_found"
    with pytest.raises(ServiceError) as missing:
        await engine.get(TaskRef(task_id="never-was"))
    assert (missing.value.code, missing.value.field) == ("not_found", "task_id")
    # A deleted id can be defined again.
    again = await engine.create(spec("Daily report", trigger=IntervalTrigger(every_s=60)))
    assert again.status == "active" and again.version > deleted.version


async def test_an_outcome_from_outside_the_scheduler_counts_toward_the_budget(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, daily_budget_usd=0.5)
    await engine.create(spec("x", trigger=IntervalTrigger(every_s=60)))
    result = await engine.on_run_event(outcome("adhoc", "inline-run-1", clock.now(), cost=0.5))
    assert result == "untracked"
    assert await engine.on_run_event(outcome("adhoc", "inline-run-1", clock.now(), cost=0.5)) == (
        "duplicate"
    )
    assert [t for t, _ in (await engine.tick()).skipped] == ["x"]
    runs = (await engine.runs(ListRuns())).runs
    assert [(r.run_id, r.cost_usd) for r in runs] == [("inline-run-1", 0.5)]


async def test_a_run_is_told_what_the_daily_budget_has_left(app: Tasks, clock: ManualClock) -> None:
    # The runner leaves out sampled verification when that is less than a full run.
    engine = scheduler(app, clock, daily_budget_usd=1.0)
    await engine.create(spec("x", trigger=ManualTrigger()))
    await engine.on_run_event(outcome("adhoc", "inline-run-1", clock.now(), cost=0.3))
    await engine.run(RunTask(task_id="x"))
    await engine.tick()
    unlimited = scheduler(app, clock)
    await unlimited.create(spec("y", trigger=ManualTrigger()))
    await unlimited.run(RunTask(task_id="y"))
    await unlimited.tick()
    requests = [
        m.event
        for e in stored(app, Task.RunDispatched)
        for m in messages_for(e, e.event.spec.name)
        if isinstance(m.event, RunRequest)
    ]
    assert [(r.task_id, r.budget_left_usd) for r in requests] == [("x", 0.7), ("y", None)]


async def test_the_runs_of_a_task_id_nothing_ever_used_are_not_found(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    await engine.create(spec("news", trigger=ManualTrigger()))
    assert (await engine.runs(ListRuns(task_id="news"))).runs == []  # none yet
    # A typo must not read as "this task never ran".
    with pytest.raises(ServiceError) as caught:
        await engine.runs(ListRuns(task_id="newz"))
    assert (caught.value.code, caught.value.field) == ("not_found", "task_id")
    # Runs from outside the scheduler are listed under their task_id, task or not; a
    # deleted task's ledger stays readable.
    await engine.on_run_event(outcome("adhoc", "inline-run-1", clock.now()))
    assert [r.run_id for r in (await engine.runs(ListRuns(task_id="adhoc"))).runs] == [
        "inline-run-1"
    ]
    await engine.delete(TaskRef(task_id="news"))
    assert (await engine.runs(ListRuns(task_id="news"))).runs == []


async def test_an_intake_command_redelivered_after_the_dedupe_window_runs_once(
    app: Tasks, clock: ManualClock
) -> None:
    # JetStream drops a duplicate only inside its window; past it, the run id derived
    # from the message id makes the second delivery ask for the run already taken.
    engine = scheduler(app, clock)
    await engine.handle("create", b'{"name": "m", "prompt": "p"}', key="create-1")
    first = await engine.handle("run", b'{"task_id": "m"}', key="msg-7")
    assert (await engine.tick()).dispatched == [("m", first.run_id)]  # type: ignore[attr-defined]
    await engine.on_run_event(outcome("m", first.run_id, clock.now()))  # type: ignore[attr-defined]
    clock.advance(3600)
    again = await engine.handle("run", b'{"task_id": "m"}', key="msg-7")
    assert again == first
    assert (await engine.tick()).dispatched == []
    with pytest.raises(ServiceError) as unknown:
        await engine.handle("explode", b"{}")
    assert (unknown.value.code, unknown.value.field) == ("invalid_request", "verb")


async def test_a_redelivered_run_restarts_the_deadline_clock(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock, grace_s=10)
    await engine.create(spec("long", deadline_s=100))
    run_id = (await engine.run(RunTask(task_id="long"))).run_id
    await engine.tick()

    def started(attempt: int) -> RunEvent:
        return RunEvent(
            task_id="long",
            run_id=run_id,
            event="started",
            status="running",
            at=clock.now(),
            attempt=attempt,
        )

    assert await engine.on_run_event(started(1)) == "started"
    assert await engine.on_run_event(started(1)) == "ignored"  # the same report again
    clock.advance(100)
    assert await engine.on_run_event(started(2)) == "started"  # a runner died; retried
    clock.advance(100)
    assert (await engine.tick()).abandoned == []  # 200 s after the first start
    clock.advance(11)
    assert (await engine.tick()).abandoned == [("long", run_id)]


async def test_a_run_no_runner_started_is_abandoned_without_counting_against_the_task(
    app: Tasks, clock: ManualClock
) -> None:
    # Every runner down: runs go out, none starts. That says nothing about the task, so
    # an outage of any length must not pause it through max_failures.
    engine = scheduler(app, clock, grace_s=10)
    await engine.create(spec("m", trigger=ManualTrigger(), deadline_s=100, max_failures=1))
    for _ in range(3):
        run_id = (await engine.run(RunTask(task_id="m"))).run_id
        assert (await engine.tick()).dispatched == [("m", run_id)]
        clock.advance(111)
        assert (await engine.tick()).abandoned == [("m", run_id)]
    view = await engine.get(TaskRef(task_id="m"))
    assert (view.status, view.consecutive_failures) == ("active", 0)
    (run, *_) = (await engine.runs(ListRuns(task_id="m"))).runs
    assert (run.status, run.reason, run.infrastructure) == ("failed", "abandoned", True)
    outcome_event = messages_for(stored(app, Task.RunFinished)[-1], "m")[0].event
    assert isinstance(outcome_event, RunEvent) and outcome_event.infrastructure

    # A run a runner started, then lost, still counts: it may be the task that hangs.
    run_id = (await engine.run(RunTask(task_id="m"))).run_id
    await engine.tick()
    started = RunEvent(
        task_id="m", run_id=run_id, event="started", status="running", at=clock.now()
    )
    assert await engine.on_run_event(started) == "started"
    clock.advance(111)
    assert (await engine.tick()).abandoned == [("m", run_id)]
    view = await engine.get(TaskRef(task_id="m"))
    assert (view.status, view.consecutive_failures) == ("paused", 1)


async def test_a_run_queued_before_a_pause_does_not_go_out(app: Tasks, clock: ManualClock) -> None:
    engine = scheduler(app, clock)
    await engine.create(spec("m", trigger=ManualTrigger(), max_failures=1))
    first = await engine.run(RunTask(task_id="m"))
    assert (await engine.tick()).dispatched == [("m", first.run_id)]
    queued = await engine.run(RunTask(task_id="m"))
    assert queued.queued
    # The run in flight fails: max_failures=1 pauses the task.
    await engine.on_run_event(outcome("m", first.run_id, clock.now(), ok=False))
    view = await engine.get(TaskRef(task_id="m"))
    assert view.status == "paused" and view.run_pending is None
    assert (await engine.tick()).dispatched == []
    skipped = stored(app, Task.RunSkipped)
    assert [e.run_id for e in skipped] == [queued.run_id]
    assert "paused" in skipped[0].reason
    # Asked for while paused, a run is an operator's explicit choice and goes out.
    explicit = await engine.run(RunTask(task_id="m"))
    assert (await engine.tick()).dispatched == [("m", explicit.run_id)]


async def test_a_trigger_that_cannot_be_scheduled_pauses_its_task_not_the_others(
    app: Tasks, clock: ManualClock
) -> None:
    # Saved before validation caught it (or by an older version): a cron that never
    # fires. The tick pauses that task, saying why, and serves the rest.
    engine = scheduler(app, clock)
    await engine.create(spec("fine", trigger=IntervalTrigger(every_s=60)))
    never = TaskSpec(name="never", prompt="p", trigger=CronTrigger(expr="0 0 31 2 *"))
    broken = Task.open(Defined(task_id="never", spec=never, at=T0))
    app.save(broken)
    assert [t for t, _ in (await engine.tick()).dispatched] == ["fine"]
    view = await engine.get(TaskRef(task_id="never"))
    assert view.status == "paused" and view.next_due_at is None
    assert "never fires" in (view.status_reason or "")
    assert len((await engine.list(ListTasks())).tasks) == 2


async def _news_after_a_long_run(app: Tasks, clock: ManualClock) -> tuple[Scheduler, str]:
    """An every-10-s task whose first run was out for 25 s: its next slot is overdue."""
    engine = scheduler(app, clock, compile_wait_s=30)
    await engine.create(spec("News", trigger=IntervalTrigger(every_s=10)))
    ((_, first),) = (await engine.tick()).dispatched
    clock.advance(seconds=25)
    return engine, first


async def test_the_run_after_a_full_run_waits_for_its_executor(
    app: Tasks, clock: ManualClock
) -> None:
    """An overdue slot comes due the moment a long full run ends, a second before the
    executor compiled from it: dispatched then, it would be a second full run."""
    engine, first = await _news_after_a_long_run(app, clock)
    await engine.on_run_event(outcome("news", first, clock.now()))
    assert (await engine.tick()).dispatched == []  # its trace is compiling
    engine.on_executor_event("news", "some-other-run")  # not the run it waits for
    assert (await engine.tick()).dispatched == []
    engine.on_executor_event("news", first)  # compiled (or skipped): go
    ((_, second),) = (await engine.tick()).dispatched

    # No word from the compiler (down, or the event missed): it goes after the wait.
    clock.advance(seconds=25)
    await engine.on_run_event(outcome("news", second, clock.now()))
    clock.advance(seconds=29)
    assert (await engine.tick()).dispatched == []
    clock.advance(seconds=2)
    assert len((await engine.tick()).dispatched) == 1


async def test_the_compilers_word_before_the_runs_outcome_is_not_lost(
    app: Tasks, clock: ManualClock
) -> None:
    engine, first = await _news_after_a_long_run(app, clock)
    engine.on_executor_event("news", first)  # compiled, while the outcome is on its way
    await engine.on_run_event(outcome("news", first, clock.now()))
    assert len((await engine.tick()).dispatched) == 1


async def test_a_replay_or_a_failed_run_leaves_nothing_to_wait_for(
    app: Tasks, clock: ManualClock
) -> None:
    engine, first = await _news_after_a_long_run(app, clock)
    await engine.on_run_event(outcome("news", first, clock.now(), ok=False))
    ((_, second),) = (await engine.tick()).dispatched
    clock.advance(seconds=25)
    replayed = msgspec.structs.replace(
        outcome("news", second, clock.now()), source="executor", executor_version=1
    )
    await engine.on_run_event(replayed)
    assert len((await engine.tick()).dispatched) == 1


async def test_the_run_ledger_says_which_runs_fell_back_and_what_they_used(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    await engine.create(spec("News", trigger=IntervalTrigger(every_s=3600)))
    ((_, run_id),) = (await engine.tick()).dispatched
    healed = msgspec.structs.replace(
        outcome("news", run_id, clock.now(), cost=0.01),
        fell_back=True,
        tokens={"claude-sonnet-5-5": ModelTokens(input_tokens=3000, output_tokens=400)},
    )
    await engine.on_run_event(healed)
    (listed,) = (await engine.runs(ListRuns(task_id="news", limit=5))).runs
    assert listed.fell_back and listed.tokens["claude-sonnet-5-5"].input_tokens == 3000


async def test_a_run_that_needs_attention_pauses_its_task_at_once(
    app: Tasks, clock: ManualClock
) -> None:
    """An action that may or may not have happened: the next run would face the same
    doubt, so the task waits for a person, whatever its max_failures."""
    engine = scheduler(app, clock)
    await engine.create(spec("m", trigger=ManualTrigger(), max_failures=5))
    first = await engine.run(RunTask(task_id="m"))
    await engine.tick()
    doubt = msgspec.structs.replace(
        outcome("m", first.run_id, clock.now(), ok=False),
        reason="needs_attention",
        error="step 1 (browser_fill_form) may or may not have happened",
    )
    await engine.on_run_event(doubt)
    view = await engine.get(TaskRef(task_id="m"))
    assert (view.status, view.consecutive_failures) == ("paused", 1)
    assert view.status_reason is not None
    assert (
        "needs attention" in view.status_reason
        and "step 1 (browser_fill_form)" in view.status_reason
    )
