"""Reading back what a stream holds for one subject filter, start to end.

Used by services that rebuild state from the bus (the tracer rebuilding a run's tool
calls, the scheduler's run ledger): an ephemeral consumer delivers everything stored,
in order. Reading stops once everything stored under the filter when it began has
arrived, never merely because a fetch timed out: a busy server may answer late.
"""

from __future__ import annotations

import contextlib

import anyio
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

# A server that delivers nothing this long while messages remain is not slow but stuck:
# an error then, never a history cut short.
STALL_S = 5.0


async def read_all(
    js: JetStreamContext,
    stream: str,
    subject_filter: str,
    *,
    batch: int = 256,
    fetch_timeout_s: float = 0.5,
) -> list[Msg]:
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        inactive_threshold=30.0,
    )
    sub = await js.pull_subscribe(subject_filter, stream=stream, config=config)
    out: list[Msg] = []
    try:
        # What is stored under the filter now; the consumer delivers those first, in order.
        expected = (await sub.consumer_info()).num_pending or 0
        last_seq = 0  # stream sequence of the last message received
        delivered = 0  # ... and of the last one the server says it delivered
        in_flight = False  # the server said it delivered more than has arrived
        progress_at = anyio.current_time()
        stall_s = max(STALL_S, 10 * fetch_timeout_s)
        while len(out) < expected:
            try:
                msgs = await sub.fetch(batch, timeout=fetch_timeout_s)
            except (nats.errors.TimeoutError, TimeoutError):
                # A timeout alone proves nothing (a busy server answers late): ask.
                info = await sub.consumer_info()
                seq = info.delivered.stream_seq if info.delivered else 0
                if seq != delivered:
                    delivered, progress_at = seq, anyio.current_time()
                if info.num_pending:  # still stored and not yet delivered
                    if anyio.current_time() - progress_at > stall_s:
                        raise TimeoutError(
                            f"reading {subject_filter} from {stream}: nothing delivered for"
                            f" {stall_s:g}s with {info.num_pending} messages left"
                        ) from None
                    continue
                if delivered <= last_seq or in_flight:
                    break  # the rest went (expired, deleted) since the start, or was lost
                # Delivered before the info's reply, so already queued: one more fetch.
                in_flight = True
                continue
            in_flight, progress_at = False, anyio.current_time()
            out.extend(msgs)
            if msgs:
                last = msgs[-1].metadata
                last_seq = last.sequence.stream
                if last.num_pending == 0:
                    break  # nothing more stored under this filter
    finally:
        # The ephemeral consumer also expires on its own (inactive_threshold).
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out
