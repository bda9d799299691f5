"""Durable pull consumers: provisioned idempotently, poison messages terminated, retries
redelivered, long handlers kept alive with in_progress."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.consumers import Retry, consume, durable_config, ensure_consumer
from services.kernel.streams import ensure_streams

pytestmark = pytest.mark.anyio


class Job(msgspec.Struct):
    n: int
    data: Any = None


# Deeper than Python's stack: decoding raises RecursionError, not a validation error.
TOO_DEEP = b'{"n": 9, "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


async def test_poison_and_retry_do_not_block_the_queue(bus: Bus) -> None:
    await ensure_streams(bus.js)
    seen: list[int] = []
    attempts: dict[int, int] = {}
    done = anyio.Event()

    async def handler(job: Job, msg: Msg) -> None:
        attempts[job.n] = attempts.get(job.n, 0) + 1
        if job.n == 2 and attempts[job.n] == 1:
            raise Retry("not yet", delay_s=0.1)
        seen.append(job.n)
        if len(seen) == 3:
            done.set()

    poison = (b"garbage", b'{"n":"two"}', TOO_DEEP, b'{"n":1,"data":"\xff"}')  # last: not UTF-8
    for body in (b'{"n":1}', *poison, b'{"n":2}', b'{"n":3}'):
        await bus.js.publish(s.WORK_RUNS, body)
    config = durable_config("test-workers", filter_subjects=[s.WORK_RUNS], ack_wait_s=5)
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: consume(
                bus.js,
                stream=s.STREAM_WORK,
                config=config,
                type_=Job,
                handler=handler,
                fetch_timeout_s=0.3,
                task_status=task_status,
            )
        )
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert sorted(seen) == [1, 2, 3]
    assert attempts[2] == 2
    # Work-queue retention: everything settled is gone, poison included.
    with anyio.fail_after(5):
        while (await bus.js.stream_info(s.STREAM_WORK)).state.messages:
            await anyio.sleep(0.05)


async def test_long_handler_is_not_redelivered(bus: Bus) -> None:
    await ensure_streams(bus.js)
    calls = 0

    async def handler(job: Job, msg: Msg) -> None:
        nonlocal calls
        calls += 1
        await anyio.sleep(2.5)  # longer than the 1 s ack wait below

    await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
    config = durable_config("test-long", filter_subjects=[s.WORK_RUNS], ack_wait_s=1)
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: consume(
                bus.js,
                stream=s.STREAM_WORK,
                config=config,
                type_=Job,
                handler=handler,
                workers=2,
                fetch_timeout_s=0.3,
                heartbeat_s=0.3,
                task_status=task_status,
            )
        )
        await anyio.sleep(3.5)
        tg.cancel_scope.cancel()
    assert calls == 1


async def test_consumer_provisioning_updates_in_place(bus: Bus) -> None:
    await ensure_streams(bus.js)
    first = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=10))
    again = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=10))
    changed = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=45))
    assert first.config.ack_wait == again.config.ack_wait == 10
    assert changed.config.ack_wait == 45
