"""Trace building: the last attempt's calls, in order, with the model's evidence."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from contracts.errors import ErrorInfo
from contracts.llm import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from contracts.runs import ReplayOutcome, RunEvent, Transcript, TranscriptEntry
from contracts.tasks import TaskSpec
from contracts.tools import ToolEvent, ToolMetadata
from contracts.traces import PREVIEW_CHARS
from services.tracer.build import (
    Evidence,
    MissingCalls,
    build_trace,
    final_attempt_calls,
    missing_calls,
    model_evidence,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def finished(
    step: int,
    tool: str,
    output: object,
    *,
    ok: bool = True,
    source: str = "full_llm",
    attempt: int = 1,
    tool_use_id: str | None = None,
) -> ToolEvent:
    return ToolEvent(
        run_id="r", event="finished", step=step, tool=tool, input={"n": step}, at=AT,
        source=source, ok=ok, output=output, duration_ms=5 + step, attempt=attempt,
        tool_use_id=tool_use_id,
        error=None if ok else ErrorInfo(code="not_found", message="no such element"),
        metadata=ToolMetadata(item_count=len(output) if isinstance(output, list) else None),
    )  # fmt: skip


def test_redelivered_run_keeps_only_the_completing_attempts_calls() -> None:
    # The dead attempt got further (3 steps) than the live one needed (2): its extra
    # step must not leak into the trace.
    dead_attempt = [
        finished(0, "browser_navigate", {"url": "old"}),
        finished(1, "browser_extract", ["x"]),
        finished(2, "browser_click", {"clicked": "old"}),
    ]
    live_attempt = [
        finished(0, "browser_navigate", {"url": "new"}, attempt=2),
        finished(1, "browser_extract", ["a", "b"], attempt=2),
    ]
    replayed = [finished(0, "browser_navigate", {"url": "replay"}, source="executor", attempt=2)]
    started = [
        ToolEvent(run_id="r", event="started", step=2, tool="t", input={}, at=AT, attempt=2),
    ]
    calls = final_attempt_calls(dead_attempt + replayed + live_attempt + started, 2)
    assert [c.output for c in calls] == [{"url": "new"}, ["a", "b"]]
    assert [c.output for c in final_attempt_calls(dead_attempt, 1)][-1] == {"clicked": "old"}


def _assistant(*blocks: object) -> TranscriptEntry:
    return TranscriptEntry(
        at=AT, kind="message", message=Message(role="assistant", content=list(blocks))
    )  # type: ignore[arg-type]


def test_model_evidence_counts_thinking_and_text_before_each_call() -> None:
    result = ToolResultBlock(tool_use_id="u1", content="ok")
    transcript = Transcript(
        run_id="r",
        task_id="t",
        entries=[
            TranscriptEntry(at=AT, kind="message", message=Message(role="user", content="go")),
            _assistant(
                ThinkingBlock(thinking="", signature="s1"),
                TextBlock(text="Let me open the page."),
                ToolUseBlock(id="u1", name="browser_navigate", input={}),
            ),
            TranscriptEntry(at=AT, kind="message", message=Message(role="user", content=[result])),
            _assistant(
                ThinkingBlock(thinking="", signature="s2"),
                RedactedThinkingBlock(data="opaque"),
                ToolUseBlock(id="u2", name="browser_extract", input={}),
                ToolUseBlock(id="u3", name="browser_read_page", input={}),
            ),
            _assistant(TextBlock(text="final answer")),
        ],
    )  # fmt: skip
    assert model_evidence(transcript) == {
        "u1": Evidence("Let me open the page.", 1),
        "u2": Evidence("", 2),  # redacted thinking counts as thinking
        "u3": Evidence("", 0),
    }
    assert model_evidence(None) == {}


def test_evidence_follows_tool_use_ids_when_the_transcript_lost_its_middle() -> None:
    # A transcript over its size bound drops middle entries; the text said before the
    # last call must still land on the last call, not on whichever call is second.
    transcript = Transcript(
        run_id="r",
        task_id="t",
        entries=[
            _assistant(
                TextBlock(text="Opening the page."),
                ToolUseBlock(id="u1", name="browser_navigate", input={}),
            ),
            # ... entries for u2 and u3 were dropped here ...
            _assistant(
                TextBlock(text="The cheapest is B, so I pick it."),
                ToolUseBlock(id="u4", name="browser_click", input={}),
            ),
        ],
    )
    run = RunEvent(task_id="t", run_id="r", event="completed", at=AT, status="completed")
    events = [
        finished(i, tool, None, tool_use_id=f"u{i + 1}")
        for i, tool in enumerate(
            ["browser_navigate", "browser_extract", "browser_read_page", "browser_click"]
        )
    ]
    trace = build_trace(
        run=run, spec=TaskSpec(name="n", prompt="p"), tool_events=events,
        transcript=transcript, captured_at=AT,
    )  # fmt: skip
    assert [step.model_text for step in trace.steps] == [
        "Opening the page.",
        "",
        "",
        "The cheapest is B, so I pick it.",
    ]


def test_build_trace_carries_outputs_previews_and_run_facts() -> None:
    spec = TaskSpec(name="news", prompt="report the top 3 headlines")
    run = RunEvent(
        task_id="t", run_id="r", event="completed", at=AT, status="completed",
        source="full_llm", result="Top 3 headlines:\n1. a", cost_usd=0.03, duration_ms=1200,
    )  # fmt: skip
    events = [
        finished(0, "browser_navigate", {"url": "http://x", "status": 200, "title": "News"}),
        finished(1, "browser_extract", ["a" * 300]),
        finished(2, "browser_click", None, ok=False),
    ]
    trace = build_trace(run=run, spec=spec, tool_events=events, transcript=None, captured_at=AT)
    assert [s.tool for s in trace.steps] == ["browser_navigate", "browser_extract", "browser_click"]
    assert trace.steps[1].output == ["a" * 300]
    assert len(trace.steps[1].preview) == 200
    assert trace.steps[2].status == "error" and trace.steps[2].error == "not_found: no such element"
    assert trace.answer == "Top 3 headlines:\n1. a" and trace.cost_usd == 0.03
    assert trace.task == spec


@pytest.mark.parametrize(
    ("attempt", "cost_usd", "loop_cost_usd", "replay_cost_usd", "full_loop"),
    [
        # A fallback: the replay that broke ($0.002) is not the full loop's cost.
        (1, 0.012, None, 0.002, 0.010),
        # Attempt 1 died after $1.00; attempt 2 replayed ($0.05, broke), then its loop
        # cost $1.00: the dead attempt is not the full loop's cost either.
        (2, 2.05, 1.0, 0.05, 1.0),
    ],
)
def test_a_traces_cost_is_one_full_loop(
    attempt: int,
    cost_usd: float,
    loop_cost_usd: float | None,
    replay_cost_usd: float,
    full_loop: float,
) -> None:
    # What an executor compiled from this run saves is measured against this cost.
    run = RunEvent(
        task_id="t", run_id="r", event="completed", at=AT, status="completed", attempt=attempt,
        source="full_llm", fell_back=True, result="done", cost_usd=cost_usd,
        loop_cost_usd=loop_cost_usd,
        replay=ReplayOutcome(
            version=1, ok=False, step=2, reason="no items", cost_usd=replay_cost_usd
        ),
    )  # fmt: skip
    spec = TaskSpec(name="news", prompt="report the top 3 headlines")
    trace = build_trace(run=run, spec=spec, tool_events=[], transcript=None, captured_at=AT)
    assert trace.cost_usd == pytest.approx(full_loop)


def test_an_input_cut_in_its_tool_event_is_marked_in_the_trace() -> None:
    # Replaying a cut input would write a cut file: the compiler must know.
    run = RunEvent(task_id="t", run_id="r", event="completed", at=AT, status="completed")
    cut = msgspec.structs.replace(
        finished(1, "file_write", {"bytes": 110_000}),
        input={"path": "report.txt", "content": "line 0\n[... truncated]"},
        input_truncated=True,
    )
    events = [finished(0, "file_read", "data"), cut]
    trace = build_trace(
        run=run, spec=TaskSpec(name="n", prompt="p"), tool_events=events,
        transcript=None, captured_at=AT,
    )  # fmt: skip
    assert [s.input_truncated for s in trace.steps] == [False, True]


def test_a_failed_steps_preview_is_bounded_like_any_other() -> None:
    # Tool errors can quote whole pages or command output.
    run = RunEvent(task_id="t", run_id="r", event="completed", at=AT, status="completed")
    failed = msgspec.structs.replace(
        finished(0, "shell_exec", None, ok=False),
        error=ErrorInfo(code="command_failed", message="x" * 5000),
    )
    trace = build_trace(
        run=run, spec=TaskSpec(name="n", prompt="p"), tool_events=[failed],
        transcript=None, captured_at=AT,
    )  # fmt: skip
    step = trace.steps[0]
    assert step.preview == "x" * PREVIEW_CHARS
    assert step.error == "command_failed: " + "x" * 5000  # the full error stays


def _results(*blocks: ToolResultBlock) -> TranscriptEntry:
    return TranscriptEntry(
        at=AT, kind="message", message=Message(role="user", content=list(blocks))
    )


def test_missing_calls_tell_failed_calls_from_calls_that_had_an_effect() -> None:
    transcript = Transcript(
        run_id="r",
        task_id="t",
        entries=[
            _assistant(
                ToolUseBlock(id="u1", name="browser_navigate", input={}),
                ToolUseBlock(id="u2", name="browser_click", input={}),
                ToolUseBlock(id="u3", name="browser_extract", input={}),
                ToolUseBlock(id="u4", name="file_write", input={}),
            ),
            _results(
                ToolResultBlock(tool_use_id="u1", content="{}"),
                # Never reached a tools service: the model was told so.
                ToolResultBlock(tool_use_id="u2", content="timeout: no reply", is_error=True),
                ToolResultBlock(tool_use_id="u3", content='["a"]'),
                # u4's result was cut from a bounded transcript: it may have succeeded.
            ),
        ],
    )
    recorded = [finished(0, "browser_navigate", {}, tool_use_id="u1")]
    missing = missing_calls(transcript, recorded)
    assert missing == MissingCalls(failed=["u2"], effective=["u3", "u4"])
    assert missing_calls(None, recorded) == MissingCalls(failed=[], effective=[])
