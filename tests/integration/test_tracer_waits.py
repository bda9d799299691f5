"""The tracer waits for a run's `started` event when it is not readable yet, and gives
up at once on a run whose spec was hidden: no wait can bring it back."""

from __future__ import annotations

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent
from services.kernel.bus import Bus
from services.kernel.consumers import Reject, Retry
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.tracer.service import Tracer

pytestmark = pytest.mark.anyio


def _event(name: str, **fields: object) -> RunEvent:
    return RunEvent(
        task_id="t1",
        run_id="r1",
        event=name,
        at=utc_now(),
        **fields,  # type: ignore[arg-type]
    )


async def test_missing_started_is_retried_and_hidden_spec_is_rejected(
    settings: Settings, bus: Bus
) -> None:
    await ensure_streams(bus.js)
    completed = _event("completed", status="completed", source="full_llm", result="ok")
    delivery = Msg(bus.nc, subject=s.run_event("t1", "r1", "completed"))
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings, bus=bus, task_group=tg, services=("tracer",),
            nats_url=bus.url, embedded_nats=False,
        )  # fmt: skip
        tracer = Tracer(ctx)
        with pytest.raises(Retry, match="not readable yet"):
            await tracer.on_run_completed(completed, delivery)

        await bus.publish_event(
            s.run_event("t1", "r1", "started"),
            _event("started", status="running", spec=None),
            msg_id="r1:started:1",
        )
        with pytest.raises(Reject, match="spec is hidden"):
            await tracer.on_run_completed(completed, delivery)
        tg.cancel_scope.cancel()

    traces = await bus.js.stream_info(s.STREAM_TRACES)
    assert traces.state.messages == 0
