"""Healing a replayed step in place: a tool step whose element is gone (the page changed)
is repaired by the small model, and the replay goes on, instead of paying for a full run.

The replayer hands a step's final failure to `Healer.heal`. A failure that says the page
changed (services/executor/healing.py `page_changed`) of a step that may heal gets one
try: the page's candidates (browser_candidates, read-only), the small model's pick among
them (by number: it never writes a selector), the step again with the new locators. The
healed call must pass the step's expectations, and a read's values must look like the
recorded ones (`values_alike`); an action heals only onto the same control
(`same_control`). Anything less and the original failure stands: the run falls back to
the full loop, as before. A healed replay's answer is always checked (verification.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from contracts.executors import ToolStep
from contracts.runs import HealedStep
from contracts.tools import Candidates, ToolMetadata
from services.executor.healing import (
    HEALABLE_KEYS,
    MAX_HEALS_PER_RUN,
    Repair,
    acts_by_key,
    heal_prompt,
    page_changed,
    read_heal,
    values_alike,
)

CANDIDATES_TOOL = "browser_candidates"

# Calls a tool for step `index` (`key`: the effect journal's key for an action, None:
# the step's own); returns its output and metadata, raises the replayer's StepFailed.
CallTool = Callable[[int, str, dict[str, Any], str | None], Awaitable[tuple[Any, ToolMetadata]]]
# Asks the small model for step `index`; returns its text, raises StepFailed.
Ask = Callable[[int, str], Awaitable[str]]
# The step's expectations against an output: why it misses them, or None.
Check = Callable[[ToolStep, Any, ToolMetadata], str | None]


class NotHealed(Exception):
    """Why a step could not be healed, in words (its original failure then stands)."""


class Healer:
    """The heals of one replay: at most MAX_HEALS_PER_RUN, each recorded in `healed`."""

    def __init__(
        self, task_prompt: str, call_tool: CallTool, ask: Ask, spent: Callable[[], float]
    ) -> None:
        self.task_prompt = task_prompt
        self.call_tool = call_tool
        self.ask = ask
        self.spent = spent
        self.healed: list[HealedStep] = []

    def may_heal(self, step: ToolStep, reason: str, *, expectation: bool) -> bool:
        if len(self.healed) >= MAX_HEALS_PER_RUN:
            return False
        return page_changed(step.tool, reason, expectation=expectation)

    async def heal(
        self, step: ToolStep, tool_input: dict[str, Any], reason: str, check: Check
    ) -> tuple[Any, ToolMetadata, dict[str, Any]]:
        """Repair `step` (run with `tool_input`, failed for `reason`) on the page as it
        is: the healed call's output, metadata and input; NotHealed when it cannot be."""
        before = self.spent()
        page = await self._candidates(step)
        prompt = heal_prompt(self.task_prompt, step, reason, page)
        repair = read_heal(await self.ask(step.index, prompt), step, page)
        if isinstance(repair, str):
            raise NotHealed(repair)
        healed_input = _with_repair(step, tool_input, repair)
        key = f"h{len(self.healed) + 1}" if acts_by_key(step.tool) else None
        output, metadata = await self.call_tool(step.index, step.tool, healed_input, key)
        missed = check(step, output, metadata)
        if missed is None and not acts_by_key(step.tool):
            missed = values_alike(step, output)
        if missed is not None:
            raise NotHealed(f"the healed step failed its checks: {missed}")
        self.healed.append(
            HealedStep(
                step=step.index,
                tool=step.tool,
                input=repair.input,
                was={k: step.input[k] for k in HEALABLE_KEYS[step.tool] if k in step.input},
                reason=reason,
                fingerprint=metadata.fingerprint,
                target=metadata.target,
                cost_usd=round(self.spent() - before, 8),
            )
        )
        return output, metadata, healed_input

    async def _candidates(self, step: ToolStep) -> Candidates:
        purpose = "act" if acts_by_key(step.tool) else "read"
        output, _ = await self.call_tool(step.index, CANDIDATES_TOOL, {"purpose": purpose}, None)
        try:
            return msgspec.convert(output, Candidates)
        except msgspec.ValidationError as exc:
            raise NotHealed(f"the page's candidates could not be read: {exc}") from None


def _with_repair(step: ToolStep, tool_input: dict[str, Any], repair: Repair) -> dict[str, Any]:
    """The step's input as replayed, its locators replaced by the repair's: a click
    found by text is now found by the candidate's selector."""
    healed = {**tool_input, **repair.input}
    if step.tool == "browser_click" and "selector" in repair.input:
        healed.pop("text", None)
    return healed
