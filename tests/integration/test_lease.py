"""One scheduler at a time: the lease in NATS key-value, and a second scheduler that
waits as a standby and takes over when the first one stops."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio
import nats.errors
import pytest

from contracts import subjects as s
from contracts.tasks import TaskView
from services.kernel.bus import Bus, connect
from services.kernel.discovery import gather
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.lease import Lease, LeaseLost
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.engine import SchedulerConfig
from services.scheduler.service import serve

pytestmark = pytest.mark.anyio

# A test bucket's TTL, for rote_leases' fifteen seconds: longer than a stall of the test
# process (an audit froze it for a second at a time), so keys expire only when meant to.
TTL_S = 4.0
# How long a key is waited on to expire: the server expires keys some time after the TTL.
EXPIRY_WAIT_S = 15.0


async def poll(
    condition: Callable[[], bool | Awaitable[bool]], timeout_s: float = EXPIRY_WAIT_S
) -> None:
    """Wait until `condition()` (awaited if need be) holds, failing after `timeout_s`."""
    with anyio.fail_after(timeout_s):
        while True:
            held = condition()
            if await held if inspect.isawaitable(held) else held:
                return
            await anyio.sleep(0.05)


async def test_one_holder_then_the_next_on_release(bus: Bus) -> None:
    await ensure_streams(bus.js)
    kv = await bus.js.key_value(s.BUCKET_LEASES)
    first, second = Lease(kv, "role", 15, "first"), Lease(kv, "role", 15, "second")
    assert await first.try_acquire()
    assert not await second.try_acquire()
    assert await second.current_holder() == "first"
    await first.release()
    assert await second.try_acquire() and await first.current_holder() == "second"
    await second.release()


async def test_a_dead_holders_lease_expires_and_a_standby_takes_it(bus: Bus) -> None:
    # A bucket with a one-second TTL stands in for rote_leases' fifteen.
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=1.0)
    dead = Lease(kv, "role", 1.0, "dead")
    assert await dead.try_acquire()  # ...and never renews nor releases
    standby = Lease(kv, "role", 1.0, "standby")
    with anyio.fail_after(5):
        await standby.acquire(poll_s=0.1)
    assert await standby.current_holder() == "standby"


async def test_a_holder_whose_lease_was_taken_over_gives_up(bus: Bus) -> None:
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=1.0)
    holder = Lease(kv, "role", 0.6, "holder")
    assert await holder.try_acquire()
    await kv.put("role", b"usurper")  # as after an expiry during a network partition
    with anyio.fail_after(3), pytest.raises(LeaseLost):
        await holder.keep()


async def test_a_renewal_applied_late_is_not_mistaken_for_a_takeover(bus: Bus) -> None:
    """After a NATS restart, a renewal that timed out while NATS was away can be applied
    on reconnect (or the server can lose the last write): the key is this holder's at a
    revision it did not expect. Keeping and confirming carry on from that revision."""
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=TTL_S)
    ttl = 0.6 * TTL_S  # renewing every 0.8 s
    holder = Lease(kv, "role", ttl, "holder")
    assert await holder.try_acquire()
    assert holder.revision is not None
    # The late renewal, behind the holder's back: same value, a revision it never saw.
    late = await kv.update("role", b"holder", last=holder.revision)
    async with anyio.create_task_group() as tg:
        tg.start_soon(holder.keep)  # a LeaseLost from any renewal fails the test
        # The renewal that finds the late one, then the next: carrying on from it.
        await poll(lambda: (holder.revision or 0) > late)
        adopted = holder.revision or 0
        await poll(lambda: (holder.revision or 0) > adopted)
        tg.cancel_scope.cancel()
    assert await holder.current_holder() == "holder"

    # Again, then confirm. (From the key's revision: a renewal cut short by the
    # cancelling above may have been applied all the same.)
    moved = await kv.update("role", b"holder", last=(await kv.get("role")).revision)
    await anyio.sleep(ttl / 2 + 0.2)  # past half a TTL: confirming renews
    assert await holder.confirm()
    assert holder.revision is not None and holder.revision > moved
    assert await holder.current_holder() == "holder"

    # A real other holder is still a takeover, for both.
    await kv.put("role", b"usurper")
    await anyio.sleep(ttl / 2 + 0.2)
    assert not await holder.confirm()
    holder = Lease(kv, "role", ttl, "holder")  # keeping from a renewal it did make
    holder.revision = moved
    holder._renewed_at = time.monotonic()
    with anyio.fail_after(10), pytest.raises(LeaseLost, match="usurper"):
        await holder.keep()


async def test_a_holder_keeps_its_lease_across_a_nats_restart(tmp_path: Path) -> None:
    """The chaos audit's case, for real: NATS killed and back on its store. A renewal
    sent while it was away times out, then goes out on reconnect and is applied; the
    next renewal finds the key moved on, in this holder's name: no takeover."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        b = await connect(server.url, name="lease-restart")
        # A 1 s API timeout (5 s by default) and a 9 s TTL keep the test short.
        kv = await b.nc.jetstream(timeout=1.0).create_key_value(bucket="test_leases", ttl=9.0)
        holder = Lease(kv, "role", 9.0, "holder")
        assert await holder.try_acquire()
        lost: list[LeaseLost] = []

        async def keep() -> None:
            try:
                await holder.keep()
            except LeaseLost as exc:
                lost.append(exc)

        acquired = holder.revision
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep)  # renews at 3 s, 6 s...
            await poll(lambda: holder.revision != acquired)  # the renewal at 3 s is done
            renewed = holder.revision
            assert server.process is not None
            server.process.kill()  # kill -9: the renewal at 6 s waits in the client
            server.process.wait()
            server.process = None
            await anyio.sleep(4.1)  # ...and times out at 7 s
            server.spawn()
            await anyio.to_thread.run_sync(server.wait_ready)
            # Reconnected, the late renewal applied, renewed at 10 s: renewing goes on.
            await poll(lambda: bool(lost) or holder.revision != renewed, timeout_s=20)
            tg.cancel_scope.cancel()
        assert not lost, lost
        assert await holder.current_holder() == "holder"
        assert await holder.confirm()
        await b.close()
    finally:
        server.stop()


async def test_a_key_gone_from_under_its_holder_is_lost_though_no_one_took_it(
    bus: Bus,
) -> None:
    """Expired (no renewal for a whole TTL) or removed (an operator, lost data): someone
    may have held it meanwhile, so the holder cannot vouch for being alone."""
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=TTL_S)
    expired = Lease(kv, "one", TTL_S, "expired")
    removed = Lease(kv, "two", 0.6 * TTL_S, "removed")
    assert await expired.try_acquire() and await removed.try_acquire()
    await kv.delete("two")
    with anyio.fail_after(10), pytest.raises(LeaseLost, match="expired or was removed"):
        await removed.keep()

    async def expired_by_now() -> bool:  # no renewal for a whole TTL: the server expires it
        return await expired.current_holder() is None

    await poll(expired_by_now)
    assert not await expired.confirm()


async def test_confirm_tells_a_holder_whether_it_still_holds_the_lease(bus: Bus) -> None:
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=TTL_S)
    holder = Lease(kv, "role", TTL_S, "holder")
    assert await holder.try_acquire()
    assert await holder.confirm()  # just taken: cannot have expired
    # Past half a TTL, still the key's holder: confirming renews it.
    await anyio.sleep(TTL_S / 2 + 0.2)
    revision = holder.revision
    assert await holder.confirm() and holder.revision != revision
    # Its renewals stopped (NATS away), the key expired and another runner took it.
    await poll(Lease(kv, "role", TTL_S, "other").try_acquire)
    assert not await holder.confirm()
    assert await holder.current_holder() == "other"


async def test_confirming_while_keeping_is_not_mistaken_for_a_takeover(bus: Bus) -> None:
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=TTL_S)
    # Renewing every 10 ms and confirming (a renewal too) every 5 ms: their
    # compare-and-sets overlap again and again.
    holder = Lease(kv, "role", 0.03, "holder")
    assert await holder.try_acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(holder.keep)  # would raise LeaseLost on a lost compare-and-set
        for _ in range(200):
            await anyio.sleep(0.005)
            assert await holder.confirm()
        tg.cancel_scope.cancel()


async def test_a_second_scheduler_waits_and_takes_over_when_the_first_stops(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    await ensure_streams(bus.js)
    # Both on one SQLite store, as two machines would share one PostgreSQL.
    shared = settings.with_(event_store="sqlite", data_dir=tmp_path / "shared")

    async def scheduler_count() -> int:
        return sum(p["name"] == "rote-scheduler" for p in await gather(bus, "$SRV.PING"))

    async def run_scheduler(scope: anyio.CancelScope, started: anyio.Event) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                ctx = ServiceContext(
                    settings=shared, bus=bus, task_group=tg, services=("scheduler",),
                    nats_url=bus.url, embedded_nats=False,
                )  # fmt: skip
                await tg.start(partial(serve, ctx, config=SchedulerConfig(tick_s=0.1)))
                started.set()
                await anyio.sleep_forever()

    first, second = anyio.CancelScope(), anyio.CancelScope()
    first_started, second_started = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as outer:
        outer.start_soon(run_scheduler, first, first_started)
        with anyio.fail_after(10):
            await first_started.wait()
        outer.start_soon(run_scheduler, second, second_started)
        await anyio.sleep(1.5)
        # The second one is a standby: not serving, not dispatching.
        assert not second_started.is_set() and await scheduler_count() == 1
        created = await bus.request(s.TASKS_CREATE, b'{"name": "kept", "prompt": "p"}', TaskView)

        first.cancel()  # the first scheduler stops and releases its lease
        with anyio.fail_after(10):
            await second_started.wait()
        assert await scheduler_count() == 1
        # It serves the same tasks: the state is the event store's, not a process's.
        got = await bus.request(s.TASKS_GET, b'{"task_id": "kept"}', TaskView)
        assert got.task_id == created.task_id == "kept"
        second.cancel()


async def test_a_scheduler_that_loses_its_lease_stands_by_and_takes_over_again(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    """A process stalled past its lease (a pause, NATS away) must stop scheduling, since
    another scheduler may have taken over; but only the scheduler stops, standing by,
    not every service of `rote up` with it. Once the lease is free it serves again."""
    await ensure_streams(bus.js)
    kv = await bus.js.key_value(s.BUCKET_LEASES)
    store = settings.with_(event_store="sqlite", data_dir=tmp_path / "store")

    async def scheduler_count() -> int:
        return sum(p["name"] == "rote-scheduler" for p in await gather(bus, "$SRV.PING"))

    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=store, bus=bus, task_group=tg, services=("scheduler",),
            nats_url=bus.url, embedded_nats=False,
        )  # fmt: skip
        with anyio.fail_after(10):
            await tg.start(partial(serve, ctx, config=SchedulerConfig(tick_s=0.1)))
        await bus.request(s.TASKS_CREATE, b'{"name": "kept", "prompt": "p"}', TaskView)

        # What a stall looks like from the holder's side: the key now names another.
        await kv.put("scheduler", b"another-process")
        await poll(lambda: _count_is(scheduler_count, 0))  # stopped at its next renewal

        await kv.delete("scheduler")  # the other one stops (or its key expires)
        await poll(lambda: _count_is(scheduler_count, 1))
        got = await bus.request(s.TASKS_GET, b'{"task_id": "kept"}', TaskView)
        assert got.task_id == "kept"
        tg.cancel_scope.cancel()


async def _count_is(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() == n


async def test_a_standby_waits_out_nats_being_away(tmp_path: Path) -> None:
    """The standby is there for when things go wrong: NATS gone for a few seconds (a
    restart) is waited out; once it is back and the holder's key has expired, the
    standby takes over."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        b = await connect(server.url, name="lease-outage")
        kv = await b.js.create_key_value(bucket="test_leases", ttl=1.0)
        assert await Lease(kv, "role", 1.0, "gone").try_acquire()  # dies with NATS
        standby = Lease(kv, "role", 1.0, "standby")
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(standby.acquire, poll_s=0.1))
            await anyio.sleep(0.3)  # standing by
            server.stop()
            await anyio.sleep(6.0)  # longer than a request waits: the polls fail
            server.start()
            with anyio.fail_after(20):
                while standby.revision is None:
                    await anyio.sleep(0.1)
        assert await standby.current_holder() == "standby"
        await b.close()
    finally:
        server.stop()


async def test_a_holder_whose_renewals_hang_gives_up_before_a_standby_can_take_over(
    bus: Bus,
) -> None:
    """A renewal that gets no answer (NATS overloaded, the holder's connection half
    dead) waits for the request timeout, which can outlast the key. The holder must stop
    acting as holder before the key can expire, or for a while two processes hold it."""
    kv = await bus.js.create_key_value(bucket="test_leases", ttl=TTL_S)
    holder = Lease(await bus.js.key_value("test_leases"), "role", TTL_S, "holder")
    standby = Lease(kv, "role", TTL_S, "standby")
    assert await holder.try_acquire()

    async def unanswered(*args: object, **kwargs: object) -> int:
        await anyio.sleep(5.0)  # nats-py's KV request timeout
        raise nats.errors.TimeoutError

    holder.kv.update = unanswered  # type: ignore[method-assign]
    lost_at = taken_at = 0.0
    reason = ""

    async def keep() -> None:
        nonlocal lost_at, reason
        with pytest.raises(LeaseLost) as lost:
            await holder.keep()
        lost_at = anyio.current_time()
        reason = str(lost.value)

    async def take() -> None:
        nonlocal taken_at
        await standby.acquire(poll_s=0.05)
        taken_at = anyio.current_time()

    with anyio.fail_after(EXPIRY_WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep)
            tg.start_soon(take)
    # Given up at its own deadline, while the renewal was still unanswered (one that
    # waited for it would quote the request's timeout), and before the standby took over.
    assert reason.endswith("no answer before the key could expire"), reason
    assert lost_at < taken_at
