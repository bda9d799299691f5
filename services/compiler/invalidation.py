"""An operator's invalidation of an executor version (rote.api.executors.invalidate), decided
on the health state like health.py's other decisions: the version goes, its pin with it,
and a candidate's standby comes back (promotion.restore)."""

from __future__ import annotations

from datetime import datetime

from services.compiler import executor_events as ev
from services.compiler import promotion
from services.compiler.health import Health, HealthError, VersionState, current, named_version


def decide_invalidate(
    health: Health, *, reason: str, by: str, at: datetime, version: int | None = None
) -> list[ev.HealthEvent]:
    """Invalidate `version` (None: the current one): an active version only (current, on
    standby behind a candidate, or waiting behind a pin); the rules are health.py's."""
    if not health.versions:
        raise HealthError("not_found", f"task {health.task_id} has no executor")
    target = current(health) if version is None else _invalidatable(health, version)
    if target is None:
        raise HealthError("conflict", f"task {health.task_id} has no active executor")
    events: list[ev.HealthEvent] = [
        ev.Invalidated(at=at, version=target.version, reason=reason, by=by)
    ]
    if health.pinned == target.version:
        events.append(ev.Unpinned(at=at, version=target.version, reason="invalidated"))
    return events + promotion.restore(health, target, at, f"invalidated: {reason}")


def _invalidatable(health: Health, version: int) -> VersionState:
    """The named version, if it is active (current, on standby behind a candidate, or
    waiting behind a pin)."""
    state = named_version(health, version)
    if state.status != "active":
        now = current(health)
        why = f": {state.status_reason}" if state.status_reason else ""
        where = f"the current version is v{now.version}" if now else "no version is current"
        raise HealthError(
            "conflict",
            f"v{version} is {state.status}{why}; {where}",
            field="version",
            details={"current_version": now.version if now else None},
        )
    return state
