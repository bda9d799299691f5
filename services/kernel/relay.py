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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import nats.errors
from anyio.abc import TaskStatus
from eventsourcing.application import Application
from eventsourcing.persistence import Notification
from nats.js.errors import KeyNotFoundError
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
    ) -> None:
        self.app = app
        self.bus = bus
        self.convert = convert
        self.name = name
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.position = 0
        self._lock = anyio.Lock()
        self._wake = anyio.Event()
        self._kv: KeyValue | None = None

    async def load_position(self) -> int:
        self._kv = await self.bus.js.key_value(s.BUCKET_RELAY)
        try:
            entry = await self._kv.get(self.name)
            self.position = int(entry.value or b"0")
        except KeyNotFoundError:
            self.position = 0
        # A position past the end of the store means the store was replaced (an
        # in-memory store after a restart, a reset database) while NATS kept the old
        # position: start again from the beginning rather than publish nothing.
        newest = await anyio.to_thread.run_sync(self.app.recorder.max_notification_id)
        if self.position > (newest or 0):
            log.warning(
                "relay_position_reset", relay=self.name, position=self.position, newest=newest
            )
            self.position = 0
        return self.position

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
        """Publish one message for a recorded event. One over the server's max payload
        can never be sent: retrying it would hold back every later event for good, so it
        is logged and left out (the store still has the event)."""
        try:
            await self.bus.publish_event(
                subject,
                event,
                msg_id=msg_id,
                headers={s.HEADER_NOTIFICATION_ID: str(notification.id)},
            )
        except nats.errors.MaxPayloadError:
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
        await self.load_position()
        task_status.started()
        while True:
            # Reset before publishing, so a wake() that arrives meanwhile is not lost.
            self._wake = anyio.Event()
            try:
                await self.publish_pending()
            except Exception as exc:  # NATS briefly away: keep the position, try again
                log.warning("relay_publish_failed", relay=self.name, error=str(exc))
            with anyio.move_on_after(self.poll_interval_s):
                await self._wake.wait()

    async def run_leased(
        self, lease: Lease, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """`run` while holding `lease`; standing by while another process holds it, and
        again after losing it. Started at once: a standby serves everything else."""
        task_status.started()
        while True:
            await lease.acquire()
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lease.keep)
                    # From the shared position: the last holder moved it on.
                    await tg.start(self.run)
            except* LeaseLost as lost:
                log.warning("relay_lease_lost", relay=self.name, error=str(lost.exceptions[0]))
            finally:
                await lease.release()
