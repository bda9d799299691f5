"""The Task aggregate on SQLite and on PostgreSQL: what is saved comes back, a fresh
process rebuilds the same tasks, ledger and spend, snapshots keep long-lived tasks
cheap, and concurrent writers never lose a command."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.utils import get_topic

from contracts.runs import ModelTokens
from contracts.tasks import (
    Above,
    ConditionTrigger,
    CreateTask,
    CronTrigger,
    IntervalTrigger,
    UpdateTask,
)
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.scheduler.application import Tasks, to_view
from services.scheduler.task import Task
from services.scheduler.task_rules import RunSkip

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path, event_store: str) -> Settings:
    return Settings(data_dir=tmp_path, event_store=event_store)


@pytest.fixture
def open_app(settings: Settings) -> Iterator[type[Tasks]]:
    opened: list[Tasks] = []

    def make() -> Tasks:
        app = Tasks(env=application_env(settings, "scheduler"))
        opened.append(app)
        return app

    yield make  # type: ignore[misc]
    for app in opened:
        app.close()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_task_lives_and_a_fresh_process_rebuilds_it(open_app: type[Tasks]) -> None:
    app = open_app()
    created = app.create(
        CreateTask(
            name="Price watch",
            prompt="Read the price of ACME",
            trigger=CronTrigger(expr="*/15 * * * *", tz="Europe/Berlin"),
            allowed_tools=["browser_navigate", "browser_extract"],
        ),
        at(0),
    )
    assert created.task_id == "price-watch" and created.version == 1
    app.update(UpdateTask(task_id="price-watch", max_failures=5), at(1))
    app.pause("price-watch", "maintenance", at(2))
    app.resume("price-watch", at(3))
    assert app.dispatch("price-watch", "run-1", "schedule", at(900))
    assert not app.dispatch("price-watch", "run-2", "schedule", at(901))  # one in flight
    assert app.start("price-watch", "run-1", at(901))
    result = app.finish(
        "price-watch",
        "run-1",
        at(960),
        status="completed",
        cost_usd=0.042,
        cost_saved_usd=0.0,
        source="full_llm",
        executor_version=None,
        duration_ms=59_000,
        reason=None,
        error=None,
    )
    assert result == "recorded"
    assert app.finish("price-watch", "run-1", at(961), status="completed") == "duplicate"
    app.skip("price-watch", RunSkip(reason="over budget", origin="schedule", at=at(1800)))

    fresh = open_app()
    task = fresh.get("price-watch")
    view = to_view(task)
    assert view.spec.max_failures == 5 and view.spec.allowed_tools == [
        "browser_navigate",
        "browser_extract",
    ]
    assert isinstance(view.spec.trigger, CronTrigger)
    assert view.spec.trigger.tz == "Europe/Berlin"
    assert (view.status, view.last_run_id, view.last_run_status) == (
        "active",
        "run-1",
        "completed",
    )
    assert view.total_cost_usd == pytest.approx(0.042) and view.runs_dispatched == 1
    assert view.next_due_at == at(2700)  # the skip at 08:30 used that slot
    assert task.version == 8

    fresh.catalog.catch_up()
    (run,) = fresh.catalog.runs(None, 10)
    assert (run.run_id, run.status, run.source, run.duration_ms, run.origin) == (
        "run-1",
        "completed",
        "full_llm",
        59_000,
        "schedule",
    )
    assert fresh.catalog.spent_on(at(0)) == pytest.approx(0.042)

    fresh.delete("price-watch", "done", at(3000))
    with pytest.raises(ServiceError) as gone:
        open_app().update(UpdateTask(task_id="price-watch", prompt="x"), at(3001))
    assert gone.value.code == "not_found"


def test_the_ledger_carries_fell_back_and_tokens_but_no_result(open_app: type[Tasks]) -> None:
    app = open_app()
    app.create(CreateTask(name="fb", prompt="p", trigger=IntervalTrigger(every_s=60)), at(0))
    used = {"claude-x": ModelTokens(input_tokens=1200, output_tokens=80, cost_usd=0.01, calls=2)}
    app.dispatch("fb", "r1", "manual", at(1))
    app.finish(
        "fb", "r1", at(30), status="completed", cost_usd=0.01, source="full_llm",
        fell_back=True, tokens=used,
    )  # fmt: skip
    # An outcome no task waits for (untracked) keeps them too.
    app.finish("fb", "stray", at(40), status="completed", cost_usd=0.02, tokens=used)
    fresh = open_app()
    fresh.catalog.catch_up()
    runs = {run.run_id: run for run in fresh.catalog.runs("fb", 10)}
    assert runs["r1"].fell_back is True and runs["r1"].tokens == used
    assert runs["r1"].result is None  # the ledger keeps no answers: runs.get has them
    assert runs["stray"].tokens == used and runs["stray"].fell_back is False


def stored_before(app: Tasks, topic: str, *absent: str, version: int = 1) -> Any:
    """The one stored event of `topic`, as an earlier version stored it: without the
    fields `absent`, at class_version `version` (read back through the upcasters)."""
    (record,) = [
        n for n in app.recorder.select_notifications(start=1, limit=100) if n.topic == topic
    ]
    state = app.mapper.transcoder.decode(record.state)
    for name in absent:
        del state[name]
    del state["class_version"]
    if version > 1:
        state["class_version"] = version
    return app.mapper.to_domain_event(
        dataclasses.replace(record, state=app.mapper.transcoder.encode(state))
    )


def test_a_run_finished_recorded_before_fell_back_and_tokens_reads_back(
    open_app: type[Tasks],
) -> None:
    app = open_app()
    app.create(CreateTask(name="old", prompt="p", trigger=IntervalTrigger(every_s=60)), at(0))
    app.dispatch("old", "r1", "manual", at(1))
    app.finish("old", "r1", at(30), status="completed", cost_usd=0.01)
    task = app.get("old")
    topic = get_topic(Task.RunFinished)
    finished = stored_before(app, topic, "fell_back", "tokens", "infrastructure")
    rebuilt = app.repository.get(task.id, version=finished.originator_version - 1)
    finished.mutate(rebuilt)
    assert rebuilt.state.last_run_status == "completed" and rebuilt.state.in_flight is None
    catalog = open_app().catalog
    catalog.catch_up()
    with catalog._lock:
        catalog._fold(finished)
    (run,) = catalog.runs("old", 10)
    assert (run.status, run.fell_back, run.tokens, run.infrastructure) == (
        "completed",
        False,
        {},
        False,
    )


def test_a_run_dispatched_before_runs_were_told_the_budget_reads_back(
    open_app: type[Tasks],
) -> None:
    app = open_app()
    app.create(CreateTask(name="old", prompt="p"), at(0))
    app.dispatch("old", "r1", "manual", at(1), budget_left_usd=0.25)
    task = app.get("old")
    dispatched = stored_before(app, get_topic(Task.RunDispatched), "budget_left_usd", version=2)
    assert dispatched.event.budget_left_usd is None
    rebuilt = app.repository.get(task.id, version=dispatched.originator_version - 1)
    dispatched.mutate(rebuilt)
    assert rebuilt.state.in_flight is not None and rebuilt.state.in_flight.run_id == "r1"


def test_a_failed_run_recorded_before_infrastructure_still_counts_toward_max_failures(
    open_app: type[Tasks],
) -> None:
    app = open_app()
    app.create(CreateTask(name="older", prompt="p", max_failures=1), at(0))
    app.dispatch("older", "r1", "manual", at(1))
    app.finish("older", "r1", at(30), status="failed", reason="tool_error", error="gone")
    task = app.get("older")
    finished = stored_before(app, get_topic(Task.RunFinished), "infrastructure")
    rebuilt = app.repository.get(task.id, version=finished.originator_version - 1)
    finished.mutate(rebuilt)
    assert rebuilt.state.consecutive_failures == 1


def test_snapshots_rebuild_a_long_lived_task(open_app: type[Tasks]) -> None:
    app = open_app()
    app.create(CreateTask(name="busy", prompt="p", trigger=IntervalTrigger(every_s=60)), at(0))
    for i in range(60):
        app.dispatch("busy", f"r{i}", "schedule", at(60 * i + 1))
        app.finish("busy", f"r{i}", at(60 * i + 30), status="completed", cost_usd=0.001)
    task = app.get("busy")
    assert task.version == 121
    assert app.snapshots is not None
    snapshots = list(app.snapshots.get(task.id))
    assert [s.originator_version for s in snapshots] == [100]
    rebuilt = open_app().get("busy")
    assert to_view(rebuilt) == to_view(task)
    assert rebuilt.state.total_cost_usd == pytest.approx(0.06)


def test_a_condition_input_shaped_like_library_values_reads_back(
    open_app: type[Tasks],
) -> None:
    # eventsourcing's decoder takes {"_type_", "_data_"} objects for its own values.
    lookalike = {"_type_": "note", "_data_": {"_type_": "datetime_iso", "_data_": "x"}}
    trigger = ConditionTrigger(
        tool="browser_extract",
        input={"selector": ".price", "fields": lookalike},
        url="https://shop.example/item",
        predicate=Above(value=10),
        every_s=60,
    )
    app = open_app()
    app.create(CreateTask(name="odd", prompt="p", trigger=trigger), at(0))
    for i in range(60):  # past a snapshot (every 100 events)
        app.dispatch("odd", f"r{i}", "condition", at(60 * i + 1))
        app.finish("odd", f"r{i}", at(60 * i + 30), status="completed", cost_usd=0.001)
    rebuilt = open_app().get("odd")
    assert rebuilt.state.spec.trigger == trigger
    assert rebuilt.state.runs_dispatched == 60


def test_concurrent_writers_lose_nothing(open_app: type[Tasks]) -> None:
    first, second = open_app(), open_app()
    first.create(CreateTask(name="shared", prompt="p0"), at(0))
    errors: list[BaseException] = []

    def writer(app: Tasks, name: str) -> None:
        try:
            for i in range(10):
                app.update(UpdateTask(task_id="shared", prompt=f"{name}-{i}"), at(i))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(app, f"w{n}"))
        for n, app in enumerate([first, second, first, second])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # Every update changed the prompt, so every one is an event: none was lost.
    assert open_app().get("shared").version == 1 + 40
