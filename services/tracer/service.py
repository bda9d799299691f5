"""The tracer service: on every successful full-LLM run, rebuild the run's trace from
the bus (its tool events in ROTE_ACTIVITY, its transcript) and publish it as
rote.evt.trace.<task_id>.<run_id>.captured. rote.api.traces.get returns it.

Nothing is held in memory between messages: a tracer restarted mid-run loses nothing,
because the trace is read back from the streams when the run completes.
"""

from __future__ import annotations

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError, ObjectNotFoundError

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent
from contracts.tools import ToolEvent
from contracts.traces import Trace, TraceCaptured, TraceRef, TraceReply, TraceStep
from services import __version__
from services.kernel import blobs
from services.kernel.codec import decode, encode
from services.kernel.consumers import Reject, Retry, consume, durable_config
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.replay_read import read_all
from services.kernel.run_store import RunStore
from services.kernel.runtime import ServiceContext
from services.tracer.build import build_trace, final_attempt_calls, missing_calls

log = get_logger("rote.tracer")

# Outputs above this (encoded) go to the blob store; the trace keeps a reference.
INLINE_OUTPUT_BYTES = 32 * 1024
# Left free under the largest message allowed for headers (Nats-Msg-Id) and slack.
PAYLOAD_HEADROOM_BYTES = 16 * 1024
# What an output costs once stored: `null` plus `"sha256:<64 hex>"`, rounded up. Smaller
# outputs are cheaper inline.
REF_BYTES = 100
# Deliveries of a completion to wait for late tool events before deciding without them.
PATIENCE = 6


class TraceTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the trace is {size} bytes even with its tool outputs stored apart, over the "
            f"{limit} one message may carry (its inputs and model text are too long); "
            "no trace"
        )
        self.size = size
        self.limit = limit


def undecodable_skipped(msgs: list[Msg]) -> list[ToolEvent]:
    """The tool events that decode. One bad event must not hold up the whole trace: the
    transcript check decides whether the call it stood for matters."""
    events = []
    for m in msgs:
        try:
            events.append(decode(m.data, ToolEvent))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("tool_event_undecodable", subject=m.subject, error=str(exc))
    return events


class Tracer:
    def __init__(self, ctx: ServiceContext) -> None:
        self.bus = ctx.bus
        self.runs = RunStore(ctx.bus)

    async def on_run_completed(self, event: RunEvent, msg: Msg) -> None:
        if event.event != "completed" or event.source != "full_llm":
            return
        if event.resumed_actions:
            # Some of its actions were answered from its effect journal, not done in
            # this attempt: a trace of it would leave them out. A later full run's will do.
            log.info(
                "trace_skipped_resumed_run", run_id=event.run_id, actions=event.resumed_actions
            )
            return
        with structlog.contextvars.bound_contextvars(run_id=event.run_id, task_id=event.task_id):
            started = await self.runs.last_event(event.run_id, "started")
            if started is None:
                raise Retry("the run's started event is not readable yet", delay_s=1.0)
            if started.spec is None:
                # The runner shows no spec when masking a secret in it would break the
                # spec: without it no trace can be built, and waiting will not bring it.
                raise Reject("the run's spec is hidden (it held a secret); no trace")
            tool_msgs = await read_all(
                self.bus.js, s.STREAM_ACTIVITY, s.tool_event(event.run_id, "finished")
            )
            tool_events = undecodable_skipped(tool_msgs)
            if event.result_truncated:
                # The event carries the answer's head: compiled from it, the executor's
                # result step would write a cut answer on every replay.
                event = await self._whole_answer(event)
            transcript = await self.runs.transcript(event.run_id)
            # Tools services publish their events without waiting for JetStream, so the
            # last call's event can land just after the run's completion: wait for every
            # call the transcript shows.
            calls = final_attempt_calls(tool_events, event.attempt)
            missing = missing_calls(transcript, calls)
            if missing.failed or missing.effective:
                tries = msg.metadata.num_delivered if msg.metadata else 1
                if tries < PATIENCE:
                    count = len(missing.failed) + len(missing.effective)
                    raise Retry(f"waiting for the events of {count} calls", delay_s=0.5)
                if missing.effective:
                    # Its finished event was lost: a trace without a call that did
                    # something would compile into an executor that skips it.
                    log.error("trace_call_lost", missing=missing.effective)
                    count = len(missing.effective)
                    raise Reject(
                        f"no tool event for {count} successful call{'s' * (count != 1)} "
                        f"({', '.join(missing.effective)}); the trace would leave out "
                        "something the run did"
                    )
                # Failed calls without an event never reached a tools service (or their
                # event was lost): they had no effect worth replaying.
                log.warning("trace_without_calls", missing=missing.failed)
            trace = build_trace(
                run=event,
                spec=started.spec,
                tool_events=tool_events,
                transcript=transcript,
                captured_at=utc_now(),
            )
            try:
                trace = await self.offload_large_outputs(trace)
            except TraceTooLarge as exc:
                log.error("trace_too_large", size=exc.size, limit=exc.limit)
                raise Reject(str(exc)) from None
            await self.bus.publish_event(
                s.trace_captured(event.task_id, event.run_id),
                TraceCaptured(trace=trace),
                msg_id=f"trace:{event.run_id}",
            )
            log.info("trace_captured", steps=len(trace.steps))

    async def _whole_answer(self, event: RunEvent) -> RunEvent:
        """The completed event with its whole answer, read back from the blob store."""
        if event.result_ref is None:
            raise Reject("the run's answer was cut and not kept whole; no trace")
        try:
            whole = await blobs.get(self.bus.js, event.result_ref)
        except (ObjectNotFoundError, NotFoundError, ValueError):
            raise Reject(f"the run's answer {event.result_ref} is not in the blob store") from None
        return msgspec.structs.replace(event, result=whole.decode())

    async def offload_large_outputs(self, trace: Trace) -> Trace:
        """Outputs over INLINE_OUTPUT_BYTES go to the blob store; then the largest of the
        rest, until the captured event fits one message. Raises TraceTooLarge when even
        with its outputs stored it does not (long inputs or model text)."""
        encoded = {
            i: encode(step.output) for i, step in enumerate(trace.steps) if step.output is not None
        }
        for i, data in encoded.items():
            if len(data) > INLINE_OUTPUT_BYTES:
                await self._offload(trace.steps[i], data)
        limit = await self._max_message_bytes() - PAYLOAD_HEADROOM_BYTES
        size = len(encode(TraceCaptured(trace=trace)))
        inline = sorted(
            (
                i
                for i in encoded
                if trace.steps[i].output is not None and len(encoded[i]) > REF_BYTES
            ),
            key=lambda i: len(encoded[i]),
            reverse=True,
        )
        for i in inline:
            if size <= limit:
                break
            await self._offload(trace.steps[i], encoded[i])
            # An estimate (the reference takes fewer than REF_BYTES): re-encoding the
            # whole trace for every output would be quadratic.
            size -= len(encoded[i]) - REF_BYTES
        size = len(encode(TraceCaptured(trace=trace)))
        if size > limit:
            raise TraceTooLarge(size, limit)
        return trace

    async def _max_message_bytes(self) -> int:
        """The largest trace message both the connection and ROTE_TRACES take: a server
        whose max_payload was raised past the stream's max_msg_size would otherwise see
        the stream refuse the trace on every delivery."""
        info = await self.bus.js.stream_info(s.STREAM_TRACES)
        stream_max = info.config.max_msg_size or -1  # -1: no limit of its own
        payload_max = self.bus.nc.max_payload
        return payload_max if stream_max < 0 else min(payload_max, stream_max)

    async def _offload(self, step: TraceStep, data: bytes) -> None:
        step.output_ref = await blobs.put(self.bus.js, data)
        step.output = None

    async def get(self, ref: TraceRef) -> TraceReply:
        try:
            msg = await self.bus.js.get_last_msg(
                s.STREAM_TRACES, f"{s.PREFIX}.evt.trace.*.{ref.run_id}.captured"
            )
        except NotFoundError:
            raise ServiceError(
                "not_found", f"no trace for run {ref.run_id}", field="run_id"
            ) from None
        return TraceReply(trace=decode(msg.data or b"", TraceCaptured).trace)


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    tracer = Tracer(ctx)
    service = await start_service(
        ctx.bus,
        name="rote-tracer",
        version=__version__,
        description="Captures traces of successful full LLM runs",
        endpoints=[Endpoint("get", s.TRACES_GET, TraceRef, tracer.get, description="a trace")],
        task_group=ctx.task_group,
    )
    config = durable_config(
        s.CONSUMER_TRACER, filter_subjects=[s.run_events_of(event="completed")], max_deliver=10
    )
    try:
        await consume(
            ctx.bus.js,
            stream=s.STREAM_RUNS,
            config=config,
            type_=RunEvent,
            handler=tracer.on_run_completed,
            task_status=task_status,
        )
    finally:
        await stop_service(service)
