"""Issue 7's "done when": a task created with a raw `nats req rote.api.tasks.create`
payload runs on its schedule through the real runner (stand-in model over HTTP, real
Chromium, the demo site), again and again, with nobody asking for a run."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from contracts import subjects as s
from contracts.runs import ListRuns, RunEvent, RunList
from contracts.tasks import TaskView
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.scheduler.triggers import MIN_EVERY_S
from tests.e2e.conftest import Rig

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

EVERY_S = 3.0


async def test_a_raw_nats_req_task_runs_on_its_schedule_through_the_runner(
    stack_settings: Settings, rig_parts: Rig
) -> None:
    assert EVERY_S >= MIN_EVERY_S  # the shortest interval the scheduler accepts
    # Exactly the bytes `nats req rote.api.tasks.create '<json>'` sends.
    payload = (
        f'{{"name": "Top headlines", "prompt": "Open {rig_parts.site.url}/news and report'
        f' the top 3 headlines", "trigger": {{"kind": "interval", "every_s": {EVERY_S}}}}}'
    ).encode()
    names = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        # Generous: two full runs with Chromium on a busy machine take a while.
        with anyio.fail_after(120):
            bus = stack.bus
            reply = await bus.nc.request(s.TASKS_CREATE, payload, timeout=10)
            assert not (reply.headers or {}).get("Nats-Service-Error"), reply.data
            created = decode(reply.data, TaskView)
            task_id = created.task_id
            assert task_id == "top-headlines"

            # Only the schedule asks for runs here: no `rote.api.tasks.run` anywhere.
            completed_subject = s.run_events_of(task_id=task_id, event="completed")
            while len(done := await read_all(bus.js, s.STREAM_RUNS, completed_subject)) < 2:
                await anyio.sleep(0.2)
            first, second = (decode(m.data, RunEvent) for m in done[:2])
            assert first.run_id != second.run_id
            assert first.result == second.result and "1. " in (first.result or "")

            # The scheduler's ledger records an outcome a moment after the runner
            # publishes it: wait for both there too.
            while True:
                runs = await bus.request(s.RUNS_LIST, ListRuns(task_id=task_id), RunList)
                ledger = {r.run_id: r for r in runs.runs}
                one, two = ledger.get(first.run_id), ledger.get(second.run_id)
                if one and two and one.status == two.status == "completed":
                    break
                await anyio.sleep(0.2)
            assert one is not None and two is not None  # for the type checker
            # The second is `catch_up` when the first run outlasted its interval (a
            # busy machine): its slot came while the task had a run in flight.
            assert one.origin == "schedule" and two.origin in ("schedule", "catch_up")
            assert one.source == "full_llm"  # the first run ever has no executor yet
            assert one.requested_at is not None and two.requested_at is not None
            # The slots are the task's creation, then every EVERY_S; a run goes out at
            # its slot or (on a busy machine) later, never before, whenever the first did.
            assert one.requested_at >= created.created_at
            assert two.requested_at >= created.created_at + timedelta(seconds=EVERY_S)
