"""The relay publishes what the event store recorded, once, across restarts."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import OperationalError

from contracts import subjects as s
from contracts.tasks import CreateTask, IntervalTrigger
from services.kernel.bus import Bus
from services.kernel.event_store import application_env
from services.kernel.lease import Lease
from services.kernel.relay import EventRelay, Outgoing
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.application import Tasks
from services.scheduler.service import SchedulerRelay

pytestmark = pytest.mark.anyio


class Counter(Aggregate):
    @event("Created")
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0

    @event("Incremented")
    def increment(self) -> None:
        self.count += 1


class Counters(Application[Any]):
    pass


class Tick(msgspec.Struct):
    name: str
    kind: str
    version: int


def convert(domain_event: Any) -> Outgoing | None:
    kind = type(domain_event).__name__
    name = getattr(domain_event, "name", "counter")
    return Outgoing(
        subject=s.executor_event(name, kind.lower()),
        event=Tick(name=name, kind=kind, version=domain_event.originator_version),
    )


async def _stream_messages(bus: Bus) -> int:
    return (await bus.js.stream_info(s.STREAM_EXECUTORS)).state.messages


async def test_relay_publishes_once_and_resumes(bus: Bus, tmp_path: Path, event_store: str) -> None:
    await ensure_streams(bus.js)
    settings = Settings(data_dir=tmp_path, event_store=event_store)
    app = Counters(env=application_env(settings, "counters"))
    counter = Counter("c1")
    counter.increment()
    counter.increment()
    app.save(counter)

    relay = EventRelay(app, bus, convert, name="counters")
    assert await relay.publish_pending() == 3
    assert await _stream_messages(bus) == 3

    # A restarted relay resumes from the stored position: nothing is published twice.
    relay2 = EventRelay(app, bus, convert, name="counters")
    assert await relay2.publish_pending() == 0
    counter.increment()
    app.save(counter)
    assert await relay2.publish_pending() == 1
    assert await _stream_messages(bus) == 4

    # A relay that died after publishing but before saving its position republishes;
    # the stream drops the duplicates by Nats-Msg-Id.
    kv = await bus.js.key_value(s.BUCKET_RELAY)
    await kv.put("counters", b"0")
    relay3 = EventRelay(app, bus, convert, name="counters")
    assert await relay3.publish_pending() == 4
    assert await _stream_messages(bus) == 4

    msg = await bus.js.get_last_msg(s.STREAM_EXECUTORS, s.executor_event("counter", "incremented"))
    assert msg.headers is not None
    assert msg.headers[s.HEADER_NOTIFICATION_ID] == "4"
    app.close()


async def test_a_replaced_store_is_published_from_the_start(bus: Bus, tmp_path: Path) -> None:
    await ensure_streams(bus.js)
    kv = await bus.js.key_value(s.BUCKET_RELAY)
    await kv.put("fresh", b"57")  # a position left by an earlier, now vanished, store
    app = Counters(env=application_env(Settings(data_dir=tmp_path, event_store="memory"), "fresh"))
    app.save(Counter("new"))
    relay = EventRelay(app, bus, convert, name="fresh")
    assert await relay.publish_pending() == 1
    app.close()


async def test_a_relay_that_dies_mid_batch_has_saved_every_published_event(
    bus: Bus, tmp_path: Path
) -> None:
    # Restarted after the stream's duplicate window, a relay must not republish what it
    # had published: its position is saved per event, not per batch.
    await ensure_streams(bus.js)
    app = Counters(env=application_env(Settings(data_dir=tmp_path, event_store="memory"), "mid"))
    counter = Counter("c1")
    for _ in range(4):
        counter.increment()
    app.save(counter)

    class Crash(Exception):
        pass

    class DyingRelay(EventRelay):
        async def _publish(self, notification: Any) -> None:
            if notification.id == 3:
                raise Crash
            await super()._publish(notification)

    with pytest.raises(Crash):
        await DyingRelay(app, bus, convert, name="mid").publish_pending()
    kv = await bus.js.key_value(s.BUCKET_RELAY)
    assert (await kv.get("mid")).value == b"2"
    assert await _stream_messages(bus) == 2
    # The restarted relay publishes exactly the rest.
    assert await EventRelay(app, bus, convert, name="mid").publish_pending() == 3
    assert await _stream_messages(bus) == 5
    app.close()


class Note(Aggregate):
    @event("Written")
    def __init__(self, text: str) -> None:
        self.text = text


class Written(msgspec.Struct):
    text: str


def convert_note(domain_event: Any) -> Outgoing | None:
    return Outgoing(subject=s.executor_event("notes", "written"), event=Written(domain_event.text))


# Over the max payload; under it alone, but not with the headers (which the server
# counts, and nats-py does not: sent, the server closes the connection for good); over
# the stream's largest message (an operator raised max_payload past it).
SIZES = ["over_max_payload", "over_with_headers", "over_stream_max_msg_size"]


@pytest.mark.parametrize("size", SIZES)
async def test_an_event_too_large_to_send_is_logged_and_passed_over(
    bus: Bus, tmp_path: Path, written_logs: list[dict[str, Any]], size: str
) -> None:
    # Retried, it would fail forever and hold back every event recorded after it.
    await ensure_streams(bus.js)
    app = Counters(env=application_env(Settings(data_dir=tmp_path, event_store="memory"), "big"))
    app.save(Note("before"))
    text = {
        "over_max_payload": bus.nc.max_payload + 1,
        "over_with_headers": bus.nc.max_payload - 40,  # the JSON around it: 11 bytes
        "over_stream_max_msg_size": 5000,
    }[size]
    if size == "over_stream_max_msg_size":
        info = await bus.js.stream_info(s.STREAM_EXECUTORS)
        info.config.max_msg_size = 2000
        await bus.js.update_stream(info.config)
    huge = Note("x" * text)
    app.save(huge)
    app.save(Note("after"))
    relay = EventRelay(app, bus, convert_note, name="notes")
    assert await relay.publish_pending() == 3
    assert await _stream_messages(bus) == 2
    last = await bus.js.get_last_msg(s.STREAM_EXECUTORS, s.executor_event("notes", "written"))
    assert msgspec.json.decode(last.data, type=Written).text == "after"
    kv = await bus.js.key_value(s.BUCKET_RELAY)
    assert (await kv.get("notes")).value == b"3"  # a restart does not try it again
    (logged,) = [e for e in written_logs if e["event"] == "relay_event_too_large"]
    assert logged["level"] == "error" and logged["notification_id"] == 2
    assert logged["originator_id"] == str(huge.id)
    assert logged["topic"].endswith("Note.Written")
    # The store still has it, and the connection every service shares is still up.
    assert app.repository.get(huge.id).text == huge.text
    assert bus.nc.is_connected
    app.close()


class FlakyRecorder:
    """The store's recorder, failing the first call of each named method once (the
    database briefly unreachable)."""

    def __init__(self, recorder: Any, *failing: str) -> None:
        self._recorder = recorder
        self.failing = set(failing)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._recorder, name)
        if name not in self.failing:
            return method

        def fail_once(*args: Any, **kwargs: Any) -> Any:
            self.failing.discard(name)
            raise sqlite3.OperationalError(f"simulated: {name} while the database is away")

        return fail_once


async def _wait_for_messages(bus: Bus, n: int) -> None:
    with anyio.fail_after(10):
        while await _stream_messages(bus) < n:
            await anyio.sleep(0.05)


async def test_a_leased_relay_survives_a_store_that_fails_once(bus: Bus, tmp_path: Path) -> None:
    """Taking the lease meets a database error (reading where the store ends), then so
    does a publish (reading new events): the relay retries both and publishes every
    event once, and the task group it runs in (a service's) carries on."""
    await ensure_streams(bus.js)
    app = Counters(env=application_env(Settings(data_dir=tmp_path, event_store="sqlite"), "f"))
    counter = Counter("c1")
    counter.increment()
    app.save(counter)
    app.recorder = FlakyRecorder(app.recorder, "max_notification_id", "select_notifications")  # type: ignore[misc]
    relay = EventRelay(app, bus, convert, name="flaky", poll_interval_s=0.05, retry_base_s=0.01)
    lease = Lease(await bus.js.key_value(s.BUCKET_LEASES), "relay.flaky", ttl_s=15)
    async with anyio.create_task_group() as tg:
        await tg.start(relay.run_leased, lease)
        await _wait_for_messages(bus, 2)
        assert app.recorder.failing == set()  # both failures happened
        counter.increment()
        app.save(counter)
        relay.wake()
        await _wait_for_messages(bus, 3)
        await anyio.sleep(0.3)  # several polls: nothing more
        assert await _stream_messages(bus) == 3
        tg.cancel_scope.cancel()
    app.close()


async def test_a_leased_relay_survives_an_unexpected_error_and_lets_the_lease_go(
    bus: Bus, tmp_path: Path, written_logs: list[dict[str, Any]]
) -> None:
    """Whatever escapes the relay while it holds the lease is logged, the lease goes
    (another process may publish meanwhile), and after a pause it tries again."""
    await ensure_streams(bus.js)
    app = Counters(env=application_env(Settings(data_dir=tmp_path, event_store="sqlite"), "u"))
    counter = Counter("c1")
    app.save(counter)
    kv = await bus.js.key_value(s.BUCKET_LEASES)
    released: list[str | None] = []

    class BrokenOnce(Lease):
        broken = False

        async def keep(self) -> None:
            if not BrokenOnce.broken:
                BrokenOnce.broken = True
                await anyio.sleep(0.2)
                raise OSError("simulated: a socket error nobody expected")
            await super().keep()

        async def release(self) -> None:
            released.append(await self.current_holder())
            await super().release()

    lease = BrokenOnce(kv, "relay.unexpected", ttl_s=15, holder="me")
    relay = EventRelay(
        app, bus, convert, name="unexpected", poll_interval_s=0.05, retry_base_s=0.05
    )
    async with anyio.create_task_group() as tg:
        await tg.start(relay.run_leased, lease)
        await _wait_for_messages(bus, 1)
        with anyio.fail_after(10):
            while not released:
                await anyio.sleep(0.05)
        assert released == ["me"]  # it held the lease when it failed, and let it go
        counter.increment()
        app.save(counter)
        await _wait_for_messages(bus, 2)  # holding it again, publishing
        assert await lease.current_holder() == "me"
        tg.cancel_scope.cancel()
    assert await _stream_messages(bus) == 2
    (failed,) = [e for e in written_logs if e["event"] == "relay_failed"]
    assert failed["level"] == "error" and "socket error" in failed["error"]
    app.close()


# --- the scheduler's relay: one Task event, several messages --------------------------


async def _scheduler_relay_after_restart(bus: Bus, tmp_path: Path) -> tuple[Tasks, SchedulerRelay]:
    """A task whose events were relayed, then a run dispatched, then a restart: the
    new relay has not seen the task (its task_id comes from the store)."""
    await ensure_streams(bus.js)
    app = Tasks(env=application_env(Settings(data_dir=tmp_path, event_store="sqlite"), "scheduler"))
    t0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
    app.create(CreateTask(name="w", prompt="p", trigger=IntervalTrigger(every_s=3600)), t0)
    await SchedulerRelay(app, bus).publish_pending()
    assert app.dispatch("w", "run-1", "schedule", t0)
    return app, SchedulerRelay(app, bus)


async def test_the_scheduler_relay_waits_out_a_store_briefly_away(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store cannot answer when the relay looks up whose task a run request is:
    the event is tried again, not passed over (its run would never go out)."""
    app, relay = await _scheduler_relay_after_restart(bus, tmp_path)
    get, failures = app.repository.get, [OperationalError("database is locked")]

    def flaky_get(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return get(*args, **kwargs)

    monkeypatch.setattr(app.repository, "get", flaky_get)
    with pytest.raises(OperationalError):
        await relay.publish_pending()
    await relay.publish_pending()  # the store is back: from the same event
    assert (await bus.js.stream_info(s.STREAM_WORK)).state.messages == 1
    app.close()


async def test_the_scheduler_relay_passes_over_a_task_it_cannot_read(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose events this code can no longer rebuild must not hold back every
    later event: it is logged and passed over."""
    app, relay = await _scheduler_relay_after_restart(bus, tmp_path)

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("an event this version cannot read")

    monkeypatch.setattr(app.repository, "get", unreadable)
    assert await relay.publish_pending() >= 1
    assert relay.position == app.recorder.max_notification_id()
    assert (await bus.js.stream_info(s.STREAM_WORK)).state.messages == 0
    app.close()
