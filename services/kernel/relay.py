"""Publishes recorded events from an event store's notification log to NATS.

The store is the source of truth: an event reaches the bus only after it was recorded,
and every recorded event reaches the bus eventually, unless it is over the server's max
payload: that one is logged and left out rather than retried forever. The relay
remembers how far it got in the `rote_relay` key-value bucket, after each event; if it
dies after publishing but before saving its position, the republished event carries
the same Nats-Msg-Id and the stream drops it as a duplicate (within the stream's
duplicate window, set in services/kernel/streams.py).

Several processes of one service share one store; `run_leased` lets one relay publish
at a time (the others wait as standbys), or each event would go out once per process.

The store and NATS can both be briefly away. Neither is a reason to stop: the relay
runs in the same task group as the service's endpoints and consumers (and under
`rote up`, every other service's), so an error escaping it would take them all down.
It logs, gives up the lease if it held it, waits a little longer each time, and tries
again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import nats.errors
from anyio.abc import TaskStatus
from eventsourcing.application import Application
from eventsourcing.persistence import Notification
from nats.js.errors import BadRequestError, KeyNotFoundError
from nats.js.kv import KeyValue

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.lease import Lease, LeaseLost
from services.kernel.logs import get_logger

log = get_logger("rote.relay")


@dataclass(frozen=True)
class Outgoing:
    subject: str
    event: msgspec.Struct


# Maps a stored domain event to what goes on the bus (None: not published).
Convert = Callable[[Any], Outgoing | None]

# JetStream's error code for a message over the stream's max_msg_size.
MESSAGE_SIZE_EXCEEDS_MAXIMUM = 10054
# Waits between retries after a failure: doubling from the base up to the cap.
RETRY_BASE_S = 0.5
RETRY_CAP_S = 30.0


def backoff_s(failures: int, *, base_s: float, cap_s: float) -> float:
    """The wait after the `failures`-th failure in a row: exponential, bounded, and
    jittered (half fixed, half random) so that processes which failed together, on the
    same outage, do not all come back at the same moment."""
    ceiling = min(cap_s, base_s * 2 ** min(max(failures - 1, 0), 32))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class EventRelay:
    def __init__(
        self,
        app: Application[Any],
        bus: Bus,
        convert: Convert,
        *,
        name: str,
        batch_size: int = 100,
        poll_interval_s: float = 1.0,
        retry_base_s: float = RETRY_BASE_S,
        retry_cap_s: float = RETRY_CAP_S,
    ) -> None:
        self.app = app
        self.bus = bus
        self.convert = convert
        self.name = name
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.retry_base_s = retry_base_s
        self.retry_cap_s = retry_cap_s
        self.position = 0
        self._lock = anyio.Lock()
        self._wake = anyio.Event()
        self._kv: KeyValue | None = None

    async def load_position(self) -> int:
        kv = await self.bus.js.key_value(s.BUCKET_RELAY)
        try:
            entry = await kv.get(self.name)
            position = int(entry.value or b"0")
        except KeyNotFoundError:
            position = 0
        # A position past the end of the store means the store was replaced (an
        # in-memory store after a restart, a reset database) while NATS kept the old
        # position: start again from the beginning rather than publish nothing.
        newest = await anyio.to_thread.run_sync(self.app.recorder.max_notification_id)
        if position > (newest or 0):
            log.warning("relay_position_reset", relay=self.name, position=position, newest=newest)
            position = 0
        # Only once all of it was read: a half-done load must not count as loaded.
        self._kv, self.position = kv, position
        return self.position

    def _backoff_s(self, failures: int) -> float:
        return backoff_s(failures, base_s=self.retry_base_s, cap_s=self.retry_cap_s)

    def wake(self) -> None:
        """Call after saving: publish soon rather than at the next poll."""
        self._wake.set()

    def _select(self, start: int) -> list[Notification]:
        return list(self.app.recorder.select_notifications(start=start, limit=self.batch_size))

    async def publish_pending(self) -> int:
        """Publish everything recorded since the last position; return how many."""
        async with self._lock:
            if self._kv is None:
                await self.load_position()
            total = 0
            while True:
                batch = await anyio.to_thread.run_sync(self._select, self.position + 1)
                if not batch:
                    return total
                assert self._kv is not None
                for notification in batch:
                    await self._publish(notification)
                    self.position = notification.id
                    total += 1
                    # Saved after every event, so at most one event can be republished
                    # after a crash, and only outlives de-duplication if the relay
                    # stays down past the stream's duplicate window.
                    await self._kv.put(self.name, str(self.position).encode())

    async def _publish(self, notification: Notification) -> None:
        try:
            outgoing = self.convert(self.app.mapper.to_domain_event(notification))
        except Exception:
            # An event this code can no longer read must not block every later one.
            log.exception(
                "relay_convert_failed",
                relay=self.name,
                notification_id=notification.id,
                topic=notification.topic,
            )
            return
        if outgoing is None:
            return
        await self.send(
            notification,
            outgoing.subject,
            outgoing.event,
            msg_id=f"{self.name}:{notification.originator_id}:{notification.originator_version}",
        )

    async def send(
        self, notification: Notification, subject: str, event: msgspec.Struct, *, msg_id: str
    ) -> None:
        """Publish one message for a recorded event. One over the server's max payload,
        or over the stream's largest message, can never be sent: retrying it would hold
        back every later event for good, so it is logged and left out (the store still
        has the event)."""
        try:
            await self.bus.publish_event(
                subject,
                event,
                msg_id=msg_id,
                headers={s.HEADER_NOTIFICATION_ID: str(notification.id)},
            )
        except (nats.errors.MaxPayloadError, BadRequestError) as exc:
            if isinstance(exc, BadRequestError) and exc.err_code != MESSAGE_SIZE_EXCEEDS_MAXIMUM:
                raise
            log.error(
                "relay_event_too_large",
                relay=self.name,
                notification_id=notification.id,
                originator_id=str(notification.originator_id),
                originator_version=notification.originator_version,
                topic=notification.topic,
                subject=subject,
                msg_id=msg_id,
                max_payload=self.bus.nc.max_payload,
            )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Publish until cancelled. Started once the position is loaded (from the
        shared one: a relay taking over goes on where the last holder stopped)."""
        failures = 0
        while True:
            try:
                await self.load_position()
                break
            except Exception as exc:  # the store or NATS briefly away
                failures += 1
                delay = self._backoff_s(failures)
                log.warning(
                    "relay_load_failed",
                    relay=self.name,
                    error=repr(exc),
                    retry_in_s=round(delay, 3),
                )
                await anyio.sleep(delay)
        task_status.started()
        while True:
            # Reset before publishing, so a wake() that arrives meanwhile is not lost.
            self._wake = anyio.Event()
            try:
                await self.publish_pending()
            except Exception as exc:  # NATS or the store briefly away: keep the position
                log.warning("relay_publish_failed", relay=self.name, error=repr(exc))
            with anyio.move_on_after(self.poll_interval_s):
                await self._wake.wait()

    async def run_leased(
        self, lease: Lease, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """`run` while holding `lease`; standing by while another process holds it, and
        again after losing it. Started at once: a standby serves everything else. Never
        raises (but for cancellation): see the module's docstring."""
        task_status.started()
        failures = 0
        while True:
            delay = 0.0
            try:
                await lease.acquire()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lease.keep)
                    await tg.start(self.run)
                    failures = 0  # publishing again: a later failure waits afresh
            except* LeaseLost as lost:
                # Another process may be publishing now: stand by at once.
                log.warning("relay_lease_lost", relay=self.name, error=str(lost.exceptions[0]))
            except* Exception as group:
                # Unexpected (run retries the store and NATS itself): let another
                # process publish meanwhile, and come back a little later each time.
                failures += 1
                delay = self._backoff_s(failures)
                log.error(
                    "relay_failed",
                    relay=self.name,
                    error=repr(group.exceptions[0]),
                    failures=failures,
                    retry_in_s=round(delay, 3),
                    exc_info=group,
                )
            finally:
                await lease.release()
            if delay:
                await anyio.sleep(delay)
