"""Executors written by hand for replay tests, and a run scope with no services behind
it (for Replayer tests that never reach a port)."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.base import utc_now
from contracts.executors import Executor, ExecutorStats, ExecutorStep, LlmStep, ToolStep
from contracts.llm import CompleteReply, TextBlock, Usage
from contracts.tasks import TaskSpec
from services.runner.ports import Ports, RunScope
from services.runner.transcript import TranscriptRecorder


def hand_built_executor(
    task_id: str, steps: Sequence[ExecutorStep], *, version: int = 1
) -> Executor:
    """An executor as the compiler would store it; its stats are counted from the steps
    (the tests that use it do not look at them)."""
    llm = sum(isinstance(step, LlmStep) for step in steps)
    templated = sum(isinstance(step, ToolStep) and step.templated for step in steps)
    return Executor(
        task_id=task_id,
        version=version,
        source_run_id="seed",
        compiled_at=utc_now(),
        steps=list(steps),
        stats=ExecutorStats(
            total_steps=len(steps),
            deterministic_steps=len(steps) - llm,
            templated_steps=templated,
            llm_steps=llm,
            estimated_replay_cost_usd=0.0,
            source_run_cost_usd=0.01,
        ),
    )


def small_model_reply(text: str, stop_reason: str = "end_turn") -> CompleteReply:
    """What the llm service answers for one small-model step that wrote `text`."""
    return CompleteReply(
        id="m1",
        model="claude-haiku-5-5",
        content=[TextBlock(text=text)],
        stop_reason=stop_reason,
        usage=Usage(input_tokens=100, output_tokens=10),
        cost_usd=0.00002,
    )


def offline_scope(run_id: str = "r", task_id: str = "t") -> RunScope:
    """A run's scope whose ports fail the test if any is called."""

    async def unused(*args: object) -> None:
        raise AssertionError("no port is called here")

    ports = Ports(unused, unused, unused, unused, unused, unused)  # type: ignore[arg-type]
    return RunScope(
        spec=TaskSpec(name=task_id, prompt="p"),
        ports=ports,
        run_id=run_id,
        task_id=task_id,
        attempt=1,
        transcript=TranscriptRecorder(run_id, task_id),
    )
