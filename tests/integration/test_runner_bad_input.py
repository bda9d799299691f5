"""What the runner's endpoints do with input they cannot carry or read: a spec too big
for a run request is refused up front, and an unreadable event among a run's events
does not break the run's view."""

from __future__ import annotations

import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import RunEvent, RunRef, RunView, StartRun
from contracts.tasks import MAX_SPEC_BYTES, ConditionTrigger, Contains, TaskSpec
from services.kernel.errors import RemoteError
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

pytestmark = pytest.mark.anyio


async def test_a_spec_too_big_for_a_run_request_is_refused(settings: Settings) -> None:
    # Every field within its own bounds; together, over what one run request carries.
    check = ConditionTrigger(
        tool="shell_exec",
        input={"command": "df -h", "notes": "n" * MAX_SPEC_BYTES},
        predicate=Contains(text="9"),
        every_s=60,
    )
    spec = TaskSpec(name="big", prompt="check the disk", trigger=check)
    async with open_stack(settings, ["runner"]) as stack:
        with pytest.raises(RemoteError) as refused:
            await stack.bus.request(s.RUNS_START, StartRun(spec=spec), RunView)
        assert (refused.value.code, refused.value.status) == ("too_large", 413)
        assert refused.value.info.field == "spec"
        assert (await stack.bus.js.stream_info(s.STREAM_WORK)).state.messages == 0


async def test_an_unreadable_event_of_a_run_does_not_break_its_view(settings: Settings) -> None:
    async with open_stack(settings, ["runner"]) as stack:
        bus = stack.bus
        await bus.js.publish(s.run_event("t", "r1", "requested"), b'{"bogus": 1}')
        started = RunEvent(
            task_id="t", run_id="r1", event="started", at=utc_now(), status="running"
        )
        await bus.publish_event(s.run_event("t", "r1", "started"), started, msg_id="r1:started:1")
        view = await bus.request(s.RUNS_GET, RunRef(run_id="r1"), RunView)
    assert (view.run_id, view.status) == ("r1", "running")
