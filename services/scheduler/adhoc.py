"""rote.api.runs.start: one run of an inline task spec, with no task behind it. The
spec passes the checks tasks.create applies (spec.py), so a spec the scheduler would
refuse is not run through the back door either. The run goes straight to the work
queue: no trigger, no slot, no budget (the ledger still counts its cost, as an
untracked run's)."""

from __future__ import annotations

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent, RunRequest, RunStarted, StartRun
from services.kernel.bus import Bus
from services.kernel.errors import ServiceError
from services.kernel.ids import new_run_id, slug
from services.kernel.pricing import PriceTable
from services.kernel.run_store import RunStore
from services.kernel.secrets import redact_struct
from services.scheduler.spec import checked_spec


class AdHocRuns:
    def __init__(self, bus: Bus, prices: PriceTable) -> None:
        self.bus = bus
        self.store = RunStore(bus)
        self.prices = prices

    async def start(self, command: StartRun) -> RunStarted:
        spec = checked_spec(command.spec, self.prices)
        task_id = command.task_id or slug(command.spec.name)
        run_id = command.run_id or new_run_id()
        if await self.store.last_event(run_id) is not None:
            raise ServiceError("conflict", f"run {run_id} already exists", field="run_id")
        await self.enqueue(
            RunRequest(
                run_id=run_id,
                task_id=task_id,
                spec=spec,
                requested_at=utc_now(),
                origin="operator",
            )
        )
        return RunStarted(run_id=run_id, task_id=task_id)

    async def enqueue(self, request: RunRequest) -> None:
        # Everything that can fail comes before the work request goes out: once queued,
        # the run runs, whatever this caller is then told.
        requested = RunEvent(
            task_id=request.task_id,
            run_id=request.run_id,
            event="requested",
            at=request.requested_at,
            status="requested",
            spec=redact_struct(request.spec),
            origin=request.origin,
        )
        await self.bus.publish_event(s.WORK_RUNS, request, msg_id=request.run_id)
        await self.bus.publish_event(
            s.run_event(request.task_id, request.run_id, "requested"),
            requested,
            msg_id=f"{request.run_id}:requested",
        )
