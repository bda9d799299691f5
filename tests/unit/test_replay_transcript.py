"""A replayed run's transcript shows every step: the tool steps, the conditions that
held or not, and the result step with the answer it wrote (bounded like every entry)."""

from __future__ import annotations

import dataclasses

import anyio

from contracts.executors import ConditionStep, ResultStep, ToolStep
from contracts.llm import CompleteReply, CompleteRequest
from contracts.tools import ExecTool, ToolResult
from services.runner.replay import Replayer, ReplayResult
from services.runner.transcript import MAX_STRING
from tests.hand_built_replay import hand_built_executor, offline_scope, small_model_reply


async def _exec_tool(request: ExecTool) -> ToolResult:
    return ToolResult(ok=True, output=f"{request.tool} ok: 42", duration_ms=3)


def _replay(steps: list, **ports: object) -> tuple[ReplayResult, list]:  # type: ignore[type-arg]
    scope = offline_scope()
    scope = dataclasses.replace(
        scope, ports=dataclasses.replace(scope.ports, exec_tool=_exec_tool, **ports)
    )
    result = anyio.run(Replayer(hand_built_executor("t", steps), scope, backoff_s=0.0).run)
    return result, [e for e in scope.transcript.entries if e.kind == "replay_step"]


def test_the_last_replay_step_holds_the_answer() -> None:
    result, steps = _replay(
        [
            ToolStep(index=0, tool="browser_navigate", input={"url": "http://x"}),
            ToolStep(index=1, tool="browser_extract", input={"selector": ".price"}),
            ResultStep(index=2, mode="template", template="Price: {{step_1}}"),
        ]
    )
    assert result.ok and result.answer == "Price: browser_extract ok: 42"
    assert [e.step for e in steps] == [0, 1, 2]
    assert steps[-1].detail == {"result": "template", "answer": result.answer}


def test_a_condition_that_held_is_recorded_too() -> None:
    result, steps = _replay(
        [
            ToolStep(index=0, tool="browser_extract", input={"selector": ".price"}),
            ConditionStep(index=1, ref="{{step_0}}"),
            ResultStep(index=2, mode="template", template="{{step_0}}"),
        ]
    )
    assert result.ok
    assert steps[1].step == 1 and steps[1].detail == {"condition": "{{step_0}}", "held": True}
    assert steps[-1].detail == {"result": "template", "answer": result.answer}


def test_an_llm_written_answer_is_recorded_bounded() -> None:
    long_answer = "x" * (MAX_STRING + 500)

    async def complete(request: CompleteRequest) -> CompleteReply:
        return small_model_reply(long_answer)

    result, steps = _replay(
        [
            ToolStep(index=0, tool="browser_extract", input={"selector": ".price"}),
            ResultStep(index=1, mode="llm", prompt="Say {{step_0}}", example="x" * 9000),
        ],
        complete=complete,
    )
    assert result.ok and result.answer == long_answer
    last = steps[-1]
    assert last.step == 1 and last.detail is not None and last.detail["result"] == "llm"
    assert last.detail["answer"].startswith("x" * MAX_STRING)
    assert len(last.detail["answer"]) < len(long_answer)
