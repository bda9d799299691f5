"""The executor's stats: how many steps of each kind, and the small model's cost per
replay, estimated on the recorded data (it stands in for the fresh data when sizing
prompts; a pick or a value answers like last time)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import msgspec

from contracts.executors import (
    ExecutorStats,
    ExecutorStep,
    InList,
    LlmStep,
    ResultStep,
    ToolStep,
)
from contracts.tasks import TaskSpec
from contracts.traces import Trace
from services.executor import references
from services.executor.cost import estimate_call
from services.executor.quality import quality_prompt
from services.kernel.pricing import PriceTable

# About the size of a quality check's reply ("PASS: " and one short sentence).
QUALITY_VERDICT = "PASS: the new answer has the same form and kind of content."


def stats(
    steps: list[ExecutorStep], trace: Trace, task: TaskSpec, prices: PriceTable | None
) -> ExecutorStats:
    """Counts, and the small model's cost estimated on the recorded data (it stands in
    for the fresh data when sizing prompts; a pick or value answers like last time)."""
    by_trace = {step.index: step for step in trace.steps}
    outputs: dict[int, Any] = {}
    cost = 0.0
    for step in steps:
        match step:
            case ToolStep():
                recorded = by_trace.get(step.trace_step) if step.trace_step is not None else None
                outputs[step.index] = recorded.output if recorded is not None else None
            case LlmStep():
                reply = _expected_reply(step, outputs)
                outputs[step.index] = reply
                cost += _estimate(step.prompt, reply, outputs, task, prices)
            case ResultStep(mode="llm"):
                cost += _estimate(step.prompt or "", trace.answer, outputs, task, prices)
    if task.quality_check:
        # Every replay also has the small model judge its answer against the original.
        prompt = quality_prompt(task.prompt, trace.answer, trace.answer)
        cost += estimate_call(prompt, QUALITY_VERDICT, task.small_model, prices)[1]
    return ExecutorStats(
        **_counts(steps),
        estimated_replay_cost_usd=round(cost, 9),
        source_run_cost_usd=trace.cost_usd,
    )


def recount(steps: list[ExecutorStep], stats: ExecutorStats) -> ExecutorStats:
    """`stats` for `steps` healed in place (services/compiler/healed.py): the counts
    recomputed; the cost estimate kept, since a heal changes locators only, no prompt or
    recorded output it is sized on, and so is the full run the version stands for."""
    return msgspec.structs.replace(stats, **_counts(steps))


def _counts(steps: list[ExecutorStep]) -> dict[str, int]:
    kinds = Counter(_kind(step) for step in steps)
    return {
        "total_steps": len(steps),
        "deterministic_steps": kinds["deterministic"],
        "templated_steps": kinds["templated"],
        "llm_steps": kinds["llm"],
    }


def _kind(step: ExecutorStep) -> str:
    """deterministic, templated or llm (see ExecutorStats)."""
    match step:
        case ToolStep():
            return "templated" if step.templated else "deterministic"
        case LlmStep() | ResultStep(mode="llm"):
            return "llm"
        case ResultStep():
            return "templated" if step.variables else "deterministic"
    return "deterministic"  # a condition step


def _expected_reply(step: LlmStep, outputs: Mapping[int, Any]) -> str:
    """What the small model would answer on the recorded data (for sizing only)."""
    for expectation in step.expect:
        if isinstance(expectation, InList):
            try:
                items = references.render_string(expectation.ref, outputs)
                if isinstance(items, list) and items:
                    return references.stringify(
                        references.lookup(items[0], tuple(expectation.path))
                    )
            except (references.BadReference, KeyError, IndexError, TypeError):
                break
    return " " * 40


def _estimate(
    prompt: str,
    expected: str,
    outputs: Mapping[int, Any],
    task: TaskSpec,
    prices: PriceTable | None,
) -> float:
    try:
        rendered = references.render_string(prompt, outputs)
    except references.BadReference:
        rendered = prompt
    text = rendered if isinstance(rendered, str) else references.stringify(rendered)
    return estimate_call(text, expected, task.small_model, prices)[1]
