"""Runs: the work queue request, the run lifecycle events, and run queries."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from contracts.base import Command, Event, Reply, SubjectToken, UtcDatetime
from contracts.llm import Message
from contracts.tasks import TaskSpec
from contracts.tools import Fingerprint, Target

RunSource = Literal["full_llm", "executor"]
RunStatus = Literal["requested", "running", "completed", "failed"]
FailureReason = Literal[
    "stuck",
    "max_iterations",
    "deadline",
    "llm_error",
    "tool_error",
    "abandoned",
    "replay_failed",
    # Never went out: its task was paused or deleted first, or the day's budget spent.
    "skipped",
    # An action of the run may or may not have happened (its call started, its outcome
    # is unknown) and no check could tell: the run stopped rather than act again, and
    # its task is paused until someone looks (the error names the step).
    "needs_attention",
]
RunOrigin = Literal["schedule", "manual", "condition", "operator", "catch_up"]


class RunRequest(Event, kw_only=True):
    """One unit of work on rote.work.runs (Nats-Msg-Id = run_id). Carries a snapshot
    of the task spec so a runner needs nothing else to start."""

    run_id: SubjectToken
    task_id: SubjectToken
    spec: TaskSpec
    requested_at: UtcDatetime
    origin: RunOrigin = "manual"
    # What the day's budget (ROTE_DAILY_BUDGET_USD) had left when the scheduler sent the
    # run out; None: no budget, or a run sent without one (runs.start). Below a full
    # run's cost, the runner leaves out the verification it only samples.
    budget_left_usd: float | None = None


class StartRun(Command, kw_only=True):
    """rote.api.runs.start (served by the scheduler): run an inline task spec now, once,
    with no task behind it; the spec passes tasks.create's checks. A `run_id` already
    used is refused (`conflict`)."""

    spec: TaskSpec
    task_id: SubjectToken | None = None
    run_id: SubjectToken | None = None


class RunStarted(Reply, kw_only=True):
    run_id: str
    task_id: str


class ModelTokens(msgspec.Struct, kw_only=True):
    """Tokens and cost spent on one model during a run."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0


VerificationStatus = Literal["verified", "unverified", "wrong", "skipped"]
# "shadow": the run fell in the shadow sample (ROTE_SHADOW_RATE), nothing else had the
# answer checked; "healed": steps were repaired in place (every such answer is checked).
VerificationWhy = Literal["flagged", "new_version", "sampled", "shadow", "healed"]
# "shadow": a full run in a fresh session answered the task too, and was compared.
VerificationMethod = Literal["small_model", "shadow"]


class Verification(msgspec.Struct, kw_only=True):
    """Whether a replayed answer was checked, why, and the verdict
    (services/runner/verification.py). `status`: `verified` (a check found the page
    supports the answer), `wrong` (a check found it does not: the answer is not
    delivered, the run takes the full loop), `unverified` (the page differed from the
    recording and no check could clear it: delivered, flagged), `skipped` (not checked:
    nothing differed and the replay was not sampled). A read-only replay may be checked
    again by a shadow full run (services/runner/shadow.py): `method` is then `shadow`."""

    status: VerificationStatus = "skipped"
    # The page differed from what the executor recorded (its fingerprints).
    flagged: bool = False
    # Why it was checked: the fingerprints differed, the version is new, or a sample
    # (of the small model's checks, or of the shadow's).
    why: VerificationWhy | None = None
    method: VerificationMethod | None = None
    # What differed, then the check's verdict, in words.
    reasons: list[str] = []
    cost_usd: float = 0.0


class HealedStep(msgspec.Struct, kw_only=True):
    """A replayed step whose element was gone, repaired in place by the small model
    (services/runner/healing.py): the same tool with new locators. `input`: the keys of
    the step's input the heal replaced, with their new values; `was`: those keys as
    recorded. `fingerprint` / `target`: what the healed call read or acted on, which the
    healed version records in place of the old."""

    step: int
    tool: str
    input: dict[str, Any]
    was: dict[str, Any] = {}
    reason: str  # why the step as recorded failed
    fingerprint: Fingerprint | None = None
    target: Target | None = None
    cost_usd: float = 0.0  # what repairing it cost (part of the replay's cost)


class ReplayOutcome(msgspec.Struct, kw_only=True):
    """What happened when a run tried to replay an executor."""

    version: int
    ok: bool
    step: int | None = None
    reason: str | None = None
    tokens: dict[str, ModelTokens] = {}
    cost_usd: float = 0.0
    duration_ms: int = 0
    # The replay failed because a service it needs could not serve (tools or llm down,
    # overloaded, rate limited): not the executor's fault, so its health ignores it.
    infrastructure: bool = False
    # The delivery of the run that replayed, when an earlier one did (a redelivered run
    # that had fallen back goes on with the full run and replays nothing); None: this one.
    attempt: int | None = None
    verification: Verification | None = None  # None: the replay broke before its answer
    # The steps repaired in place: the run answered with them, and the compiler records
    # a version with them (a candidate) after a replay that went on to verify.
    healed_steps: list[HealedStep] = []


class RunEvent(Event, kw_only=True):
    """Published on rote.evt.run.<task_id>.<run_id>.<event>."""

    # Subject tokens: a consumer builds subjects from them (a "*" would match every run).
    task_id: SubjectToken
    run_id: SubjectToken
    event: Literal["requested", "started", "replay_failed", "completed", "failed"]
    at: UtcDatetime
    status: RunStatus
    source: RunSource | None = None
    executor_version: int | None = None
    fell_back: bool = False
    result: str | None = None
    # An answer too large to carry inline (a replay's template can join several tool
    # outputs): `result` holds its head, and the whole answer, as UTF-8 text, is in the
    # blob store (bucket rote_blobs, object <hex>) under `result_ref` ("sha256:<hex>",
    # like TraceStep.output_ref). result_ref is None if the store refused it.
    result_truncated: bool = False
    result_ref: str | None = None
    tokens: dict[str, ModelTokens] = {}
    cost_usd: float = 0.0
    # A replay's saving: the executor health's full_run_cost_usd (mean of the task's
    # recent full runs) at lookup minus this run's cost. Not floored: negative when the
    # replay cost more. The executor's health adds exactly this number to its total.
    cost_saved_usd: float = 0.0
    # What this attempt's full LLM loop alone spent: cost_usd less the replay that broke
    # before it and any earlier, dead attempts of the run (redeliveries). What a full run
    # of the task costs, which replays' savings are measured against. None when no full
    # loop ran (a replay's outcome), and in events written before the field existed.
    loop_cost_usd: float | None = None
    duration_ms: int | None = None
    reason: FailureReason | None = None
    error: str | None = None
    # The run failed because a service it needs could not serve it (no rote service
    # answered, the tools service never replied, the model API stayed rate limited or
    # overloaded), not because of its task: the scheduler does not count it toward
    # the task's max_failures. False in events written before the field existed.
    infrastructure: bool = False
    replay: ReplayOutcome | None = None
    spec: TaskSpec | None = None
    origin: RunOrigin | None = None
    attempt: int = 1
    # Actions the run did not do again because its effect journal showed them done (an
    # earlier delivery, or the replay it fell back from, did them): their recorded
    # results stood in. Its trace would not show them happening, so none is built.
    resumed_actions: int = 0


# --- queries ---------------------------------------------------------------------------


class RunRef(Command, kw_only=True):
    run_id: SubjectToken


class ListRuns(Command, kw_only=True):
    """rote.api.runs.list: recent runs from the scheduler's run ledger, newest first.
    Ledger entries carry no `result` (answers can be large): use runs.get for it."""

    task_id: SubjectToken | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50


class RunView(Reply, kw_only=True):
    """The latest known state of a run. From runs.get (the runner) it is complete; in
    runs.list (the scheduler's ledger) `result` is always None: use runs.get for it."""

    run_id: str
    task_id: str
    status: RunStatus
    source: RunSource | None = None
    executor_version: int | None = None
    fell_back: bool = False
    result: str | None = None
    # `result` is the head of an answer kept whole under `result_ref` (RunEvent's).
    result_truncated: bool = False
    result_ref: str | None = None
    tokens: dict[str, ModelTokens] = {}
    cost_usd: float = 0.0
    cost_saved_usd: float = 0.0
    duration_ms: int | None = None
    reason: FailureReason | None = None
    error: str | None = None
    # It failed because a service could not serve it (RunEvent.infrastructure).
    infrastructure: bool = False
    requested_at: UtcDatetime | None = None
    started_at: UtcDatetime | None = None
    finished_at: UtcDatetime | None = None
    origin: RunOrigin | None = None


class RunList(Reply, kw_only=True):
    runs: list[RunView]


class TranscriptEntry(msgspec.Struct, kw_only=True):
    """One turn of a run: a message exchanged with the model, or a replayed step."""

    at: UtcDatetime
    kind: Literal["message", "replay_step", "note"]
    message: Message | None = None
    step: int | None = None
    detail: dict[str, Any] | None = None


class Transcript(Reply, kw_only=True):
    run_id: str
    task_id: str
    entries: list[TranscriptEntry]
    truncated: bool = False
