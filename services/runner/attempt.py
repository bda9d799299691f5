"""One attempt at a run: path A, then path B, within the run's deadline.

Path A replays the task's active executor (`replay.Replayer`): cheap, no big model.
When the task has no executor, the executor was compiled for an older version of the
task, or the replay fails, path B runs the full LLM agent loop (`agent_loop.AgentLoop`),
whose trace the compiler can turn into a new executor. A delivery that follows one whose
replay failed skips path A and goes on with path B (see prior.py).

No NATS and no key-value buckets here: every call out of the process goes through the
`Ports` seam, and the one event an attempt publishes while it runs, `replay_failed`
(which a redelivery reads, to go on with the full run rather than replay again), through
the `publish` callable it is given (the service wires both once, in `AttemptNeeds`).
Not pure, though: it awaits those calls, reads the clock, and bounds the run's time
with anyio cancel scopes. What it returns, an `AttemptResult`, is what the run's
terminal event reports (`terminal_event`).

Time: the run's deadline bounds its wall-clock time across deliveries, so an attempt
gets only what the earlier ones left (`elapsed_s` is what they used). An attempt with
no time left starts nothing, and ends `deadline` at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import msgspec

from contracts.base import utc_now
from contracts.executors import Executor, ExecutorHealth, ResultStep
from contracts.runs import ReplayOutcome, RunEvent, RunRequest, RunSource, Verification
from services.executor.fingerprint import task_fingerprint
from services.executor.verification import DEFAULT_VERIFY_RATE, budget_short
from services.kernel.logs import get_logger
from services.kernel.secrets import redact_struct
from services.runner.accounting import Ledger
from services.runner.agent_loop import (
    DEFAULT_TOOL_TIMEOUT_S,
    MAX_TOOL_TIMEOUT_S,
    AgentLoop,
    AgentOutcome,
    time_left,
)
from services.runner.bounds import abandon_error
from services.runner.effects import ActionInDoubt, EffectStore, RunEffects
from services.runner.ports import Ports, PublishRunEvent, RunScope
from services.runner.replay import Replayer, ReplayResult
from services.runner.shadow import DEFAULT_SHADOW_RATE, Shadow, shadow_due
from services.runner.transcript import TranscriptRecorder
from services.runner.verification import CheckPlan

log = get_logger("rote.runner")


def deadline_error(deadline_s: float, attempt: int, elapsed_s: float) -> str:
    """What a run cut off by its deadline says; `elapsed_s` is what earlier deliveries
    had used of it when this one (`attempt`) began."""
    if elapsed_s <= 0:
        return f"the run passed its {deadline_s:g} s deadline"
    if elapsed_s >= deadline_s:
        return (
            f"the run's {deadline_s:g} s deadline passed across its deliveries: it first"
            f" started {elapsed_s:.1f} s before delivery {attempt}, which had no time left"
        )
    return (
        f"the run passed its {deadline_s:g} s deadline across {attempt} deliveries: it"
        f" first started {elapsed_s:.1f} s before delivery {attempt}"
    )


@dataclass(frozen=True)
class Limits:
    """How hard an attempt tries: a failed replay step is retried `replay_retries`
    times, `replay_backoff_s` apart; a tool call gets `tool_timeout_s` unless it asks
    for more, never more than `max_tool_timeout_s` (nor than the run has left)."""

    replay_retries: int = 1
    replay_backoff_s: float = 1.0
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_tool_timeout_s: float = MAX_TOOL_TIMEOUT_S
    # The share of clean replays checked when the task does not say (TaskSpec.verify_rate).
    verify_rate: float = DEFAULT_VERIFY_RATE
    # The share of clean read-only replays checked by a shadow full run when the task
    # does not say (TaskSpec.shadow_rate; shadow.py).
    shadow_rate: float = DEFAULT_SHADOW_RATE


@dataclass(frozen=True)
class AttemptNeeds:
    """What every attempt at a run works with, wired once by the service: the other
    services (`ports`), how hard it tries (`limits`), and where the run's events go
    (`publish`)."""

    ports: Ports
    limits: Limits
    publish: PublishRunEvent
    # Where runs' effect journals live (effects.py); None: actions are not journaled.
    journal: EffectStore | None = None


@dataclass
class AttemptState:
    """What one attempt at a run has done so far (path A, then perhaps path B)."""

    outcome: AgentOutcome | None = None
    source: RunSource = "full_llm"
    version: int | None = None
    fell_back: bool = False
    replay: ReplayOutcome | None = None
    full_run_cost_usd: float = 0.0
    # Why sampled verification is left out of this run (verification.budget_short).
    budget_short: str | None = None
    replayer: Replayer | None = None  # set while path A runs
    # The run ledger's cost when path B's full loop began (None: it never began).
    loop_from_usd: float | None = None

    def stop_in_doubt(self, ledger: Ledger, doubt: ActionInDoubt) -> None:
        """An action may have happened and nothing can tell: the run stops, asking for
        a person. A replay cut off by it is not the executor's failure."""
        self.cut_off_replay(ledger, str(doubt), infrastructure=True)
        self.outcome = AgentOutcome(
            ok=False, reason="needs_attention", error=str(doubt), ledger=ledger
        )

    def cut_off_replay(self, ledger: Ledger, reason: str, *, infrastructure: bool = False) -> None:
        """The deadline stopped the replay mid-step: the executor failed this run (its
        health must hear of it) and what its steps spent is part of the run's cost."""
        replayer = self.replayer
        if replayer is None or self.replay is not None or self.version is None:
            return
        ledger.merge(replayer.ledger)
        self.source = "executor"
        self.replay = ReplayOutcome(
            version=self.version,
            ok=False,
            step=replayer.current_step,
            reason=reason,
            tokens=replayer.ledger.snapshot(),
            cost_usd=round(replayer.ledger.cost_usd, 8),
            duration_ms=int((time.monotonic() - replayer.started) * 1000),
            infrastructure=infrastructure,
        )


@dataclass(frozen=True)
class AttemptResult:
    """How an attempt ended: what its run's terminal event reports."""

    outcome: AgentOutcome  # ok, and the answer, or why not (reason, error)
    # This attempt's spend; the delivery adds what earlier attempts spent.
    ledger: Ledger
    source: RunSource
    version: int | None  # the executor replayed (or whose replay failed)
    fell_back: bool
    replay: ReplayOutcome | None
    # What a full run of the task costs, as the executor's health says: a successful
    # replay saved that less its own cost.
    full_run_cost_usd: float
    # What path B's full loop cost alone (None: it never ran). A full run's cost, which
    # replays are measured against, is one full loop, never a dead attempt's too.
    loop_cost_usd: float | None
    # Actions answered from the run's effect journal instead of done again.
    resumed_actions: int = 0


def terminal_event(
    request: RunRequest, attempt: int, result: AttemptResult, duration_ms: int
) -> RunEvent:
    """The run's `completed` or `failed` event for how this attempt ended."""
    outcome = result.outcome
    replayed = result.source == "executor" and outcome.ok
    cost = result.ledger.cost_usd
    saved = result.full_run_cost_usd - cost if replayed else 0.0  # not floored: see RunEvent
    loop_cost = result.loop_cost_usd
    return RunEvent(
        task_id=request.task_id,
        run_id=request.run_id,
        event="completed" if outcome.ok else "failed",
        at=utc_now(),
        status="completed" if outcome.ok else "failed",
        source=result.source,
        executor_version=result.version if result.source == "executor" else None,
        fell_back=result.fell_back,
        result=outcome.result,
        tokens=result.ledger.snapshot(),
        cost_usd=round(cost, 8),
        cost_saved_usd=round(saved, 8),
        loop_cost_usd=None if loop_cost is None else round(loop_cost, 8),
        duration_ms=duration_ms,
        reason=outcome.reason,
        error=outcome.error,
        infrastructure=outcome.infrastructure and not outcome.ok,
        replay=result.replay,
        origin=request.origin,
        attempt=attempt,
        resumed_actions=result.resumed_actions,
    )


async def close_session(ports: Ports, run_id: str, attempt: int) -> None:
    """Close the attempt's browser session. However that breaks, it never decides the
    run: a run that has answered must not be redelivered (and act again) over it, and
    the tools service closes an idle session in the end anyway."""
    try:
        await ports.close_session(run_id, attempt)
    except Exception as exc:
        log.warning("close_session_failed", error=abandon_error(exc))


class RunAttempt:
    """One delivery's attempt at a run. `run` returns how it ended; an unexpected error
    (or a cancellation) propagates, for the delivery to settle."""

    def __init__(
        self,
        request: RunRequest,
        attempt: int,
        *,
        ports: Ports,
        transcript: TranscriptRecorder,
        limits: Limits,
        publish: PublishRunEvent,
        effects: RunEffects | None = None,
    ) -> None:
        self.request = request
        self.scope = RunScope(
            spec=request.spec,
            ports=ports,
            run_id=request.run_id,
            task_id=request.task_id,
            attempt=attempt,
            transcript=transcript,
            effects=effects,
        )
        self.limits = limits
        self.publish = publish

    async def run(self, elapsed_s: float, earlier_replay: ReplayOutcome | None) -> AttemptResult:
        """Run the attempt with what the run's deadline has left after `elapsed_s`;
        `earlier_replay`: the replay an earlier delivery saw fail (then path B only)."""
        deadline_s = self.request.spec.deadline_s
        remaining = deadline_s - elapsed_s
        ledger = Ledger()
        state = AttemptState()
        with anyio.move_on_after(remaining) as deadline:
            # Nothing starts with no time left (a replay cut off before its first
            # step would count as the executor's failure): it ends below, `deadline`.
            if remaining > 0:
                try:
                    await self._paths(ledger, state, deadline.deadline, earlier_replay)
                except ActionInDoubt as doubt:
                    state.stop_in_doubt(ledger, doubt)
        outcome = state.outcome
        # The loop (or the replay) ends as `deadline` itself when a call came back just as
        # time ran out.
        if deadline.cancelled_caught or outcome is None or outcome.reason == "deadline":
            error = deadline_error(deadline_s, self.scope.attempt, elapsed_s)
            state.cut_off_replay(ledger, error)
            outcome = AgentOutcome(ok=False, reason="deadline", error=error, ledger=ledger)
        return AttemptResult(
            outcome=outcome,
            ledger=ledger,
            source=state.source,
            version=state.version,
            fell_back=state.fell_back,
            replay=state.replay,
            full_run_cost_usd=state.full_run_cost_usd,
            loop_cost_usd=(
                None if state.loop_from_usd is None else ledger.cost_usd - state.loop_from_usd
            ),
            resumed_actions=self.scope.effects.answered if self.scope.effects else 0,
        )

    async def _paths(
        self,
        ledger: Ledger,
        state: AttemptState,
        deadline: float,
        earlier_replay: ReplayOutcome | None,
    ) -> None:
        """Path A, then path B if A gave no answer. First, any action an earlier delivery
        left unsettled is settled (effects.py): one in doubt stops the run here."""
        if self.scope.effects is not None:
            await self.scope.effects.settle_earlier()
        await self._path_a(ledger, state, deadline, earlier_replay)
        if state.outcome is None:
            remaining = time_left(deadline)
            state.loop_from_usd = ledger.cost_usd
            state.outcome = await AgentLoop(
                self.scope,
                ledger=ledger,
                tool_timeout_s=min(self.limits.tool_timeout_s, remaining),
                max_tool_timeout_s=min(self.limits.max_tool_timeout_s, remaining),
                deadline=deadline,
            ).run()

    async def _path_a(
        self,
        ledger: Ledger,
        state: AttemptState,
        deadline: float,
        earlier_replay: ReplayOutcome | None,
    ) -> None:
        """Replay the task's active executor, if it has one. On success `state.outcome`
        is set; on failure the failure is published and the run falls back to path B.
        `deadline`: when the run's time is up (anyio's clock)."""
        if earlier_replay is not None:
            self._go_on_after(state, earlier_replay)
            return
        request = self.request
        active = await self.scope.ports.active_executor(request.task_id)
        if active is None or active.executor is None:
            return
        executor = active.executor
        # Runs see the spec as events show it (secrets masked), and so did the compiler.
        asked = task_fingerprint(redact_struct(request.spec) or request.spec)
        if executor.task_fingerprint not in (None, asked):
            # The task was edited since this version was compiled: its answer would be
            # the old task's. The full run's trace compiles one for the task as it is.
            log.info("replay_skipped", version=executor.version, reason="task changed")
            return
        state.version = executor.version
        state.full_run_cost_usd = active.health.full_run_cost_usd
        # What one more full run would cost: the task's recent ones, else the recorded one.
        full_run_usd = active.health.full_run_cost_usd or executor.stats.source_run_cost_usd
        state.budget_short = budget_short(request.budget_left_usd, full_run_usd)
        log.info("replay_started", version=executor.version, steps=len(executor.steps))
        state.replayer = Replayer(
            executor,
            self.scope,
            retries=self.limits.replay_retries,
            backoff_s=self.limits.replay_backoff_s,
            # As long as a full run gives the call: a step that was slow then (a long
            # command, a slow page) must not time out on every replay. Never more than
            # the run has left, which the replayer sees from `deadline`.
            tool_timeout_s=self.limits.tool_timeout_s,
            max_tool_timeout_s=self.limits.max_tool_timeout_s,
            deadline=deadline,
            checks=self._check_plan(active.health, state.budget_short),
        )
        result: ReplayResult = await state.replayer.run()
        effects = self.scope.effects
        if result.out_of_time:
            # The deadline passed just before a step's call: the run ends there, as when
            # it cuts the replay off mid-step (run() records the replay's failure).
            state.outcome = AgentOutcome(ok=False, reason="deadline", ledger=ledger)
            return
        ledger.merge(result.ledger)
        state.replay = ReplayOutcome(
            version=executor.version,
            ok=result.ok,
            step=result.failed_step,
            reason=result.reason,
            tokens=result.ledger.snapshot(),
            cost_usd=round(result.ledger.cost_usd, 8),
            duration_ms=result.duration_ms,
            # A replay resumed after actions answered from the journal reads pages those
            # actions did not leave this time: its failure says nothing of the executor.
            infrastructure=result.infrastructure or bool(effects and effects.answered),
            verification=result.verification,
            healed_steps=result.healed,
        )
        if result.ok:
            state.source = "executor"
            state.outcome = AgentOutcome(ok=True, result=result.answer, ledger=ledger)
            await self._shadow(ledger, state, executor, deadline)
            return
        await self._fall_back(state, result, executor.version)

    def _check_plan(self, health: ExecutorHealth, short: str | None) -> CheckPlan:
        """Which replays of this version the small model checks (verification.py)."""
        spec = self.request.spec
        return CheckPlan(
            version_replays=health.success_count + health.failure_count,
            candidate=health.candidate,
            budget_short=short,
            rate=spec.verify_rate if spec.verify_rate is not None else self.limits.verify_rate,
        )

    async def _shadow(
        self, ledger: Ledger, state: AttemptState, executor: Executor, deadline: float
    ) -> None:
        """The replay answered: a shadow full run checks the answer when one is due
        (shadow.py). An answer it finds wrong is replaced by the shadow's, as after a
        fallback; otherwise the replay's verification says what the shadow found."""
        replay, outcome, spec = state.replay, state.outcome, self.request.spec
        if replay is None or outcome is None or outcome.result is None:
            return
        rate = spec.shadow_rate if spec.shadow_rate is not None else self.limits.shadow_rate
        if not shadow_due(executor, replay.verification, self.request.run_id, rate):
            return
        if state.budget_short is not None:
            # A shadow is a full run: not one the day's budget has room for.
            check = replay.verification or Verification()
            reasons = [*check.reasons, f"no shadow run: {state.budget_short}"]
            state.replay = msgspec.structs.replace(
                replay, verification=msgspec.structs.replace(check, reasons=reasons)
            )
            return
        # A fresh browser session: the replay's page state must not steer the full run.
        await close_session(self.scope.ports, self.request.run_id, self.scope.attempt)
        before = ledger.cost_usd
        found = await Shadow(
            self.scope,
            ledger=ledger,
            deadline=deadline,
            tool_timeout_s=self.limits.tool_timeout_s,
            max_tool_timeout_s=self.limits.max_tool_timeout_s,
            small_model=executor.small_model or spec.small_model,
        ).run(outcome.result, replay.verification or Verification())
        check = found.verification
        if found.overruled is None:
            # The replay's answer stands: what checking it cost is part of its cost.
            spent = round(replay.cost_usd + ledger.cost_usd - before, 8)
            state.replay = msgspec.structs.replace(replay, verification=check, cost_usd=spent)
            return
        # A full run is the authority: its answer is the run's, as after a fallback, and
        # the replay failed (its health and a redelivery must hear of it).
        step = max((s.index for s in executor.steps if isinstance(s, ResultStep)), default=None)
        verdict = check.reasons[-1].removeprefix("shadow: ")
        state.replay = msgspec.structs.replace(
            replay, ok=False, step=step, reason=f"verification: {verdict}", verification=check
        )
        state.source, state.outcome, state.loop_from_usd = "full_llm", found.overruled, before
        await self._replay_failed(state, executor.version, step, state.replay.reason)

    async def _fall_back(self, state: AttemptState, result: ReplayResult, version: int) -> None:
        """The replay failed: say so, and leave path B a clean browser session."""
        await self._replay_failed(state, version, result.failed_step, result.reason)
        # Path B gets a fresh browser session: whatever state the broken replay left
        # behind (a half-filled form, a wrong page) must not steer the full run.
        await close_session(self.scope.ports, self.request.run_id, self.scope.attempt)

    async def _replay_failed(
        self, state: AttemptState, version: int, step: int | None, reason: str | None
    ) -> None:
        """Say the replay failed: a redelivery reads it, and goes on with the full run."""
        request, attempt = self.request, self.scope.attempt
        log.info("replay_failed", version=version, step=step, reason=reason)
        self.scope.transcript.note(
            f"replay of v{version} failed at step {step}: {reason};"
            " falling back to the full LLM run"
        )
        state.fell_back = True
        await self.publish(
            RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event="replay_failed",
                at=utc_now(),
                status="running",
                source="executor",
                executor_version=version,
                replay=state.replay,
                origin=request.origin,
                attempt=attempt,
            ),
            f"{request.run_id}:replay_failed:{attempt}",
        )

    def _go_on_after(self, state: AttemptState, replay: ReplayOutcome) -> None:
        """An earlier delivery of this run replayed and failed: this one goes on with the
        full run it had fallen back to. Replaying again would redo the executor's actions
        (a second order) to break the same way, and count the same failure twice. The
        earlier replay's outcome stays the run's."""
        state.fell_back = True
        state.version = replay.version
        state.replay = replay
        log.info("replay_skipped", version=replay.version, reason="an earlier delivery's failed")
        self.scope.transcript.note(
            f"delivery {replay.attempt} replayed v{replay.version} and failed at step"
            f" {replay.step}: {replay.reason}; this delivery goes on with the full LLM run"
        )
