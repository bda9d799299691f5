"""The claim protocol: one claim per run, so that two deliveries of the same run request
never run it at once.

Every runner process pulls from one shared consumer of rote.work.runs. The same run may
be delivered twice (a redelivery after its runner died or lost NATS, a request published
again past the de-duplication window), so a delivery first takes the run's claim, one
key per run in the rote_leases bucket (`RunClaims.take`, called by deliveries.py):

- while another runner holds it, the delivery waits (the consumer's heartbeat keeps it
  in progress) and takes over once a dead holder's claim expires;
- a run found finished once the claim is held is only acked.

While the run executes (execution.py), deliveries.py renews the claim and stops the run
when it can no longer be vouched for. At the end, the run's record and ending are
written only if the claim is still ours (`ending_is_ours`, `record_is_ours`); a run
given up is ended abandoned only when no other runner may hold it (`is_free`).
"""

from __future__ import annotations

import anyio
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent, RunRequest
from services.kernel.bus import Bus
from services.kernel.lease import Lease, run_key
from services.kernel.logs import get_logger
from services.kernel.run_store import RunStore
from services.kernel.streams import DUPLICATE_WINDOW_S, KV_TTL_S

log = get_logger("rote.runner")

# How often a delivery waiting on another runner's claim on its run looks again.
CLAIM_POLL_S = 1.0


class RunClaims:
    """Each run's claim: one key per run in the leases bucket."""

    def __init__(self, bus: Bus, store: RunStore) -> None:
        self.bus = bus
        self.store = store
        self._leases: KeyValue | None = None

    async def lease(self, run_id: str) -> Lease:
        """The run's claim (not yet taken)."""
        if self._leases is None:
            self._leases = await self.bus.js.key_value(s.BUCKET_LEASES)
        return Lease(self._leases, run_key(run_id), ttl_s=KV_TTL_S[s.BUCKET_LEASES])

    async def is_free(self, run_id: str, mine: str | None) -> bool:
        """Whether the run's claim is known to be free, or still ours: not merely
        unreadable (NATS trouble is the usual reason a claim was lost)."""
        for tried in range(3):
            if tried:
                await anyio.sleep(1.0)
            try:
                holder = await (await self.lease(run_id)).current_holder()
            except Exception as exc:
                log.warning("run_claim_unreadable", error=str(exc))
                continue
            return holder is None or holder == mine
        return False

    async def take(self, request: RunRequest) -> Lease | RunEvent:
        """The run's claim, once this delivery holds it; or the run's terminal event,
        if the run has finished. While another runner holds the claim this waits: the
        consumer's heartbeat keeps the delivery in progress, so it is neither
        redelivered nor dropped (it may be the holder's own message, redelivered after a
        blip). A dead holder's claim expires within the leases' TTL; then this takes over."""
        run_id = request.run_id
        claim = await self.lease(run_id)
        # A request older than the duplicate window may be a republished one, arriving
        # after the run it asks for has ended: look past a last `requested` event.
        thorough = (utc_now() - request.requested_at).total_seconds() > DUPLICATE_WINDOW_S
        waited = False
        while True:
            if await claim.try_acquire():
                # Looked at only now that no one else can be running it: a holder may
                # have finished the run and let go just before.
                try:
                    done = await self.store.finished(run_id, thorough=thorough)
                except BaseException:
                    await claim.release()  # not left to block the run for a whole TTL
                    raise
                if done is None:
                    if waited:
                        log.info("run_claim_taken_over")
                    return claim
                await claim.release()
                return done
            done = await self.store.finished(run_id, thorough=thorough)
            if done is not None:
                return done
            if not waited:
                log.info("run_claimed_elsewhere", held_by=await claim.current_holder())
                waited = True
            await anyio.sleep(CLAIM_POLL_S)

    async def ending_is_ours(self, claim: Lease, run_id: str) -> bool:
        """Whether this runner may end the run. A claim that expired unnoticed (NATS
        away) is taken back when no other runner holds it and none ended the run
        meanwhile; held by another, the run is theirs to end."""
        try:
            if await claim.confirm():
                return True
            if not await claim.try_acquire():
                return False
            log.info("run_claim_taken_back")
            return await self.store.finished(run_id) is None
        except Exception as exc:  # unknown: the publish that follows needs NATS anyway
            log.warning("run_claim_unconfirmed", error=str(exc))
            return True

    async def record_is_ours(self, claim: Lease, run_id: str) -> bool:
        """Whether a broken attempt's record may stand as the run's transcript: not once
        another runner holds the run, or has ended it (its record is the run's)."""
        if await claim.current_holder() not in (None, claim.holder):
            return False
        return await self.store.finished(run_id) is None
