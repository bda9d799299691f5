"""The second tier of trusting a replayed answer (services/runner/shadow.py): a shadow
full run for sampled, and unverified flagged, replays of read-only executors, against
scripted ports. Which replays are shadowed, what the comparison decides, and what the
run then delivers. No NATS."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from contracts.base import utc_now
from contracts.executors import ActiveExecutor, ExecutorHealth, ResultStep, ToolStep
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    TextBlock,
    TextEvent,
    ToolDefinition,
    Usage,
)
from contracts.runs import RunEvent, RunRequest
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, Fingerprint, ToolMetadata, ToolResult
from services.executor.verification import (
    COMPARISON_HEAD,
    PROMPT_HEAD,
    comparison_prompt,
    read_comparison,
    sampled,
)
from services.runner.attempt import AttemptResult, Limits, RunAttempt
from services.runner.ports import PortError, Ports
from services.runner.shadow import read_only, shadow_due
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

TASK, RUN = "weather", "run-1"
RECORDED = Fingerprint(lang="en", notes=["Temperatures in °F."], labels={"high": ["High"]})
COST = 0.0002  # every scripted model call


def request(shadow_rate: float | None) -> RunRequest:
    spec = TaskSpec(
        name=TASK,
        prompt="Report the high for Lisbon",
        allowed_tools=["browser_navigate", "browser_extract", "browser_click"],
        shadow_rate=shadow_rate,
    )
    return RunRequest(run_id=RUN, task_id=TASK, spec=spec, requested_at=utc_now())


def active(*, click: bool = False) -> ActiveExecutor:
    """Reads the high column (after a click, with `click`); answers "High: 64 °F". A
    seasoned version: no small-model check unless its page drifted."""
    steps: list[ToolStep | ResultStep] = []
    if click:
        steps.append(ToolStep(index=0, tool="browser_click", input={"text": "Lisbon"}))
    read = ToolStep(
        index=len(steps),
        tool="browser_extract",
        input={"selector": "tr", "fields": {"high": "td:nth-child(2)"}},
        fingerprint=RECORDED,
    )
    template = f"High: {{{{step_{read.index}[0].high}}}} °F"
    steps += [read, ResultStep(index=read.index + 1, mode="template", template=template)]
    return ActiveExecutor(
        executor=hand_built_executor(TASK, steps, version=2),
        health=ExecutorHealth(
            task_id=TASK, status="active", version=2, full_run_cost_usd=0.05, success_count=10
        ),
    )


@dataclass
class Services:
    """Scripted tools (the page now: `page`) and models: the small model's check
    (`verdict`, None: down) and comparison (`compared`), and the full loop's answer
    (`full`, None: its model fails)."""

    executor: ActiveExecutor
    full: str | None = "high: 64  °f"
    compared: str = "DIFFERENT: 18 °C is not 64 °F."
    verdict: str | None = "PASS: the page says 64 °F."
    page: Fingerprint = RECORDED
    prompts: list[str] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)
    closed: int = 0
    published: list[RunEvent] = field(default_factory=list)

    def ports(self) -> Ports:
        async def complete(req: CompleteRequest) -> CompleteReply:
            prompt = str(req.messages[0].content)
            self.prompts.append(prompt)
            if PROMPT_HEAD in prompt:
                text = self.verdict
            elif COMPARISON_HEAD in prompt:
                text = self.compared
            else:  # the shadow's full loop
                text = self.full
            if text is None:
                raise PortError("unavailable", "no llm service answered")
            return CompleteReply(
                id="m", model="claude-haiku-4-5", content=[TextBlock(text=text)],
                stop_reason="end_turn", usage=Usage(input_tokens=100, output_tokens=10),
                cost_usd=COST,
            )  # fmt: skip

        async def exec_tool(req: ExecTool) -> ToolResult:
            meta = ToolMetadata(url="http://weather.test/", fingerprint=self.page)
            return ToolResult(ok=True, output=[{"high": "64"}], duration_ms=1, metadata=meta)

        async def list_tools(names: list[str]) -> list[ToolDefinition]:
            self.offered.append(list(names))
            return []

        async def publish_text(event: TextEvent) -> None:
            pass

        async def active_executor(task_id: str) -> ActiveExecutor | None:
            return self.executor

        async def close_session(run_id: str, attempt: int) -> None:
            self.closed += 1

        return Ports(
            complete=complete,
            exec_tool=exec_tool,
            list_tools=list_tools,
            publish_text=publish_text,
            active_executor=active_executor,
            close_session=close_session,
        )

    def loops(self) -> list[str]:
        return [p for p in self.prompts if PROMPT_HEAD not in p and COMPARISON_HEAD not in p]


async def attempt(services: Services, shadow_rate: float | None = 1.0) -> AttemptResult:
    async def publish(event: RunEvent, msg_id: str) -> None:
        services.published.append(event)

    run = RunAttempt(
        request(shadow_rate),
        1,
        ports=services.ports(),
        transcript=TranscriptRecorder(RUN, TASK),
        limits=Limits(replay_retries=0, replay_backoff_s=0.0, verify_rate=0.0, shadow_rate=0.0),
        publish=publish,
    )
    return await run.run(0.0, None)


async def test_a_sampled_read_only_replay_is_verified_by_a_shadow_that_agrees() -> None:
    services = Services(active())
    result = await attempt(services)
    # The replay's answer is delivered; the shadow's loop is paid for by the run.
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert result.source == "executor" and not result.fell_back
    assert len(services.loops()) == 1
    assert result.ledger.cost_usd == pytest.approx(COST)
    assert result.loop_cost_usd is None
    check = result.replay.verification if result.replay else None
    assert check is not None
    assert (check.status, check.why, check.method) == ("verified", "shadow", "shadow")
    assert check.reasons[-1] == "shadow: the full run gave the same answer"
    assert check.cost_usd == pytest.approx(COST)
    assert result.replay is not None and result.replay.cost_usd == pytest.approx(COST)
    # In a fresh session, offered no tool that acts; nothing said the replay failed.
    assert services.closed == 1
    assert services.offered == [["browser_navigate", "browser_extract"]]
    assert services.published == []


async def test_answers_the_small_model_calls_the_same_verify_the_replay() -> None:
    services = Services(active(), full="Lisbon's high today is 64 °F.", compared="SAME: 64 °F.")
    result = await attempt(services)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.method) == ("verified", "shadow")
    assert result.ledger.cost_usd == pytest.approx(2 * COST)  # the loop and the comparison


async def test_a_shadow_that_answers_otherwise_overrules_the_replay() -> None:
    services = Services(active(), full="The high for Lisbon: 18 °C")
    result = await attempt(services)
    # The full run is the authority: its answer is the run's, as after a fallback.
    assert result.outcome.ok and result.outcome.result == "The high for Lisbon: 18 °C"
    assert result.source == "full_llm" and result.fell_back
    assert result.loop_cost_usd is not None and result.loop_cost_usd > 0
    replay = result.replay
    assert replay is not None and not replay.ok and replay.step == 1
    assert replay.reason == "verification: the full run answered otherwise: 18 °C is not 64 °F."
    assert replay.verification is not None
    assert (replay.verification.status, replay.verification.method) == ("wrong", "shadow")
    # Said once, as a fallback says it: the executor's health and a redelivery hear it.
    assert [e.event for e in services.published] == ["replay_failed"]
    assert services.published[0].replay == replay
    assert services.closed == 1


async def test_an_unclear_comparison_is_a_different_answer() -> None:
    services = Services(active(), full="18 °C", compared="Hard to say.")
    result = await attempt(services)
    assert result.source == "full_llm" and result.outcome.result == "18 °C"


async def test_an_executor_that_acts_is_never_shadowed() -> None:
    services = Services(active(click=True))
    assert not read_only(services.executor.executor)  # type: ignore[arg-type]
    result = await attempt(services)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    assert services.loops() == [] and services.closed == 0
    check = result.replay.verification if result.replay else None
    assert check is not None and check.status == "skipped" and check.method is None


async def test_a_shadow_whose_loop_fails_leaves_the_replays_answer() -> None:
    services = Services(active(), full=None)
    result = await attempt(services)
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert result.source == "executor" and not result.fell_back
    check = result.replay.verification if result.replay else None
    assert check is not None and check.status == "skipped" and check.method is None
    assert check.reasons[-1].startswith("shadow: the full run failed: ")
    assert services.published == []


async def test_a_flag_the_small_model_could_not_clear_is_shadowed() -> None:
    page = Fingerprint(lang="en", notes=["Temperatures in °C."], labels={"high": ["High"]})
    services = Services(active(), page=page, verdict=None)
    result = await attempt(services, shadow_rate=0.0)  # not in the sample: flagged
    assert len(services.loops()) == 1
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    check = result.replay.verification if result.replay else None
    assert check is not None
    assert (check.status, check.flagged, check.why, check.method) == (
        "verified", True, "flagged", "shadow"
    )  # fmt: skip
    assert check.reasons[-2].startswith("the check could not be made")


async def test_the_shadow_sample_is_its_own() -> None:
    # Decided by run id, apart from the small model's sample.
    executor = active().executor
    assert executor is not None
    runs = [f"run-{n}" for n in range(4000)]
    shadowed = {run for run in runs if shadow_due(executor, None, run, 0.05)}
    checked = {run for run in runs if sampled(run, 0.05)}
    assert 0.03 < len(shadowed) / 4000 < 0.07
    assert len(shadowed & checked) < 40  # about 0.25% of runs fall in both
    assert not shadow_due(executor, None, "run-1", 0.0)


def test_the_comparison_is_read_strictly() -> None:
    prompt = comparison_prompt("Report the high", "High: 64 °F", "64 °F")
    assert prompt.startswith(COMPARISON_HEAD) and "<full_answer>\n64 °F\n" in prompt
    assert read_comparison("SAME: both say 64 °F.", "").ok
    assert read_comparison("**Verdict:** SAME - both 64 °F", "").ok
    assert not read_comparison("DIFFERENT: °C against °F.", "").ok
    assert not read_comparison("They look alike.", "").ok
    assert not read_comparison("SAME: or DIFFERENT, hard to tell.", "").ok
    # A verdict word in the answers is their content, not a second verdict.
    assert read_comparison("SAME: both say DIFFERENT colours.", "DIFFERENT colours").ok
