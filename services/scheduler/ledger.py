"""The run ledger: the latest state of every run, folded from run events (requested,
started, finished), newest first. It keeps the most recent `keep_per_task` runs of each
task in memory; older runs remain in the event store. Run ids are global on the bus
(the work queue's Nats-Msg-Id, run leases), so it also knows which task each belongs to."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

import msgspec

from contracts.runs import (
    FailureReason,
    ModelTokens,
    RunOrigin,
    RunSource,
    RunStatus,
    RunView,
)


class RunLedger:
    def __init__(self, keep_per_task: int = 500) -> None:
        self.keep_per_task = keep_per_task
        self._runs: dict[str, OrderedDict[str, RunView]] = {}
        self._owners: dict[str, str] = {}  # run_id -> task_id, for the runs kept

    def _put(self, view: RunView) -> None:
        runs = self._runs.setdefault(view.task_id, OrderedDict())
        runs[view.run_id] = view
        self._owners.setdefault(view.run_id, view.task_id)
        while len(runs) > self.keep_per_task:
            run_id, _ = runs.popitem(last=False)
            if self._owners.get(run_id) == view.task_id:
                del self._owners[run_id]

    def owner(self, run_id: str) -> str | None:
        """The task whose run this id names (the first one seen, should two share it)."""
        return self._owners.get(run_id)

    def get(self, task_id: str, run_id: str) -> RunView | None:
        runs = self._runs.get(task_id)
        return None if runs is None else runs.get(run_id)

    def requested(self, task_id: str, run_id: str, origin: RunOrigin | None, at: datetime) -> None:
        if self.get(task_id, run_id) is None:
            self._put(
                RunView(
                    run_id=run_id,
                    task_id=task_id,
                    status="requested",
                    origin=origin,
                    requested_at=at,
                )
            )

    def started(self, task_id: str, run_id: str, at: datetime) -> None:
        view = self.get(task_id, run_id)
        if view is None:
            view = RunView(run_id=run_id, task_id=task_id, status="running")
        if view.status in ("completed", "failed"):
            return
        self._put(msgspec.structs.replace(view, status="running", started_at=at))

    def finished(
        self,
        task_id: str,
        run_id: str,
        *,
        status: RunStatus,
        at: datetime,
        cost_usd: float = 0.0,
        cost_saved_usd: float = 0.0,
        source: RunSource | None = None,
        executor_version: int | None = None,
        duration_ms: int | None = None,
        reason: FailureReason | None = None,
        error: str | None = None,
        fell_back: bool = False,
        tokens: dict[str, Any] | None = None,
        infrastructure: bool = False,
    ) -> None:
        """The run's outcome. Its result (the answer) is not kept: answers can be large,
        and runs.get has them."""
        view = self.get(task_id, run_id) or RunView(run_id=run_id, task_id=task_id, status=status)
        if duration_ms is None and view.started_at is not None:
            duration_ms = int((at - view.started_at).total_seconds() * 1000)
        self._put(
            msgspec.structs.replace(
                view,
                status=status,
                finished_at=at,
                cost_usd=cost_usd,
                cost_saved_usd=cost_saved_usd,
                source=source or view.source,
                executor_version=executor_version
                if executor_version is not None
                else view.executor_version,
                duration_ms=duration_ms,
                reason=reason,
                error=error,
                fell_back=fell_back,
                tokens=msgspec.convert(tokens or {}, dict[str, ModelTokens]),
                infrastructure=infrastructure,
            )
        )

    def skipped(
        self, task_id: str, run_id: str, origin: RunOrigin | None, at: datetime, why: str
    ) -> None:
        """A queued run skipped before it went out: it ended (failed, `skipped`), as its
        terminal event says, so its id is used up like that of any run that ended."""
        view = self.get(task_id, run_id) or RunView(
            run_id=run_id, task_id=task_id, status="requested", origin=origin
        )
        if view.status in ("completed", "failed"):
            return
        self._put(
            msgspec.structs.replace(
                view, status="failed", finished_at=at, reason="skipped", error=why
            )
        )

    def list(self, task_id: str | None = None, limit: int = 50) -> list[RunView]:
        """Newest first (by when the run was requested, else when it finished)."""
        if task_id is not None:
            views = list(self._runs.get(task_id, {}).values())
        else:
            views = [v for runs in self._runs.values() for v in runs.values()]

        def when(view: RunView) -> datetime:
            moment = view.requested_at or view.started_at or view.finished_at
            assert moment is not None
            return moment

        dated = [v for v in views if v.requested_at or v.started_at or v.finished_at]
        return sorted(dated, key=when, reverse=True)[:limit]
