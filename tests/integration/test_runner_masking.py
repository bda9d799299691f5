"""Secrets in what a run is asked to do, or in why its replay failed, are masked in the
run events kept on ROTE_RUNS; the run request itself keeps them (the run needs them)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import ReplayOutcome, RunEvent, RunStarted, StartRun
from contracts.tasks import TaskSpec
from services.kernel import secrets
from services.kernel.bus import Bus
from services.kernel.replay_read import read_all
from services.kernel.runtime import ServiceContext, open_stack
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.runner.service import Runner

pytestmark = pytest.mark.anyio

PASSWORD = "opensesame-4711"
TOKEN = "tok-REGISTERED-0123456789"


@pytest.fixture
def registered() -> Iterator[None]:
    secrets.register_secret(TOKEN)
    try:
        yield
    finally:
        secrets._secrets.discard(TOKEN)


async def kept_on_runs(bus: Bus) -> bytes:
    return b"\n".join(m.data for m in await read_all(bus.js, s.STREAM_RUNS, ">"))


@pytest.mark.usefixtures("registered")
async def test_a_secret_in_an_operators_spec_is_masked_in_the_run_events(
    settings: Settings,
) -> None:
    prompt = f"Check postgresql://app:{PASSWORD}@db.internal/prod with token {TOKEN}"
    async with open_stack(settings, ["runner", "scheduler"]) as stack:
        bus = stack.bus
        work = await bus.nc.subscribe(s.WORK_RUNS)
        started = await bus.request(
            s.RUNS_START, StartRun(spec=TaskSpec(name="ops", prompt=prompt)), RunStarted
        )
        # No llm service here: the run fails, after its `started` event.
        with anyio.fail_after(30):
            while b'"failed"' not in await kept_on_runs(bus):
                await anyio.sleep(0.2)
        request = await work.next_msg(timeout=5)
        kept = await kept_on_runs(bus)
    assert started.run_id.encode() in kept and b'"requested"' in kept and b'"started"' in kept
    assert PASSWORD.encode() not in kept and TOKEN.encode() not in kept
    assert b"[redacted]" in kept
    assert PASSWORD.encode() in request.data  # the runner still gets the real spec


@pytest.mark.usefixtures("registered")
async def test_a_replay_failure_quoting_a_secret_is_masked(settings: Settings, bus: Bus) -> None:
    await ensure_streams(bus.js)
    reason = f"step 0: cannot open https://ops:{PASSWORD}@intranet/ (token {TOKEN})"
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings, bus=bus, task_group=tg, services=("runner",),
            nats_url=bus.url, embedded_nats=False,
        )  # fmt: skip
        await Runner(ctx).publish(
            RunEvent(
                task_id="ops",
                run_id="r1",
                event="replay_failed",
                at=utc_now(),
                status="running",
                replay=ReplayOutcome(version=1, ok=False, step=0, reason=reason),
            ),
            msg_id="r1:replay_failed:1",
        )
        tg.cancel_scope.cancel()
    kept = await kept_on_runs(bus)
    assert b"cannot open https://ops:" in kept
    assert PASSWORD.encode() not in kept and TOKEN.encode() not in kept
