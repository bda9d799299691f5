"""A run's execution: one delivery of a run request, under the run's claim, from the
run's `started` event to its terminal one.

`RunExecution.run` follows a run from start to end:

1. what earlier deliveries left (prior.py): when the run first started, whether an
   earlier replay failed; read once, before anything starts;
2. the run's `started` event for this delivery (one per delivery: the ledger shows every
   delivery that took the run up);
3. the attempt itself (attempt.py): path A, path B, within what the deadline has left;
   an attempt with no time left runs nothing and keeps the earlier attempts'
   transcript, adding how the run ended;
4. the ending: what earlier attempts spent joins the run's cost, the browser session is
   closed, the transcript saved and the terminal `completed`/`failed` event published,
   unless another runner took the run over (claims.py) or it was already ended (a late
   run the scheduler declared abandoned).

An attempt that breaks (an unexpected error, or its runner stopping) closes its session
and saves its record so far, then lets the error through: deliveries.py decides between
a redelivery and ending the run abandoned, which `abandon` does.
"""

from __future__ import annotations

import time

import anyio

from contracts.base import utc_now
from contracts.runs import FailureReason, RunEvent, RunRequest
from services.kernel.lease import Lease
from services.kernel.logs import get_logger
from services.kernel.run_store import RunStore
from services.kernel.secrets import redact_struct
from services.runner.attempt import (
    AttemptNeeds,
    AttemptResult,
    RunAttempt,
    close_session,
    terminal_event,
)
from services.runner.bounds import abandon_error
from services.runner.claims import RunClaims
from services.runner.effects import RunEffects, did_not_act
from services.runner.prior import PriorDeliveries
from services.runner.transcript import TranscriptRecorder

log = get_logger("rote.runner")

# How long a broken attempt may spend saving its transcript (it holds up a shutdown).
TRANSCRIPT_SAVE_S = 5.0
# How long a run's terminal event is tried (across a JetStream leader election, a NATS
# restart) before the delivery gives up and breaks; well inside the delivery's
# redelivery bound, which its heartbeat extends meanwhile.
END_PUBLISH_S = 60.0


class RunExecution:
    """Runs the deliveries of run requests, one `run` call each (any number at once: it
    keeps no state of its own between them), and ends the runs no delivery could end
    (`abandon`)."""

    def __init__(
        self,
        needs: AttemptNeeds,
        *,
        store: RunStore,
        claims: RunClaims,
        prior: PriorDeliveries,
    ) -> None:
        self.needs = needs
        self.store = store
        self.claims = claims
        self.prior = prior

    async def run(self, request: RunRequest, attempt: int, claim: Lease) -> RunEvent:
        """Run delivery `attempt` of `request` under the run's `claim`, which this
        delivery holds, and return the run's terminal event (also when it was not
        published: another runner's, or an earlier ending's, stands)."""
        spec = request.spec
        effects, ended = await self._journal(request, attempt)
        if ended is not None:
            # The run ended and its end was recorded, but its event may not have reached
            # the stream (the delivery broke publishing it): only that is done again.
            log.info("run_end_republished", status=ended.status)
            await self._publish_end(ended, request.run_id)
            return ended
        # The deadline bounds the run's wall-clock time, not each delivery's: a
        # redelivered run gets only what its first start left of it.
        prior = await self.prior.load(request, attempt)
        started = time.monotonic()
        started_at = utc_now()
        elapsed = prior.elapsed_s(started_at)
        await self.needs.publish(
            RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event="started",
                at=started_at,
                status="running",
                spec=redact_struct(spec),
                origin=request.origin,
                attempt=attempt,
            ),
            f"{request.run_id}:started:{attempt}",
        )
        log.info("run_started", model=spec.model)
        transcript = TranscriptRecorder(request.run_id, request.task_id)
        if spec.deadline_s - elapsed <= 0:
            # Still `started` above: the ledger shows every delivery that took the run
            # up, and this one's `failed` says why it ran nothing.
            log.warning("run_deadline_passed_before_delivery", elapsed_s=round(elapsed, 3))
            await self._carry_over(transcript, request.run_id)
        needs = self.needs
        run = RunAttempt(
            request,
            attempt,
            ports=needs.ports,
            transcript=transcript,
            limits=needs.limits,
            publish=needs.publish,
            effects=effects,
        )
        try:
            result = await run.run(elapsed, prior.failed_replay)
        except BaseException as broke:
            await self._keep_broken_record(request, attempt, claim, transcript, broke)
            raise
        if attempt > 1:  # what the earlier, broken attempts spent is this run's cost too
            result.ledger.merge(await self.prior.spent_before(request.run_id, started_at))
        return await self._end(request, attempt, claim, transcript, result, started, effects)

    async def _journal(
        self, request: RunRequest, attempt: int
    ) -> tuple[RunEffects | None, RunEvent | None]:
        """The run's effect journal, and its recorded end if it has one. A first delivery
        starts an empty one; a later one reads what earlier ones recorded, and breaks
        (to be delivered again) when it cannot: acting without it could act twice."""
        journal = self.needs.journal
        if journal is None:
            return None, None
        check = self.needs.ports.call_status
        if attempt <= 1:
            return RunEffects(request.run_id, attempt, journal, check), None
        return await RunEffects.load(request.run_id, attempt, journal, check)

    async def _journal_left(self, run_id: str) -> tuple[RunEvent | None, list[str]]:
        """What the run's journal says of a run being given up: its recorded end, if it
        has one, and the actions it took or may have taken (`step 1 (browser_click):
        done`), if it can be read."""
        if self.needs.journal is None:
            return None, []
        try:
            effects, recorded = await self.needs.journal.load(run_id)
        except Exception as exc:
            log.warning("run_journal_unreadable", error=str(exc))
            return None, []
        acted = [
            f"{e.tool} ({e.key}): {e.state}"
            for e in sorted(effects.values(), key=lambda e: e.intended_at)
            if not did_not_act(e)
        ]
        return recorded, acted

    async def _publish_end(self, event: RunEvent, run_id: str) -> None:
        """Publish the run's terminal event, trying again (same Nats-Msg-Id) while
        JetStream elects a leader or NATS comes back, for up to END_PUBLISH_S. The
        delivery's heartbeat keeps it ours meanwhile; past that it breaks, and the next
        delivery finds the end recorded in the journal and only publishes it."""
        pause = 0.25
        with anyio.fail_after(END_PUBLISH_S):
            while True:
                try:
                    await self.needs.publish(event, f"{run_id}:finished")
                    return
                except Exception as exc:
                    log.warning("run_end_unpublished", error=str(exc), retry_in_s=pause)
                await anyio.sleep(pause)
                pause = min(pause * 2, 4.0)

    async def _carry_over(self, transcript: TranscriptRecorder, run_id: str) -> None:
        """An attempt with no time left runs nothing: rather than write over the earlier
        attempts' record (what they did, what broke them), it adds how the run ended."""
        try:
            earlier = await self.store.transcript(run_id)
        except Exception as exc:
            log.warning("transcript_unreadable", error=str(exc))
            return
        if earlier is not None:
            transcript.carry_over(earlier)

    async def _keep_broken_record(
        self,
        request: RunRequest,
        attempt: int,
        claim: Lease,
        transcript: TranscriptRecorder,
        broke: BaseException,
    ) -> None:
        """Whatever broke the attempt (the message is redelivered), its browser context
        must not outlive it: the next attempt starts from a clean one. Its record so far,
        and what broke it, is saved: a later attempt writes over it; when none comes, it
        is the run's transcript."""
        with anyio.CancelScope(shield=True):
            await close_session(self.needs.ports, request.run_id, attempt)
            if isinstance(broke, Exception):
                transcript.note(f"attempt {attempt} broke: {abandon_error(broke)}")
            else:
                transcript.note(f"attempt {attempt} was stopped with its runner")
            with anyio.move_on_after(TRANSCRIPT_SAVE_S):
                try:
                    if await self.claims.record_is_ours(claim, request.run_id):
                        await self.store.save_transcript(transcript.encoded(), request.run_id)
                except Exception as exc:
                    log.warning("transcript_save_failed", error=str(exc))

    async def _end(
        self,
        request: RunRequest,
        attempt: int,
        claim: Lease,
        transcript: TranscriptRecorder,
        result: AttemptResult,
        started: float,
        effects: RunEffects | None,
    ) -> RunEvent:
        """Close the session, save the transcript and publish the run's terminal event,
        unless the run is no longer this runner's to end."""
        outcome = result.outcome
        with anyio.CancelScope(shield=True):
            await close_session(self.needs.ports, request.run_id, attempt)
            if outcome.error:
                transcript.note(outcome.error, reason=outcome.reason)
            # One terminal event per run: completed and failed share a Nats-Msg-Id. That
            # dedupes only within the stream's window, and a run that outlived its
            # deadline may meanwhile have been declared abandoned by the scheduler.
            late = (utc_now() - request.requested_at).total_seconds() > request.spec.deadline_s
            earlier = await self.store.finished(request.run_id) if late else None
            # A runner that took the run over writes its record and its ending.
            taken_over = not await self.claims.ending_is_ours(claim, request.run_id)
            if not taken_over:
                try:
                    await self.store.save_transcript(transcript.encoded(), request.run_id)
                except Exception as exc:  # the run's outcome matters more than its record
                    log.warning("transcript_save_failed", error=str(exc))
            finished = terminal_event(
                request, attempt, result, duration_ms=int((time.monotonic() - started) * 1000)
            )
            if earlier is not None:
                log.warning("run_outcome_dropped", already=earlier.reason or earlier.status)
            elif taken_over:
                log.warning("run_outcome_dropped", already="claimed by another runner")
            else:
                if effects is not None:
                    await effects.record_finished(finished)
                await self._publish_end(finished, request.run_id)
        log.info(
            "run_finished",
            status=finished.status,
            source=finished.source,
            fell_back=finished.fell_back,
            reason=finished.reason,
            cost_usd=finished.cost_usd,
            duration_ms=finished.duration_ms,
        )
        return finished

    async def abandon(self, request: RunRequest, attempt: int, error: str) -> None:
        """End the run `failed`, reason `abandoned` (`error` says why): its last permitted
        delivery broke, or every delivery ended without an outcome. Without this the
        run would stay `running` for good for whoever watches or asked for it."""
        try:
            if await self.store.finished(request.run_id, thorough=True) is not None:
                return  # it ended meanwhile (or another delivery ended it): one ending
        except Exception as exc:
            log.warning("run_finished_unknown", error=str(exc))
        recorded, acted = await self._journal_left(request.run_id)
        if recorded is not None:
            # It ended, and only publishing its end failed: that end is the run's.
            try:
                await self.needs.publish(recorded, f"{request.run_id}:finished")
                return
            except Exception as exc:
                log.error("run_end_unpublished", error=str(exc))
        reason: FailureReason = "abandoned"
        if acted:
            # It acted (or may have) before it was given up: run again, by its schedule
            # or by hand, it would act again. Its task waits for a person.
            reason = "needs_attention"
            error = f"{error}; it had acted or may have: {', '.join(acted)}"
        log.error("run_abandoned", error=error, reason=reason)
        spent = await self.prior.spent_before(request.run_id, utc_now())
        try:
            await self.needs.publish(
                RunEvent(
                    task_id=request.task_id,
                    run_id=request.run_id,
                    event="failed",
                    at=utc_now(),
                    status="failed",
                    reason=reason,
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
