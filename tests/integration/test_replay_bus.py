"""The replay's tool calls over real NATS, when the tools service does not answer: a
call no tools service took (no responders) is tried again, but an action whose reply
was lost may have acted and is not done a second time (a second order).

Only the bus runs here; a stand-in takes tool calls at rote.api.tools.exec.
"""

from __future__ import annotations

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.executors import ResultStep, ToolStep
from contracts.tasks import TaskSpec
from services.kernel.bus import Bus
from services.runner.ports import RunScope
from services.runner.replay import Replayer, ReplayResult
from services.runner.service import bus_ports
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

SPEC = TaskSpec(name="order", prompt="Order one widget", allowed_tools=["browser_fill_form"])


async def replay_order(bus: Bus, run_id: str) -> tuple[ReplayResult, int]:
    """Replay an executor whose one step submits an order form, with one retry; returns
    the result and how many times the replay tried the step."""
    executor = hand_built_executor(
        "order",
        [
            ToolStep(index=0, tool="browser_fill_form", input={"fields": {"#qty": 1}}),
            ResultStep(index=1, mode="template", template="ordered", example="ordered"),
        ],
    )
    transcript = TranscriptRecorder(run_id, "order")
    scope = RunScope(
        spec=SPEC,
        ports=bus_ports(bus),
        run_id=run_id,
        task_id="order",
        attempt=1,
        transcript=transcript,
    )
    replayer = Replayer(executor, scope, retries=1, backoff_s=0.0, tool_timeout_s=0.1)
    with anyio.fail_after(60):
        result = await replayer.run()
    tries = sum("failed" in (e.detail or {}) for e in transcript.build().entries)
    return result, tries


async def test_an_order_no_tools_service_took_is_tried_again(bus: Bus) -> None:
    result, tries = await replay_order(bus, "no-tools")  # nothing subscribes: no responders
    assert not result.ok and result.failed_step == 0 and result.infrastructure
    assert result.reason is not None and "unavailable" in result.reason
    assert tries == 2


async def test_an_order_whose_reply_was_lost_is_not_submitted_twice(bus: Bus) -> None:
    taken: list[bytes] = []

    async def swallow(msg: Msg) -> None:  # the form went in; the reply never came back
        taken.append(msg.data)

    await bus.nc.subscribe(s.TOOLS_EXEC, cb=swallow)
    result, tries = await replay_order(bus, "lost-reply")
    assert not result.ok and result.failed_step == 0
    assert result.reason is not None and "timeout" in result.reason
    assert len(taken) == 1 and tries == 1  # submitted once; the fallback run takes over
