"""Trust in replayed answers: what the checks of replays found, tallied per version and
per task (health.apply folds each replay event in with `count`), and the rates the
executor queries publish from the tallies (views.py). Pure.

A check (services/runner/verification.py) asks the small model whether the page
supports a replay's answer. Replays are checked when their reads drifted from the
recording (flagged: a drift alarm), and, unflagged, when their version is new or the
run falls in the sample. The unflagged checks are the evidence about the answers
delivered unchecked: the share of them found wrong estimates how often a clean replay
is wrong (the false-success rate), and its Wilson interval says how sure that is. New
versions are checked first and are the likeliest to be wrong, so the estimate leans
high rather than low.

Replay events recorded before replays were checked carry no verification and count
nothing here. Beside the checks, the tally counts the replays that healed steps in place
(services/compiler/healed.py), whose answers are always checked.
"""

from __future__ import annotations

import math

import msgspec

from services.compiler.executor_events import ReplayCheck

# The z of a 95% two-sided interval.
Z95 = 1.96


class Tally(msgspec.Struct, kw_only=True):
    """Counts of replay checks; the names are the published fields' (ExecutorHealth)."""

    checked: int = 0  # answers a check judged: verified or wrong
    wrong: int = 0  # answers a check found wrong
    drift_alarms: int = 0  # replays whose reads differed from the recording (flagged)
    drift_confirmed: int = 0  # drift alarms whose check found the answer wrong
    unflagged_checked: int = 0  # checks of replays with no alarm: new versions, samples
    unflagged_wrong: int = 0  # of those, found wrong: drift the fingerprints missed
    unverified: int = 0  # flagged answers delivered because no check could be made
    # Replays that repaired steps in place (healed.py): each one's answer is checked.
    healed: int = 0


def count(tally: Tally, check: ReplayCheck | None, healed_steps: list[int] | None = None) -> None:
    """Fold one replay's check, and whether it healed steps, into the tally (in place)."""
    tally.healed += bool(healed_steps)
    if check is None:
        return
    judged = check.status in ("verified", "wrong")
    wrong = check.status == "wrong"
    tally.checked += judged
    tally.wrong += wrong
    tally.drift_alarms += check.flagged
    tally.drift_confirmed += check.flagged and wrong
    tally.unflagged_checked += judged and not check.flagged
    tally.unflagged_wrong += wrong and not check.flagged
    tally.unverified += check.status == "unverified"


def total(tallies: list[Tally]) -> Tally:
    """The sum of several tallies (the savings ledger's, over every task)."""
    summed = Tally()
    for name in Tally.__struct_fields__:
        setattr(summed, name, sum(getattr(t, name) for t in tallies))
    return summed


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion seen `successes` times in `trials`.
    Unlike p ± z·se it stays within [0, 1] and says something at 0 of n: its upper
    bound is z²/(n + z²). No trials: nothing is known, (0, 1)."""
    if trials <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes in {trials} trials")
    p = successes / trials
    z2 = z * z
    denominator = 1 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    spread = z / denominator * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    # At 0 or n the bound is exactly 0 or 1; computed, it is off by a rounding error.
    low = 0.0 if successes == 0 else max(0.0, centre - spread)
    high = 1.0 if successes == trials else min(1.0, centre + spread)
    return low, high


def ratio(part: int, whole: int) -> float | None:
    """part / whole, rounded for the wire; None when there is nothing to divide."""
    return round(part / whole, 6) if whole > 0 else None


def false_success(tally: Tally) -> tuple[float | None, float | None]:
    """The estimated share of clean (unflagged) replays whose answer is wrong, and the
    upper bound of its 95% Wilson interval; (None, None) before any unflagged check."""
    if tally.unflagged_checked <= 0:
        return None, None
    _, upper = wilson_interval(tally.unflagged_wrong, tally.unflagged_checked)
    return ratio(tally.unflagged_wrong, tally.unflagged_checked), round(upper, 6)
