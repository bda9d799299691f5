"""The second tier of trusting a replayed answer: a shadow full run.

A replay whose executor only reads can be checked the expensive way, by doing the task
again: path B's full loop, in a fresh browser session, with the run's ledger (what it
costs is the run's, so a replay's saving stays honest). It runs for a sample of clean
replays (`shadow_rate`, by run id, apart from the small model's sample) and for every
flagged replay whose small-model check could not be made. An executor with a step that
acts is never shadowed: a second run would do its actions twice; nor may the shadow act
itself (it is offered the task's tools less the acting ones).

The answers are compared: equal after whitespace and case, or said the same by the small
model (services/executor/verification.py's comparison prompt), the replay is verified.
Otherwise the full run is the authority: the run delivers its answer, as after a
fallback. A shadow that fails itself (its loop, its time, its comparison) leaves the
replay's answer as it was, with the reason noted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import anyio
import msgspec

from contracts.executors import Executor, LlmStep, ToolStep
from contracts.llm import CompleteRequest, Message
from contracts.runs import Verification
from services.executor.toolkinds import acts
from services.executor.verification import comparison_prompt, read_comparison, sampled
from services.runner.accounting import Ledger
from services.runner.agent_loop import (
    AgentLoop,
    AgentOutcome,
    final_text,
    request_messages,
    time_left,
)
from services.runner.ports import PortError, RunScope
from services.runner.verification import MAX_REASONS

DEFAULT_SHADOW_RATE = 0.01
# The shadow stops this long before the run's deadline: a shadow cut off by the deadline
# itself would end the run `deadline`, its replay's good answer lost.
SHADOW_MARGIN_S = 1.0
COMPARISON_MAX_TOKENS = 1024
SAME_ANSWER = "shadow: the full run gave the same answer"
# What a replay the shadow overruled failed of: its reason is "verification: " and this,
# as a small-model check's is "verification: FAIL: ...".
OTHERWISE = "the full run answered otherwise"


def read_only(executor: Executor) -> bool:
    """No step of the executor acts (a tool step, or an llm step that calls a tool)."""
    for step in executor.steps:
        if isinstance(step, ToolStep) and acts(step.tool):
            return False
        if isinstance(step, LlmStep) and step.tool is not None and acts(step.tool):
            return False
    return True


def shadow_due(executor: Executor, check: Verification | None, run_id: str, rate: float) -> bool:
    """Whether a replay that answered is shadowed. Its own sample (the run id salted),
    so a run the small model checked may be shadowed as well, and a redelivery decides
    the same way."""
    if not read_only(executor) or (check is not None and check.status == "wrong"):
        return False
    if check is not None and check.status == "unverified":
        return True
    return sampled(f"{run_id}:shadow", rate)


def same_answer(first: str, second: str) -> bool:
    return " ".join(first.split()).casefold() == " ".join(second.split()).casefold()


def reading_scope(scope: RunScope) -> RunScope | None:
    """The shadow's scope: the run's, offered none of the acting tools and with no
    effect journal (nothing it does is an action). None: the task allows no other tool."""
    tools = [tool for tool in scope.spec.allowed_tools if not acts(tool)]
    if not tools:
        return None
    spec = msgspec.structs.replace(scope.spec, allowed_tools=tools)
    return replace(scope, spec=spec, effects=None)


@dataclass(frozen=True)
class ShadowResult:
    """The replay's verification, with the shadow's verdict added; `overruled`: the
    shadow's outcome, when its answer differs and is the run's."""

    verification: Verification
    overruled: AgentOutcome | None = None


@dataclass(frozen=True)
class _Found:
    """What the shadow found: `same` None when it could give no verdict."""

    note: str
    same: bool | None = None
    outcome: AgentOutcome | None = None


class Shadow:
    """One shadow full run for a replayed answer, within the run's time (`deadline`, on
    anyio's clock) and on the run's `ledger`."""

    def __init__(
        self,
        scope: RunScope,
        *,
        ledger: Ledger,
        deadline: float,
        tool_timeout_s: float,
        max_tool_timeout_s: float,
        small_model: str,
    ) -> None:
        self.scope = scope
        self.ledger = ledger
        self.deadline = deadline - SHADOW_MARGIN_S
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_timeout_s = max_tool_timeout_s
        self.small_model = small_model

    async def run(self, replayed: str, check: Verification) -> ShadowResult:
        """Run the full loop and compare its answer with `replayed`; `check` is the
        replay's verification so far."""
        before = self.ledger.cost_usd
        found = _Found("shadow: the full run could not finish in the run's time")
        with anyio.CancelScope(deadline=self.deadline):
            found = await self._run(replayed)
        reasons = [*check.reasons, found.note][-MAX_REASONS:]
        cost = round(check.cost_usd + self.ledger.cost_usd - before, 8)
        if found.same is None:
            # No verdict: the replay's stands, with the attempt noted.
            return ShadowResult(msgspec.structs.replace(check, reasons=reasons, cost_usd=cost))
        verdict = Verification(
            status="verified" if found.same else "wrong",
            flagged=check.flagged,
            why=check.why or "shadow",
            method="shadow",
            reasons=reasons,
            cost_usd=cost,
        )
        return ShadowResult(verdict, None if found.same else found.outcome)

    async def _run(self, replayed: str) -> _Found:
        scope = reading_scope(self.scope)
        left = time_left(self.deadline)
        if scope is None:
            return _Found("shadow: the full run failed: the task allows no tool that only reads")
        if left <= 0:
            return _Found("shadow: the full run could not finish in the run's time")
        scope.transcript.note("shadow: the full LLM run, to check the replayed answer")
        outcome = await AgentLoop(
            scope,
            ledger=self.ledger,
            tool_timeout_s=min(self.tool_timeout_s, left),
            max_tool_timeout_s=min(self.max_tool_timeout_s, left),
            deadline=self.deadline,
        ).run()
        if not outcome.ok or outcome.result is None:
            why = outcome.error or outcome.reason or "no answer"
            return _Found(f"shadow: the full run failed: {why}")
        if same_answer(replayed, outcome.result):
            return _Found(SAME_ANSWER, same=True)
        return await self._compare(replayed, outcome, outcome.result)

    async def _compare(self, replayed: str, outcome: AgentOutcome, full: str) -> _Found:
        """The small model's word on two answers that differ in form."""
        prompt = comparison_prompt(self.scope.spec.prompt, replayed, full)
        try:
            reply = await self.scope.ports.complete(
                CompleteRequest(
                    model=self.small_model,
                    messages=request_messages([Message(role="user", content=prompt)]),
                    max_tokens=COMPARISON_MAX_TOKENS,
                    effort="low",
                    run_id=self.scope.run_id,
                    task_id=self.scope.task_id,
                    purpose="verification",
                )
            )
        except PortError as exc:
            if exc.billed is not None:
                self.ledger.add(exc.billed)
            # A model outage is no verdict on the replay: its answer stands, noted.
            return _Found(f"shadow: the answers differ and could not be compared: {exc}")
        self.ledger.add(reply)
        text = final_text(reply.content)
        self.scope.transcript.note("shadow: the answers compared", prompt=prompt, reply=text)
        verdict = read_comparison(text, f"{replayed}\n{full}")
        if verdict.ok:
            return _Found(f"shadow: SAME: {verdict.reason}", same=True)
        return _Found(f"shadow: {OTHERWISE}: {verdict.reason}", same=False, outcome=outcome)
