"""open_stack: services are reachable the moment it yields."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.slow
async def test_embedded_server_outlives_retired_worker_threads(tmp_path: Path) -> None:
    # Linux stops a child whose parent *thread* exits (PR_SET_PDEATHSIG); anyio retires
    # worker threads idle for 10 s. The embedded server must not be tied to one.
    import time

    import anyio

    from services.kernel.embedded_nats import free_port

    settings = Settings(data_dir=tmp_path, event_store="memory", log_format="json")
    async with open_stack(
        settings, ["system"], join_running=False, embedded_port=free_port()
    ) as stack:
        assert stack.embedded is not None and stack.embedded.process is not None
        async with anyio.create_task_group() as tg:  # grow the worker pool
            for _ in range(6):
                tg.start_soon(anyio.to_thread.run_sync, time.sleep, 0.2)
        for _ in range(5):  # ~13 s: idle workers are retired meanwhile
            await anyio.sleep(2.6)
            await anyio.to_thread.run_sync(time.sleep, 0.01)
        assert stack.embedded.process.poll() is None
        info = await stack.bus.request(s.SYSTEM_INFO, b"{}", SystemInfo, timeout=2)
        assert info.embedded_nats


def test_embedded_server_takes_the_default_port_or_a_free_one_when_it_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from services.kernel import embedded_nats
    from services.kernel.embedded_nats import EmbeddedNats, free_port

    # Stand a free port in for 4222 (the machine's own NATS may hold the real one).
    default = free_port()
    monkeypatch.setattr(embedded_nats, "DEFAULT_PORT", default)
    with EmbeddedNats(tmp_path / "a") as server:
        assert server.port == default and server.url == f"nats://127.0.0.1:{default}"

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", default))
        squatter.listen()
        with EmbeddedNats(tmp_path / "b") as server:
            assert server.port != default
            # It is a real, reachable server on the port it says.
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as conn:
                assert conn.recv(4096).startswith(b"INFO ")


def test_an_embedded_server_beaten_to_its_port_is_not_taken_for_another(
    tmp_path: Path,
) -> None:
    """Another NATS with JetStream took the port between its choice and the bind: ours
    exits, and start() says so, instead of reporting the other server as ready."""
    from services.kernel.embedded_nats import EmbeddedNats, EmbeddedNatsError, free_port

    port = free_port()
    with (
        EmbeddedNats(tmp_path / "other", port=port, name="someone-else"),
        pytest.raises(EmbeddedNatsError, match=f"exited with .* on port {port}"),
    ):
        EmbeddedNats(tmp_path / "mine", port=port).start()


async def test_only_this_data_dirs_own_embedded_server_is_joined(
    tmp_path: Path, settings: Settings
) -> None:
    from services.kernel.embedded_nats import free_port
    from services.kernel.runtime import running_embedded_url, url_file

    mine = Settings(data_dir=tmp_path / "mine", event_store="memory", log_format="json")
    async with open_stack(mine, ["system"], join_running=False, embedded_port=free_port()):
        assert running_embedded_url(mine) == url_file(mine).read_text().strip()
    # After a crash the recorded port may be another server's (here, the tests' NATS):
    # it is not taken for this data dir's own.
    assert settings.nats_url is not None
    url_file(mine).write_text(settings.nats_url + "\n")
    assert running_embedded_url(mine) is None


async def test_a_connection_closed_for_good_stops_the_stack_with_a_clear_error(
    settings: Settings,
) -> None:
    """The server closes a connection for a protocol violation (here a message over the
    max payload once its headers count, sent past rote's own check) and nats-py does not
    reconnect from that: every service of the process is then deaf. The process must
    stop, so that its supervisor starts it again, rather than look alive."""
    import anyio

    from services.kernel.bus import ConnectionLost

    with pytest.raises(BaseException) as stopped:  # an exception group
        with anyio.fail_after(10):
            async with open_stack(settings, ["system"]) as stack:
                nc = stack.bus.nc
                size = nc.max_payload - 20
                await nc.publish("rote.test.big", b"x" * size, headers={"X-Pad": "y" * 64})
                await anyio.sleep_forever()
    leaves = stopped.value.exceptions if isinstance(stopped.value, BaseExceptionGroup) else []
    lost = [e for e in leaves if isinstance(e, ConnectionLost)]
    assert lost, stopped.value
    assert "closed for good" in str(lost[0]) and "payload" in str(lost[0]).lower()


async def test_two_stacks_starting_at_once_on_one_data_dir_start_one_embedded_server(
    tmp_path: Path,
) -> None:
    """Two `rote up` started together both find no running server: without a lock on
    the data dir, both would run a nats-server on the one JetStream store, and the first
    to stop would delete the other's nats.url (`rote status`: nothing running)."""
    import anyio

    from services.kernel.embedded_nats import free_port
    from services.kernel.runtime import AlreadyRunningError, running_embedded_url

    settings = Settings(data_dir=tmp_path, event_store="memory", log_format="json")
    outcomes: list[str] = []
    refused = anyio.Event()

    async def start() -> None:
        try:
            async with open_stack(
                settings, ["system"], join_running=False, embedded_port=free_port()
            ) as stack:
                outcomes.append("started")
                with anyio.move_on_after(10):
                    await refused.wait()
                assert running_embedded_url(settings) == stack.nats_url
        except AlreadyRunningError:
            outcomes.append("refused")
            refused.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(start)
        tg.start_soon(start)
    assert sorted(outcomes) == ["refused", "started"]


async def test_streams_and_buckets_come_back_after_nats_restarts_without_its_store(
    tmp_path: Path,
) -> None:
    """A NATS restarted without its JetStream store (a container with no volume) comes
    back empty. Consumers re-create their own streams, but nothing else would: not the
    streams only published to, nor the buckets (the scheduler's lease among them, so
    the scheduler would stay in standby until rote itself restarts)."""
    import anyio

    from contracts import subjects
    from services.kernel.embedded_nats import EmbeddedNats, free_port
    from services.kernel.streams import BUCKET_STREAMS, STREAMS

    port = free_port()
    wanted = {spec.name for spec in STREAMS} | set(BUCKET_STREAMS)
    first = EmbeddedNats(tmp_path / "store-1", port=port).start()
    settings = Settings(
        nats_url=first.url, data_dir=tmp_path / "data", event_store="memory", log_format="json"
    )
    try:
        async with open_stack(settings, ["system"]) as stack:
            first.stop()
            second = EmbeddedNats(tmp_path / "store-2", port=port).start()
            try:
                have: set[str] = set()
                with anyio.move_on_after(15):
                    while not wanted <= have:
                        await anyio.sleep(0.2)
                        if stack.bus.nc.is_connected:
                            with anyio.move_on_after(2):
                                have = {s.config.name for s in await stack.bus.js.streams_info()}
                assert wanted <= have, sorted(wanted - have)
                assert subjects.STREAM_TASKS in have
            finally:
                await anyio.to_thread.run_sync(second.stop)
    finally:
        first.stop()
