"""Tasks: what to run, when, and with which limits. Owned by the scheduler."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from contracts.base import (
    MAX_REASON_CHARS,
    Command,
    Event,
    NonEmptyStr,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Reply,
    SubjectToken,
    UtcDatetime,
)
from contracts.errors import ErrorInfo

# Browser tools are safe to allow by default; local tools (shell, files) must be named.
DEFAULT_ALLOWED_TOOLS: list[str] = [
    "browser_navigate",
    "browser_read_page",
    "browser_extract",
    "browser_click",
    "browser_type",
    "browser_fill_form",
    "browser_scroll",
    "browser_screenshot",
]

# --- condition predicates --------------------------------------------------------------


class Contains(Command, tag="contains", tag_field="op", kw_only=True):
    """True when the tool output (at `path`, or any text value of it) contains `text`."""

    text: NonEmptyStr
    path: str | None = None


class NotContains(Command, tag="not_contains", tag_field="op", kw_only=True):
    text: NonEmptyStr
    path: str | None = None


class Above(Command, tag="above", tag_field="op", kw_only=True):
    """True when the number found in the output (at `path`, else in its main text, such
    as shell_exec's stdout: services/scheduler/conditions.py) is strictly above `value`."""

    value: float
    path: str | None = None


class Below(Command, tag="below", tag_field="op", kw_only=True):
    value: float
    path: str | None = None


Predicate = Contains | NotContains | Above | Below

# --- triggers --------------------------------------------------------------------------


class IntervalTrigger(Command, tag="interval", tag_field="kind", kw_only=True):
    every_s: PositiveFloat


class CronTrigger(Command, tag="cron", tag_field="kind", kw_only=True):
    expr: NonEmptyStr
    tz: str = "UTC"


class OnceTrigger(Command, tag="once", tag_field="kind", kw_only=True):
    at: datetime


class ManualTrigger(Command, tag="manual", tag_field="kind", kw_only=True):
    pass


class ConditionTrigger(Command, tag="condition", tag_field="kind", kw_only=True):
    """Every `every_s`, call `tool` with `input` through the tools service; when
    `predicate` holds on its output, dispatch a run, then wait `cooldown_s`.

    Each check has a browser session of its own, which starts blank: a browser tool
    that acts on the current page (all but browser_navigate) needs `url`, the page
    opened in that session before `tool` runs on it."""

    tool: NonEmptyStr
    input: dict[str, Any] = {}
    # Optional for the tasks stored before it existed; required where it is needed by
    # services/scheduler/triggers.validate (on create and update), not here.
    url: NonEmptyStr | None = None
    predicate: Predicate
    every_s: PositiveFloat
    cooldown_s: NonNegativeFloat = 0.0


Trigger = IntervalTrigger | CronTrigger | OnceTrigger | ManualTrigger | ConditionTrigger
TriggerKind = Literal["interval", "cron", "once", "manual", "condition"]

# --- the task spec ---------------------------------------------------------------------


# A spec travels whole in run requests and events (one NATS message each, 1 MB by
# default), so its parts are bounded.
TaskName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Prompt = Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)]
ToolNames = Annotated[list[str], msgspec.Meta(max_length=200)]
# The whole spec, JSON-encoded (a condition trigger's input is free-form): well under the
# NATS max payload, with room for the run request or event around it.
MAX_SPEC_BYTES = 256 * 1024


class TaskSpec(Command, kw_only=True):
    """Everything a runner needs to run a task, snapshotted into every run request."""

    name: TaskName
    prompt: Prompt
    trigger: Trigger = msgspec.field(default_factory=ManualTrigger)
    model: NonEmptyStr = "sonnet"
    small_model: NonEmptyStr = "haiku"
    allowed_tools: ToolNames = msgspec.field(default_factory=lambda: list(DEFAULT_ALLOWED_TOOLS))
    max_iterations: PositiveInt = 30
    deadline_s: PositiveFloat = 600.0
    # Have the small model check each replayed answer against the form of the answer
    # the executor came from; a failing verdict falls back (services/executor/quality.py).
    quality_check: bool = False
    max_failures: PositiveInt = 3
    # The share of clean replays whose answer the small model checks against the page
    # (services/runner/verification.py); None: the runner's default (ROTE_VERIFY_RATE).
    verify_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    # The share of clean replays of a read-only executor checked by a shadow full run
    # (services/runner/shadow.py); None: the runner's default (ROTE_SHADOW_RATE).
    shadow_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None


# --- commands --------------------------------------------------------------------------


class CreateTask(TaskSpec, kw_only=True):
    """A task spec plus an optional id (generated from the name when absent)."""

    task_id: SubjectToken | None = None


class UpdateTask(Command, kw_only=True):
    """Change some fields of a task; fields left out keep their value."""

    task_id: SubjectToken
    name: TaskName | msgspec.UnsetType = msgspec.UNSET
    prompt: Prompt | msgspec.UnsetType = msgspec.UNSET
    trigger: Trigger | msgspec.UnsetType = msgspec.UNSET
    model: NonEmptyStr | msgspec.UnsetType = msgspec.UNSET
    small_model: NonEmptyStr | msgspec.UnsetType = msgspec.UNSET
    allowed_tools: ToolNames | msgspec.UnsetType = msgspec.UNSET
    max_iterations: PositiveInt | msgspec.UnsetType = msgspec.UNSET
    deadline_s: PositiveFloat | msgspec.UnsetType = msgspec.UNSET
    quality_check: bool | msgspec.UnsetType = msgspec.UNSET
    max_failures: PositiveInt | msgspec.UnsetType = msgspec.UNSET
    verify_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | msgspec.UnsetType | None = (
        msgspec.UNSET
    )
    shadow_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | msgspec.UnsetType | None = (
        msgspec.UNSET
    )


class TaskRef(Command, kw_only=True):
    """Names one task (pause, resume, delete, get)."""

    task_id: SubjectToken
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)] | None = None


class RunTask(Command, kw_only=True):
    """Run a task now. `run_id` is an optional idempotency key: asking twice with the
    same run_id starts one run."""

    task_id: SubjectToken
    run_id: SubjectToken | None = None


class ListTasks(Command, kw_only=True):
    """Without `status`: every task that is not deleted. Tasks come in task_id order, a
    page at a time: `after` is the previous page's `next_after` (the tasks whose task_id
    sorts after it)."""

    status: Literal["active", "paused", "deleted"] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    after: SubjectToken | None = None


# --- replies ---------------------------------------------------------------------------

TaskStatus = Literal["active", "paused", "deleted"]


class TaskView(Reply, kw_only=True):
    task_id: str
    spec: TaskSpec
    status: TaskStatus
    status_reason: str | None = None
    version: int
    created_at: UtcDatetime
    updated_at: UtcDatetime
    # When the trigger next wants a run (for a condition trigger: its next check).
    next_due_at: UtcDatetime | None = None
    run_in_flight: str | None = None
    # A run someone asked for that waits for a free slot or for the run in flight.
    run_pending: str | None = None
    last_run_id: str | None = None
    last_run_status: str | None = None
    consecutive_failures: int = 0
    runs_dispatched: int = 0
    total_cost_usd: float = 0.0


class TaskList(Reply, kw_only=True):
    """One page. A page ends at `limit`, or earlier to fit in one NATS message; when
    more tasks follow, `next_after` is the cursor to ask for them (`after`)."""

    tasks: list[TaskView]
    next_after: str | None = None


class RunAccepted(Reply, kw_only=True):
    """The run is queued; `queued` means it waits behind a run already in flight or
    pending for this task (then `run_id` names the pending one)."""

    task_id: str
    run_id: str
    queued: bool = False


# --- events ----------------------------------------------------------------------------

TaskEventName = Literal[
    "defined",
    "updated",
    "paused",
    "resumed",
    "deleted",
    "run_requested",
    "run_dispatched",
    "run_started",
    "run_finished",
    "run_skipped",
]


class TaskEvent(Event, kw_only=True):
    """A recorded Task aggregate event, published on rote.evt.task.<task_id>.<event>."""

    task_id: str
    event: TaskEventName
    version: int
    at: UtcDatetime
    spec: TaskSpec | None = None
    reason: str | None = None
    run_id: str | None = None
    status: str | None = None
    cost_usd: float | None = None
    origin: str | None = None
    error: str | None = None
    changed: list[str] | None = None


class TaskRejected(Event, kw_only=True):
    """An intake command that was refused, with the payload as received: secrets
    masked (JSON holding one is written again, masked value by value), cut to its first
    64 KiB (`payload_truncated` says so)."""

    verb: str
    error: ErrorInfo
    payload: str
    at: UtcDatetime
    msg_id: str | None = None
    payload_truncated: bool = False
