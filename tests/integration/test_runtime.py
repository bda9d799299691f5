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
