"""The durable task intake (`nats pub rote.intake.tasks.<verb>`): commands applied in
order, each once; bad ones refused on rote.evt.task.rejected with the reason and the
payload as sent, without holding back the ones behind them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TypeVar

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.tasks import TaskEvent, TaskRejected, TaskView
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.engine import SchedulerConfig
from services.scheduler.service import serve
from tests.e2e.helpers import stored

pytestmark = pytest.mark.anyio
T = TypeVar("T")


@asynccontextmanager
async def scheduler(settings: Settings, bus: Bus) -> AsyncIterator[None]:
    await ensure_streams(bus.js)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings,
            bus=bus,
            task_group=tg,
            services=("scheduler",),
            nats_url=bus.url,
            embedded_nats=False,
        )
        await tg.start(partial(serve, ctx, config=SchedulerConfig(tick_s=0.1)))
        yield
        tg.cancel_scope.cancel()


async def events(
    bus: Bus,
    subject: str,
    type_: type[T],
    count: int,
    wait: float = 30,
    stream: str = s.STREAM_TASKS,
) -> list[T]:
    """Events on `subject` from the start of its stream: the first `count` of them, or
    fewer if no more were stored within `wait` seconds."""
    msgs: list[Msg] = []
    with anyio.move_on_after(wait):
        while len(msgs := await read_all(bus.js, stream, subject)) < count:
            await anyio.sleep(0.1)
    return [decode(m.data, type_) for m in msgs[:count]]


async def task_stream(bus: Bus, subject: str, type_: type[T]) -> list[T]:
    """Every event on `subject` ROTE_TASKS holds now, read to its end."""
    return await stored(bus, s.STREAM_TASKS, subject, type_)


async def get(bus: Bus, task_id: str) -> TaskView:
    reply = await bus.request(s.TASKS_GET, json.dumps({"task_id": task_id}).encode(), TaskView)
    return reply


BAD_FIELD = b'{"name": "typo", "prompt": "p", "colour": "red"}'
BAD_CRON = b'{"name": "bad cron", "prompt": "p", "trigger": {"kind": "cron", "expr": "99 * * * *"}}'
NOT_JSON = b"{this is not json"
# Near the 1 MB limit, and far over it once escaped into a rejection; a secret inside.
HUGE = (
    b'{"name": "x", "prompt": "postgresql://app:hunter2pw@db/prod", "colour": "'
    + b'\\"' * 300_000
    + b'"}'
)
GOOD = b'{"name": "Intake OK", "prompt": "p", "trigger": {"kind": "cron", "expr": "0 9 * * *"}}'


async def test_bad_commands_are_refused_and_the_ones_behind_them_still_apply(
    settings: Settings, bus: Bus
) -> None:
    await ensure_streams(bus.js)
    # Published before the scheduler starts: the durable consumer takes them in order.
    sequence = [
        ("create", BAD_FIELD),
        ("create", BAD_CRON),
        ("create", NOT_JSON),
        ("create", HUGE),
        ("frobnicate", b'{"task_id": "x"}'),
        ("update", b'{"task_id": "no-such-task", "prompt": "x"}'),
        ("create", GOOD),
        ("pause", b'{"task_id": "intake-ok", "reason": "from intake"}'),
        ("update", b'{"task_id": "intake-ok", "max_failures": 7}'),
    ]
    for verb, body in sequence:
        await bus.js.publish(s.intake_task(verb), body)
    async with scheduler(settings, bus):
        rejected = await events(bus, s.TASK_REJECTED, TaskRejected, 6)
        assert [(r.verb, r.error.code, r.error.field) for r in rejected] == [
            ("create", "invalid_request", "colour"),
            ("create", "invalid_request", "trigger.expr"),
            ("create", "malformed", None),
            ("create", "invalid_request", "colour"),
            ("frobnicate", "invalid_request", "verb"),
            ("update", "not_found", "task_id"),
        ]
        assert [r.payload.encode() for r in rejected[:3]] == [BAD_FIELD, BAD_CRON, NOT_JSON]
        assert "99 * * * *" in rejected[1].error.message
        assert not any(r.payload_truncated for r in rejected[:3])
        huge = rejected[3]
        assert huge.payload_truncated and len(huge.payload) < len(HUGE)
        assert "hunter2pw" not in huge.payload and "[redacted]" in huge.payload

        applied = await events(bus, s.task_event("intake-ok", "*"), TaskEvent, 3)
        assert [e.event for e in applied] == ["defined", "paused", "updated"]
        view = await get(bus, "intake-ok")
        assert (view.status, view.status_reason, view.spec.max_failures) == (
            "paused",
            "from intake",
            7,
        )
        # Nothing more was refused, and the intake is drained (work-queue retention). The
        # last command is applied (above), and a refusal is published before its command
        # is acked, so every refusal there was to be is on the stream by now.
        assert len(await task_stream(bus, s.TASK_REJECTED, TaskRejected)) == 6
        with anyio.fail_after(5):
            while (await bus.js.stream_info(s.STREAM_INTAKE)).state.messages:
                await anyio.sleep(0.05)


async def test_a_duplicate_command_is_applied_once(settings: Settings, bus: Bus) -> None:
    async with scheduler(settings, bus):
        create = b'{"name": "dup", "prompt": "p"}'
        first = await bus.js.publish(
            s.intake_task("create"), create, headers={"Nats-Msg-Id": "c-1"}
        )
        again = await bus.js.publish(
            s.intake_task("create"), create, headers={"Nats-Msg-Id": "c-1"}
        )
        assert not first.duplicate and again.duplicate

        run = b'{"task_id": "dup"}'
        for _ in range(3):
            await bus.js.publish(s.intake_task("run"), run, headers={"Nats-Msg-Id": "run-1"})
        # The run goes out before the pause (a pause skips a run still queued).
        await events(bus, s.task_event("dup", "*"), TaskEvent, 3)
        # A different message id is a different request.
        await bus.js.publish(s.intake_task("pause"), run, headers={"Nats-Msg-Id": "p-1"})

        # The four expected events (however slow the machine), then none more: time for a
        # wrong one to follow, then the stream read to its end.
        await events(bus, s.task_event("dup", "*"), TaskEvent, 4)
        await anyio.sleep(1.5)
        got = await task_stream(bus, s.task_event("dup", "*"), TaskEvent)
        names = [e.event for e in got]
        assert len(names) == 4, names
        assert names.count("defined") == 1
        assert names.count("run_requested") == 1
        assert names.count("run_dispatched") == 1
        assert names.count("paused") == 1
        assert await task_stream(bus, s.TASK_REJECTED, TaskRejected) == []  # all applied (above)
        work = await bus.js.stream_info(s.STREAM_WORK)
        assert work.state.messages == 1  # one run request, nobody consumed it here
        (requested,) = [e for e in got if e.event == "run_dispatched"]
        assert requested.run_id is not None and requested.run_id.startswith("k-")


async def test_the_intake_goes_on_after_its_consumer_was_deleted(
    settings: Settings, bus: Bus
) -> None:
    """An operator's `nats consumer rm` (or a stream reset) must not stop the scheduler
    taking commands: the consumer is created again and the next command applies."""
    async with scheduler(settings, bus):
        await bus.js.delete_consumer(s.STREAM_INTAKE, s.CONSUMER_SCHEDULER_INTAKE)
        await anyio.sleep(0.5)
        await bus.js.publish(s.intake_task("create"), GOOD)
        with anyio.fail_after(20):
            while True:
                try:
                    task = await get(bus, "intake-ok")
                    break
                except Exception:  # not there yet
                    await anyio.sleep(0.2)
        assert task.spec.name == "Intake OK"


# As Go's encoding/json (`&` as \u0026) and PHP's json_encode (`/` as \/) write it: the
# secrets are there once the JSON is read, as a task event shows them, masked.
ESCAPED = (
    rb'{"name": "Escaped", "prompt": "poll https:\/\/api.example.com\/s?id=1\u0026token='
    rb'tok3nV4lue and postgresql:\/\/app:hunter2pw@db\/prod", "colour": "red"}'
)


async def test_a_rejection_masks_secrets_the_json_writes_with_escapes(
    settings: Settings, bus: Bus
) -> None:
    await ensure_streams(bus.js)
    await bus.js.publish(s.intake_task("create"), ESCAPED)
    async with scheduler(settings, bus):
        (rejected,) = await events(bus, s.TASK_REJECTED, TaskRejected, 1)
    assert (rejected.error.code, rejected.error.field) == ("invalid_request", "colour")
    assert "tok3nV4lue" not in rejected.payload and "hunter2pw" not in rejected.payload
    # Still the command as sent, secrets aside.
    assert json.loads(rejected.payload) == {
        "name": "Escaped",
        "prompt": "poll https://api.example.com/s?id=1&token=[redacted]"
        " and postgresql://app:[redacted]@db/prod",
        "colour": "red",
    }


async def test_a_recreated_intake_stream_still_gets_its_rejections(
    settings: Settings, bus: Bus
) -> None:
    """An operator's stream reset (`nats stream rm`, then provisioned again) starts the
    intake at sequence 1 again: a refusal there is a new one, not a copy of the last."""
    async with scheduler(settings, bus):
        await bus.js.publish(s.intake_task("create"), BAD_FIELD)
        await events(bus, s.TASK_REJECTED, TaskRejected, 1)
        await bus.js.delete_stream(s.STREAM_INTAKE)
        await ensure_streams(bus.js)
        ack = await bus.js.publish(s.intake_task("create"), BAD_CRON)
        assert ack.seq == 1
        rejected = await events(bus, s.TASK_REJECTED, TaskRejected, 2)
        assert [r.payload.encode() for r in rejected] == [BAD_FIELD, BAD_CRON]


async def test_a_task_naming_an_unpriced_model_is_refused_on_either_way_in(
    settings: Settings, bus: Bus
) -> None:
    """An unknown model would count as $0 and run past ROTE_DAILY_BUDGET_USD: the
    endpoint answers with the field and the models it could have named, the intake
    refuses it on rote.evt.task.rejected, and no task is defined either way."""
    unpriced = {"name": "gpt", "prompt": "p", "task_id": "gpt", "model": "gpt-9"}
    async with scheduler(settings, bus):
        reply = await bus.nc.request(s.TASKS_CREATE, json.dumps(unpriced).encode(), timeout=5)
        assert (reply.headers or {}).get("Nats-Service-Error-Code") == "400"
        error = json.loads(reply.data)["error"]
        assert (error["code"], error["field"]) == ("invalid_request", "model")
        assert "'gpt-9' has no price" in error["message"]
        assert {"sonnet", "haiku", "claude-sonnet-5-5"} <= set(error["details"]["priced"])

        small = {**unpriced, "model": "sonnet", "small_model": "gpt-9-mini"}
        await bus.js.publish(s.intake_task("create"), json.dumps(small).encode())
        (rejected,) = await events(bus, s.TASK_REJECTED, TaskRejected, 1)
        assert (rejected.error.code, rejected.error.field) == ("invalid_request", "small_model")
        assert await task_stream(bus, s.task_event("gpt", "*"), TaskEvent) == []
