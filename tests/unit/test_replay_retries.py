"""A replay step is tried once, then retried as configured; never zero times."""

from __future__ import annotations

import anyio
import pytest

from contracts.base import utc_now
from contracts.executors import Executor, ExecutorStats, ResultStep
from contracts.tasks import TaskSpec
from services.runner.ports import Ports, RunScope
from services.runner.replay import Replayer, StepFailed
from services.runner.transcript import TranscriptRecorder


def _replayer(retries: int) -> Replayer:
    async def unused(*args: object) -> None:
        raise AssertionError("no port is called here")

    ports = Ports(unused, unused, unused, unused, unused, unused)  # type: ignore[arg-type]
    scope = RunScope(
        spec=TaskSpec(name="t", prompt="p"), ports=ports, run_id="r", task_id="t", attempt=1,
        transcript=TranscriptRecorder("r", "t"),
    )  # fmt: skip
    executor = Executor(
        task_id="t", version=1, source_run_id="s", compiled_at=utc_now(),
        steps=[ResultStep(index=0, mode="template")],
        stats=ExecutorStats(total_steps=1, deterministic_steps=1, templated_steps=0, llm_steps=0,
                            estimated_replay_cost_usd=0.0, source_run_cost_usd=0.01),
    )  # fmt: skip
    return Replayer(executor, scope, retries=retries, backoff_s=0.0)


@pytest.mark.parametrize(("retries", "tries"), [(-1, 1), (0, 1), (1, 2), (3, 4)])
def test_a_failing_step_is_tried_once_plus_its_retries(retries: int, tries: int) -> None:
    replayer = _replayer(retries)
    calls: list[int] = []

    async def failing() -> None:
        calls.append(1)
        raise StepFailed(0, f"no match on try {len(calls)}")

    async def main() -> None:
        with pytest.raises(StepFailed, match=f"try {tries}"):
            await replayer._with_retries(0, failing)

    anyio.run(main)
    assert len(calls) == tries


def test_a_step_that_recovers_on_retry_returns_its_output() -> None:
    replayer = _replayer(1)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise StepFailed(0, "not yet")
        return "items"

    assert anyio.run(replayer._with_retries, 0, flaky) == "items"
    assert len(calls) == 2


def test_a_refusal_is_not_retried() -> None:
    """tool_not_allowed, path_denied, a malformed request: asking again cannot help."""
    replayer = _replayer(3)
    calls: list[int] = []

    async def refused() -> None:
        calls.append(1)
        raise StepFailed(0, "file_write: tool_not_allowed: not in allowed_tools", retryable=False)

    async def main() -> None:
        with pytest.raises(StepFailed, match="tool_not_allowed"):
            await replayer._with_retries(0, refused)

    anyio.run(main)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("code", "retried"),
    [("tool_not_allowed", False), ("path_denied", False), ("invalid_request", False),
     ("timeout", True), ("element_not_found", True), ("unavailable", True)],
)  # fmt: skip
def test_which_tool_errors_are_worth_a_retry(code: str, retried: bool) -> None:
    from services.runner.replay import _refused

    assert _refused(code) is not retried
