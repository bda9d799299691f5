"""A tool output too large to travel inside a trace is stored once as a blob and
referenced; the compiler reads it back and compiles from the full data."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from contracts import subjects as s
from contracts.executors import ToolStep
from services.kernel import blobs
from services.kernel.bus import Bus
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.tracer.service import INLINE_OUTPUT_BYTES, Tracer
from tests.integration.test_compiler_service import (
    compiler,
    executor_events,
    publish_trace,
    trace,
    until,
)

pytestmark = pytest.mark.anyio


async def test_large_output_is_stored_once_and_the_compiler_reads_it_back(
    settings: Settings, bus: Bus
) -> None:
    await ensure_streams(bus.js)
    t = trace("news_clicktop", "bignews", "run-big")
    # A front page with thousands of headlines: the extract output is far over the bound.
    headlines = t.steps[1].output + [f"Filler headline number {i}" for i in range(3000)]
    t.steps[1].output = headlines
    assert len(msgspec.json.encode(headlines)) > INLINE_OUTPUT_BYTES

    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings, bus=bus, task_group=tg, services=("tracer",),
            nats_url=bus.url, embedded_nats=False,
        )  # fmt: skip
        tracer = Tracer(ctx)
        t = await tracer.offload_large_outputs(t)
        tg.cancel_scope.cancel()

    big = t.steps[1]
    assert big.output is None and big.output_ref == blobs.reference(msgspec.json.encode(headlines))
    assert msgspec.json.decode(await blobs.get(bus.js, big.output_ref)) == headlines
    # Small outputs stay inline.
    assert t.steps[0].output is not None and t.steps[0].output_ref is None
    # Stored once: the same output again is the same object, not a second copy.
    store = await bus.js.object_store(s.BUCKET_BLOBS)
    before = len(await store.list())
    assert await blobs.put(bus.js, msgspec.json.encode(headlines)) == big.output_ref
    assert len(await store.list()) == before

    async with compiler(settings, bus):
        await publish_trace(bus, t)
        compiled = (await until(lambda: executor_events(bus, "bignews", "compiled")))[0]
    assert compiled.executor is not None
    clicks = [
        step
        for step in compiled.executor.steps
        if isinstance(step, ToolStep) and step.tool == "browser_click"
    ]
    # The click's text came from the stored extract: only visible by reading the blob.
    assert len(clicks) == 1 and "{{step_1" in msgspec.json.encode(clicks[0].input).decode()
