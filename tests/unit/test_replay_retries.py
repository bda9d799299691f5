"""A replay step is tried once, then retried as configured; never zero times."""

from __future__ import annotations

import anyio
import pytest

from contracts.executors import ResultStep
from services.runner.replay import Replayer, StepFailed
from tests.hand_built_replay import hand_built_executor, offline_scope


def _replayer(retries: int) -> Replayer:
    executor = hand_built_executor("t", [ResultStep(index=0, mode="template")])
    return Replayer(executor, offline_scope(), retries=retries, backoff_s=0.0)


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
