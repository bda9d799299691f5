"""Executors: compiled, replayable scripts, and their event-sourced health."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from contracts.base import (
    MAX_REASON_CHARS,
    Command,
    Event,
    PositiveInt,
    Reply,
    SubjectToken,
    UtcDatetime,
)
from contracts.runs import Verification
from contracts.tools import Fingerprint, Target

# --- expectations checked on replay ----------------------------------------------------
# services.executor.expectations.check() is the one implementation of these checks.


class MinItems(msgspec.Struct, kw_only=True, tag="min_items", tag_field="kind"):
    """The step's output is a list of at least `count` items; for a text output (a page
    read), at least `count` non-blank lines."""

    count: int


class ContainsText(msgspec.Struct, kw_only=True, tag="contains_text", tag_field="kind"):
    """`text` appears in the step's output (strings as they are, other values as JSON)
    or in its title."""

    text: str


class HttpStatus(msgspec.Struct, kw_only=True, tag="http_status", tag_field="kind"):
    """The navigation answered with this HTTP status."""

    status: int


class ExitCode(msgspec.Struct, kw_only=True, tag="exit_code", tag_field="kind"):
    """A shell command exited with this code."""

    code: int


class InList(msgspec.Struct, kw_only=True, tag="in_list", tag_field="kind"):
    """The step's output (text) is one of the items of the list `ref` points to, or of
    their `path` field: a small model's pick must be a real item, not an invention."""

    ref: str
    path: list[str | int] = []


class ValueLike(msgspec.Struct, kw_only=True, tag="value_like", tag_field="kind"):
    """A value the small model wrote afresh looks like the one it replaces: `shape`
    "number" (a number and nothing else), "url" (an absolute http(s) URL), "line" (one
    line of text) or "text"; at most `max_chars` characters. A reply that explains
    instead of answering ("The new date is ...") would otherwise go into the tool."""

    shape: Literal["number", "url", "line", "text"]
    max_chars: PositiveInt


Expectation = MinItems | ContainsText | HttpStatus | ExitCode | InList | ValueLike

# --- steps -----------------------------------------------------------------------------
# Steps are numbered 0.. in order (`index`); a step's output is kept under its index.
# Strings in `input`, `prompt` and `template` may hold references to earlier outputs:
# "{{step_N}}" or "{{step_N.path[0].field}}" (syntax and rendering:
# services.executor.references). A string that is exactly one reference keeps the JSON
# type of the value; references inside longer strings become text.


class ToolStep(msgspec.Struct, kw_only=True, tag="tool", tag_field="type"):
    """A tool call replayed as recorded (deterministic) or with references filled in
    from earlier steps (templated)."""

    index: int
    tool: str
    input: dict[str, Any]
    templated: bool = False
    expect: list[Expectation] = []
    trace_step: int | None = None  # the trace step this was compiled from
    # What the values this step reads meant when it was recorded (a read's
    # ToolMetadata.fingerprint): a replay whose page differs is checked before trusted.
    fingerprint: Fingerprint | None = None
    # The element an action was done on when recorded (ToolMetadata.target): a healed
    # action must be done on one with the same role and name.
    target: Target | None = None
    # A few of the values the read held when recorded, cut short: what a heal looks for.
    sample: list[Any] = []


class LlmStep(msgspec.Struct, kw_only=True, tag="llm", tag_field="type"):
    """Judgement over content that changes between runs. The small model is given
    `prompt` rendered (references filled in; `variables` names the steps it reads, e.g.
    "step_2"), and its text reply, stripped, is the step's output; later steps refer to
    it ("{{step_3}}"). The compiler emits these with `tool` unset: one pick or value per
    step, used by an ordinary templated tool step or the result. With `tool` set, the
    reply is that tool's input as a JSON object, and the tool's output is the step's."""

    index: int
    prompt: str
    variables: list[str] = []
    tool: str | None = None
    example_input: dict[str, Any] | None = None
    expect: list[Expectation] = []
    trace_step: int | None = None


class ConditionStep(msgspec.Struct, kw_only=True, tag="condition", tag_field="type"):
    """A check that gates the rest of the replay (e.g. abort when an extract is empty).
    `ref` is a reference ("{{step_2}}"); on_false "fail" fails the replay at this step,
    "stop" skips the remaining tool steps and goes on to the result."""

    index: int
    ref: str
    check: Literal["not_empty", "contains", "equals"] = "not_empty"
    value: Any = None
    on_false: Literal["fail", "stop"] = "fail"
    message: str = ""


class ResultStep(msgspec.Struct, kw_only=True, tag="result", tag_field="type"):
    """Produces the run's answer in the same form as the original run's answer: mode
    "template" renders `template`; mode "llm" asks the small model with `prompt` rendered
    (`example` is the original answer, already quoted in the prompt)."""

    index: int
    mode: Literal["template", "llm"]
    template: str | None = None
    prompt: str | None = None
    variables: list[str] = []
    example: str = ""


ExecutorStep = ToolStep | LlmStep | ConditionStep | ResultStep


class ExecutorStats(msgspec.Struct, kw_only=True):
    """deterministic: tool steps replayed as recorded, condition steps, a constant result;
    templated: tool steps and a result template filled from earlier outputs; llm: steps
    and a result that call the small model. They add up to total_steps."""

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
    compiled_at: UtcDatetime
    small_model: str = "haiku"
    steps: list[ExecutorStep]
    stats: ExecutorStats
    # What the task asked (prompt, tools, small model) when this was compiled: after
    # the task is edited, the executor is not replayed (None: compiled before this
    # was recorded, replayed as it is).
    task_fingerprint: str | None = None
    # A version made by healing steps of this one in place (no full run compiled it).
    healed_from: int | None = None


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
    last_used_at: UtcDatetime | None = None
    # The sum of the replays' run-event cost_saved_usd (negative ones included).
    total_cost_saved_usd: float = 0.0
    source_run_id: str | None = None
    total_steps: int = 0
    deterministic_steps: int = 0
    llm_steps: int = 0
    full_run_cost_usd: float = 0.0  # mean cost of this task's recent full LLM runs
    status_reason: str | None = None
    templated_steps: int = 0
    compiled_at: UtcDatetime | None = None
    estimated_replay_cost_usd: float = 0.0
    replays: int = 0  # every version: replays tried, failed
    replay_failures: int = 0
    # What the checks of replayed answers found, every version (services/compiler/README.md):
    checked: int = 0  # answers a check judged (verified or wrong)
    wrong: int = 0  # answers a check found wrong (such a replay failed and fell back)
    drift_alarms: int = 0  # replays whose reads differed from the recording (flagged)
    drift_confirmed: int = 0  # drift alarms whose check found the answer wrong
    unflagged_checked: int = 0  # checks of replays with no alarm: new versions, samples
    unflagged_wrong: int = 0  # of those, found wrong: drift the fingerprints missed
    unverified: int = 0  # flagged answers delivered because no check could be made
    healed: int = 0  # replays that repaired steps in place (each one's answer checked)
    full_runs: int = 0  # full LLM runs completed (a failed replay's fallback included)
    # Runs answered by a replay: successful replays / (those + full_runs); None: no runs.
    hit_rate: float | None = None
    # Estimated share of wrong answers among clean replays delivered unchecked:
    # unflagged_wrong / unflagged_checked; None before any unflagged check.
    false_success_rate: float | None = None
    false_success_upper: float | None = None  # its 95% Wilson score upper bound
    # The current version is a candidate: compiled after a fallback (or restored when
    # the one after it failed), not yet verified; each of its replays is checked.
    candidate: bool = False


class VersionView(Reply, kw_only=True):
    """One compiled version and how it fared."""

    version: int
    status: ExecutorStatus
    status_reason: str | None = None
    source_run_id: str
    compiled_at: UtcDatetime
    success_count: int = 0
    failure_count: int = 0
    consecutive_failures: int = 0
    last_used_at: UtcDatetime | None = None
    cost_saved_usd: float = 0.0
    # This version's replays, as in ExecutorHealth (no full_runs: a full run replays none).
    checked: int = 0  # answers a check judged (verified or wrong)
    wrong: int = 0  # answers a check found wrong
    drift_alarms: int = 0  # replays whose reads differed from the recording
    drift_confirmed: int = 0  # drift alarms whose check found the answer wrong
    unflagged_checked: int = 0  # checks of replays with no alarm: new version, samples
    unflagged_wrong: int = 0  # of those, found wrong: drift the fingerprints missed
    unverified: int = 0  # flagged answers delivered because no check could be made
    healed: int = 0  # its replays that repaired steps in place
    hit_rate: float | None = None  # success_count / its replays; None: never replayed
    false_success_rate: float | None = None  # unflagged_wrong / unflagged_checked
    false_success_upper: float | None = None  # its 95% Wilson score upper bound
    candidate: bool = False  # serving runs, not yet verified (as in ExecutorHealth)
    # Made by healing version healed_from in place, not compiled from a full run's trace;
    # compiled_reason says why it exists ("healed step 2 (browser_extract): ...").
    healed_from: int | None = None
    compiled_reason: str | None = None


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
    "full_run_recorded",  # a full LLM run's cost, which moves full_run_cost_usd
    "promoted",  # a candidate's replay was verified: it is trusted, its standby retired
    "restored",  # a candidate went: the version on standby is current again, a candidate
]


class ExecutorEvent(Event, kw_only=True):
    """rote.evt.executor.<task_id>.<event>."""

    task_id: str
    event: ExecutorEventName
    at: UtcDatetime
    version: int | None = None
    run_id: str | None = None
    step: int | None = None
    reason: str | None = None
    by: str | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    # replay_succeeded: the run event's cost_saved_usd, as reported (may be negative)
    cost_saved_usd: float | None = None
    executor: Executor | None = None
    attempt: int | None = None  # replay_*: the run's delivery attempt that replayed
    # replay_*: the check of the replay's answer, its reasons the evidence (cost_usd 0:
    # the event's cost_usd includes it); None: recorded before replays were checked.
    verification: Verification | None = None
    candidate: bool = False  # compiled: the version starts as a candidate
    # compiled: the version this one healed in place (its reason says how); None: one
    # compiled from a full run's trace.
    healed_from: int | None = None
    # compiled: the steps healed in place; replay_*: the steps the replay repaired.
    healed_steps: list[int] = []


# --- commands and queries --------------------------------------------------------------


class ExecutorRef(Command, kw_only=True):
    task_id: SubjectToken


class InvalidateExecutor(Command, kw_only=True):
    """Stop replaying a version, for good. `version` names the one judged (null: the
    current one); a named version that is no longer active (a newer compilation
    replaced it) is refused with `conflict`, field `version`, rather than hitting the
    version that replaced it."""

    task_id: SubjectToken
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REASON_CHARS)]
    by: Annotated[str, msgspec.Meta(max_length=200)] = "operator"
    version: PositiveInt | None = None


class PinExecutor(Command, kw_only=True):
    """Pin a version (it stays active even when a newer one compiles); null unpins."""

    task_id: SubjectToken
    version: PositiveInt | None
    by: Annotated[str, msgspec.Meta(max_length=200)] = "operator"


class HistoryQuery(Command, kw_only=True):
    """A page of a task's executor history: the `limit` newest events before event
    number `before` (all of them when null), oldest first. The reply's `next_before`
    asks for the page before it."""

    task_id: SubjectToken
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    before: PositiveInt | None = None


class ListExecutors(Command, kw_only=True):
    """Tasks in the order their executors were first recorded; `after` (a task_id from
    the previous page) continues a listing."""

    status: ExecutorStatus | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 100
    after: SubjectToken | None = None


class ExecutorList(Reply, kw_only=True):
    executors: list[ExecutorHealth]
    next_after: str | None = None  # more tasks follow: pass as `after`


class ExecutorHistory(Reply, kw_only=True):
    """`summaries`: every version; `versions`: the executors compiled by the events of
    this page (a compiled event's executor is there, not repeated in the event);
    `first_event`: the number of the page's first event (1 = the oldest)."""

    task_id: str
    versions: list[Executor]
    events: list[ExecutorEvent]
    summaries: list[VersionView] = []
    first_event: int = 1
    total_events: int = 0
    next_before: int | None = None  # earlier events exist: pass as `before`


class SavingsStats(Reply, kw_only=True):
    executors: int
    active: int
    replays: int
    replay_failures: int
    total_cost_saved_usd: float
    by_task: dict[str, float]  # the (at most 1000) tasks that saved most
    by_task_omitted: int = 0  # tasks with an executor left out of by_task
    # Every task's sums and rates, as in ExecutorHealth (full_runs: tasks without an
    # executor too).
    checked: int = 0  # answers a check judged (verified or wrong)
    wrong: int = 0  # answers a check found wrong
    drift_alarms: int = 0  # replays whose reads differed from the recording
    drift_confirmed: int = 0  # drift alarms whose check found the answer wrong
    unflagged_checked: int = 0  # checks of replays with no alarm: new versions, samples
    unflagged_wrong: int = 0  # of those, found wrong: drift the fingerprints missed
    unverified: int = 0  # flagged answers delivered because no check could be made
    healed: int = 0  # replays that repaired steps in place
    full_runs: int = 0  # full LLM runs completed
    hit_rate: float | None = None  # successful replays / (those + full_runs)
    false_success_rate: float | None = None  # unflagged_wrong / unflagged_checked
    false_success_upper: float | None = None  # its 95% Wilson score upper bound
