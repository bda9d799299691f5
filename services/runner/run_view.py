"""A run's latest state, folded from its lifecycle events."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.runs import RunEvent, RunView


def fold(events: Iterable[RunEvent]) -> RunView | None:
    """Events in any order; later lifecycle stages win."""
    order = {"requested": 0, "started": 1, "replay_failed": 2, "completed": 3, "failed": 3}
    view: RunView | None = None
    for event in sorted(events, key=lambda e: (order[e.event], e.at)):
        if view is None:
            view = RunView(run_id=event.run_id, task_id=event.task_id, status=event.status)
        view.status = event.status
        view.origin = event.origin or view.origin
        if event.event == "requested":
            view.requested_at = event.at
        elif event.event == "started":
            view.started_at = event.at
            view.source = event.source
            view.executor_version = event.executor_version
        elif event.event in ("completed", "failed"):
            view.finished_at = event.at
            view.source = event.source
            view.executor_version = event.executor_version
            view.fell_back = event.fell_back
            view.result = event.result
            view.result_truncated = event.result_truncated
            view.result_ref = event.result_ref
            view.tokens = event.tokens
            view.cost_usd = event.cost_usd
            view.cost_saved_usd = event.cost_saved_usd
            view.duration_ms = event.duration_ms
            view.reason = event.reason
            view.error = event.error
            view.infrastructure = event.infrastructure
    return view
