"""Tool calls: the catalogue, one execution, session lifecycle, and tool events."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from contracts.base import Command, Event, NonEmptyStr, Reply, SubjectToken
from contracts.errors import ErrorInfo
from contracts.llm import ToolDefinition


class ListTools(Command, kw_only=True):
    """rote.api.tools.list; `names` narrows the catalogue (e.g. to a task's allowed tools)."""

    names: list[str] | None = None


class ToolList(Reply, kw_only=True):
    tools: list[ToolDefinition]


class ExecTool(Command, kw_only=True):
    """rote.api.tools.exec. A tool absent from `allowed_tools` is refused before it runs."""

    run_id: SubjectToken
    task_id: SubjectToken | None = None
    allowed_tools: list[str]
    tool: NonEmptyStr
    input: dict[str, Any] = {}
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 30.0
    step: int | None = None
    source: Literal["full_llm", "executor", "condition"] = "full_llm"


class ToolMetadata(msgspec.Struct, kw_only=True):
    """Facts about a call the compiler turns into replay expectations."""

    url: str | None = None
    http_status: int | None = None
    title: str | None = None
    item_count: int | None = None
    exit_code: int | None = None
    blob: str | None = None  # "sha256:<hex>" of a stored artefact (screenshot, large output)


class ToolResult(Reply, kw_only=True):
    """The outcome of one call. `ok=false` with `error` is a tool failure the model
    should see (bad selector, timeout); refusals are error replies instead."""

    ok: bool
    output: Any = None
    truncated: bool = False
    duration_ms: int
    metadata: ToolMetadata = msgspec.field(default_factory=ToolMetadata)
    error: ErrorInfo | None = None


class CloseSession(Command, kw_only=True):
    run_id: SubjectToken


class SessionClosed(Reply, kw_only=True):
    run_id: str
    closed: bool


class ToolEvent(Event, kw_only=True):
    """rote.evt.tool.<run_id>.<started|finished>."""

    run_id: str
    task_id: str | None = None
    event: Literal["started", "finished"]
    step: int | None = None
    tool: str
    input: dict[str, Any]
    at: datetime
    source: Literal["full_llm", "executor", "condition"] = "full_llm"
    ok: bool | None = None
    output: Any = None
    truncated: bool = False
    error: ErrorInfo | None = None
    duration_ms: int | None = None
    metadata: ToolMetadata | None = None
