"""Waiting for what the stack publishes, the way a user watching the NATS CLI would."""

from __future__ import annotations

from typing import TypeVar

import anyio

from contracts import subjects as s
from contracts.runs import RunEvent
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.replay_read import read_all

T = TypeVar("T")


async def stored(bus: Bus, stream: str, subject: str, type_: type[T]) -> list[T]:
    """Every message on `subject` the stream holds now (read to its end), decoded."""
    return [decode(m.data, type_) for m in await read_all(bus.js, stream, subject)]


async def run_events(bus: Bus, run_id: str) -> list[RunEvent]:
    return await stored(bus, s.STREAM_RUNS, s.run_events_of(run_id=run_id), RunEvent)


async def wait_finished(bus: Bus, run_id: str, timeout: float = 60.0) -> RunEvent:
    with anyio.fail_after(timeout):
        while True:
            for event in await run_events(bus, run_id):
                if event.event in ("completed", "failed"):
                    return event
            await anyio.sleep(0.2)


async def wait_for(bus: Bus, stream: str, subject: str, type_: type[T], timeout: float = 30.0) -> T:
    with anyio.fail_after(timeout):
        while True:
            msgs = await read_all(bus.js, stream, subject)
            if msgs:
                return decode(msgs[-1].data, type_)
            await anyio.sleep(0.2)


async def work_queue_settled(bus: Bus, timeout: float = 15.0) -> None:
    """Every run request on the work queue delivered and acked (or terminated)."""
    with anyio.fail_after(timeout):
        while True:
            info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
            if info.num_pending == 0 and info.num_ack_pending == 0:
                return
            await anyio.sleep(0.05)


# What the demo does, run by run (services/dev/demo/scenario.py): a full run, two
# replays, a redesign healed in place (run 4 makes v2), its replay, a redesign no heal
# can bridge (run 6 falls back and compiles v3), its replay.
DEMO_SOURCES = [
    "full_llm", "executor", "executor", "executor", "executor", "full_llm", "executor",
]  # fmt: skip
DEMO_VERSIONS = [None, 1, 1, 1, 2, None, 3]


def measured(metric: dict[str, object]) -> bool:
    """A bench metric holds a number, or null for an untargeted one that had nothing to
    measure (no fallback in a quick run where every layout change heals)."""
    value = metric["value"]
    return isinstance(value, int | float) or (value is None and metric["target"] is None)
