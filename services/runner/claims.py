"""The claim protocol: a run request's deliveries, and the one claim per run that keeps
two of them from running it at once.

Every runner process pulls from one shared consumer of rote.work.runs. The same run may
be delivered twice (a redelivery after its runner died or lost NATS, a request published
again past the de-duplication window), so a delivery first takes the run's claim, one
key per run in the rote_leases bucket (`RunClaims.take`):

- while another runner holds it, the delivery waits (the consumer's heartbeat keeps it
  in progress) and takes over once a dead holder's claim expires;
- a run found finished once the claim is held is only acked.

While the run executes (delivery.py), the claim is renewed; a claim that can no longer be
vouched for stops the run, since another runner may be running it now
(`Deliveries._run_claimed`). At the end, the run's record and ending are written only
if the claim is still ours (`RunClaims.ending_is_ours`, `record_is_ours`).

A run must end even when its deliveries do not: when the last permitted delivery breaks,
or its runner stops during it, or JetStream says the deliveries ran out with none acked
(the advisory), the run's terminal `failed` event (reason `abandoned`) is published here
(`Deliveries.give_up`) — but only when no other runner may hold the run and finish it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import anyio
import structlog
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent, RunRequest
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.consumers import MaxDeliveries, Reject, Retry
from services.kernel.lease import Lease, LeaseLost, run_key
from services.kernel.logs import get_logger
from services.kernel.run_store import RunStore
from services.kernel.streams import DUPLICATE_WINDOW_S, KV_TTL_S
from services.runner.accounting import Ledger
from services.runner.bounds import abandon_error
from services.runner.ports import PublishRunEvent

log = get_logger("rote.runner")

# Deliveries of one run request (the consumer's max_deliver) before it is given up.
MAX_DELIVERIES = 3
# How often a delivery waiting on another runner's claim on its run looks again.
CLAIM_POLL_S = 1.0
# How long a runner stopping during a run's last delivery may spend ending the run.
STOP_GIVE_UP_S = 5.0

# Runs one delivery of a run request (its attempt number) under the claim it holds.
Execute = Callable[[RunRequest, int, Lease], Awaitable[RunEvent]]
# What a run's model calls spent before a time, from the llm service's usage events.
SpentBefore = Callable[[str, datetime], Awaitable[Ledger]]


def last_delivery_error(failure: BaseException) -> str:
    return f"unexpected error on the last of {MAX_DELIVERIES} deliveries: " + abandon_error(failure)


def stopped_every_time(deliveries: int) -> str:
    return (
        f"each of its {deliveries} deliveries ended without an outcome"
        " (the runner stopped or died during it)"
    )


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


class Deliveries:
    """Settles each delivery of a run request: claim the run, execute it under the claim,
    and end the run (abandoned) when no delivery will."""

    def __init__(
        self,
        bus: Bus,
        claims: RunClaims,
        *,
        execute: Execute,
        publish: PublishRunEvent,
        spent_before: SpentBefore,
    ) -> None:
        self.bus = bus
        self.claims = claims
        self.store = claims.store
        self.execute = execute
        self.publish = publish
        self.spent_before = spent_before

    async def handle(self, request: RunRequest, msg: Msg) -> None:
        """One delivery of a run request, as the work consumer hands it over."""
        attempt = msg.metadata.num_delivered if msg.metadata else 1
        with structlog.contextvars.bound_contextvars(
            run_id=request.run_id, task_id=request.task_id, attempt=attempt
        ):
            # The same run delivered twice (redelivery, a duplicate request past the
            # de-duplication window) must never run twice: one claim per run keeps a
            # second delivery from running it alongside, and a run found finished once
            # the claim is held is only acked.
            try:
                claimed = await self.claims.take(request)
            except Exception as exc:
                if attempt < MAX_DELIVERIES:
                    raise  # redelivered: NATS may be back by then
                # No delivery comes after this one. The error may have struck while
                # another runner holds the claim and runs the run: only a claim known
                # to be free makes this run abandoned.
                if await self.claims.is_free(request.run_id, mine=None):
                    await self.give_up(request, attempt, last_delivery_error(exc))
                raise Reject(f"run {request.run_id}: no claim on the last delivery") from exc
            if isinstance(claimed, RunEvent):
                log.info("run_already_finished", status=claimed.status)
                return
            try:
                await self._run_claimed(request, attempt, claimed)
            except anyio.get_cancelled_exc_class():
                if attempt >= MAX_DELIVERIES:
                    await self._stopped_on_last_delivery(request, attempt, msg)
                raise
            finally:
                await claimed.release()

    async def _stopped_on_last_delivery(self, request: RunRequest, attempt: int, msg: Msg) -> None:
        """This runner is stopping during the run's last delivery: handed back, it could
        never be delivered again, and the server's word that its deliveries ran out may
        reach no runner (none is listening while all restart). It ends here, as the
        advisory would have ended it."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_GIVE_UP_S):
            await self.give_up(request, attempt, stopped_every_time(attempt))
            try:
                await msg.term()
            except Exception as exc:  # the ack wait lets it go in the end
                log.warning("work_request_not_terminated", error=str(exc))

    async def _run_claimed(self, request: RunRequest, attempt: int, claim: Lease) -> None:
        """Execute the run while renewing its claim. A claim that can no longer be
        vouched for stops the run: another runner may be running it now."""
        lost: LeaseLost | None = None
        failure: Exception | None = None
        ran = False
        async with anyio.create_task_group() as tg:

            async def keep() -> None:
                nonlocal lost
                try:
                    await claim.keep()
                except LeaseLost as exc:
                    lost = exc
                    tg.cancel_scope.cancel()

            tg.start_soon(keep)
            try:
                await self.execute(request, attempt, claim)
                ran = True
            except Exception as exc:  # settled below, outside the task group
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if lost is not None and not ran:
            log.warning("run_claim_lost", error=str(lost))
            if attempt < MAX_DELIVERIES:
                raise Retry(str(lost))
            # No delivery comes after this one: unless another runner may hold the
            # claim now (and will finish the run), the run ends here, abandoned.
            if not await self.claims.is_free(request.run_id, mine=claim.holder):
                raise Retry(str(lost))
            await self.give_up(request, attempt, last_delivery_error(lost))
            raise Reject(f"run {request.run_id} abandoned: {lost}")
        if failure is None:
            return
        if attempt < MAX_DELIVERIES:
            raise failure  # redelivered: the next attempt may get through
        await self.give_up(request, attempt, last_delivery_error(failure))
        raise Reject(f"run {request.run_id} abandoned after {attempt} deliveries") from failure

    async def on_max_deliveries(self, msg: Msg) -> None:
        """JetStream's advisory that a run request used up its deliveries, none acked:
        the runner stopped or died during each, so no code of theirs could end the run.
        Someone must, or it stays `running` for good (the scheduler's recovery covers
        only the runs it dispatched, not an operator's)."""
        try:
            advisory = decode(msg.data, MaxDeliveries)
            stored = await self.bus.js.get_msg(s.STREAM_WORK, advisory.stream_seq)
            request = decode(stored.data or b"", RunRequest)
        except Exception as exc:  # gone already, or not a run request: nothing to end
            log.warning("max_deliveries_unreadable", error=str(exc))
            return
        with structlog.contextvars.bound_contextvars(
            run_id=request.run_id, task_id=request.task_id
        ):
            if await self.claims.is_free(request.run_id, mine=None):
                await self.give_up(
                    request, advisory.deliveries, stopped_every_time(advisory.deliveries)
                )
            try:  # never delivered again: it would only sit in the work queue
                await self.bus.js.delete_msg(s.STREAM_WORK, advisory.stream_seq)
            except Exception as exc:
                log.warning("work_request_not_deleted", error=str(exc))

    async def give_up(self, request: RunRequest, attempt: int, error: str) -> None:
        """The last permitted delivery broke (`error` says how): publish the run's
        terminal event, or the run would stay `running` for good for whoever watches or
        asked for it."""
        try:
            if await self.store.finished(request.run_id, thorough=True) is not None:
                return  # it ended meanwhile (or another delivery ended it): one ending
        except Exception as exc:
            log.warning("run_finished_unknown", error=str(exc))
        log.error("run_abandoned", error=error)
        spent = await self.spent_before(request.run_id, utc_now())
        try:
            await self.publish(
                RunEvent(
                    task_id=request.task_id,
                    run_id=request.run_id,
                    event="failed",
                    at=utc_now(),
                    status="failed",
                    reason="abandoned",
                    error=error,
                    tokens=spent.snapshot(),
                    cost_usd=round(spent.cost_usd, 8),
                    origin=request.origin,
                    attempt=attempt,
                ),
                f"{request.run_id}:finished",
            )
        except Exception as exc:  # NATS gone too: the scheduler's recovery is what is left
            log.error("run_abandon_unpublished", error=str(exc))
