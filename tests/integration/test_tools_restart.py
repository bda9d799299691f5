"""A NATS restart, as the runner's tool calls see it (real NATS, stand-in tools process).

The runner's connection may come back before the tools process's: for that moment the
run's pinned tools instance has no responder, though it is alive with the run's page.
That is not a lost browser session: the call is retried until the reconnect grace is
over. Only an instance still missing after it is taken for gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest

from contracts.tools import SESSION_LOST, ExecTool
from services.kernel import bus as bus_module
from services.kernel.bus import Bus, connect
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.runner.adapters import bus_ports
from services.runner.ports import PortError, Ports
from tests.integration.test_llm_reconnect import kill, restart
from tests.integration.test_tools_outage import PRICES, TOOLS, URL, ToolsProcess

pytestmark = pytest.mark.anyio


def call(tool: str, tool_input: dict[str, str]) -> ExecTool:
    return ExecTool(
        run_id="r1",
        task_id="t1",
        allowed_tools=TOOLS,
        tool=tool,
        input=tool_input,
        timeout_s=5,
        step=0,
        source="full_llm",
    )


class Restarted:
    """A runner bus and a tools process on their own connection, one browsed page
    pinned to it, then a NATS kill -9 and restart; the runner is back, tools not yet."""

    def __init__(self, server: EmbeddedNats, runner: Bus, tools: ToolsProcess) -> None:
        self.server, self.runner, self.tools = server, runner, tools
        self.ports: Ports = bus_ports(runner)


@pytest.fixture
async def restarted(tmp_path: Path) -> AsyncIterator[Restarted]:
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    runner: Bus | None = None
    tools_nc: nats.aio.client.Client | None = None
    try:
        runner = await connect(server.url, name="runner")  # reconnects after 1 s
        # The tools process reconnects later than the runner.
        tools_nc = await nats.connect(server.url, reconnect_time_wait=3, max_reconnect_attempts=-1)
        tools = ToolsProcess(Bus(tools_nc, server.url), "inst1")
        await tools.start()
        env = Restarted(server, runner, tools)
        first = await env.ports.exec_tool(call("browser_navigate", {"url": URL}))
        assert first.served_by == "inst1"

        kill(server)
        await anyio.sleep(0.3)
        await restart(server)
        with anyio.fail_after(10):
            while not runner.reconnects:
                await anyio.sleep(0.05)
        assert not tools_nc.is_connected  # the gap this is about
        yield env
    finally:
        if runner is not None:
            await runner.close()
        if tools_nc is not None:
            await tools_nc.close()
        server.stop()


async def test_a_nats_restart_does_not_lose_the_runs_browser_session(
    restarted: Restarted,
) -> None:
    # Sent while the tools process is still reconnecting: retried, not session_lost.
    with anyio.fail_after(bus_module.RECONNECT_GRACE_S + 5):
        result = await restarted.ports.exec_tool(call("browser_extract", {}))
    assert (result.served_by, result.output) == ("inst1", {"items": PRICES})
    assert restarted.tools.ran("browser_extract") == [URL]  # on the run's page, once
    # And the run stays pinned there.
    again = await restarted.ports.exec_tool(call("browser_extract", {}))
    assert (again.served_by, again.output) == ("inst1", {"items": PRICES})


async def test_an_instance_still_missing_after_the_grace_is_gone(
    restarted: Restarted, monkeypatch: pytest.MonkeyPatch
) -> None:
    await restarted.tools.bus.nc.close()  # it died with NATS: it will not answer again
    monkeypatch.setattr(bus_module, "RECONNECT_GRACE_S", 1.0)
    with anyio.fail_after(30), pytest.raises(PortError) as caught:
        await restarted.ports.exec_tool(call("browser_extract", {}))
    # Retried for the grace after the runner's reconnect, not for the call's timeout
    # (20 s): retries that ran to it would end as `timeout`.
    assert caught.value.code == SESSION_LOST
