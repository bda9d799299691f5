"""read_all returns a subject filter's whole history, in order, however late the server
answers: a fetch timing out is not the end of the history."""

from __future__ import annotations

import json
from typing import Any

import anyio
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from contracts import subjects as s
from services.kernel.bus import Bus
from services.kernel.replay_read import read_all
from services.kernel.streams import ensure_streams

pytestmark = pytest.mark.anyio


async def test_a_fetch_answered_late_does_not_cut_the_history_short(bus: Bus) -> None:
    await ensure_streams(bus.js)
    subject = s.llm_event("r1", "usage")
    pad = "x" * 1000
    for i in range(3000):
        await bus.js.publish(subject, json.dumps({"i": i, "pad": pad}).encode())
        if i % 100 == 0:
            await bus.js.publish(s.llm_event("r2", "usage"), b"{}")  # another run's
    # Fetches that give up after 0.1 ms time out before the server's answer arrives, as
    # they do on a busy server with the default timeout.
    for _ in range(3):
        msgs = await read_all(bus.js, s.STREAM_ACTIVITY, subject, fetch_timeout_s=0.0001)
        assert [json.loads(m.data)["i"] for m in msgs] == list(range(3000))


async def test_a_fetch_that_times_out_midway_is_not_the_end(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_streams(bus.js)
    subject = s.tool_event("r1", "finished")
    for i in range(1000):
        await bus.js.publish(subject, json.dumps({"i": i}).encode())
    fetch = JetStreamContext.PullSubscription.fetch
    calls = 0

    async def every_other_one_late(
        self: JetStreamContext.PullSubscription, batch: int = 1, timeout: float = 5, **kw: Any
    ) -> list[Msg]:
        nonlocal calls
        calls += 1
        if calls % 2 == 0:  # the server's answer comes after the client gave up
            await anyio.sleep(timeout)
            raise nats.errors.TimeoutError
        return await fetch(self, batch, timeout, **kw)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", every_other_one_late)
    msgs = await read_all(bus.js, s.STREAM_ACTIVITY, subject, batch=100, fetch_timeout_s=0.05)
    assert [json.loads(m.data)["i"] for m in msgs] == list(range(1000))


async def test_nothing_stored_is_an_empty_history_at_once(bus: Bus) -> None:
    await ensure_streams(bus.js)
    await bus.js.publish(s.llm_event("r2", "usage"), b"{}")
    # Far less than one fetch timeout: no fetch waited for (yet room for a busy machine).
    with anyio.fail_after(5):
        msgs = await read_all(
            bus.js, s.STREAM_ACTIVITY, s.llm_event("r1", "usage"), fetch_timeout_s=60
        )
    assert msgs == []
