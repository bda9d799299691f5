"""Path B end to end: a full LLM run through the runner, its events, transcript and trace."""

from __future__ import annotations

import pytest

from contracts import subjects as s
from contracts.llm import TextEvent, UsageEvent
from contracts.runs import RunRef, RunStarted, RunView, StartRun, Transcript
from contracts.tasks import TaskSpec
from contracts.tools import CloseSession, SessionClosed
from contracts.traces import TraceCaptured, TraceRef, TraceReply
from services.dev.demo.site import stories
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, wait_finished, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]


async def test_news_top3_full_run_completes_with_trace_and_transcript(rig: Rig) -> None:
    bus = rig.stack.bus
    spec = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 3 headlines")
    started = await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="news"), RunStarted)
    done = await wait_finished(bus, started.run_id)

    headlines = [st.title for st in stories(0)[:3]]
    assert done.status == "completed", done.error
    assert done.source == "full_llm" and done.executor_version is None and not done.fell_back
    assert done.result == "Top 3 headlines:\n" + "\n".join(
        f"{i}. {h}" for i, h in enumerate(headlines, 1)
    )
    sonnet = done.tokens["claude-sonnet-5-5"]
    assert sonnet.input_tokens > 0 and sonnet.output_tokens > 0 and sonnet.calls >= 3
    assert done.cost_usd == pytest.approx(sonnet.cost_usd) and done.cost_usd > 0
    assert done.cost_saved_usd == 0  # a full run saves nothing
    # The run's cost is the sum of what the llm service billed, call by call.
    usage = [
        decode(m.data, UsageEvent)
        for m in await read_all(bus.js, s.STREAM_ACTIVITY, s.llm_event(started.run_id, "usage"))
    ]
    assert len(usage) == sonnet.calls
    assert done.cost_usd == pytest.approx(sum(u.cost_usd for u in usage))
    # Every text block the model wrote went out as a text event, the answer included.
    texts = [
        decode(m.data, TextEvent).text
        for m in await read_all(bus.js, s.STREAM_ACTIVITY, s.llm_event(started.run_id, "text"))
    ]
    assert texts and texts[-1] == done.result
    # The run's browser context was closed when it ended: nothing is left to close.
    closed = await bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id=started.run_id), SessionClosed
    )
    assert closed.closed is False
    assert [e.event for e in await run_events(bus, started.run_id)] == [
        "requested", "started", "completed",
    ]  # fmt: skip

    view = await bus.request(s.RUNS_GET, RunRef(run_id=started.run_id), RunView)
    assert view.status == "completed" and view.result == done.result

    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=started.run_id), Transcript)
    roles = [e.message.role for e in transcript.entries if e.message]
    assert roles[0] == "user" and "assistant" in roles

    captured = await wait_for(
        bus, s.STREAM_TRACES, s.trace_captured("news", started.run_id), TraceCaptured
    )
    trace = captured.trace
    assert [st.tool for st in trace.steps] == ["browser_navigate", "browser_extract"]
    assert trace.steps[1].output[:3] == headlines
    assert trace.steps[0].model_text.startswith("Let me open")
    assert trace.steps[0].thinking_blocks == 1
    assert trace.answer == done.result
    got = await bus.request(s.TRACES_GET, TraceRef(run_id=started.run_id), TraceReply)
    assert got.trace == trace
