"""Several tools processes: every call of a run reaches the process that holds the run's
browser session, so multi-step browsing works however the queue group spreads work."""

from __future__ import annotations

import anyio
import pytest

from contracts import subjects as s
from contracts.runs import RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ToolEvent
from services.dev.demo.site import DemoSite, stories
from services.dev.standin.server import StandinServer
from services.kernel.codec import decode
from services.kernel.discovery import gather
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.e2e.helpers import wait_finished

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]


async def test_runs_stay_on_the_tools_process_holding_their_session(
    stack_settings: Settings, site: DemoSite, standin: StandinServer
) -> None:
    spec = TaskSpec(
        name="click",
        prompt=f"Open {site.url}/, click News, and report the top 3 headlines",
    )
    expected = "Top 3 headlines:\n" + "\n".join(
        f"{i}. {st.title}" for i, st in enumerate(stories(0)[:3], 1)
    )
    names = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
    async with open_stack(stack_settings, names) as stack, open_stack(stack_settings, ["tools"]):
        # Every instance answers; ask again until both have (a busy one may answer late).
        with anyio.fail_after(30):
            while len(infos := await gather(stack.bus, "$SRV.INFO.rote-tools", wait_s=2)) < 2:
                await anyio.sleep(0.2)
        assert len(infos) == 2  # two tools processes share the queue group
        for i in range(4):
            started = await stack.bus.request(
                s.RUNS_START, StartRun(spec=spec, task_id=f"click{i}"), RunStarted
            )
            done = await wait_finished(stack.bus, started.run_id)
            assert done.status == "completed", done.error
            assert done.result == expected
            msgs = await read_all(
                stack.bus.js, s.STREAM_ACTIVITY, s.tool_event(done.run_id, "finished")
            )
            assert [decode(m.data, ToolEvent).tool for m in msgs] == [
                "browser_navigate", "browser_click", "browser_extract",
            ]  # fmt: skip
