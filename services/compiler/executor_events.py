"""The executor aggregate's events: one class per kind, with typed fields. What each
means for health is health.apply; how each is stored, aggregate.py.

`kind` tags each one: events recorded by an earlier version are stored together as one
tagged JSON value (the read-only ExecutorAggregate.Recorded).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from contracts.base import MAX_REASON_CHARS
from contracts.runs import (
    Verification,
    VerificationMethod,
    VerificationStatus,
    VerificationWhy,
)

# A replay's check keeps at most this many reasons (the runner sends at most 13).
MAX_CHECK_REASONS = 20


class Created(msgspec.Struct, kw_only=True):
    """The aggregate's opening event, naming its task (not a health event: health
    starts empty, health.new)."""

    task_id: str


class _Ev(msgspec.Struct, kw_only=True, tag_field="kind"):
    at: datetime


class Compiled(_Ev, tag="compiled"):
    version: int
    executor: dict[str, Any]  # kept raw: a contract change must not make history unreadable
    source_run_id: str
    source_cost_usd: float = 0.0
    # Compiled while another version was current (after its fallback): it serves runs
    # but is trusted only once a replay verifies (promotion.py). False in events
    # recorded before candidates, which superseded the version before them at once.
    candidate: bool = False
    # Made by healing steps of version `healed_from` in place (healed.py), the steps
    # `healed_steps`, for the reason in words; None and [] for a compiled trace.
    healed_from: int | None = None
    healed_steps: list[int] = []
    reason: str | None = None


class Skipped(_Ev, tag="skipped"):
    run_id: str
    reason: str


class ReplayCheck(msgspec.Struct, kw_only=True):
    """Whether a replay's answer was checked, and the verdict: the run event's
    Verification (contracts/runs.py) without its cost, which the replay's cost holds."""

    status: VerificationStatus
    flagged: bool = False
    why: VerificationWhy | None = None
    method: VerificationMethod | None = None
    reasons: list[str] = []


def replay_check(verification: Verification | None) -> ReplayCheck | None:
    """What a replay event keeps of the run's verification: the reasons are the
    evidence the history shows, each bounded like an operator's reason."""
    if verification is None:
        return None
    return ReplayCheck(
        status=verification.status,
        flagged=verification.flagged,
        why=verification.why,
        method=verification.method,
        reasons=[r[:MAX_REASON_CHARS] for r in verification.reasons[:MAX_CHECK_REASONS]],
    )


class ReplaySucceeded(_Ev, tag="replay_succeeded"):
    version: int
    run_id: str
    # The run's delivery attempt; None in events recorded before outcomes were counted
    # per attempt (then the run counted once, whatever the attempt).
    attempt: int | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    cost_saved_usd: float = 0.0  # as the run event reported it; may be negative
    # The check of its answer; None in events recorded before replays were checked.
    verification: ReplayCheck | None = None
    # The steps the runner repaired in place on the way (their new locators are a new
    # version's, healed.py); [] when none was, and in events recorded before heals.
    healed_steps: list[int] = []


class ReplayFailed(_Ev, tag="replay_failed"):
    version: int
    run_id: str
    attempt: int | None = None  # as in ReplaySucceeded
    step: int | None = None
    reason: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    verification: ReplayCheck | None = None  # as in ReplaySucceeded (wrong: why it failed)
    healed_steps: list[int] = []  # as in ReplaySucceeded (a heal found wrong lists them)


class Superseded(_Ev, tag="superseded"):
    version: int
    reason: str


class Invalidated(_Ev, tag="invalidated"):
    version: int
    reason: str
    by: str = "operator"


class Pinned(_Ev, tag="pinned"):
    version: int
    by: str = "operator"


class Unpinned(_Ev, tag="unpinned"):
    version: int
    reason: str = ""


class FullRunRecorded(_Ev, tag="full_run_recorded"):
    run_id: str
    cost_usd: float


class Promoted(_Ev, tag="promoted"):
    """A candidate's replay was verified (by run `run_id`): it is trusted from now on."""

    version: int
    run_id: str | None = None


class Restored(_Ev, tag="restored"):
    """A candidate went (`reason` says how) and the version on standby beside it is
    current again, as a candidate: trusted only once a replay of it verifies."""

    version: int
    reason: str


HealthEvent = (
    Compiled
    | Skipped
    | ReplaySucceeded
    | ReplayFailed
    | Superseded
    | Invalidated
    | Pinned
    | Unpinned
    | FullRunRecorded
    | Promoted
    | Restored
)
