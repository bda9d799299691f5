"""Replies of the executor queries, built from folded health states. Pure."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from contracts.executors import (
    Executor,
    ExecutorEvent,
    ExecutorHealth,
    ExecutorHistory,
    SavingsStats,
)
from services.compiler import health as h


def none_health(task_id: str) -> ExecutorHealth:
    return ExecutorHealth(task_id=task_id, status="none")


def history(task_id: str, state: h.Health, events: Iterable[h.HealthEvent]) -> ExecutorHistory:
    """Every version (those the current contract can still read) and every event."""
    versions: list[Executor] = []
    for version in state.versions:
        try:
            versions.append(h.decode_executor(version.executor))
        except (msgspec.ValidationError, TypeError):
            continue
    wire: list[ExecutorEvent] = [e for e in (h.to_wire(task_id, x) for x in events) if e]
    return ExecutorHistory(
        task_id=task_id, versions=versions, events=wire, summaries=h.version_views(state)
    )


def savings(states: Iterable[h.Health]) -> SavingsStats:
    executors = active = replays = failures = 0
    total = 0.0
    by_task: dict[str, float] = {}
    for state in states:
        if not state.versions:
            continue
        executors += 1
        active += h.current(state) is not None
        replays += state.replays
        failures += state.replay_failures
        total += state.total_cost_saved_usd
        by_task[state.task_id] = round(state.total_cost_saved_usd, 9)
    return SavingsStats(
        executors=executors,
        active=active,
        replays=replays,
        replay_failures=failures,
        total_cost_saved_usd=round(total, 9),
        by_task=by_task,
    )
