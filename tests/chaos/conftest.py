"""The chaos suite's harness: a NATS the tests can stop and restart on the same port and
store, rote's services each in its own process, the counting site and the gated model.
Every test module here is marked `chaos` (and `browser`, `slow`)."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from services.kernel.bus import connect
from services.kernel.embedded_nats import EmbeddedNats, free_port
from tests.chaos.ledger import REPORTS, FaultLog, RunWatch
from tests.chaos.model import GatedStandin
from tests.chaos.procs import STEADY, Services
from tests.chaos.rig import Rig
from tests.chaos.site import CountingSite

STANDIN_KEY = "sk-ant-test-standin-key-0000"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each chaos test's report (faults, runs, duplicates), passed or failed."""
    if not REPORTS:
        return
    terminalreporter.section("chaos suite")
    for text, _, _ in REPORTS:
        terminalreporter.write_line(text)
    faults = sum(f for _, f, _ in REPORTS)
    dupes = sum(d for _, _, d in REPORTS)
    terminalreporter.write_line(f"chaos suite: {faults} faults injected, {dupes} duplicate submits")


@pytest.fixture
def site() -> Iterator[CountingSite]:
    with CountingSite() as counting:
        yield counting


@pytest.fixture
def model() -> Iterator[GatedStandin]:
    standin = GatedStandin()
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()


class RestartableNats:
    """One nats-server with JetStream on a fixed port and store dir: stopped (SIGTERM, a
    clean shutdown; SIGKILL, a crash) and started again where it was."""

    def __init__(self, store: Path) -> None:
        self.server = EmbeddedNats(store, port=free_port())
        self.up_since = 0.0

    @property
    def url(self) -> str:
        return self.server.url

    async def start(self) -> None:
        # Spawned on the event-loop thread (it dies with the thread that spawned it),
        # waited for in a worker.
        self.server.spawn()
        await anyio.to_thread.run_sync(self.server.wait_ready)
        self.up_since = time.monotonic()

    def stop(self, sig: signal.Signals) -> None:
        process = self.server.process
        assert process is not None and process.poll() is None, "nats-server is not running"
        process.send_signal(sig)
        process.wait(30)

    def close(self) -> None:
        self.server.stop()


@pytest.fixture
async def nats(tmp_path: Path) -> AsyncIterator[RestartableNats]:
    node = RestartableNats(tmp_path / "nats")
    await node.start()
    try:
        yield node
    finally:
        node.close()


def service_env(
    nats_url: str, data_dir: Path, model: GatedStandin, *, ack_wait_s: float, replicas: int = 1
) -> dict[str, str]:
    return {
        "ROTE_NATS_URL": nats_url,
        "ROTE_DATA_DIR": str(data_dir),
        "ROTE_EVENT_STORE": "sqlite",
        "ROTE_LOG_FORMAT": "json",
        "ROTE_LOG_LEVEL": "info",
        "ROTE_RUNNER_ACK_WAIT_S": str(ack_wait_s),
        "ROTE_RUNNER_SLOTS": "1",
        "ROTE_MAX_CONCURRENT": "32",
        "ROTE_REPLAY_BACKOFF_S": "0.2",
        "ROTE_STREAM_REPLICAS": str(replicas),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": STANDIN_KEY,
    }


@asynccontextmanager
async def open_rig(
    test: str,
    workdir: Path,
    nats_url: str,
    site: CountingSite,
    model: GatedStandin,
    *,
    runners: int,
    ack_wait_s: float,
    replicas: int = 1,
    runner_slots: int = 1,
) -> AsyncIterator[Rig]:
    """Every service its own process (`runners` runners of `runner_slots` slots), the
    test's own connection, and the run watch; everything stopped at the end."""
    env = service_env(nats_url, workdir / "data", model, ack_wait_s=ack_wait_s, replicas=replicas)
    env["ROTE_RUNNER_SLOTS"] = str(runner_slots)
    services = Services(workdir, env)
    bus = None
    rig: Rig | None = None
    try:
        # The streams are provisioned by the first service up; the rest, runners
        # included, start together.
        await services.start("system")
        await services.start(*[n for n in STEADY if n != "system"], *["runner"] * runners)
        bus = await connect(nats_url, name="rote-chaos-test")
        watch = await RunWatch(bus).start()
        rig = Rig(services, bus, site, model, FaultLog(test), watch)
        async with anyio.create_task_group() as tg:
            tg.start_soon(services.supervise)
            yield rig
            tg.cancel_scope.cancel()
    finally:
        if rig is not None:
            await rig.watch.stop()
            await rig.stop()
        else:
            await services.stop_all()
        if bus is not None:
            await bus.close()
