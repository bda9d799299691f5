"""Executors: compiled, replayable scripts, and their event-sourced health."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from contracts.base import Command, Event, PositiveInt, Reply, SubjectToken

# --- expectations checked on replay ----------------------------------------------------


class MinItems(msgspec.Struct, kw_only=True, tag="min_items", tag_field="kind"):
    count: int


class ContainsText(msgspec.Struct, kw_only=True, tag="contains_text", tag_field="kind"):
    text: str


class HttpStatus(msgspec.Struct, kw_only=True, tag="http_status", tag_field="kind"):
    status: int


Expectation = MinItems | ContainsText | HttpStatus

# --- steps -----------------------------------------------------------------------------
# String values in `input` may hold references to earlier results: "{{step_N}}" or
# "{{step_N.path[0].field}}"; a value that is exactly one reference keeps its JSON type.


class ToolStep(msgspec.Struct, kw_only=True, tag="tool", tag_field="type"):
    """A tool call replayed as recorded (deterministic) or with references filled in
    from earlier steps (templated)."""

    index: int
    tool: str
    input: dict[str, Any]
    templated: bool = False
    expect: list[Expectation] = []


class LlmStep(msgspec.Struct, kw_only=True, tag="llm", tag_field="type"):
    """A step whose input needs judgement over content that changes between runs. The
    small model is given `prompt` with `variables` filled in; with `tool` set it writes
    that tool's input (JSON) and the tool runs, otherwise its text is the step's result."""

    index: int
    prompt: str
    variables: list[str] = []
    tool: str | None = None
    example_input: dict[str, Any] | None = None
    expect: list[Expectation] = []


class ConditionStep(msgspec.Struct, kw_only=True, tag="condition", tag_field="type"):
    """A check that gates the rest of the replay (e.g. abort when an extract is empty)."""

    index: int
    ref: str
    check: Literal["not_empty", "contains", "equals"] = "not_empty"
    value: Any = None
    on_false: Literal["fail", "stop"] = "fail"
    message: str = ""


class ResultStep(msgspec.Struct, kw_only=True, tag="result", tag_field="type"):
    """Produces the run's answer in the same form as the original run's answer."""

    index: int
    mode: Literal["template", "llm"]
    template: str | None = None
    prompt: str | None = None
    variables: list[str] = []
    example: str = ""


ExecutorStep = ToolStep | LlmStep | ConditionStep | ResultStep


class ExecutorStats(msgspec.Struct, kw_only=True):
    total_steps: int
    deterministic_steps: int
    templated_steps: int
    llm_steps: int
    estimated_replay_cost_usd: float
    source_run_cost_usd: float


class Executor(msgspec.Struct, kw_only=True):
    task_id: str
    version: int
    source_run_id: str
    compiled_at: datetime
    small_model: str = "haiku"
    steps: list[ExecutorStep]
    stats: ExecutorStats


class Skip(msgspec.Struct, kw_only=True):
    """Why a trace was not compiled."""

    reason: str


# --- health (derived by replaying the aggregate's events) ------------------------------

ExecutorStatus = Literal["active", "superseded", "invalidated", "none"]


class ExecutorHealth(Reply, kw_only=True):
    task_id: str
    status: ExecutorStatus
    version: int | None = None
    pinned_version: int | None = None
    versions: int = 0
    success_count: int = 0
    failure_count: int = 0
    consecutive_failures: int = 0
    last_used_at: datetime | None = None
    total_cost_saved_usd: float = 0.0
    source_run_id: str | None = None
    total_steps: int = 0
    deterministic_steps: int = 0
    llm_steps: int = 0
    full_run_cost_usd: float = 0.0
    status_reason: str | None = None


class ActiveExecutor(Reply, kw_only=True):
    """rote.api.executors.active: the executor to replay, or null."""

    executor: Executor | None
    health: ExecutorHealth


ExecutorEventName = Literal[
    "compiled",
    "skipped",
    "replay_succeeded",
    "replay_failed",
    "superseded",
    "invalidated",
    "pinned",
    "unpinned",
]


class ExecutorEvent(Event, kw_only=True):
    """rote.evt.executor.<task_id>.<event>."""

    task_id: str
    event: ExecutorEventName
    at: datetime
    version: int | None = None
    run_id: str | None = None
    step: int | None = None
    reason: str | None = None
    by: str | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    cost_saved_usd: float | None = None
    executor: Executor | None = None


# --- commands and queries --------------------------------------------------------------


class ExecutorRef(Command, kw_only=True):
    task_id: SubjectToken


class InvalidateExecutor(Command, kw_only=True):
    task_id: SubjectToken
    reason: Annotated[str, msgspec.Meta(min_length=1)]
    by: str = "operator"


class PinExecutor(Command, kw_only=True):
    """Pin a version (it stays active even when a newer one compiles); null unpins."""

    task_id: SubjectToken
    version: PositiveInt | None


class ListExecutors(Command, kw_only=True):
    status: ExecutorStatus | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100


class ExecutorList(Reply, kw_only=True):
    executors: list[ExecutorHealth]


class ExecutorHistory(Reply, kw_only=True):
    task_id: str
    versions: list[Executor]
    events: list[ExecutorEvent]


class SavingsStats(Reply, kw_only=True):
    executors: int
    active: int
    replays: int
    replay_failures: int
    total_cost_saved_usd: float
    by_task: dict[str, float]
