"""A NATS restart (kill -9, back on the same store) in the middle of a model call: the
reply the llm service sent while the runner was away is lost, so the runner sends the
call again once it is back, and the llm service answers the repeat from its record.
The run ends promptly, not after the runner's 300 s wait, and pays for the call once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.llm import ToolDefinition, UsageEvent
from contracts.runs import RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, SessionClosed, ToolList, ToolResult
from services.dev.standin.server import StandinServer
from services.kernel import bus as bus_module
from services.kernel.bus import Bus, connect, routed
from services.kernel.codec import decode, encode
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.errors import RemoteError
from services.kernel.replay_read import read_all
from services.kernel.run_store import RunStore
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings

pytestmark = pytest.mark.anyio

SUBJECT = "rote.test.idempotent"


def kill(server: EmbeddedNats) -> None:
    """kill -9, as the chaos audit did: no goodbye to the clients."""
    assert server.process is not None
    server.process.kill()
    server.process.wait()
    server.process = None


async def restart(server: EmbeddedNats) -> None:
    server.spawn()  # on the loop's thread (see EmbeddedNats.spawn), same port and store
    await anyio.to_thread.run_sync(server.wait_ready)


async def bounce(server: EmbeddedNats) -> None:
    """Killed, and back on the same store half a second later."""
    kill(server)
    await anyio.sleep(0.5)
    await restart(server)


async def test_a_request_is_sent_again_when_the_connection_came_back_while_it_waited(
    tmp_path: Path,
) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        service = await connect(server.url, name="service")
        caller = await connect(server.url, name="caller")
        seen: list[bytes] = []

        async def answer(msg: Msg) -> None:
            seen.append(msg.data)
            if len(seen) > 1:  # the first reply is lost: it is never sent
                await msg.respond(b'"answered"')

        await service.nc.subscribe(SUBJECT, cb=answer)
        await routed(service.nc)
        # No responder, no reconnect: unavailable at once, as without re-sends (sent
        # again until its 10 s were up, it would end as `timeout`).
        with anyio.fail_after(30), pytest.raises(RemoteError) as caught:
            await caller.request("rote.test.nobody", b"{}", str, resend=3)
        assert caught.value.code == "unavailable"

        got: list[str] = []

        async def ask() -> None:
            got.append(await caller.request(SUBJECT, b'{"id": 1}', str, timeout=60, resend=3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(5):
                while not seen:
                    await anyio.sleep(0.01)
            await bounce(server)
            # Long before the request's 60 s, which it would wait out if not sent again.
            with anyio.fail_after(45):
                while not got:
                    await anyio.sleep(0.05)
        assert got == ["answered"] and seen == [b'{"id": 1}'] * 2
        assert caller.reconnects == 1
        await caller.close()
        await service.close()
    finally:
        server.stop()


async def test_a_request_is_sent_again_when_the_service_it_asked_came_back(
    tmp_path: Path,
) -> None:
    """In a cluster, the node a service is connected to dies with a request on its way
    to the service: the caller, on another node, sees no disconnect. The service says
    it is back (rote.evt.bus.reconnected), and the caller sends the request again
    rather than wait out its whole timeout (300 s for a model call)."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        service = await connect(server.url, name="service")
        caller = await connect(server.url, name="caller")
        bystander = await connect(server.url, name="bystander")
        seen: list[bytes] = []

        async def answer(msg: Msg) -> None:
            seen.append(msg.data)
            if len(seen) > 1:  # the first request is lost: never answered
                await msg.respond(b'"answered"')

        await service.nc.subscribe(SUBJECT, cb=answer)
        await bystander.nc.subscribe("rote.test.other", cb=answer)
        for bus in (service, bystander):
            await routed(bus.nc)
        got: list[str] = []

        async def ask() -> None:
            got.append(await caller.request(SUBJECT, b'{"id": 1}', str, timeout=60, resend=3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(5):
                while not seen:
                    await anyio.sleep(0.01)
            # A process serving something else coming back changes nothing.
            await bystander.announce_reconnect()
            await anyio.sleep(0.5)
            assert seen == [b'{"id": 1}'] and not got
            # What the service does once its connection is back (nats-py's reconnected
            # callback): the caller's connection never went away.
            await service.announce_reconnect()
            with anyio.fail_after(10):
                while not got:
                    await anyio.sleep(0.05)
        assert got == ["answered"] and seen == [b'{"id": 1}'] * 2
        assert caller.reconnects == 0
        for bus in (caller, service, bystander):
            await bus.close()
    finally:
        server.stop()


async def test_a_service_that_lost_the_same_server_late_does_not_get_the_request_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ends lost one server: the caller, back first, sent the request again. The
    service's notice, however late it comes (a busy machine), names the server both
    lost: what the caller sent since its own reconnect never went there, so it is not
    sent a third time."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        service = await connect(server.url, name="service")
        caller = await connect(server.url, name="caller")
        sends: list[bytes] = []
        release = anyio.Event()

        async def answer(msg: Msg) -> None:
            # One at a time: a third send would wait behind the held second, and be
            # counted once it is let go.
            sends.append(msg.data)
            if len(sends) > 1:  # the first is lost with the server; the re-send waits
                await release.wait()
                await msg.respond(b'"answered"')

        await service.nc.subscribe(SUBJECT, cb=answer)
        await routed(service.nc)
        got: list[str] = []

        async def ask() -> None:
            got.append(await caller.request(SUBJECT, b'{"id": 1}', str, timeout=60, resend=3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(5):
                while not sends:
                    await anyio.sleep(0.01)
            await bounce(server)
            with anyio.fail_after(45):
                while len(sends) < 2 or not service.nc.is_connected:
                    await anyio.sleep(0.05)
            assert service.lost_server and service.lost_server == caller.lost_server
            # Late: past any window of "came back at about the same time".
            monkeypatch.setattr(bus_module, "RECONNECT_GRACE_S", 0.0)
            await service.announce_reconnect()
            await anyio.sleep(1.0)
            assert not got
            release.set()
            with anyio.fail_after(10):
                while not got:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # room for a third send to show itself
        assert got == ["answered"] and len(sends) == 2
        for bus in (caller, service):
            await bus.close()
    finally:
        server.stop()


async def serve_tools(bus: Bus) -> None:
    """The tools service, at the bus boundary: a page titled "News"."""
    navigate = ToolDefinition(name="browser_navigate", description="open", input_schema={})

    async def list_tools(msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[navigate])))

    async def exec_tool(msg: Msg) -> None:
        call = decode(msg.data, ExecTool)
        output = {"url": call.input.get("url"), "status": 200, "title": "News"}
        await msg.respond(encode(ToolResult(ok=True, output=output, duration_ms=1)))

    async def close_session(msg: Msg) -> None:
        await msg.respond(encode(SessionClosed(run_id="-", closed=True)))

    await bus.nc.subscribe(s.TOOLS_LIST, cb=list_tools)
    await bus.nc.subscribe(s.TOOLS_EXEC, cb=exec_tool)
    await bus.nc.subscribe(s.TOOLS_CLOSE_SESSION, cb=close_session)
    await routed(bus.nc)


async def usage_events(bus: Bus, run_id: str) -> list[UsageEvent]:
    msgs = await read_all(bus.js, s.STREAM_ACTIVITY, s.llm_event(run_id, "usage"))
    return [decode(m.data, UsageEvent) for m in msgs]


async def test_a_model_reply_lost_to_a_nats_restart_ends_the_run_promptly_paid_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_logs: list[dict[str, Any]]
) -> None:
    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    try:
        with StandinServer(min_cache_tokens=0) as model:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", model.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-secret")
            settings = Settings(
                nats_url=server.url,
                data_dir=tmp_path / "data",
                event_store="memory",
                log_format="json",
            )
            # The first model call answers 1.5 s after it arrives: NATS is away by then.
            model.inject(latency_ms=1500, latency_count=1)
            async with (
                open_stack(settings, ["llm"]),
                open_stack(settings, ["runner", "scheduler"]) as runner,
            ):
                bus = await connect(server.url, name="test")
                await serve_tools(bus)
                # The runner comes back last (its next attempt 5 s after a failed one,
                # the others' 1 s): the llm service replies while it is still away, and
                # the reply is lost, as in the audit.
                runner.bus.nc.options["reconnect_time_wait"] = 5
                spec = TaskSpec(
                    name="title",
                    prompt="Open http://news.test/ and report its title",
                    allowed_tools=["browser_navigate"],
                )
                start = StartRun(spec=spec, task_id="title", run_id="chaos-run")
                await bus.request(s.RUNS_START, start, RunStarted)
                with anyio.fail_after(10):
                    while not model.received:  # the call is with the model
                        await anyio.sleep(0.01)
                kill(server)
                await anyio.sleep(1.0)
                await restart(server)
                store = RunStore(bus)
                with anyio.fail_after(60):  # the runner used to wait out its 300 s
                    while (done := await store.finished("chaos-run")) is None:
                        await anyio.sleep(0.2)
                usage = await usage_events(bus, "chaos-run")
                await bus.close()
        # The case under test happened: the reply was lost and the call sent again.
        assert any(e["event"] == "request_resent" for e in written_logs)
        assert (done.status, done.result) == ("completed", "Title: News"), done.error
        # Two turns, each called once: the repeat of the first was answered from the
        # llm service's record, and the run's cost counts both.
        assert model.stats()["messages"] == 2 and len(usage) == 2
        assert done.cost_usd == pytest.approx(sum(e.cost_usd for e in usage))
        assert done.cost_usd > 0
    finally:
        server.stop()
