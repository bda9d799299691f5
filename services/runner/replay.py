"""Path A: replay a compiled executor, step by step, in the run's own browser session.

Tool steps go through the tools service with references to earlier outputs filled in;
llm steps ask the small model (tokens and cost counted); condition steps gate the rest;
expectations check every result. A step that fails is retried (once, after a second, by
default) before the replay gives up; the caller then falls back to the full agent loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from contracts.errors import status_for
from contracts.executors import ConditionStep, Executor, LlmStep, ResultStep, ToolStep
from contracts.llm import CompleteRequest, Message
from contracts.runs import HealedStep, Verification
from contracts.tools import SESSION_LOST, ExecTool, ToolMetadata
from services.executor import quality, references
from services.executor.expectations import check_all, condition_holds
from services.executor.healing import named_exactly
from services.executor.toolkinds import acts, safe_to_retry
from services.executor.verification import FIRST_REPLAYS_CHECKED
from services.kernel.logs import get_logger
from services.runner.accounting import Ledger
from services.runner.agent_loop import (
    MAX_TOOL_TIMEOUT_S,
    answer_problem,
    call_timeout,
    final_text,
    request_messages,
    time_left,
)
from services.runner.healing import Healer, NotHealed
from services.runner.ports import PortError, RunScope
from services.runner.verification import CheckPlan, CheckUnavailable, ReplayChecks

log = get_logger("rote.runner.replay")

# Room for a small-model step's reply; current models spend their thinking out of it.
LLM_STEP_MAX_TOKENS = 2048
# A result step writes an answer like the original one: room for a few times its length.
RESULT_MAX_TOKENS_CAP = 16_000


def result_max_tokens(example: str) -> int:
    """max_tokens for a result step: a cut-off answer fails the replay, so an answer
    longer than the original (more items today) must still fit. Sized by the example's
    UTF-8 bytes, not its characters: English runs ~4 bytes a token, but Chinese or
    Japanese ~1 character (3 bytes) a token, which a character count left no room for."""
    size = len(example.encode())
    return min(RESULT_MAX_TOKENS_CAP, max(LLM_STEP_MAX_TOKENS, size))


@dataclass
class ReplayResult:
    ok: bool
    answer: str | None = None
    failed_step: int | None = None
    reason: str | None = None
    ledger: Ledger = field(default_factory=Ledger)
    duration_ms: int = 0
    # The failure was a service rote depends on, not the executor (see StepFailed).
    infrastructure: bool = False
    # The run's deadline passed before a step's call started (see OutOfTime).
    out_of_time: bool = False
    # Whether the answer was checked, and the verdict (None: no answer was written).
    verification: Verification | None = None
    # The steps healed in place (healing.py), on success or not.
    healed: list[HealedStep] = field(default_factory=list)


class StepFailed(Exception):
    """A step that did not do what the executor expects. `infrastructure`: the tools
    or llm service could not serve the call at all (down, overloaded, rate limited),
    which says nothing about the executor, so its health must not count it."""

    def __init__(
        self,
        step: int,
        reason: str,
        *,
        retryable: bool = True,
        infrastructure: bool = False,
        expectation: bool = False,
    ) -> None:
        super().__init__(f"step {step}: {reason}")
        self.step = step
        self.reason = reason
        self.retryable = retryable
        self.infrastructure = infrastructure
        # The call went through and what it returned missed the step's expectations.
        self.expectation = expectation


class OutOfTime(StepFailed):
    """The run's time was up before a step's call started. The caller's cancel ends the
    run too, but may land only after the call went out (a tool then acting, a model call
    then billed, after the run ended): no call is started with no time left, and the
    run ends at its deadline as if the replay had been cut off there."""

    def __init__(self, step: int) -> None:
        super().__init__(step, "the run passed its deadline", retryable=False)


# Codes of a call that failed before it reached a tool or a model's judgement.
_INFRASTRUCTURE_CODES = {
    "unavailable",
    "timeout",
    "rate_limited",
    "overloaded",
    "upstream",
    "internal",
    "auth",
    # The run's browser session died with its tools process or its Chromium: the page
    # the executor built up is gone, which says nothing about the executor.
    SESSION_LOST,
}


# Codes of a tools call that surely never ran: no tools service answered the subject,
# the bus could not send, or the tools service refused before running the tool (no
# browser, a start it could not record). Bus.request and the tools service say so.
_NEVER_REACHED_CODES = {"unavailable"}


def _port_failure(step: int, what: str, exc: PortError) -> StepFailed:
    """A call another service could not answer (an error reply or no reply at all)."""
    return StepFailed(
        step,
        f"{what}: {exc.code}: {exc.message}",
        # A lost session stays lost: only a fresh run (the fallback) starts over.
        retryable=not _refused(exc.code) and exc.code != SESSION_LOST,
        infrastructure=exc.code in _INFRASTRUCTURE_CODES,
    )


def _refused(code: str) -> bool:
    """A refusal (the policy forbids the call, the request is malformed): asking again
    gets the same answer, so the step is not retried."""
    return status_for(code) in (400, 401, 403)


class Replayer:
    def __init__(
        self,
        executor: Executor,
        scope: RunScope,
        *,
        retries: int = 1,
        backoff_s: float = 1.0,
        tool_timeout_s: float = 30.0,
        max_tool_timeout_s: float = MAX_TOOL_TIMEOUT_S,
        deadline: float | None = None,
        checks: CheckPlan | None = None,
    ) -> None:
        self.executor = executor
        self.spec = scope.spec
        self.ports = scope.ports
        self.run_id = scope.run_id
        self.task_id = scope.task_id
        self.attempt = scope.attempt
        self.transcript = scope.transcript
        self.effects = scope.effects
        # Every step is tried at least once, whatever the caller passed.
        self.retries = max(0, retries)
        self.backoff_s = max(0.0, backoff_s)
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_timeout_s = max_tool_timeout_s
        # When the run's time is up (anyio's clock); None: no deadline.
        self.deadline = deadline
        self.ledger = Ledger()
        self.outputs: dict[int, Any] = {}
        # Where the replay is, for a caller whose deadline cuts it off mid-step.
        self.current_step: int | None = None
        self.started = time.monotonic()
        # Without a plan only a replay whose page drifted is checked.
        plan = checks or CheckPlan(version_replays=FIRST_REPLAYS_CHECKED, rate=0.0)
        self.checks = ReplayChecks(scope.spec.prompt, scope.run_id, plan)
        self.verification: Verification | None = None
        self.healer = Healer(
            scope.spec.prompt, self._heal_tool, self._heal_ask, lambda: self.ledger.cost_usd
        )

    async def run(self) -> ReplayResult:
        started = self.started = time.monotonic()
        answer: str | None = None
        stopped = False
        if not any(isinstance(step, ResultStep) for step in self.executor.steps):
            # Nothing would write the answer: fail before any step acts, since the
            # fallback run will do the actions again.
            return ReplayResult(
                ok=False,
                reason="the executor has no result step",
                ledger=self.ledger,
                duration_ms=int((time.monotonic() - started) * 1000),
            )
        try:
            for step in self.executor.steps:
                self.current_step = step.index
                if isinstance(step, ResultStep):
                    answer = await self._with_retries(step.index, lambda s=step: self._result(s))
                    # The answer this step wrote (before any quality check judges it).
                    self.transcript.replay_step(step.index, {"result": step.mode, "answer": answer})
                    await self._verify(step.index, answer)
                    if self.spec.quality_check:
                        # Retried like a step: a check call the llm service could not
                        # serve once must not cost a full run (a FAIL is not retried).
                        await self._with_retries(
                            step.index, lambda s=step, a=answer: self._check_quality(s, a)
                        )
                    continue
                if stopped:
                    continue
                if isinstance(step, ConditionStep):
                    if condition_holds(step, self.outputs):
                        self.transcript.replay_step(
                            step.index, {"condition": step.ref, "held": True}
                        )
                    else:
                        reason = step.message or f"condition on {step.ref} does not hold"
                        self.transcript.replay_step(
                            step.index, {"condition": step.ref, "held": False}
                        )
                        if step.on_false == "fail":
                            raise StepFailed(step.index, reason)
                        stopped = True
                    continue
                self.outputs[step.index] = await self._tool_or_llm_step(step)
        except StepFailed as failed:
            return ReplayResult(
                ok=False,
                failed_step=failed.step,
                reason=failed.reason,
                ledger=self.ledger,
                duration_ms=int((time.monotonic() - started) * 1000),
                infrastructure=failed.infrastructure,
                out_of_time=isinstance(failed, OutOfTime),
                verification=self.verification,
                healed=self.healer.healed,
            )
        return ReplayResult(
            ok=True,
            answer=answer,
            ledger=self.ledger,
            duration_ms=int((time.monotonic() - started) * 1000),
            verification=self.verification,
            healed=self.healer.healed,
        )

    async def _tool_or_llm_step(self, step: ToolStep | LlmStep) -> Any:
        """Run the step (with its retries); a tool step whose element is gone is healed
        in place when it can be (healing.py), else its failure stands."""
        try:
            return await self._with_retries(step.index, lambda s=step: self._step(s))
        except OutOfTime:
            raise
        except StepFailed as failed:
            if (
                not isinstance(step, ToolStep)
                or failed.infrastructure
                or not self.healer.may_heal(step, failed.reason, expectation=failed.expectation)
            ):
                raise
            return await self._heal(step, failed)

    async def _heal(self, step: ToolStep, failed: StepFailed) -> Any:
        tool_input = references.render_input(
            step.tool, step.input, self.outputs, require_values=True
        )
        try:
            output, metadata, healed_input = await self.healer.heal(
                step, tool_input, failed.reason, self._expectations
            )
        except OutOfTime:
            raise
        except (NotHealed, StepFailed) as exc:
            why = exc.reason if isinstance(exc, StepFailed) else str(exc)
            self.transcript.replay_step(step.index, {"not_healed": why})
            raise StepFailed(
                step.index, f"{failed.reason}; not healed: {why}", retryable=False
            ) from None
        healed = self.healer.healed[-1]
        self.transcript.replay_step(step.index, {"healed": healed.input, "was": healed.was})
        log.info("replay_step_healed", step=step.index, tool=step.tool, input=healed.input)
        # The page it reads now is not the recorded one by design: the check of the
        # answer (always made after a heal) judges it, not the fingerprints.
        self.checks.forget(step.index)
        self.checks.saw(
            msgspec.structs.replace(step, fingerprint=None), healed_input, output, metadata
        )
        self.checks.healed = True
        return output

    def _expectations(self, step: ToolStep, output: Any, metadata: ToolMetadata) -> str | None:
        return check_all(step.expect, output, metadata, self.outputs)

    async def _heal_tool(
        self, index: int, tool: str, tool_input: dict[str, Any], key: str | None
    ) -> tuple[Any, ToolMetadata]:
        return await self._tool(index, tool, tool_input, heal=key)

    async def _heal_ask(self, index: int, prompt: str) -> str:
        return await self._small_model(index, prompt, purpose="heal")

    async def _verify(self, index: int, answer: str) -> None:
        """Check the answer when it is due (verification.py); one judged wrong fails
        the replay: its answer is not delivered, the full loop answers instead."""

        async def ask(prompt: str) -> str:
            try:
                return await self._small_model(index, prompt, purpose="verification")
            except StepFailed as failed:
                raise CheckUnavailable(failed.reason) from None

        self.verification = await self.checks.verify(answer, ask, lambda: self.ledger.cost_usd)
        if self.verification.status == "wrong":
            verdict = self.verification.reasons[-1]
            raise StepFailed(index, f"verification: {verdict}", retryable=False)

    async def _with_retries(self, index: int, attempt_once: Any) -> Any:
        """Run a step; on failure wait and try again, `retries` more times."""
        attempt = 0
        while True:
            try:
                return await attempt_once()
            except StepFailed as failed:
                self.transcript.replay_step(index, {"failed": failed.reason, "try": attempt + 1})
                if attempt >= self.retries or not failed.retryable:
                    raise
            except references.BadReference as exc:
                # A missing field will not appear by asking again.
                raise StepFailed(index, f"reference: {exc}") from None
            attempt += 1
            await anyio.sleep(self.backoff_s * attempt)

    async def _step(self, step: ToolStep | LlmStep) -> Any:
        output: Any
        metadata: ToolMetadata | None
        if isinstance(step, ToolStep):
            # Every value filled in must be there: the compiler referred to values the
            # original run had, and a blank one today is a changed page, not an input.
            tool_input = named_exactly(
                step,
                references.render_input(step.tool, step.input, self.outputs, require_values=True),
            )
            output, metadata = await self._tool(step.index, step.tool, tool_input)
            self.checks.saw(step, tool_input, output, metadata)
            reason = self._expectations(step, output, metadata)
            if reason is not None:
                # An action that ran but missed its expectation is not tried again: that
                # would act twice (a second order); the fallback run takes it from there.
                raise StepFailed(
                    step.index, reason, retryable=not acts(step.tool), expectation=True
                )
            return output
        text = await self._small_model(
            step.index, references.render_text(step.prompt, self.outputs)
        )
        if step.tool is None:
            output = text
            metadata = None
        else:
            try:
                tool_input = json.loads(text)
            except ValueError:
                raise StepFailed(step.index, "the small model did not write a JSON input") from None
            if not isinstance(tool_input, dict):
                raise StepFailed(step.index, "the small model's tool input is not an object")
            output, metadata = await self._tool(step.index, step.tool, tool_input)
        reason = check_all(step.expect, output, metadata, self.outputs)
        if reason is not None:
            # A judgement step without a tool acted on nothing: trying it again is safe.
            raise StepFailed(step.index, reason, retryable=step.tool is None or not acts(step.tool))
        return output

    async def _result(self, step: ResultStep) -> str:
        if step.mode == "template":
            template = step.template or ""
            try:
                # A field that came back null or blank fails, rather than writing "by
                # null." or an empty list line into an answer that looks fine.
                answer = references.render_text(template, self.outputs, require_values=True)
            except references.BlankReference:
                answer = references.render_text(template, self.outputs)
                if answer.strip():
                    raise
            # A blank answer fails, as it does in the full loop (answer_problem). The
            # template renders the same outputs the same way, so asking again cannot help.
            if not answer.strip():
                raise StepFailed(step.index, "empty answer", retryable=False)
            return answer
        # The small model's blank answer fails in _small_model (answer_problem).
        return await self._small_model(
            step.index,
            references.render_text(step.prompt or "", self.outputs),
            max_tokens=result_max_tokens(step.example),
        )

    def _time_left(self, index: int) -> float:
        """What is left of the run's time for step `index`'s call; none left: OutOfTime."""
        left = time_left(self.deadline)
        if left <= 0:
            raise OutOfTime(index)
        return left

    async def _tool(
        self, index: int, tool: str, tool_input: dict[str, Any], *, heal: str | None = None
    ) -> tuple[Any, ToolMetadata]:
        """One tool call of step `index`; `heal`: the call is a heal's (an action's
        journal key is then its own: the step's recorded call may have been journaled)."""
        left = self._time_left(index)
        request = ExecTool(
            run_id=self.run_id,
            task_id=self.task_id,
            allowed_tools=self.spec.allowed_tools,
            tool=tool,
            input=tool_input,
            # Never more than the run has left: the tools service runs the call for the time
            # it is given, and would otherwise go on after the run ended at its deadline.
            timeout_s=call_timeout(
                tool_input, self.tool_timeout_s, min(self.max_tool_timeout_s, left)
            ),
            step=index,
            source="executor",
            call_id=f"a{self.attempt}-x{index}-{time.monotonic_ns() % 1_000_000_000}",
            attempt=self.attempt,
        )
        try:
            if self.effects is not None and acts(tool):
                # Done by an earlier delivery: its recorded result, not a second time.
                key = f"x{self.executor.version}-{index}" + (f"-{heal}" if heal else "")
                result = await self.effects.run_step(key, request, self.ports.exec_tool)
            else:
                result = await self.ports.exec_tool(request)
        except PortError as exc:
            failed = _port_failure(index, tool, exc)
            # No reply (a timeout, a tools service that died mid-call) does not mean the
            # tool did not run: an action is tried again only when the call surely never
            # reached a tools service, or it may act twice (a second order).
            if acts(tool) and exc.code not in _NEVER_REACHED_CODES:
                failed.retryable = False
            raise failed from None
        self.transcript.replay_step(
            index,
            {"tool": tool, "input": tool_input, "ok": result.ok, "output": result.output},
        )
        if not result.ok:
            error = result.error
            if error is None:  # no code to tell whether it acted: an action is not redone
                raise StepFailed(
                    index, f"{tool}: failed without an error", retryable=not acts(tool)
                )
            reason = f"{tool}: {error.code}: {error.message}"
            if error.code == SESSION_LOST:  # Chromium died under the run: as above
                raise StepFailed(index, reason, retryable=False, infrastructure=True)
            # An action that may have acted before it failed is not tried again.
            again = not _refused(error.code) and safe_to_retry(tool, error.code)
            raise StepFailed(index, reason, retryable=again)
        return result.output, result.metadata

    async def _check_quality(self, step: ResultStep, answer: str) -> None:
        """TaskSpec.quality_check: a replayed answer the small model finds unlike the
        original one in form fails the replay (services/executor/quality.py)."""
        prompt = quality.quality_prompt(self.spec.prompt, step.example, answer)
        said = await self._small_model(step.index, prompt, purpose="quality_check")
        verdict = quality.parse_verdict(said, content=f"{step.example}\n{answer}")
        if not verdict.ok:
            # The model's verdict: asking again until it says PASS would defeat the check.
            raise StepFailed(step.index, f"quality check: {verdict.reason}", retryable=False)

    async def _small_model(
        self,
        index: int,
        prompt: str,
        purpose: str = "replay_step",
        max_tokens: int = LLM_STEP_MAX_TOKENS,
    ) -> str:
        self._time_left(index)
        try:
            reply = await self.ports.complete(
                CompleteRequest(
                    model=self.executor.small_model or self.spec.small_model,
                    messages=request_messages([Message(role="user", content=prompt)]),
                    max_tokens=max_tokens,
                    effort="low",
                    run_id=self.run_id,
                    task_id=self.task_id,
                    purpose=purpose,
                )
            )
        except PortError as exc:
            if exc.billed is not None:
                self.ledger.add(exc.billed)
            raise _port_failure(index, "small model", exc) from None
        self.ledger.add(reply)
        text = final_text(reply.content)
        self.transcript.replay_step(index, {"prompt": prompt, "reply": text})
        problem = answer_problem(reply, text)
        if problem is not None:
            # A refusal or a cut-off answer would come back the same way if asked again;
            # an empty or odd stop might not.
            again = reply.stop_reason not in ("refusal", "max_tokens")
            raise StepFailed(index, f"small model: {problem}", retryable=again)
        return text
