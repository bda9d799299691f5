"""Traces: the tool calls of one successful full LLM run, as the compiler sees them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from contracts.base import Command, Event, Reply, SubjectToken, UtcDatetime
from contracts.runs import ModelTokens
from contracts.tasks import TaskSpec
from contracts.tools import ToolMetadata

PREVIEW_CHARS = 200


class TraceStep(msgspec.Struct, kw_only=True):
    index: int
    tool: str
    input: dict[str, Any]
    # `input` was cut in the tool event (ToolEvent.input_truncated): not the call as made.
    input_truncated: bool = False
    output: Any = None
    # Large outputs are stored once in the blob store and referenced ("sha256:<hex>").
    output_ref: str | None = None
    preview: str = ""
    truncated: bool = False
    status: Literal["ok", "error"]
    error: str | None = None
    duration_ms: int = 0
    metadata: ToolMetadata = msgspec.field(default_factory=ToolMetadata)
    # Evidence only: what the model produced since the previous tool finished. Whether a
    # step needs the model on replay is decided from data flow, never from this.
    model_text: str = ""
    thinking_blocks: int = 0


class Trace(msgspec.Struct, kw_only=True):
    run_id: str
    task_id: str
    task: TaskSpec
    steps: list[TraceStep]
    answer: str
    model: str
    tokens: dict[str, ModelTokens] = {}
    cost_usd: float = 0.0
    duration_ms: int = 0
    captured_at: UtcDatetime


class TraceCaptured(Event, kw_only=True):
    """rote.evt.trace.<task_id>.<run_id>.captured."""

    trace: Trace


class TraceRef(Command, kw_only=True):
    run_id: SubjectToken


class TraceReply(Reply, kw_only=True):
    trace: Trace
