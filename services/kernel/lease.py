"""One holder at a time for a role (the scheduler) or a run (the runner's claim on it),
through a key in a NATS key-value bucket whose keys expire (rote_leases).

The holder creates the key, then renews it well inside the bucket's TTL with a
compare-and-set on its revision. A second process finds the key taken and waits as a
standby. When the holder stops it deletes the key and a standby takes over at once;
when it dies, the key expires and a standby takes over within the TTL. A holder that
cannot renew for a whole TTL can no longer be sure it is alone, so it gives up. A
compare-and-set that misses is a takeover only if the key names another holder: after
a NATS restart it often misses on the holder's own late renewal.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import anyio
import nats.errors
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from services.kernel.logs import get_logger

log = get_logger("rote.lease")


# Compare-and-sets a renewal tries, adopting the key's revision after each miss, before
# a key that keeps moving under it (though in its name) is given up on.
RESYNC_TRIES = 3
# The share of the TTL a holder may go without a renewal before it gives up: the key
# expires a TTL after the last write the server applied (which it may have applied a
# little after it was sent), and a standby may take it from then on.
HOLD_SHARE = 0.9


class LeaseLost(Exception):
    """Another process may hold the lease now: stop acting as its holder."""


def run_key(run_id: str) -> str:
    """The lease key of a run: whoever holds it is the one runner executing that run."""
    return f"run.{run_id}"


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Lease:
    def __init__(self, kv: KeyValue, role: str, ttl_s: float, holder: str | None = None) -> None:
        self.kv = kv
        self.role = role
        self.ttl_s = ttl_s
        self.holder = holder or holder_name()
        self.revision: int | None = None
        self._renewed_at = 0.0
        # keep() and confirm() both renew: one compare-and-set at a time, or the second
        # would fail on the first's new revision and look like a takeover.
        self._renewing = anyio.Lock()

    async def current_holder(self) -> str | None:
        try:
            entry = await self.kv.get(self.role)
        except KeyNotFoundError:  # never taken, released (deleted) or expired
            return None
        return entry.value.decode() if entry.value else None

    async def try_acquire(self) -> bool:
        sent = time.monotonic()  # the key's TTL runs from no earlier than this
        try:
            self.revision = await self.kv.create(self.role, self.holder.encode())
        except KeyWrongLastSequenceError:
            return False
        self._renewed_at = sent
        return True

    async def acquire(self, poll_s: float = 1.0) -> None:
        """Wait until this process holds the lease. A standby exists for when things go
        wrong: NATS being away for a while is waited out, not a reason to stop."""
        announced = False
        while True:
            try:
                if await self.try_acquire():
                    break
                if not announced:
                    holder = await self.current_holder()
                    log.info("lease_standby", role=self.role, held_by=holder)
                    announced = True
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("lease_unreachable", role=self.role, error=str(exc))
            await anyio.sleep(poll_s)
        log.info("lease_acquired", role=self.role, holder=self.holder)

    async def keep(self) -> None:
        """Renew until cancelled; raise LeaseLost when holding can no longer be vouched
        for: before the key can have expired, not once a renewal stuck on an unanswered
        request gives up (by then a standby may have been acting for seconds)."""
        while True:
            await anyio.sleep(self.ttl_s / 3)
            try:
                with anyio.fail_after(max(0.0, self._held_until() - time.monotonic())):
                    await self._renew()
            except (nats.errors.Error, TimeoutError) as exc:  # NATS away: retry in time
                if time.monotonic() >= self._held_until():
                    reason = str(exc) or "no answer before the key could expire"
                    raise LeaseLost(f"could not renew the {self.role} lease: {reason}") from None
                log.warning("lease_renew_failed", role=self.role, error=str(exc))

    def _held_until(self) -> float:
        """Until when (monotonic) the key surely has not expired."""
        return self._renewed_at + self.ttl_s * HOLD_SHARE

    async def _renew(self) -> None:
        """Compare-and-set the key to this holder again; LeaseLost when another process
        holds it, or may have held it since this one last renewed."""
        async with self._renewing:
            for _ in range(RESYNC_TRIES):
                sent = time.monotonic()
                try:
                    self.revision = await self.kv.update(
                        self.role, self.holder.encode(), last=self.revision
                    )
                except KeyWrongLastSequenceError:
                    await self._resync()
                    continue
                self._renewed_at = sent
                return
            raise LeaseLost(f"the {self.role} lease keeps changing under its holder")

    async def _resync(self) -> None:
        """The key is not at the revision this holder last wrote. That alone is no
        takeover: a renewal that timed out while NATS was away may have been applied on
        reconnect, or a restarted server may have lost the last write. Only another
        holder's name in the key is, or no key at all: it expired, or was removed (by
        an operator, or with its data), and another may have held it meanwhile. Adopts
        the key's revision, or raises LeaseLost."""
        try:
            entry = await self.kv.get(self.role)
        except KeyNotFoundError:
            raise LeaseLost(f"the {self.role} lease expired or was removed") from None
        holder = entry.value.decode() if entry.value else None
        if holder != self.holder:
            raise LeaseLost(f"the {self.role} lease was taken over by {holder}")
        log.info(
            "lease_revision_adopted", role=self.role, expected=self.revision, found=entry.revision
        )
        self.revision = entry.revision

    async def confirm(self) -> bool:
        """Whether this process surely holds the lease right now, before an act only the
        holder may do (a run's one terminal event). Renewed less than half a TTL ago,
        the key cannot have expired; otherwise it is renewed now, by compare-and-set,
        which fails if another process took it over meanwhile (a key moved on by this
        holder's own late renewal is still held). NATS errors propagate."""
        if self.revision is None:
            return False
        if time.monotonic() - self._renewed_at < self.ttl_s / 2:
            return True
        try:
            await self._renew()
        except LeaseLost:
            return False
        return True

    async def release(self) -> None:
        """Let a standby take over now rather than after the TTL."""
        if self.revision is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.kv.delete(self.role, last=self.revision)
            except Exception as exc:  # taken over or NATS gone: the TTL frees it anyway
                log.debug("lease_release_failed", role=self.role, error=str(exc))
        self.revision = None
