"""Recovery after a crash or a lost runner.

A run that was dispatched (or started) but reported no outcome by its deadline plus a
grace period is marked failed with reason `abandoned`, which frees its slot. One no
runner started (every runner down) is an infrastructure failure: it says nothing about
the task, so it does not count toward the task's max_failures. Missed schedules collapse
into one run (see triggers.next_due); when more than one slot was missed the run's
origin says `catch_up`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

# Time a runner gets past the task's deadline to report before the run is abandoned.
DEFAULT_GRACE_S = 60.0


def is_abandoned(since: datetime, deadline_s: float, now: datetime, grace_s: float) -> bool:
    """`since`: when the run was last heard of (dispatched, or started)."""
    # Compared as seconds: `since + timedelta(deadline_s)` overflows for a huge deadline_s
    # (the contract bounds it only below), which would fail every tick.
    return (now - since).total_seconds() > deadline_s + grace_s


def abandoned_error(
    since: datetime, deadline_s: float, grace_s: float, *, started: bool = True
) -> str:
    """`started`: a runner said it started the run; if none did, the error says so."""
    what = "no outcome reported" if started else "no runner started the run"
    return f"{what} within deadline_s={deadline_s:g} + {grace_s:g}s grace of {since.isoformat()}"


def scheduled_origin(missed: int) -> Literal["schedule", "catch_up"]:
    return "catch_up" if missed > 1 else "schedule"
