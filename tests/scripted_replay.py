"""Scripted ports for one attempt at a run that replays an executor (services/runner/
attempt.py): a hand-built executor that reads the high for Lisbon, the tools that read
its page, and the models that check, compare and answer instead. No NATS."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

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
from services.executor.verification import COMPARISON_HEAD, PROMPT_HEAD
from services.runner.attempt import AttemptResult, Limits, RunAttempt
from services.runner.ports import PortError, Ports
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor

TASK, RUN = "weather", "run-1"
RECORDED = Fingerprint(lang="en", notes=["Temperatures in °F."], labels={"high": ["High"]})
COST = 0.0002  # every scripted model call


def ports(
    complete: Callable[[CompleteRequest], Awaitable[CompleteReply]],
    exec_tool: Callable[[ExecTool], Awaitable[ToolResult]],
    list_tools: Callable[[list[str]], Awaitable[list[ToolDefinition]]],
    active_executor: Callable[[str], Awaitable[ActiveExecutor | None]],
    close_session: Callable[[str, int], Awaitable[None]],
) -> Ports:
    """Ports from scripted services, in Ports' order; the streamed text goes nowhere."""

    async def publish_text(event: TextEvent) -> None:
        pass

    return Ports(
        complete=complete,
        exec_tool=exec_tool,
        list_tools=list_tools,
        publish_text=publish_text,
        active_executor=active_executor,
        close_session=close_session,
    )


def request(
    verify_rate: float | None = None,
    shadow_rate: float | None = None,
    budget_left_usd: float | None = None,
) -> RunRequest:
    spec = TaskSpec(
        name=TASK,
        prompt="Report the high for Lisbon",
        allowed_tools=["browser_navigate", "browser_extract", "browser_click"],
        verify_rate=verify_rate,
        shadow_rate=shadow_rate,
    )
    return RunRequest(
        run_id=RUN,
        task_id=TASK,
        spec=spec,
        requested_at=utc_now(),
        budget_left_usd=budget_left_usd,
    )


def active(replays: int = 10, click: bool = False, candidate: bool = False) -> ActiveExecutor:
    """Reads the high column (after a click, with `click`); answers "High: 64 °F".
    Replayed `replays` times before: with 10, a seasoned version, not checked by the
    small model unless its page drifted (or it is a `candidate`)."""
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
            task_id=TASK,
            status="active",
            version=2,
            full_run_cost_usd=0.05,
            success_count=replays,
            candidate=candidate,
        ),
    )


@dataclass
class Services:
    """Scripted tools (the page now: `page`) and models: the small model's check
    (`verdict`, None: down) and comparison (`compared`), and the full loop's answer
    (`full`, None: its model fails; by default the replay's answer, written otherwise)."""

    executor: ActiveExecutor
    full: str | None = "high: 64  °f"
    compared: str = "DIFFERENT: 18 °C is not 64 °F."
    verdict: str | None = "PASS: the page says 64 °F for Lisbon."
    page: Fingerprint = RECORDED
    prompts: list[str] = field(default_factory=list)
    offered: list[list[str]] = field(default_factory=list)
    closed: int = 0
    published: list[RunEvent] = field(default_factory=list)

    def answer(self, prompt: str) -> str | None:
        """The scripted models' reply to `prompt` (None: the model is down)."""
        if PROMPT_HEAD in prompt:
            return self.verdict
        if COMPARISON_HEAD in prompt:
            return self.compared
        return self.full  # the full loop, after a fallback or as a shadow

    def tool(self, req: ExecTool) -> ToolResult:
        """The scripted tools' result of a call."""
        meta = ToolMetadata(url="http://weather.test/", fingerprint=self.page)
        return ToolResult(ok=True, output=[{"high": "64"}], duration_ms=1, metadata=meta)

    def ports(self) -> Ports:
        async def complete(req: CompleteRequest) -> CompleteReply:
            prompt = str(req.messages[0].content)
            self.prompts.append(prompt)
            text = self.answer(prompt)
            if text is None:
                raise PortError("unavailable", "no llm service answered")
            return CompleteReply(
                id="m", model="claude-haiku-4-5", content=[TextBlock(text=text)],
                stop_reason="end_turn", usage=Usage(input_tokens=100, output_tokens=10),
                cost_usd=COST,
            )  # fmt: skip

        async def exec_tool(req: ExecTool) -> ToolResult:
            return self.tool(req)

        async def list_tools(names: list[str]) -> list[ToolDefinition]:
            self.offered.append(list(names))
            return []

        async def active_executor(task_id: str) -> ActiveExecutor | None:
            return self.executor

        async def close_session(run_id: str, attempt: int) -> None:
            self.closed += 1

        return ports(complete, exec_tool, list_tools, active_executor, close_session)

    def checks(self) -> list[str]:
        """The small model's checks of the replay's answer."""
        return [p for p in self.prompts if PROMPT_HEAD in p]

    def loops(self) -> list[str]:
        """The full loop's calls."""
        return [p for p in self.prompts if PROMPT_HEAD not in p and COMPARISON_HEAD not in p]


async def attempt(
    services: Services,
    verify_rate: float | None = None,
    shadow_rate: float | None = None,
    budget_left_usd: float | None = None,
) -> AttemptResult:
    """One attempt; a rate the task does not set is 0 (no check or shadow by sample).
    `budget_left_usd`: what the day's budget had left when the run went out."""

    async def publish(event: RunEvent, msg_id: str) -> None:
        services.published.append(event)

    run = RunAttempt(
        request(verify_rate, shadow_rate, budget_left_usd),
        1,
        ports=services.ports(),
        transcript=TranscriptRecorder(RUN, TASK),
        limits=Limits(replay_retries=0, replay_backoff_s=0.0, verify_rate=0.0, shadow_rate=0.0),
        publish=publish,
    )
    return await run.run(0.0, None)
