"""open_stack: services are reachable the moment it yields."""

from __future__ import annotations

import pytest

from contracts import subjects as s
from contracts.system import SystemInfo
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

pytestmark = pytest.mark.anyio


async def test_a_request_right_after_start_is_answered(settings: Settings) -> None:
    # nats-py's flush() does not prove queued SUBs reached the server; start_service
    # waits for a round trip behind them, so not one of these may find no responder.
    for _ in range(15):
        async with open_stack(settings, ["system"]) as stack:
            info = await stack.bus.request(s.SYSTEM_INFO, b"{}", SystemInfo, timeout=2)
            assert info.services_running == ["system"]


async def test_several_seed_urls_connect_through_any_live_one(settings: Settings) -> None:
    from services.kernel.embedded_nats import free_port

    dead = f"nats://127.0.0.1:{free_port()}"
    seeds = f"{dead},{settings.nats_url}"
    async with open_stack(settings.with_(nats_url=seeds), ["system"]) as stack:
        info = await stack.bus.request(s.SYSTEM_INFO, b"{}", SystemInfo, timeout=2)
        assert info.services_running == ["system"]
