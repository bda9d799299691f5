"""Durable pull consumers: provisioned idempotently, poison messages terminated, retries
redelivered, long handlers kept alive with in_progress; a consumer or stream deleted
under a running service is restored, and nothing a fetch or an ack raises ends it."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, RetentionPolicy
from nats.js.errors import NotFoundError

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.consumers import (
    Reject,
    Retry,
    consume,
    durable_config,
    ensure_consumer,
    hand_back,
    stranded,
)
from services.kernel.streams import ensure_streams

pytestmark = pytest.mark.anyio


class Job(msgspec.Struct):
    n: int
    data: Any = None


def job_consumer(bus: Bus, config: ConsumerConfig, handler: Any) -> Any:
    """`consume` of Job messages from the work stream, for a task group's start()."""
    return partial(
        consume, bus.js, stream=s.STREAM_WORK, config=config, type_=Job, handler=handler,
        fetch_timeout_s=0.3,
    )  # fmt: skip


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
        await anyio.sleep(5.0)  # longer than two of the 2 s ack waits below

    await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
    config = durable_config("test-long", filter_subjects=[s.WORK_RUNS], ack_wait_s=2)
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
        await anyio.sleep(6.0)
        tg.cancel_scope.cancel()
    assert calls == 1


async def test_a_stopped_consumer_hands_its_message_back_at_once(bus: Bus) -> None:
    """A process stopped mid-message (a rolling restart) does not leave the message to
    the ack wait: another process on the same durable takes it over at once."""
    await ensure_streams(bus.js)
    taken = anyio.Event()
    handled: list[tuple[str, int]] = []  # (process, delivery)
    finished = anyio.Event()

    def process(who: str) -> Any:
        async def handler(job: Job, msg: Msg) -> None:
            delivery = msg.metadata.num_delivered if msg.metadata else 0
            handled.append((who, delivery))
            if not taken.is_set():
                taken.set()
                await anyio.sleep_forever()  # busy with it when it is stopped
            finished.set()

        # Far longer than the test may take: only a hand-back can bring it back in time.
        config = durable_config("test-handback", filter_subjects=[s.WORK_RUNS], ack_wait_s=120)
        return lambda task_status: consume(
            bus.js,
            stream=s.STREAM_WORK,
            config=config,
            type_=Job,
            handler=handler,
            workers=2,
            fetch_timeout_s=0.3,
            task_status=task_status,
        )

    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()
        second = anyio.CancelScope()

        async def run(scope: anyio.CancelScope, who: str, task_status: Any) -> None:
            with scope:
                await process(who)(task_status)

        await tg.start(run, first, "first")
        await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
        with anyio.fail_after(10):
            await taken.wait()
        await tg.start(run, second, "second")
        assert handled == [("first", 1)]
        first.cancel()
        with anyio.fail_after(15):
            await finished.wait()
        second.cancel()
    assert handled == [("first", 1), ("second", 2)]
    await _settled(bus)


async def test_a_message_sent_for_a_cancelled_fetch_is_handed_back(bus: Bus) -> None:
    """A shutdown can cancel a fetch whose pull request the server answers a moment
    later: the message lands in a queue nobody reads any more. A stopping consumer hands
    it back, so it comes again at once rather than after the ack wait."""
    await ensure_streams(bus.js)
    config = durable_config("test-stranded", filter_subjects=[s.WORK_RUNS], ack_wait_s=120)
    await ensure_consumer(bus.js, s.STREAM_WORK, config)
    await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
    # What a cancelled fetch leaves behind: its pull request, answered into its inbox.
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox)
    await bus.nc.publish(
        f"$JS.API.CONSUMER.MSG.NEXT.{s.STREAM_WORK}.test-stranded", b'{"batch":1}', reply=inbox
    )
    with anyio.fail_after(5):
        while sub.pending_msgs < 1:
            await anyio.sleep(0.01)
    await sub.unsubscribe()

    await hand_back(stranded(sub), "test-stranded")

    again = await bus.js.pull_subscribe_bind(durable="test-stranded", stream=s.STREAM_WORK)
    [msg] = await again.fetch(1, timeout=5)  # far inside the 120 s ack wait
    assert json.loads(msg.data) == {"n": 1}
    assert msg.metadata.num_delivered == 2
    await msg.ack()
    assert stranded(sub) == []  # taken once


async def test_consumer_provisioning_updates_in_place(bus: Bus) -> None:
    await ensure_streams(bus.js)
    first = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=10))
    again = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=10))
    changed = await ensure_consumer(bus.js, s.STREAM_RUNS, durable_config("c", ack_wait_s=45))
    assert first.config.ack_wait == again.config.ack_wait == 10
    assert changed.config.ack_wait == 45


async def _consume_until(
    bus: Bus,
    config: ConsumerConfig,
    handler: Any,
    during: Any,
    *,
    stream: str = s.STREAM_WORK,
    timeout_s: float = 15,
    check_every_s: float = 60.0,
) -> None:
    """Run consume() while `during` does its part; consume() raising fails the test."""
    async with anyio.create_task_group() as tg:
        await tg.start(
            lambda task_status: consume(
                bus.js,
                stream=stream,
                config=config,
                type_=Job,
                handler=handler,
                workers=2,
                fetch_timeout_s=0.3,
                check_every_s=check_every_s,
                task_status=task_status,
            )
        )
        with anyio.fail_after(timeout_s):
            await during()
        tg.cancel_scope.cancel()


async def _settled(bus: Bus) -> None:
    """Until the work queue is empty: every message delivered so far is acknowledged."""
    while (await bus.js.stream_info(s.STREAM_WORK)).state.messages:
        await anyio.sleep(0.05)


class Seen:
    """What a handler received, and a way to wait for a given job."""

    def __init__(self) -> None:
        self.jobs: list[int] = []
        self._changed = anyio.Event()

    async def handler(self, job: Job, msg: Msg) -> None:
        self.jobs.append(job.n)
        self._changed.set()

    async def wait_for(self, n: int) -> None:
        while n not in self.jobs:
            self._changed = anyio.Event()
            await self._changed.wait()


async def test_a_deleted_consumer_is_recreated_and_consumption_goes_on(
    bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    await ensure_streams(bus.js)
    seen = Seen()
    config = durable_config("test-deleted", filter_subjects=[s.WORK_RUNS], ack_wait_s=5)

    async def during() -> None:
        await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
        await seen.wait_for(1)
        await _settled(bus)  # else the new consumer rightly delivers it again
        await bus.js.delete_consumer(s.STREAM_WORK, "test-deleted")
        await bus.js.publish(s.WORK_RUNS, b'{"n":2}')
        await seen.wait_for(2)

    await _consume_until(bus, config, seen.handler, during)
    assert seen.jobs == [1, 2]
    lost = [e for e in written_logs if e["event"] == "consumer_lost"]
    assert lost and lost[0]["consumer"] == "test-deleted" and lost[0]["stream"] == s.STREAM_WORK
    assert lost[0]["level"] == "warning" and "no responders" in lost[0]["error"]


async def test_a_deleted_stream_is_recreated_and_consumption_goes_on(bus: Bus) -> None:
    await ensure_streams(bus.js)
    seen = Seen()
    config = durable_config("test-stream-gone", filter_subjects=[s.WORK_RUNS], ack_wait_s=5)

    async def during() -> None:
        await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
        await seen.wait_for(1)
        await _settled(bus)
        await bus.js.delete_stream(s.STREAM_WORK)
        while True:  # consume() provisions it again, as defined
            try:
                info = await bus.js.stream_info(s.STREAM_WORK)
                break
            except NotFoundError:
                await anyio.sleep(0.1)
        assert info.config.retention == RetentionPolicy.WORK_QUEUE
        await bus.js.publish(s.WORK_RUNS, b'{"n":2}')
        await seen.wait_for(2)

    await _consume_until(bus, config, seen.handler, during)
    assert seen.jobs == [1, 2]


async def test_a_consumer_changed_to_refuse_pull_requests_is_put_back(bus: Bus) -> None:
    """Changed behind rote's back so that the server answers every pull request with a
    409 (which nats-py reports as a plain fetch timeout): an idle worker finds out and
    puts the consumer back to its config, and messages flow again."""
    await ensure_streams(bus.js)
    seen = Seen()
    config = durable_config("test-refused", filter_subjects=[s.WORK_RUNS], ack_wait_s=5)

    async def during() -> None:
        # Pull requests may wait at most 10 ms: consume()'s (0.3 s) get "409 Exceeded
        # MaxRequestExpires".
        drifted = {**config.as_dict(), "max_expires": 10_000_000}
        await bus.nc.request(
            f"$JS.API.CONSUMER.CREATE.{s.STREAM_WORK}.test-refused",
            json.dumps({"stream_name": s.STREAM_WORK, "config": drifted}).encode(),
        )
        await bus.js.publish(s.WORK_RUNS, b'{"n":1}')
        await seen.wait_for(1)

    await _consume_until(bus, config, seen.handler, during, check_every_s=1.0)
    assert seen.jobs == [1]


async def test_a_handler_that_settles_the_message_itself_does_not_crash(bus: Bus) -> None:
    await ensure_streams(bus.js)
    seen = Seen()

    async def handler(job: Job, msg: Msg) -> None:
        await msg.ack()  # the consumer's own ack after this fails: already acknowledged
        await seen.handler(job, msg)

    config = durable_config("test-self-ack", filter_subjects=[s.WORK_RUNS], ack_wait_s=5)

    async def during() -> None:
        for n in (1, 2, 3):
            await bus.js.publish(s.WORK_RUNS, f'{{"n":{n}}}'.encode())
        for n in (1, 2, 3):
            await seen.wait_for(n)

    await _consume_until(bus, config, handler, during)
    assert sorted(seen.jobs) == [1, 2, 3]


async def test_a_failing_handler_backs_off_and_its_last_delivery_is_logged_as_given_up(
    bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    """A dependency away for a few seconds (an event store restarting) must not use up
    every delivery at once: each comes back later than the one before. The message the
    consumer then gives up is lost work, and says so."""
    await ensure_streams(bus.js)
    deliveries: list[float] = []
    asked: list[float | None] = []  # the delay each nak asked the server for
    given_up = anyio.Event()

    async def handler(job: Job, msg: Msg) -> None:
        deliveries.append(anyio.current_time())
        nak = msg.nak

        async def recorded_nak(delay: float | None = None) -> None:
            asked.append(delay)
            await nak(delay=delay)

        msg.nak = recorded_nak  # type: ignore[method-assign]
        if len(deliveries) == 3:
            given_up.set()
        raise RuntimeError("the event store is restarting")

    await bus.js.publish(s.WORK_RUNS, b'{"n": 1}')
    config = durable_config("test-backoff", filter_subjects=[s.WORK_RUNS], max_deliver=3)
    async with anyio.create_task_group() as tg:
        await tg.start(job_consumer(bus, config, handler))
        with anyio.fail_after(15):
            await given_up.wait()
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    # Each failure asks for a longer delay than the one before...
    assert asked == [1.0, 2.0, 4.0]
    # ...and the server holds the message back at least that long. Each delivery is
    # timed before its nak is sent: a busy machine can only make a gap longer.
    first, second = deliveries[1] - deliveries[0], deliveries[2] - deliveries[1]
    assert first > 0.8 and second > 1.8, deliveries
    events = [e for e in written_logs if e.get("consumer") == "test-backoff"]
    assert [(e["event"], e["delivery"]) for e in events if "delivery" in e] == [
        ("handler_failed", 1),
        ("handler_failed", 2),
        ("message_given_up", 3),
    ]


async def test_a_message_retried_past_its_last_delivery_is_logged_as_given_up(
    bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    """A `Retry` (a `completed` event whose `started` never becomes readable) on the
    last delivery is lost work too: an info-level retry line would hide it."""
    await ensure_streams(bus.js)
    deliveries = 0
    done = anyio.Event()

    async def handler(job: Job, msg: Msg) -> None:
        nonlocal deliveries
        deliveries += 1
        if deliveries == 2:
            done.set()
        raise Retry("its started event is not readable yet", delay_s=0.1)

    await bus.js.publish(s.WORK_RUNS, b'{"n": 1}')
    config = durable_config("test-retried", filter_subjects=[s.WORK_RUNS], max_deliver=2)
    async with anyio.create_task_group() as tg:
        await tg.start(job_consumer(bus, config, handler))
        with anyio.fail_after(10):
            await done.wait()
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    given_up = [e for e in written_logs if e["event"] == "message_given_up"]
    assert [(e["consumer"], e["delivery"], e["level"]) for e in given_up] == [
        ("test-retried", 2, "error")
    ]
    assert given_up[0]["reason"] == "its started event is not readable yet"


async def test_a_reject_raised_in_the_handlers_own_task_group_still_rejects(bus: Bus) -> None:
    """anyio wraps it in an exception group: read as a failure, the message would come
    back again and again instead of being dropped as the handler said."""
    await ensure_streams(bus.js)
    calls = 0

    async def handler(job: Job, msg: Msg) -> None:
        nonlocal calls
        calls += 1

        async def check() -> None:
            raise Reject("not a job this consumer can ever do")

        async with anyio.create_task_group() as tg:
            tg.start_soon(check)

    await bus.js.publish(s.WORK_RUNS, b'{"n": 1}')
    config = durable_config("test-grouped", filter_subjects=[s.WORK_RUNS])
    async with anyio.create_task_group() as tg:
        await tg.start(job_consumer(bus, config, handler))
        with anyio.fail_after(5):  # terminated: gone from the work queue
            while calls == 0 or (await bus.js.stream_info(s.STREAM_WORK)).state.messages:
                await anyio.sleep(0.05)
        await anyio.sleep(1.5)  # a nak'd message would be back within this
        tg.cancel_scope.cancel()
    assert calls == 1


class Stray(BaseException):
    """A BaseException that is not a cancellation (some libraries define their own)."""


@pytest.mark.parametrize("kind", ["base_exception", "cancelled_elsewhere"])
async def test_a_handler_raising_a_base_exception_fails_that_message_only(
    bus: Bus, kind: str
) -> None:
    """Before: a BaseException took the consumer (and its service's task group) down; a
    CancelledError from a future cancelled elsewhere ended the worker silently, and
    nothing was consumed after it."""
    await ensure_streams(bus.js)
    calls: list[int] = []
    done = anyio.Event()

    async def handler(job: Job, msg: Msg) -> None:
        calls.append(job.n)
        if job.n == 1 and calls.count(1) == 1:
            if kind == "base_exception":
                raise Stray("not an Exception")
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future
        if {1, 2} <= set(calls[1:]):
            done.set()

    for n in (1, 2):
        await bus.js.publish(s.WORK_RUNS, f'{{"n":{n}}}'.encode())
    config = durable_config("test-stray", filter_subjects=[s.WORK_RUNS], ack_wait_s=30)
    async with anyio.create_task_group() as tg:
        await tg.start(job_consumer(bus, config, handler))
        with anyio.fail_after(10):  # 1 fails, 2 is handled, 1 comes back after ~1 s
            await done.wait()
        tg.cancel_scope.cancel()
    assert calls == [1, 2, 1]
