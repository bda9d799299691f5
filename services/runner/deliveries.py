"""Handling the deliveries of run requests: each one the work consumer hands over is
claimed, run under its claim, and settled (acked, redelivered, or ended for good).

`DeliveryHandler.handle` follows one delivery:

1. take the run's claim (claims.py); a run found finished is only acked;
2. run it (`RunExecution.run`, execution.py) while the claim is renewed; a claim that can
   no longer be vouched for stops the run, since another runner may be running it now;
3. settle: a delivery that broke is redelivered, up to MAX_DELIVERIES.

A run must end even when its deliveries do not: when the last permitted delivery breaks,
or its runner stops during it, or JetStream says the deliveries ran out with none acked
(`on_max_deliveries`, the advisory), the run is ended here, `failed` with reason
`abandoned` (`RunExecution.abandon`), but only when no other runner may hold the run
and finish it.
"""

from __future__ import annotations

import anyio
import structlog
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.runs import RunEvent, RunRequest
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.consumers import MaxDeliveries, Reject, Retry
from services.kernel.lease import Lease, LeaseLost
from services.kernel.logs import get_logger
from services.runner.bounds import abandon_error
from services.runner.claims import RunClaims
from services.runner.execution import RunExecution

log = get_logger("rote.runner")

# Deliveries of one run request (the consumer's max_deliver) before it is given up.
MAX_DELIVERIES = 3
# How long a runner stopping during a run's last delivery may spend ending the run.
STOP_GIVE_UP_S = 5.0


def last_delivery_error(failure: BaseException) -> str:
    return f"unexpected error on the last of {MAX_DELIVERIES} deliveries: " + abandon_error(failure)


def stopped_every_time(deliveries: int) -> str:
    return (
        f"each of its {deliveries} deliveries ended without an outcome"
        " (the runner stopped or died during it)"
    )


class DeliveryHandler:
    """Settles each delivery of a run request: claim the run, run it under the claim,
    and end the run (abandoned) when no delivery will."""

    def __init__(self, bus: Bus, claims: RunClaims, execution: RunExecution) -> None:
        self.bus = bus
        self.claims = claims
        self.execution = execution

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
                    await self.execution.abandon(request, attempt, last_delivery_error(exc))
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
            await self.execution.abandon(request, attempt, stopped_every_time(attempt))
            try:
                await msg.term()
            except Exception as exc:  # the ack wait lets it go in the end
                log.warning("work_request_not_terminated", error=str(exc))

    async def _run_claimed(self, request: RunRequest, attempt: int, claim: Lease) -> None:
        """Run it (execution.py) while renewing its claim. A claim that can no longer be
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
                await self.execution.run(request, attempt, claim)
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
            await self.execution.abandon(request, attempt, last_delivery_error(lost))
            raise Reject(f"run {request.run_id} abandoned: {lost}")
        if failure is None:
            return
        if attempt < MAX_DELIVERIES:
            raise failure  # redelivered: the next attempt may get through
        await self.execution.abandon(request, attempt, last_delivery_error(failure))
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
                await self.execution.abandon(
                    request, advisory.deliveries, stopped_every_time(advisory.deliveries)
                )
            try:  # never delivered again: it would only sit in the work queue
                await self.bus.js.delete_msg(s.STREAM_WORK, advisory.stream_seq)
            except Exception as exc:
                log.warning("work_request_not_deleted", error=str(exc))
