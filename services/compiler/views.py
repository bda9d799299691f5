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

MAX_STATS_TASKS = 1000  # tasks named in the savings ledger's by_task


def none_health(task_id: str) -> ExecutorHealth:
    return ExecutorHealth(task_id=task_id, status="none")


def history(
    task_id: str, state: h.Health, page: list[h.HealthEvent], start: int, total: int
) -> ExecutorHistory:
    """One page of the history (see HistoryQuery): `page` holds the events after the
    first `start` of `total`, numbered from 1, oldest first. Bounded, so a long-lived
    task's history still fits in a reply."""
    versions: list[Executor] = []
    wire: list[ExecutorEvent] = []
    for event in page:
        out = h.to_wire(task_id, event)
        if out is None:
            continue
        if out.executor is not None:  # carried once, in `versions`
            versions.append(out.executor)
            out = msgspec.structs.replace(out, executor=None)
        wire.append(out)
    return ExecutorHistory(
        task_id=task_id,
        versions=versions,
        events=wire,
        summaries=h.version_views(state),
        first_event=start + 1,
        total_events=total,
        next_before=start + 1 if start > 0 else None,
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
    # Bounded, so the ledger fits in a reply however many tasks there are.
    top = sorted(by_task.items(), key=lambda item: item[1], reverse=True)[:MAX_STATS_TASKS]
    return SavingsStats(
        executors=executors,
        active=active,
        replays=replays,
        replay_failures=failures,
        total_cost_saved_usd=round(total, 9),
        by_task=dict(top),
        by_task_omitted=len(by_task) - len(top),
    )
