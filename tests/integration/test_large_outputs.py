"""A tool output too large to travel inside a trace is stored once as a blob and
referenced; the compiler reads it back and compiles from the full data."""

from __future__ import annotations

from typing import Any

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
from services.tracer.service import INLINE_OUTPUT_BYTES, PAYLOAD_HEADROOM_BYTES, Tracer
from tests.integration.test_compiler_service import (
    compiler,
    executor_events,
    publish_trace,
    trace,
    until,
)
from tests.integration.test_tracer_capture import (
    Call,
    captured,
    news_calls,
    publish_run,
    rejected,
    tracer,
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


async def test_a_trace_of_many_outputs_under_the_bound_still_fits_one_message(
    settings: Settings, bus: Bus
) -> None:
    # Each output is under INLINE_OUTPUT_BYTES, together they are over NATS' 1 MB: a
    # page read many times over, then the headlines the click comes from.
    filler = "Weather, sport and markets in brief. " * 820
    headlines = ["Bridge approved", "Team wins"] + [
        f"Filler headline number {i}" for i in range(1100)
    ]
    calls = news_calls()
    calls[1].output = headlines
    calls[1:1] = [Call("browser_read_page", {}, filler) for _ in range(35)]
    extract = 36
    sizes = [len(msgspec.json.encode(c.output)) for c in calls]
    assert max(sizes) == sizes[extract] < INLINE_OUTPUT_BYTES
    assert sum(sizes) > bus.nc.max_payload

    async with tracer(settings, bus), compiler(settings, bus):
        await publish_run(bus, "r-many", calls, task_id="many")
        got, size = await until(lambda: captured(bus, "r-many"))
        compiled = (await until(lambda: executor_events(bus, "many", "compiled")))[0]

    assert size <= bus.nc.max_payload - PAYLOAD_HEADROOM_BYTES
    assert [step.tool for step in got.steps] == [c.tool for c in calls]
    # The largest went first, though under the bound; its preview stays in the trace.
    stored = got.steps[extract]
    assert stored.output is None and stored.output_ref is not None
    assert stored.preview.startswith('["Bridge approved"')
    assert msgspec.json.decode(await blobs.get(bus.js, stored.output_ref)) == headlines
    assert got.steps[0].output == calls[0].output  # small outputs stay inline
    # The click's text came from the stored extract: only visible by reading the blob.
    assert compiled.executor is not None
    tools = [step for step in compiled.executor.steps if isinstance(step, ToolStep)]
    clicks = [step for step in tools if step.tool == "browser_click"]
    [extracted] = [step.index for step in tools if step.trace_step == extract]
    assert len(clicks) == 1
    assert f"{{{{step_{extracted}" in msgspec.json.encode(clicks[0].input).decode()


async def test_a_trace_that_cannot_fit_is_rejected_once_with_a_reason(
    settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    # Eighteen long files written: the inputs alone are over 1 MB, no output to store.
    calls = news_calls() + [
        Call("file_write", {"path": f"notes/{i}.txt", "content": "n" * 60_000}, {"bytes": 60_000})
        for i in range(18)
    ]
    async with tracer(settings, bus):
        await publish_run(bus, "r-huge", calls, task_id="huge")
        reason = await rejected(written_logs)
        await anyio.sleep(1.5)  # time for a redelivery, if there were one
        assert await captured(bus, "r-huge") is None
        info = await bus.js.consumer_info(s.STREAM_RUNS, s.CONSUMER_TRACER)
    assert "even with its tool outputs stored apart" in reason
    assert f"over the {bus.nc.max_payload - PAYLOAD_HEADROOM_BYTES}" in reason
    # Given up at once: delivered once, never retried, nothing left pending.
    assert (info.num_redelivered, info.num_ack_pending, info.num_pending) == (0, 0, 0)
    assert not [e for e in written_logs if e.get("event") == "handler_failed"]


async def test_a_trace_is_fitted_to_the_traces_streams_largest_message(
    settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    # An operator raised NATS' max_payload past ROTE_TRACES' max_msg_size (simulated
    # the other way round, as the relay's test does): the stream would refuse a trace
    # fitted only to the connection, on every delivery, and the run would get none.
    calls = news_calls()
    filler = "Weather, sport and markets in brief. " * 500
    calls[1:1] = [Call("browser_read_page", {}, filler) for _ in range(20)]
    max_msg_size = 256 * 1024
    assert sum(len(msgspec.json.encode(c.output)) for c in calls) > max_msg_size
    async with tracer(settings, bus):
        info = await bus.js.stream_info(s.STREAM_TRACES)
        info.config.max_msg_size = max_msg_size
        await bus.js.update_stream(info.config)
        await publish_run(bus, "r-stream", calls, task_id="stream")
        got, size = await until(lambda: captured(bus, "r-stream"))
    assert size <= max_msg_size - PAYLOAD_HEADROOM_BYTES
    assert [step.tool for step in got.steps] == [c.tool for c in calls]
    stored = [step for step in got.steps if step.output_ref is not None]
    assert stored and all(step.output is None for step in stored)
    assert msgspec.json.decode(await blobs.get(bus.js, stored[0].output_ref)) == filler
    assert not [e for e in written_logs if e.get("event") == "handler_failed"]
