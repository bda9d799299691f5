"""The tracer over real NATS, from a run's events to its captured trace: a tool event
that cannot be decoded is skipped, a call whose event never came is left out only when
the model was told it failed, and a run whose successful call has no event is not
captured at all (the trace would replay a different run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from nats.js.errors import NotFoundError

from contracts import subjects as s
from contracts.base import utc_now
from contracts.errors import ErrorInfo
from contracts.llm import Message, TextBlock, ToolResultBlock, ToolUseBlock
from contracts.runs import RunEvent, Transcript, TranscriptEntry
from contracts.tasks import TaskSpec
from contracts.tools import ToolEvent, ToolMetadata
from contracts.traces import Trace, TraceCaptured
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode
from services.kernel.run_store import RunStore
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.tracer import service as tracer_service
from tests.integration.test_compiler_service import until

pytestmark = pytest.mark.anyio

SITE = "http://127.0.0.1:8765"
SPEC = TaskSpec(
    name="click top",
    prompt=f"On {SITE}/news, click the first headline and report the story's first paragraph.",
)


@dataclass
class Call:
    tool: str
    input: dict[str, Any]
    output: Any = None
    error: str | None = None  # the tool failed with this message
    input_truncated: bool = False  # its events carry a cut copy of `input`

    @property
    def ok(self) -> bool:
        return self.error is None


def news_calls() -> list[Call]:
    return [
        Call("browser_navigate", {"url": f"{SITE}/news"}, {"url": f"{SITE}/news", "status": 200}),
        Call("browser_extract", {"selector": "h2 a"}, ["Bridge approved", "Team wins"]),
        Call("browser_click", {"text": "Bridge approved"}, {"url": f"{SITE}/story/1"}),
        Call("browser_extract", {"selector": "article p"}, ["The council voted 7-2."]),
    ]


def transcript_of(run_id: str, calls: list[Call], unreached: dict[int, str]) -> Transcript:
    """What the runner records: one model turn per call, then its tool_result. A call in
    `unreached` never got to a tools service: the model was told this error."""
    at = utc_now()
    entries = [TranscriptEntry(at=at, kind="message", message=Message(role="user", content="go"))]
    for i, call in enumerate(calls):
        use = ToolUseBlock(id=f"u{i}", name=call.tool, input=call.input)
        said = TextBlock(text=f"Calling {call.tool}.")
        entries.append(
            TranscriptEntry(
                at=at, kind="message", message=Message(role="assistant", content=[said, use])
            )
        )
        error = unreached.get(i, call.error)
        result = ToolResultBlock(
            tool_use_id=use.id,
            content=error if error is not None else encode(call.output).decode(),
            is_error=error is not None,
        )
        entries.append(
            TranscriptEntry(at=at, kind="message", message=Message(role="user", content=[result]))
        )
    answer = Message(role="assistant", content=[TextBlock(text="The council voted 7-2.")])
    entries.append(TranscriptEntry(at=at, kind="message", message=answer))
    return Transcript(run_id=run_id, task_id="t1", entries=entries)


async def publish_run(
    bus: Bus,
    run_id: str,
    calls: list[Call],
    *,
    transcript: Transcript | None = None,
    without_events: frozenset[int] = frozenset(),
    extra_events: tuple[bytes, ...] = (),
    task_id: str = "t1",
    source: str = "full_llm",
    ending: str = "completed",
    **completed: Any,
) -> None:
    """A run as the runner and the tools service leave it on the bus: by default a
    completed full-LLM run; `completed`: more fields of its last event."""

    def run_event(name: str, **fields: Any) -> RunEvent:
        return RunEvent(task_id=task_id, run_id=run_id, event=name, at=utc_now(), **fields)  # type: ignore[arg-type]

    await bus.publish_event(
        s.run_event(task_id, run_id, "started"),
        run_event("started", status="running", source=source, spec=SPEC),
        msg_id=f"{run_id}:started",
    )
    for i, call in enumerate(calls):
        if i in without_events:
            continue
        event = ToolEvent(
            run_id=run_id, task_id=task_id, call_id=f"a1-b{i}", event="finished", step=i,
            tool_use_id=f"u{i}", tool=call.tool, input=call.input,
            input_truncated=call.input_truncated, at=utc_now(),
            ok=call.ok, output=call.output, duration_ms=5, metadata=ToolMetadata(),
            error=None if call.ok else ErrorInfo(code="tool_error", message=call.error or ""),
        )  # fmt: skip
        await bus.publish_event(
            s.tool_event(run_id, "finished"), event, msg_id=f"{run_id}:a1-b{i}:finished"
        )
    for n, data in enumerate(extra_events):
        headers = {s.HEADER_MSG_ID: f"{run_id}:x{n}"}
        await bus.js.publish(s.tool_event(run_id, "finished"), data, headers=headers)
    if transcript is not None:
        await RunStore(bus).save_transcript(encode(transcript), run_id)
    await bus.publish_event(
        s.run_event(task_id, run_id, ending),  # type: ignore[arg-type]
        run_event(ending, status=ending, source=source, result="7-2", **completed),
        msg_id=f"{run_id}:{ending}",
    )


@asynccontextmanager
async def tracer(settings: Settings, bus: Bus) -> AsyncIterator[None]:
    await ensure_streams(bus.js)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings, bus=bus, task_group=tg, services=("tracer",),
            nats_url=bus.url, embedded_nats=False,
        )  # fmt: skip
        await tg.start(tracer_service.serve, ctx)
        yield
        tg.cancel_scope.cancel()


async def captured(bus: Bus, run_id: str) -> tuple[Trace, int] | None:
    """The run's captured trace and the size of its message, once published."""
    try:
        msg = await bus.js.get_last_msg(
            s.STREAM_TRACES, f"{s.PREFIX}.evt.trace.*.{run_id}.captured"
        )
    except NotFoundError:
        return None
    return decode(msg.data or b"", TraceCaptured).trace, len(msg.data or b"")


def rejections(logs: list[dict[str, Any]]) -> list[str]:
    return [
        str(e["reason"])
        for e in logs
        if e.get("event") == "message_rejected" and e.get("consumer") == s.CONSUMER_TRACER
    ]


async def rejected(logs: list[dict[str, Any]]) -> str:
    async def found() -> str | None:
        return (rejections(logs) or [None])[0]

    reason: str = await until(found)
    return reason


async def test_an_undecodable_tool_event_is_skipped_not_fatal(
    settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    calls = news_calls()
    async with tracer(settings, bus):
        await publish_run(
            bus,
            "r-garbled",
            calls,
            transcript=transcript_of("r-garbled", calls, {}),
            # A tools service of another version, or a hand-published test message.
            extra_events=(b'{"run_id": "r-garbled", "event": "finished"}', b"{not json"),
        )
        trace, _ = await until(lambda: captured(bus, "r-garbled"))
    assert [step.tool for step in trace.steps] == [c.tool for c in calls]
    assert [step.output for step in trace.steps] == [c.output for c in calls]
    skipped = [e for e in written_logs if e.get("event") == "tool_event_undecodable"]
    assert len(skipped) >= 2 and all(e["level"] == "warning" for e in skipped)
    assert not [e for e in written_logs if e.get("event") == "handler_failed"]


async def test_only_a_completed_full_llm_run_leaves_a_trace(settings: Settings, bus: Bus) -> None:
    # A replay compiles nothing new; a failed full run is no recipe to replay.
    calls = news_calls()
    async with tracer(settings, bus):
        for run_id, source, ending in [
            ("r-replayed", "executor", "completed"),
            ("r-failed", "full_llm", "failed"),
            ("r-full", "full_llm", "completed"),
        ]:
            transcript = transcript_of(run_id, calls, {})
            await publish_run(
                bus, run_id, calls, transcript=transcript, source=source, ending=ending
            )
        await until(lambda: captured(bus, "r-full"))
        await anyio.sleep(0.5)  # the two before it had their turn first
        assert await captured(bus, "r-replayed") is None
        assert await captured(bus, "r-failed") is None


async def test_a_successful_call_without_its_event_is_not_captured(
    settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    # The click's finished event was lost: the run clicked, the trace would not.
    calls = news_calls()
    async with tracer(settings, bus):
        await publish_run(
            bus,
            "r-lost",
            calls,
            transcript=transcript_of("r-lost", calls, {}),
            without_events=frozenset({2}),
        )
        reason = await rejected(written_logs)
        await anyio.sleep(0.5)
        assert await captured(bus, "r-lost") is None
    assert "no tool event for 1 successful call (u2)" in reason
    lost = [e for e in written_logs if e.get("event") == "trace_call_lost"]
    assert [e["missing"] for e in lost] == [["u2"]]


async def test_a_call_that_never_reached_a_tools_service_is_left_out(
    settings: Settings, bus: Bus
) -> None:
    # A first click timed out before any tools service took it (no event at all); the
    # model tried again and that click worked. Left out, the trace is still the run.
    calls = news_calls()
    calls.insert(2, Call("browser_click", {"text": "Bridge approved"}))
    transcript = transcript_of(
        "r-unreached", calls, {2: "timeout: no reply from rote.api.tools.exec within 30s"}
    )
    async with tracer(settings, bus):
        await publish_run(
            bus, "r-unreached", calls, transcript=transcript, without_events=frozenset({2})
        )
        trace, _ = await until(lambda: captured(bus, "r-unreached"))
    assert [(step.index, step.tool) for step in trace.steps] == [
        (0, "browser_navigate"),
        (1, "browser_extract"),
        (2, "browser_click"),
        (3, "browser_extract"),
    ]
    assert trace.steps[2].model_text == "Calling browser_click."
    assert all(step.status == "ok" for step in trace.steps)


async def test_a_trace_marks_cut_inputs_and_costs_one_full_loop(
    settings: Settings, bus: Bus
) -> None:
    # A long text typed, cut in its tool event; a run redelivered once, whose dead
    # attempt's spend is in cost_usd but no part of what a full run of the task costs.
    calls = news_calls()
    calls.insert(2, Call("browser_type", {"text": "x" * 100}, "typed", input_truncated=True))
    async with tracer(settings, bus):
        await publish_run(
            bus, "r-cut", calls, transcript=transcript_of("r-cut", calls, {}),
            cost_usd=0.05, loop_cost_usd=0.02,
        )  # fmt: skip
        trace, _ = await until(lambda: captured(bus, "r-cut"))
    assert [step.input_truncated for step in trace.steps] == [False, False, True, False, False]
    assert trace.cost_usd == pytest.approx(0.02)
