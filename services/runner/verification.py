"""Whether a replay's answer is trusted: the drift its reads show, and the check of the
answer against the page when one is due (services/executor/verification.py says which
replays are checked and how the small model is asked).

The replayer hands every step it runs to `ReplayChecks.saw`: a read's fingerprint now is
compared with the one recorded at compile time (services/executor/drift.py), and the read
is kept as evidence. After the answer, `verify` asks the small model when the replay was
flagged, its version is new or a candidate, or it fell in the sample (unless the day's
budget is nearly spent: then the sample is left out). A FAIL means the answer is not
delivered (the replayer fails the replay, and the run takes the full loop); a check that
could not be made leaves a flagged answer `unverified`, delivered with that label.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from contracts.executors import ToolStep
from contracts.runs import Verification
from contracts.tools import ToolMetadata
from services.executor.drift import compare
from services.executor.toolkinds import is_content
from services.executor.verification import (
    DEFAULT_VERIFY_RATE,
    Read,
    read_verdict,
    verification_prompt,
    why_check,
)

# Each reason is one line in the run event and the executor's history.
MAX_REASONS = 12


class CheckUnavailable(Exception):
    """The small model could not be asked (down, over budget, no time left)."""


@dataclass(frozen=True)
class CheckPlan:
    """What decides whether a clean replay is checked: how many replays its version has
    had (the first few are), whether it is a candidate (every replay is), and the share
    of the rest that is sampled."""

    version_replays: int = 0
    rate: float = DEFAULT_VERIFY_RATE
    candidate: bool = False
    # Why a sampled check is left out (verification.budget_short); None: it is made.
    budget_short: str | None = None


# Asks the small model `prompt`; returns its reply's text, raises CheckUnavailable.
Ask = Callable[[str], Awaitable[str]]


class ReplayChecks:
    """One replay's drift evidence, and the check of its answer."""

    def __init__(self, task_prompt: str, run_id: str, plan: CheckPlan) -> None:
        self.task_prompt = task_prompt
        self.run_id = run_id
        self.plan = plan
        # What differed, per step index, in words.
        self._changes: list[tuple[int, str]] = []
        self.reads: list[Read] = []
        # A step was healed in place (healing.py): the answer is checked whatever else.
        self.healed = False

    def saw(
        self, step: ToolStep, tool_input: dict[str, Any], output: Any, meta: ToolMetadata | None
    ) -> None:
        """A tool step ran: compare what its read meant, and keep the read as evidence."""
        now = meta.fingerprint if meta is not None else None
        if step.fingerprint is not None and now is not None:
            self._changes += [(step.index, r) for r in compare(step.fingerprint, now)]
        if is_content(step.tool):
            selector = tool_input.get("selector")
            self.reads.append(
                Read(
                    step=step.index,
                    tool=step.tool,
                    output=output,
                    url=meta.url if meta is not None else None,
                    selector=selector if isinstance(selector, str) else None,
                    fingerprint=now,
                )
            )

    def forget(self, index: int) -> None:
        """Step `index`'s reads so far were of a step that then healed: what they saw
        is not what the answer came from."""
        self._changes = [(i, r) for i, r in self._changes if i != index]
        self.reads = [read for read in self.reads if read.step != index]

    @property
    def changes(self) -> list[str]:
        return [f"step {index}: {reason}" for index, reason in self._changes]

    @property
    def flagged(self) -> bool:
        return bool(self._changes)

    async def verify(self, answer: str, ask: Ask, spent: Callable[[], float]) -> Verification:
        """The verdict on `answer`; `spent()` is what the replay has cost so far, so the
        check's own cost is told apart."""
        flagged = self.flagged
        changes = self.changes[:MAX_REASONS]
        plan = self.plan
        why = why_check(
            flagged,
            plan.version_replays,
            self.run_id,
            plan.rate,
            candidate=plan.candidate,
            healed=self.healed,
        )
        if why is None:
            return Verification(status="skipped", flagged=False)
        if why == "sampled" and plan.budget_short is not None:
            return Verification(
                status="skipped", why=why, reasons=[f"not checked: {plan.budget_short}"]
            )
        before = spent()
        prompt = verification_prompt(self.task_prompt, answer, self.reads, changes)
        try:
            said = await ask(prompt)
        except CheckUnavailable as exc:
            # Nothing cleared the flag (or the heal): the answer goes out marked. A
            # sampled clean replay stays what it was, unchecked.
            return Verification(
                status="unverified" if flagged or self.healed else "skipped",
                flagged=flagged,
                why=why,
                reasons=[*changes, f"the check could not be made: {exc}"],
                cost_usd=round(spent() - before, 8),
            )
        verdict = read_verdict(said, answer)
        return Verification(
            status="verified" if verdict.ok else "wrong",
            flagged=flagged,
            why=why,
            method="small_model",
            reasons=[*changes, f"{'PASS' if verdict.ok else 'FAIL'}: {verdict.reason}"],
            cost_usd=round(spent() - before, 8),
        )
