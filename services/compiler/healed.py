"""Healed versions: a replay that repaired steps in place (the runner's heal: a step's
element was gone, the small model found it again, the same tool with new locators) and
whose answer then verified leaves a new version, the replayed one with those steps
healed. Pure: `decide` turns the replay's events into the version's.

Rules:
- only a replay that answered (ok) and whose answer the check verified: every healed
  answer is checked (why "healed"); one found wrong is a failed replay as ever
  (health.py), and one not verified (skipped, unverified) records no version;
- the replayed version must be known and active, and its stored executor must decode;
- every heal must apply (services/executor/healing.apply_heal: a tool step, the same
  tool, only its locators), and only to locators recorded as they are: one filled from
  an earlier step's output on each run would be frozen by a literal one, so such a heal
  records nothing;
- the new version is the replayed executor with the heals applied, `healed_from` the
  replayed version, its source run the replay's run, its stats recounted
  (stats.recount), a `reason` in words ("healed step 2 (browser_extract): selector
  '.price' -> '.cost' after: <why the step failed>");
- it is compiled while another version is current, so it is a candidate under the
  rules for any compilation (promotion.on_compile): the replayed version (or the one it
  stands in for, if it is a candidate itself) stands by, and the next verified replay of
  the healed version promotes it. The healed replay promotes nothing itself
  (promotion.on_verified): steps the replayed version does not hold answered;
- once per run, keyed by the run id as a compiled trace is (health.decide_trace); and
  not when an active version already calls the same tools with the same inputs (a
  pinned version, which stays current, heals again on each run: its healed version is
  recorded once and waits behind the pin), nor for a heal that leaves the locators as
  they were.

When no version is recorded, `Healing.note` says why, for the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from contracts.base import MAX_REASON_CHARS
from contracts.executors import Executor, ExecutorStep, ToolStep
from contracts.runs import HealedStep
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler.stats import recount
from services.executor import references
from services.executor.healing import HEALABLE_KEYS, apply_heal

# How much of one locator value a reason shows (a `fields` map can be long).
SHOWN_CHARS = 80


@dataclass(frozen=True)
class Healing:
    """The healed version's events (none: see `note`, why not)."""

    events: list[ev.HealthEvent] = field(default_factory=list)
    note: str | None = None


def decide(
    health: h.Health, replayed: list[ev.HealthEvent], heals: Sequence[HealedStep], at: datetime
) -> Healing:
    """The healed version a replay leaves: `replayed` are the events health.decide_replay
    decided on `health` for it (none: an outcome counted already), `heals` the run
    event's healed steps."""
    outcome = replayed[0] if replayed else None
    if not heals or not isinstance(outcome, ev.ReplaySucceeded):
        return Healing()  # nothing healed, a failed replay, or one counted already
    check = outcome.verification
    if check is None or check.status != "verified":
        status = check.status if check is not None else "not checked"
        return Healing(note=f"its answer was not verified ({status})")
    # Decided on the state before `replayed`: a healed replay's own events promote
    # nothing and change no version's status, which is all a compilation reads.
    state = health.version(outcome.version)
    if state is None or state.status != "active":
        why = "unknown" if state is None else state.status
        return Healing(note=f"v{outcome.version}, the version healed, is {why}")
    built = healed_executor(state, heals, outcome.run_id, at)
    if isinstance(built, str):
        return Healing(note=built)
    executor, reason = built
    inputs = _inputs(msgspec.to_builtins(executor.steps))
    same = next(
        (
            v
            for v in health.versions
            if v.status == "active" and _inputs(v.executor.get("steps")) == inputs
        ),
        None,
    )
    if same is not None:
        return Healing(note=f"v{same.version} already replays these steps")
    events = h.decide_trace(
        health,
        executor,
        None,
        outcome.run_id,
        at,
        reason=reason,
        healed_steps=tuple(sorted({heal.step for heal in heals})),
    )
    if not events:
        return Healing(note=f"run {outcome.run_id} recorded a version already")
    return Healing(events)


def _inputs(steps: Any) -> list[tuple[Any, Any]]:
    """What each step does, as far as a heal goes: its tool and input. (What a healed
    call read or acted on, fingerprint and target, may differ from run to run: a
    version that heals again on each run, behind a pin, would otherwise be recorded
    anew each time.)"""
    if not isinstance(steps, list):
        return []
    return [(s.get("tool"), s.get("input")) for s in steps if isinstance(s, dict)]


def healed_executor(
    state: h.VersionState, heals: Sequence[HealedStep], run_id: str, at: datetime
) -> tuple[Executor, str] | str:
    """`state`'s executor with every heal applied, as the next version made by run
    `run_id` at `at` (its number is assigned when recorded), and the reason for it in
    words; or why it cannot be."""
    try:
        executor = h.decode_executor(state.executor)
    except (msgspec.ValidationError, TypeError) as exc:
        return f"v{state.version}'s executor cannot be decoded: {exc}"
    steps: list[ExecutorStep] = list(executor.steps)
    position = {step.index: n for n, step in enumerate(steps)}
    reasons = []
    for heal in heals:
        n = position.get(heal.step)
        step = steps[n] if n is not None else None
        if n is None or not isinstance(step, ToolStep):
            return f"v{state.version} has no tool step {heal.step} to heal"
        healed = apply_heal(step, heal)
        refused = _refusal(step, heal, healed)
        if refused is not None or healed is None:
            return refused or f"the heal of step {heal.step} does not apply"
        reasons.append(describe(step, healed, heal))
        steps[n] = healed
    reason = "; ".join(reasons)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    version = msgspec.structs.replace(
        executor,
        steps=steps,
        source_run_id=run_id,
        compiled_at=at,
        healed_from=state.version,
        stats=recount(steps, executor.stats),
    )
    return version, reason


def _refusal(step: ToolStep, heal: HealedStep, healed: ToolStep | None) -> str | None:
    """Why `heal` may not change `step` (None: it may, into `healed`)."""
    name = f"step {step.index} ({step.tool})"
    allowed = HEALABLE_KEYS.get(step.tool)
    if heal.tool != step.tool:
        return f"the heal of {name} calls {heal.tool}: a heal keeps the tool"
    if allowed is None:
        return f"{name} is not healed: only {', '.join(HEALABLE_KEYS)} steps are"
    others = sorted(key for key in heal.input if key not in allowed)
    if others:
        return (
            f"the heal of {name} changes {', '.join(others)}: only its locators"
            f" ({', '.join(allowed)}) may change"
        )
    if healed is None or healed.input == step.input:
        return f"the heal of {name} changes none of its locators"
    # Every locator the heal replaced or dropped (a click's other one goes with it).
    replaced = [k for k in step.input if healed.input.get(k) != step.input[k]]
    filled = [key for key in replaced if references.find(step.input[key])]
    if filled:
        return (
            f"{name}'s {', '.join(filled)} is filled from an earlier step on each run:"
            " a healed locator would freeze it"
        )
    return None


def describe(step: ToolStep, healed: ToolStep, heal: HealedStep) -> str:
    """One heal in words: the locators as recorded and as healed, and why the step
    failed as recorded."""
    changed = [
        f"{key} {_show(step.input.get(key))} -> {_show(healed.input.get(key))}"
        for key in sorted(set(step.input) | set(healed.input))
        if step.input.get(key) != healed.input.get(key)
    ]
    return f"healed step {step.index} ({step.tool}): {', '.join(changed)} after: {heal.reason}"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return repr(text) if isinstance(value, str) else text
