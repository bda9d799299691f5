"""Reading back what a stream holds for one subject filter, start to end.

Used by services that rebuild state from the bus (the tracer rebuilding a run's tool
calls, the scheduler's run ledger): an ephemeral consumer delivers everything stored,
in order, and reading stops when nothing is pending.
"""

from __future__ import annotations

import contextlib

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy


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
        while True:
            try:
                msgs = await sub.fetch(batch, timeout=fetch_timeout_s)
            except (nats.errors.TimeoutError, TimeoutError):
                break  # nothing (more) stored under this filter
            out.extend(msgs)
            last = msgs[-1].metadata if msgs else None
            if last is None or last.num_pending == 0:
                break
    finally:
        # The ephemeral consumer also expires on its own (inactive_threshold).
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out
