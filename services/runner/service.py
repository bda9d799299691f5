"""The runner service: consumes rote.work.runs (a durable pull consumer shared by every
runner process), runs each request, and publishes the run's lifecycle.

Endpoints: rote.api.runs.get (a run's latest state, from its events) and
rote.api.runs.transcript. (rote.api.runs.start, a run of an inline spec, is the
scheduler's: it checks the spec as tasks.create does.)

Following one run request, module by module: `DeliveryHandler.handle` (deliveries.py)
takes the run's claim (`RunClaims`, claims.py) and settles the delivery;
`RunExecution.run` (execution.py) runs it from its `started` event to its terminal one,
going on from what earlier deliveries left (prior.py); `RunAttempt` (attempt.py)
replays the task's executor (replay.py) or runs the full agent loop (agent_loop.py),
over the ports of ports.py (adapters.py: over NATS). Every run event goes out through
`Runner.publish` here.
"""

from __future__ import annotations

import anyio
import msgspec
from anyio.abc import TaskStatus
from nats.js.errors import NotFoundError

from contracts import subjects as s
from contracts.runs import RunEvent, RunRef, RunRequest, RunView, Transcript
from services import __version__
from services.kernel import blobs
from services.kernel.bus import Bus, headers_size
from services.kernel.codec import encode
from services.kernel.consumers import consume, durable_config, max_deliveries_subject
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.run_store import RunStore, TranscriptUnreadable
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import redact
from services.kernel.text import cut_text, json_size
from services.runner.adapters import ExecutorCache, KvEffects, bus_ports
from services.runner.attempt import AttemptNeeds, Limits
from services.runner.bounds import MAX_EVENT_ERROR_CHARS, REF_PLACEHOLDER
from services.runner.claims import RunClaims
from services.runner.deliveries import MAX_DELIVERIES, DeliveryHandler
from services.runner.execution import RunExecution
from services.runner.ports import Ports
from services.runner.prior import PriorDeliveries
from services.runner.run_view import fold

log = get_logger("rote.runner")

# The longest gap between a run's in-progress heartbeats. Every runner process shares
# one consumer, whose ack wait is the one the runner that started last set: beating at
# least this often keeps a run alive whatever another runner set, down to about 2x this.
MAX_HEARTBEAT_S = 5.0


class Runner:
    """The runner's parts, wired: the claims on runs, the execution of a run, the
    handler of the work consumer's deliveries, and the run-event publisher."""

    def __init__(self, ctx: ServiceContext, ports: Ports | None = None) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.executors = ExecutorCache(ctx.bus)
        self.ports = ports or bus_ports(ctx.bus, self.executors)
        self.store = RunStore(ctx.bus)
        self.claims = RunClaims(ctx.bus, self.store)
        needs = AttemptNeeds(
            ports=self.ports,
            limits=Limits(
                replay_retries=ctx.settings.replay_retries,
                replay_backoff_s=ctx.settings.replay_backoff_s,
                verify_rate=ctx.settings.verify_rate,
                shadow_rate=ctx.settings.shadow_rate,
            ),
            publish=self.publish,
            journal=KvEffects(ctx.bus),
        )
        self.execution = RunExecution(
            needs, store=self.store, claims=self.claims, prior=PriorDeliveries(ctx.bus)
        )
        self.deliveries = DeliveryHandler(ctx.bus, self.claims, self.execution)

    async def publish(self, event: RunEvent, msg_id: str) -> None:
        # An answer or an error can quote what a tool read (a config file, a page):
        # mask secrets before the event is kept, and before it is cut (half a secret
        # is no longer recognised as one).
        if event.result:
            event.result = redact(event.result)
        if event.error:
            event.error = cut_text(redact(event.error), MAX_EVENT_ERROR_CHARS)
        if event.replay is not None and event.replay.reason:
            # It quotes tool errors.
            event.replay.reason = cut_text(redact(event.replay.reason), MAX_EVENT_ERROR_CHARS)
        headers = {s.HEADER_MSG_ID: msg_id}
        await self._fit_result(event, headers)
        await self.bus.publish_event(
            s.run_event(event.task_id, event.run_id, event.event), event, msg_id=msg_id
        )

    async def _fit_result(self, event: RunEvent, headers: dict[str, str]) -> None:
        """An answer larger than the rest of the event leaves of one NATS message is
        stored whole in the blob store, and the event carries its head and the
        reference (only then: a subscriber wants the answer itself). Refused, the
        publish would break the delivery, and the redelivered run would act again."""
        if event.result is None:
            return
        sized = msgspec.structs.replace(
            event, result="", result_truncated=True, result_ref=REF_PLACEHOLDER
        )
        rest = len(encode(sized)) - json_size("")
        room = self.bus.nc.max_payload - headers_size(headers) - rest
        if json_size(event.result) <= room:
            return
        whole = event.result.encode()
        try:
            event.result_ref = await blobs.put(self.bus.js, whole)
        except Exception as exc:
            # The run's ending matters more than the answer's tail: it goes out with the
            # head, marked cut, and no reference (the tracer compiles nothing from it).
            log.error("run_answer_unstored", size=len(whole), error=str(exc))
        else:
            log.info("run_answer_stored", size=len(whole), ref=event.result_ref)
        event.result = cut_text(event.result, room, mark="", size=json_size)
        event.result_truncated = True

    # --- endpoints ---------------------------------------------------------------------

    async def get(self, ref: RunRef) -> RunView:
        view = fold(await self.store.events(ref.run_id))
        if view is None:
            raise ServiceError("not_found", f"no run {ref.run_id}", field="run_id")
        return view

    async def transcript(self, ref: RunRef) -> Transcript:
        try:
            transcript = await self.store.stored_transcript(ref.run_id)
        except TranscriptUnreadable:
            detail = "what is stored for it is not a transcript this version of rote can read"
        else:
            if transcript is not None:
                return transcript
            known = await self.store.last_event(ref.run_id)
            if known is None:
                detail = "no such run"
            elif known.event in ("completed", "failed"):
                detail = "the run ended without writing one"
            else:
                detail = "it is written when the run ends"
        raise ServiceError("not_found", f"no transcript for {ref.run_id}: {detail}")


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    runner = Runner(ctx)
    await runner.executors.start()
    service = await start_service(
        ctx.bus,
        name="rote-runner",
        version=__version__,
        description="Runs tasks: replays executors, falls back to the full LLM loop",
        endpoints=[
            Endpoint("get", s.RUNS_GET, RunRef, runner.get, description="a run's latest state"),
            Endpoint(
                "transcript",
                s.RUNS_TRANSCRIPT,
                RunRef,
                runner.transcript,
                concurrent=True,
                description="a run's transcript",
            ),
        ],
        task_group=ctx.task_group,
    )
    ack_wait = ctx.settings.runner_ack_wait_s
    config = durable_config(
        s.CONSUMER_RUNNER,
        filter_subjects=[s.WORK_RUNS],
        ack_wait_s=ack_wait,
        max_deliver=MAX_DELIVERIES,
    )
    await _warn_if_ack_wait_differs(ctx.bus, ack_wait)
    # One runner process (a queue group) ends each run whose deliveries ran out.
    advisories = await ctx.bus.nc.subscribe(
        max_deliveries_subject(s.STREAM_WORK, s.CONSUMER_RUNNER),
        queue=s.CONSUMER_RUNNER,
        cb=runner.deliveries.on_max_deliveries,
    )
    try:
        await consume(
            ctx.bus.js,
            stream=s.STREAM_WORK,
            config=config,
            type_=RunRequest,
            handler=runner.deliveries.handle,
            workers=max(1, ctx.settings.runner_slots),
            heartbeat_s=max(0.2, min(ack_wait / 3, MAX_HEARTBEAT_S)),
            task_status=task_status,
        )
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await advisories.unsubscribe()
            except Exception as exc:  # the connection is going away anyway
                log.debug("advisories_unsubscribe_failed", error=str(exc))
        await stop_service(service)


async def _warn_if_ack_wait_differs(bus: Bus, ack_wait_s: float) -> None:
    """Runner processes share one consumer: a different ROTE_RUNNER_ACK_WAIT_S here
    changes it for all of them (and an idle one puts its own back later). Say so."""
    try:
        info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
    except NotFoundError:
        return  # the first runner: nothing to differ from
    except Exception as exc:  # NATS briefly away: consume() copes, this is advice only
        log.debug("runner_consumer_info_failed", error=str(exc))
        return
    current = info.config.ack_wait
    if current is not None and abs(current - ack_wait_s) > 0.001:
        log.warning(
            "runner_ack_wait_differs",
            configured_s=ack_wait_s,
            consumer_s=current,
            hint="every runner process must set the same ROTE_RUNNER_ACK_WAIT_S",
        )
