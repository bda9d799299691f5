"""Builds a run's trace from its tool events and its transcript. Pure: no I/O.

Tool events give the facts of each call (input, full bounded output, duration,
status, metadata). The transcript gives what the model produced before each call —
text, and how many thinking blocks (current models put their between-call text inside
thinking blocks, often empty). That is recorded as evidence only: whether a call needs
the model on replay is the compiler's decision, made from data flow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contracts.llm import (
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from contracts.runs import RunEvent, Transcript
from contracts.tasks import TaskSpec
from contracts.tools import ToolEvent, ToolMetadata
from contracts.traces import PREVIEW_CHARS, Trace, TraceStep
from services.executor.cost import full_run_cost


def preview(output: Any) -> str:
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return text[:PREVIEW_CHARS]


def final_attempt_calls(events: Iterable[ToolEvent], attempt: int) -> list[ToolEvent]:
    """The finished full-LLM calls of the run's completing attempt, by step.

    A run redelivered after a crash runs again from step 0, after the dead attempt's
    events in the stream; the dead attempt may have gone further than the live one, so
    only the completing attempt's calls count. Replay calls (source `executor`) of a run
    that fell back are not part of its trace.
    """
    by_step: dict[int, ToolEvent] = {}
    for event in events:
        if (
            event.event != "finished"
            or event.source != "full_llm"
            or event.step is None
            or event.attempt != attempt
        ):
            continue
        by_step[event.step] = event
    return [by_step[i] for i in sorted(by_step)]


@dataclass(frozen=True)
class Evidence:
    """What the model produced before one tool call."""

    text: str
    thinking_blocks: int


NO_EVIDENCE = Evidence("", 0)


def model_evidence(transcript: Transcript | None) -> dict[str, Evidence]:
    """Evidence per tool_use id, in call order. Keyed by id, not position: a transcript
    bounded by dropping middle entries must not shift one call's text onto another."""
    if transcript is None:
        return {}
    evidence: dict[str, Evidence] = {}
    texts: list[str] = []
    thinking = 0
    for entry in transcript.entries:
        message = entry.message
        if entry.kind != "message" or message is None or message.role != "assistant":
            continue
        if isinstance(message.content, str):
            texts.append(message.content)
            continue
        for block in message.content:
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                thinking += 1
                if block.thinking.strip():
                    texts.append(block.thinking)
            elif isinstance(block, RedactedThinkingBlock):
                thinking += 1
            elif isinstance(block, ToolUseBlock):
                text = "\n".join(t.strip() for t in texts if t.strip())
                evidence[block.id] = Evidence(text, thinking)
                texts, thinking = [], 0
    return evidence


def call_results(transcript: Transcript | None) -> dict[str, bool]:
    """Whether each call's tool_result, as the model saw it, was an error; by tool_use id."""
    if transcript is None:
        return {}
    results: dict[str, bool] = {}
    for entry in transcript.entries:
        message = entry.message
        if entry.kind != "message" or message is None or isinstance(message.content, str):
            continue
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                results[block.tool_use_id] = block.is_error
    return results


@dataclass(frozen=True)
class MissingCalls:
    """Calls the transcript shows that have no finished event, by tool_use id."""

    # The model was told the call failed: either it never reached a tools service
    # (unavailable, timeout) or the tool failed. The compiler drops failed steps anyway,
    # so a trace without them compiles the same.
    failed: list[str]
    # The call succeeded (or its result was cut from a bounded transcript, so it may
    # have): it had an effect the run relied on, and a trace without it would lie.
    effective: list[str]


def missing_calls(transcript: Transcript | None, calls: Iterable[ToolEvent]) -> MissingCalls:
    recorded = {call.tool_use_id for call in calls}
    results = call_results(transcript)
    failed: list[str] = []
    effective: list[str] = []
    for use_id in model_evidence(transcript):
        if use_id in recorded:
            continue
        (failed if results.get(use_id) is True else effective).append(use_id)
    return MissingCalls(failed=failed, effective=effective)


def full_loop_cost(run: RunEvent) -> float:
    """What the run's full LLM loop cost, as the compiler counts a full run (a
    fallback's broken replay and a redelivered run's dead attempts left out): what an
    executor compiled from it replaces. The tracer only builds completed full runs."""
    return full_run_cost(run) or 0.0


def build_trace(
    *,
    run: RunEvent,
    spec: TaskSpec,
    tool_events: Iterable[ToolEvent],
    transcript: Transcript | None,
    captured_at: datetime,
) -> Trace:
    calls = final_attempt_calls(tool_events, run.attempt)
    evidence = model_evidence(transcript)
    steps = []
    for position, call in enumerate(calls):
        said = evidence.get(call.tool_use_id or "", NO_EVIDENCE)
        steps.append(
            TraceStep(
                index=position,
                tool=call.tool,
                input=call.input,
                input_truncated=call.input_truncated,
                output=call.output,
                preview=preview(call.output)
                if call.ok
                else (call.error.message if call.error else "")[:PREVIEW_CHARS],
                truncated=call.truncated,
                status="ok" if call.ok else "error",
                error=f"{call.error.code}: {call.error.message}" if call.error else None,
                duration_ms=call.duration_ms or 0,
                metadata=call.metadata or ToolMetadata(),
                model_text=said.text,
                thinking_blocks=said.thinking_blocks,
            )
        )
    return Trace(
        run_id=run.run_id,
        task_id=run.task_id,
        task=spec,
        steps=steps,
        answer=run.result or "",
        model=spec.model,
        tokens=run.tokens,
        cost_usd=full_loop_cost(run),
        duration_ms=run.duration_ms or 0,
        captured_at=captured_at,
    )
