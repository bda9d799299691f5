"""rote-scheduler over real NATS, against what one task can do to everyone else's: a
spec too large for the bus, and a trigger whose next time is past the year 9999.

Either used to be recorded and then stop the scheduler for every task: the relay
retried the unpublishable event forever (nothing recorded after it reached the bus, no
run went out), or every tick and every list failed on the overflow."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import pytest

from contracts import subjects as s
from contracts.runs import RunEvent
from contracts.tasks import (
    MAX_SPEC_BYTES,
    Above,
    ConditionTrigger,
    IntervalTrigger,
    TaskEvent,
    TaskList,
    TaskRejected,
    TaskSpec,
)
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.application import Tasks
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from tests.integration.test_scheduler_intake import events, scheduler

pytestmark = pytest.mark.anyio
T = TypeVar("T")
T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)


@pytest.fixture
def sqlite_settings(settings: Settings) -> Settings:
    # A store that outlives the scheduler: tasks recorded by an older version are
    # put in first.
    return Settings(
        nats_url=settings.nats_url,
        data_dir=settings.data_dir,
        event_store="sqlite",
        log_format="json",
    )


def store_tasks(settings: Settings, *tasks: Task) -> None:
    app = Tasks(env=application_env(settings, "scheduler"))
    try:
        app.save(*tasks)
    finally:
        app.close()


async def call(bus: Bus, subject: str, body: dict[str, Any]) -> tuple[dict[str, str], Any]:
    msg = await bus.nc.request(subject, json.dumps(body).encode(), timeout=10)
    return dict(msg.headers or {}), json.loads(msg.data)


async def runs_requested(bus: Bus, task_id: str, count: int) -> int:
    """How many of `task_id`'s runs were requested (up to `count`); each went out on the
    work queue too."""
    subject = s.run_events_of(task_id, event="requested")
    requested = await events(bus, subject, RunEvent, count, stream=s.STREAM_RUNS)
    # The relay publishes the event, then the request: the latter may land a moment later.
    with anyio.fail_after(5):
        while (await bus.js.stream_info(s.STREAM_WORK)).state.messages < len(requested):
            await anyio.sleep(0.02)
    return len(requested)


FINE = {"name": "Fine", "prompt": "p", "trigger": {"kind": "interval", "every_s": 1}}


# --- specs too large for the bus ---------------------------------------------------------


async def test_a_spec_too_large_for_the_bus_is_refused_and_later_tasks_run(
    settings: Settings, bus: Bus
) -> None:
    big_input = {"selector": "x" * (MAX_SPEC_BYTES + 1)}
    too_large = [
        {"name": "Big", "prompt": "€" * 90_000},
        {
            "name": "Big input",
            "prompt": "p",
            "trigger": {
                "kind": "condition",
                "tool": "browser_extract",
                "input": big_input,
                "url": "https://shop.example/item",
                "predicate": {"op": "contains", "text": "in stock"},
                "every_s": 60,
            },
        },
    ]
    async with scheduler(settings, bus):
        for body in too_large:
            headers, reply = await call(bus, s.TASKS_CREATE, body)
            assert headers["Nats-Service-Error-Code"] == "413", reply
            error = reply["error"]
            assert (error["code"], error["field"]) == ("too_large", "spec")
            assert error["details"]["limit"] == MAX_SPEC_BYTES
            assert error["details"]["size"] > MAX_SPEC_BYTES
        headers, reply = await call(bus, s.TASKS_LIST, {})
        assert "Nats-Service-Error" not in headers and reply["tasks"] == []

        headers, reply = await call(bus, s.TASKS_CREATE, FINE)
        assert "Nats-Service-Error" not in headers, reply
        assert [e.event for e in await events(bus, s.task_event("fine", "*"), TaskEvent, 1)] == [
            "defined"
        ]
        assert await runs_requested(bus, "fine", 1) == 1


async def test_a_spec_too_large_on_the_intake_is_rejected_and_the_next_command_applies(
    settings: Settings, bus: Bus
) -> None:
    await ensure_streams(bus.js)
    big = json.dumps({"name": "Big", "prompt": "\x01" * 50_000}).encode()
    await bus.js.publish(s.intake_task("create"), big)
    await bus.js.publish(s.intake_task("create"), json.dumps(FINE).encode())
    async with scheduler(settings, bus):
        (rejected,) = await events(bus, s.TASK_REJECTED, TaskRejected, 1)
        assert (rejected.verb, rejected.error.code, rejected.error.field) == (
            "create",
            "too_large",
            "spec",
        )
        assert str(MAX_SPEC_BYTES) in rejected.error.message
        assert rejected.payload_truncated
        defined = await events(bus, s.task_event("fine", "*"), TaskEvent, 1)
        assert [e.event for e in defined] == ["defined"]


async def test_a_stored_event_too_large_for_the_bus_does_not_hold_back_the_rest(
    sqlite_settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    # Recorded by a version without the spec limit: its Task.Defined can never be
    # published. It is logged and passed over; what follows reaches the bus.
    huge = TaskSpec(
        name="Huge",
        prompt="p",
        trigger=ConditionTrigger(
            tool="browser_extract",
            input={"selector": "x" * (bus.nc.max_payload + 1)},
            url="https://shop.example/item",
            predicate=Above(value=1),
            every_s=3600,
        ),
    )
    store_tasks(sqlite_settings, Task.open(Defined(task_id="huge", spec=huge, at=T0)))
    async with scheduler(sqlite_settings, bus):
        headers, reply = await call(bus, s.TASKS_CREATE, FINE)
        assert "Nats-Service-Error" not in headers, reply
        defined = await events(bus, s.task_event("*", "defined"), TaskEvent, 2, wait=5)
        assert [e.task_id for e in defined] == ["fine"]
        assert await runs_requested(bus, "fine", 1) == 1
    too_large = [e for e in written_logs if e["event"] == "relay_event_too_large"]
    assert too_large and too_large[0]["level"] == "error"
    assert too_large[0]["topic"].endswith("Task.Defined")
    assert too_large[0]["notification_id"] == 1


# --- triggers past the year 9999 ---------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ({"kind": "interval", "every_s": 1e12}, "trigger.every_s"),
        ({"kind": "interval", "every_s": 1e308}, "trigger.every_s"),
        (
            {
                "kind": "condition",
                "tool": "shell_exec",
                "predicate": {"op": "above", "value": 90},
                "every_s": 60,
                "cooldown_s": 1e12,
            },
            "trigger.cooldown_s",
        ),
        ({"kind": "once", "at": "0001-01-01T00:00:00+14:00"}, "trigger.at"),
        ({"kind": "once", "at": "9999-12-31T23:59:59-14:00"}, "trigger.at"),
    ],
)
async def test_a_trigger_past_the_datetime_range_is_a_400_naming_the_field(
    settings: Settings, bus: Bus, trigger: dict[str, Any], field: str
) -> None:
    async with scheduler(settings, bus):
        body = {"name": "Far", "prompt": "p", "trigger": trigger}
        headers, reply = await call(bus, s.TASKS_CREATE, body)
        assert headers["Nats-Service-Error-Code"] == "400", reply
        assert (reply["error"]["code"], reply["error"]["field"]) == ("invalid_request", field)


async def test_a_stored_interval_past_the_datetime_range_pauses_that_task_only(
    sqlite_settings: Settings, bus: Bus
) -> None:
    # Recorded by a version without the bound, and run once: its next time, a
    # trillion seconds after that run, is past the year 9999.
    far = Task.open(
        Defined(
            task_id="far",
            spec=TaskSpec(name="Far", prompt="p", trigger=IntervalTrigger(every_s=1e12)),
            at=T0,
        )
    )
    far.dispatch_run("r-far-1", "schedule", T0)
    far.finish_run("r-far-1", status="completed", at=T0)
    store_tasks(sqlite_settings, far)
    async with scheduler(sqlite_settings, bus):
        headers, reply = await call(bus, s.TASKS_CREATE, FINE)
        assert "Nats-Service-Error" not in headers, reply
        assert await runs_requested(bus, "fine", 1) == 1  # the tick goes on

        headers, reply = await call(bus, s.TASKS_LIST, {"status": "paused"})
        assert "Nats-Service-Error" not in headers, reply
        (paused,) = decode(json.dumps(reply).encode(), TaskList).tasks
        assert paused.task_id == "far" and paused.next_due_at is None
        assert "every_s" in (paused.status_reason or "")
        headers, reply = await call(bus, s.TASKS_LIST, {})
        assert "Nats-Service-Error" not in headers, reply
        assert sorted(t["task_id"] for t in reply["tasks"]) == ["far", "fine"]
        headers, reply = await call(bus, s.TASKS_GET, {"task_id": "far"})
        assert "Nats-Service-Error" not in headers and reply["status"] == "paused"


# --- a condition input nested too deeply to load --------------------------------------------


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_condition(depth: int) -> dict[str, Any]:
    return {
        "kind": "condition",
        "tool": "shell_exec",
        "input": {"a": nested(depth)},
        "predicate": {"op": "contains", "text": "x"},
        "every_s": 60,
    }


async def test_a_condition_input_nested_too_deeply_is_a_400_naming_the_field(
    settings: Settings, bus: Bus
) -> None:
    # A 2 KB request: it used to be recorded, then every load of the task (the store's
    # cache copies it) ran out of stack: a 500, and a scheduler that could not restart.
    async with scheduler(settings, bus):
        body = {"task_id": "deep", "name": "Deep", "prompt": "p", "trigger": deep_condition(600)}
        headers, reply = await call(bus, s.TASKS_CREATE, body)
        assert headers["Nats-Service-Error-Code"] == "400", reply
        assert (reply["error"]["code"], reply["error"]["field"]) == (
            "invalid_request",
            "trigger.input",
        )
        headers, reply = await call(bus, s.TASKS_GET, {"task_id": "deep"})
        assert reply["error"]["code"] == "not_found"
        headers, reply = await call(bus, s.TASKS_CREATE, FINE)
        assert "Nats-Service-Error" not in headers, reply
        assert await runs_requested(bus, "fine", 1) == 1


async def test_a_stored_task_too_deep_to_load_does_not_stop_the_scheduler(
    sqlite_settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    # Recorded by a version without the nesting bound: the scheduler still starts,
    # leaves that task out (saying so in its log) and serves the others.
    deep = decode(
        json.dumps({"name": "Deep", "prompt": "p", "trigger": deep_condition(600)}).encode(),
        TaskSpec,
    )
    store_tasks(sqlite_settings, Task.open(Defined(task_id="deep", spec=deep, at=T0)))
    async with scheduler(sqlite_settings, bus):
        headers, reply = await call(bus, s.TASKS_CREATE, FINE)
        assert "Nats-Service-Error" not in headers, reply
        assert await runs_requested(bus, "fine", 1) == 1
        headers, reply = await call(bus, s.TASKS_LIST, {})
        assert "Nats-Service-Error" not in headers, reply
        assert [t["task_id"] for t in reply["tasks"]] == ["fine"]
    failed = [e for e in written_logs if e["event"] == "catalog_load_failed"]
    assert failed and failed[0]["task_id"] == "deep" and failed[0]["level"] == "error"


# --- tasks.list over the payload limit ----------------------------------------------------------


async def test_a_task_list_larger_than_one_message_comes_a_page_at_a_time(
    settings: Settings, bus: Bus
) -> None:
    # Twelve tasks of ~95 KB are more than one NATS message: `tasks.list {}` used to
    # answer 413, and no request could reach past the first few.
    async with scheduler(settings, bus):
        for i in range(12):
            body = {"task_id": f"t{i:02d}", "name": f"t{i}", "prompt": "x" * 95_000}
            headers, reply = await call(bus, s.TASKS_CREATE, body)
            assert "Nats-Service-Error" not in headers, reply
        pages: list[list[str]] = []
        query: dict[str, Any] = {}
        for _ in range(12):
            headers, reply = await call(bus, s.TASKS_LIST, query)
            assert "Nats-Service-Error" not in headers, reply
            page = decode(json.dumps(reply).encode(), TaskList)
            pages.append([t.task_id for t in page.tasks])
            if page.next_after is None:
                break
            query = {"after": page.next_after}
        assert len(pages) > 1 and all(pages)
        assert [task_id for page in pages for task_id in page] == [f"t{i:02d}" for i in range(12)]
