"""Healing a replayed step in place: which failures a heal may repair, what it may change,
how the small model is asked, and how its answer is read and checked. Pure; the runner
makes the calls (services/runner/healing.py) and the compiler records the healed version
(apply_heal).

A step heals only by new locators for the same tool: the keys in HEALABLE_KEYS. What it
types, where it navigates, what it submits never change, and a step that fills a form is
not healed at all: a form filled into the wrong fields is a wrong action, not a repair.
"""

from __future__ import annotations

import msgspec

from contracts.executors import ToolStep
from contracts.runs import HealedStep

# Per tool, the input keys a heal may replace (its locators).
HEALABLE_KEYS: dict[str, tuple[str, ...]] = {
    "browser_extract": ("selector", "fields"),
    "browser_click": ("selector", "text"),
    "browser_type": ("selector",),
}


def healable_tool(tool: str) -> bool:
    return tool in HEALABLE_KEYS


def apply_heal(step: ToolStep, healed: HealedStep) -> ToolStep | None:
    """`step` with the heal's new locators, and what the healed call read or acted on in
    place of what was recorded; None when the heal is not one this step may take (another
    tool, or a key outside its locators)."""
    allowed = HEALABLE_KEYS.get(step.tool)
    if allowed is None or healed.tool != step.tool or healed.step != step.index:
        return None
    if not healed.input or any(key not in allowed for key in healed.input):
        return None
    tool_input = {**step.input, **healed.input}
    # A click found by text or by selector: the heal's locator replaces the other one.
    if step.tool == "browser_click":
        for key in ("selector", "text"):
            if key not in healed.input:
                tool_input.pop(key, None)
    return msgspec.structs.replace(
        step,
        input=tool_input,
        fingerprint=healed.fingerprint if healed.fingerprint is not None else step.fingerprint,
        target=healed.target if healed.target is not None else step.target,
    )
