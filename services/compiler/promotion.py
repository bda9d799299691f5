"""Gated promotion: the candidate rules of executor health, as pure functions over the
health state. health.py's decisions call them, and its `apply` hands the promoted and
restored events to `apply` here.

A version compiled while another is current (so after that one's replay failed and
fell back to the full run whose trace compiled it) is a *candidate*: it serves runs,
and the runner checks each of its replays, but the version before it stays active on
*standby*, the one to roll back to. Rules:

- the first version of a task, one compiled when no version is current, and one
  compiled for an edited task (the old version cannot answer it) are not candidates;
- a candidate compiled behind a pin waits for the pin to go, and is still a candidate
  then; the pin stays current, as ever, and is the only version kept beside it;
- a new compilation keeps one version on standby: the one the current candidate would
  roll back to, else the current version itself; any other (the candidate it replaces)
  is superseded as before;
- a candidate's replay verified by the check is promoted: the versions before it
  (its standby) are superseded, "replaced by verified vN";
- a candidate's replay the check found wrong supersedes it at once, "failed
  verification: <verdict>". When a candidate goes, so or otherwise (3 consecutive
  failures, staleness, an operator's invalidation), its standby, if still active, is
  current again, *restored* as a candidate: trusted again only once a replay of it
  verifies on the page as it is now; if that check finds it wrong too, it goes the same
  way, and no version is left (the next run is a full one);
- replays neither verified nor wrong (skipped, unverified, or recorded before replays
  were checked) leave a candidate a candidate, and so does a verified replay that healed
  steps in place: the healed version it records is the candidate then (healed.py);
- pinning vouches for a version: a pinned candidate is a candidate no more.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from services.compiler import executor_events as ev

if TYPE_CHECKING:
    from services.compiler.health import Health, VersionState


def standby(health: Health, candidate: int) -> VersionState | None:
    """The version the candidate numbered `candidate` rolls back to: the newest active
    version before it that is not pinned (a compilation leaves at most one)."""
    for version in reversed(health.versions):
        if (
            version.version < candidate
            and version.status == "active"
            and version.version != health.pinned
        ):
            return version
    return None


def on_compile(
    health: Health, current: VersionState | None, task_changed: bool
) -> tuple[bool, int | None]:
    """Whether a new compilation is a candidate, and the version kept on standby beside
    it (None: none; a pin stays whatever this says). `current`: the version current
    before it; `task_changed`: it was compiled for the task as edited since."""
    if current is None or task_changed:
        return False, None
    if current.version == health.pinned:
        return True, None
    # A candidate replaced before it was verified is not what to roll back to: the
    # version it stood in for is, if it is still there.
    held = (standby(health, current.version) if current.candidate else None) or current
    return True, held.version


def on_verified(
    health: Health,
    state: VersionState,
    check: ev.ReplayCheck | None,
    run_id: str,
    at: datetime,
    healed: bool = False,
) -> list[ev.HealthEvent]:
    """After a successful replay of `state`: promoted, if it is an active candidate and
    the check verified the answer, and the versions before it retired (a pin stays).
    Not after a `healed` replay: steps repaired in place answered, not the candidate's
    own, so the answer vouches for the healed version (healed.py), itself a candidate."""
    if healed or not (state.candidate and state.status == "active"):
        return []
    if check is None or check.status != "verified":
        return []
    reason = f"replaced by verified v{state.version}"
    events: list[ev.HealthEvent] = [ev.Promoted(at=at, version=state.version, run_id=run_id)]
    return events + [
        ev.Superseded(at=at, version=v.version, reason=reason)
        for v in health.versions
        if v.version < state.version and v.status == "active" and v.version != health.pinned
    ]


def failed_verification(state: VersionState, check: ev.ReplayCheck | None) -> str | None:
    """Why a failed replay of `state` supersedes it at once: it is an active candidate
    and the check found its answer wrong (the verdict is the check's last reason)."""
    if not (state.candidate and state.status == "active"):
        return None
    if check is None or check.status != "wrong":
        return None
    verdict = check.reasons[-1] if check.reasons else "the answer was found wrong"
    return f"failed verification: {verdict}"


def restore(health: Health, gone: VersionState, at: datetime, why: str) -> list[ev.HealthEvent]:
    """`gone` is being retired (`why`: "failed verification", "superseded: ..."): if
    it is a candidate, its standby comes back, as a candidate. Decided on the state
    before the retirement, so `gone` still reads as it was."""
    if not gone.candidate or gone.version == health.pinned:
        return []
    held = standby(health, gone.version)
    if held is None:
        return []
    return [ev.Restored(at=at, version=held.version, reason=f"v{gone.version} {why}")]


def apply(health: Health, event: ev.Promoted | ev.Restored) -> None:
    """Fold a promotion or a restoration into the state (in place)."""
    found = health.version(event.version)
    if found is None:
        return
    match event:
        case ev.Promoted():
            found.candidate = False
            if found.status == "active" and health.pinned != found.version:
                found.status_reason = None  # a restored one's "restored as ..." is past
        case ev.Restored():
            found.candidate = True
            found.status_reason = f"restored as a candidate: {event.reason}"
