"""Acting calls under an idempotency key, on a real NATS: each acts once, whatever is sent
again, to whichever tools process, across a restart of the tools service; a call whose
process died mid-call is in doubt; a status check tells what became of a call, and
closes a key no call used so that none ever runs under it.

The acting tool is a shell_exec appending a line to a file: its lines count how many
times the call acted. No browser is needed (a pool of 0 never starts Chromium).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.tools import CallStatus, CallStatusQuery, ExecTool, ListTools, ToolList, ToolResult
from services import __version__
from services.kernel.bus import Bus, connect
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.endpoints import start_service, stop_service
from services.kernel.errors import RemoteError
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.kernel.tools_client import ToolsClient
from services.tools import call_records, leftovers, local
from services.tools.browser import BrowserPool
from services.tools.call_records import CallRecords
from services.tools.events import ToolEvents
from services.tools.service import ToolsService
from services.tools.toolbox import ToolBox, ToolsConfig
from tests.integration.test_llm_reconnect import kill, restart

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ACTED = "acted.txt"
APPEND = f"echo acted >> {ACTED}"


# --- tools processes ---------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "files"
    path.mkdir()
    return path


@pytest.fixture
def tools_settings(settings: Settings, root: Path) -> Settings:
    return settings.with_(allowed_commands=("sh -c *",), path_roots=(str(root),), tools_pool_size=0)


@asynccontextmanager
async def tools_process(url: str, settings: Settings) -> AsyncIterator[ToolsService]:
    """One tools process, as `rote serve tools` wires it, on its own NATS connection;
    stopped (its subjects without a responder) on exit."""
    bus = await connect(url, name="tools")
    await ensure_streams(bus.js)
    config = ToolsConfig.from_settings(settings)
    try:
        async with BrowserPool(config.browser) as browsers, anyio.create_task_group() as tg:
            tools = ToolsService(
                ToolBox(config, browsers), browsers, ToolEvents(bus, config), CallRecords(bus)
            )
            service = await start_service(
                bus,
                name="rote-tools",
                version=__version__,
                description="tools under test",
                endpoints=tools.endpoints(),
                task_group=tg,
                metadata={"instance": tools.instance},
            )
            try:
                yield tools
            finally:
                await stop_service(service)
                tg.cancel_scope.cancel()
    finally:
        await bus.close()


def acting(command: str = APPEND, *, key: str = "x0", **kw: Any) -> ExecTool:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "task_id": "task-1",
        "allowed_tools": ["shell_exec"],
        "tool": "shell_exec",
        "input": {"command": f"sh -c '{command}'"},
        "timeout_s": 20.0,
        "call_id": "a1-b0",
        "idempotency_key": key,
    }
    fields.update(kw)
    return ExecTool(**fields)


async def exec_on(bus: Bus, call: ExecTool, subject: str = s.TOOLS_EXEC) -> ToolResult:
    return await bus.request(subject, call, ToolResult, timeout=call.timeout_s + 30)


async def refused(bus: Bus, call: ExecTool, subject: str = s.TOOLS_EXEC) -> RemoteError:
    with pytest.raises(RemoteError) as caught:
        await exec_on(bus, call, subject)
    return caught.value


async def status(bus: Bus, key: str, *, fence: bool = True, run_id: str = "run-1") -> CallStatus:
    return await ToolsClient(bus).call_status(CallStatusQuery(run_id=run_id, key=key, fence=fence))


def acted(root: Path) -> int:
    path = root / ACTED
    return len(path.read_text().splitlines()) if path.exists() else 0


async def wait_for(check: Any, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.05)


# --- once --------------------------------------------------------------------------------


async def test_the_same_call_sent_again_acts_once(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    async with tools_process(bus.url, tools_settings):
        first = await exec_on(bus, acting())
        assert first.ok and first.output["exit_code"] == 0, first
        # Sent again (its reply lost), under another call_id (another delivery): the
        # first one's answer.
        again = await exec_on(bus, acting(call_id="a2-b0", attempt=2))
        assert again == first
        # Two at once under a new key: one acts, the other gets its answer.
        both: list[ToolResult] = []

        async def send() -> None:
            both.append(await exec_on(bus, acting(key="x1")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            tg.start_soon(send)
        assert both[0] == both[1] and both[0].ok
    assert acted(root) == 2


async def test_a_repeat_on_another_process_waits_for_the_first(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    # The first call holds until the test lets it go: the repeat, on another process,
    # arrives while it runs there.
    held = acting(f"{APPEND}; while [ ! -e go ]; do sleep 0.05; done")
    async with (
        tools_process(bus.url, tools_settings) as one,
        tools_process(bus.url, tools_settings) as two,
    ):
        replies: dict[str, ToolResult] = {}

        async def send(name: str, instance: str) -> None:
            replies[name] = await exec_on(bus, held, s.tools_exec_on(instance))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "first", one.instance)
            await wait_for(lambda: acted(root) == 1)
            running = await status(bus, "x0")
            assert running.state == "running"
            assert running.started_at is not None and running.until is not None
            assert running.started_at < running.until
            tg.start_soon(send, "repeat", two.instance)
            await anyio.sleep(0.5)  # let it find the call running (either way: one act)
            (root / "go").touch()
    assert replies["repeat"] == replies["first"]
    assert replies["first"].ok and replies["first"].served_by == one.instance
    assert acted(root) == 1


async def test_a_repeat_after_a_restart_is_answered_from_the_record(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    async with tools_process(bus.url, tools_settings) as first_process:
        first = await exec_on(bus, acting())
    async with tools_process(bus.url, tools_settings) as second_process:
        assert second_process.instance != first_process.instance
        again = await exec_on(bus, acting(call_id="a2-b0", attempt=2))
        # The same reply: it names the process that ran it (where the run's browser
        # session was), not this one.
        assert again == first and again.served_by == first_process.instance
        done = await status(bus, "x0")
        assert (done.state, done.result) == ("finished", first)
        # Another request under the key is refused, not answered with the first's.
        err = await refused(bus, acting("echo other >> acted.txt"))
        assert (err.code, err.info.field) == ("invalid_request", "idempotency_key")
    assert acted(root) == 1


async def test_the_same_key_for_another_request_is_refused(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    command = f"sh -c '{APPEND}'"
    async with tools_process(bus.url, tools_settings):
        first = await exec_on(bus, acting(input={"command": command, "timeout": 10}))
        err = await refused(bus, acting("echo other >> acted.txt"))
        assert (err.code, err.info.field) == ("invalid_request", "idempotency_key")
        # The same input with its keys in another order is the same request.
        same = await exec_on(bus, acting(input={"timeout": 10, "command": command}))
        assert same == first
    assert acted(root) == 1


async def test_a_refused_call_leaves_its_key_free(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    async with tools_process(bus.url, tools_settings):
        err = await refused(bus, acting(allowed_tools=[]))
        assert err.code == "tool_not_allowed"
        # Nothing ran, nothing is kept: asked again, it is decided afresh.
        assert (await status(bus, "x0", fence=False)).state == "unknown"
        assert (await exec_on(bus, acting())).ok
    assert acted(root) == 1


async def test_a_call_that_failed_after_it_may_have_acted_is_not_run_again(
    bus: Bus, tools_settings: Settings, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: Path, content: str, *, root: Path) -> Any:
        with (root / ACTED).open("a") as f:
            f.write("acted\n")
        raise ZeroDivisionError("a bug in a tool, after it acted")

    monkeypatch.setattr(local, "file_write", broken)
    write = acting(
        tool="file_write", allowed_tools=["file_write"], input={"path": "a", "content": "x"}
    )
    async with tools_process(bus.url, tools_settings):
        err = await refused(bus, write)
        assert err.code == "internal"
    async with tools_process(bus.url, tools_settings):
        again = await refused(bus, write)
        assert (again.code, again.message) == ("internal", err.message)
        done = await status(bus, "x0")
        assert done.state == "finished" and done.result is not None
        assert done.result.error is not None and done.result.error.code == "internal"
    assert acted(root) == 1


async def test_a_call_that_cannot_be_recorded_does_not_run(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    async with tools_process(bus.url, tools_settings):
        await bus.js.delete_key_value(s.BUCKET_TOOL_CALLS)
        err = await refused(bus, acting())
        assert err.code == "unavailable" and s.BUCKET_TOOL_CALLS in err.message
        # A call without a key does not need the record.
        assert (await exec_on(bus, acting(idempotency_key=None))).ok
    assert acted(root) == 1


# --- status checks -----------------------------------------------------------------------


async def test_a_status_check_closes_a_key_no_call_used(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    async with tools_process(bus.url, tools_settings):
        assert (await status(bus, "x0", fence=False)).state == "unknown"
        assert (await status(bus, "x0", fence=False)).state == "unknown"  # still open
        fenced = await status(bus, "x0")
        assert (fenced.run_id, fenced.key, fenced.state) == ("run-1", "x0", "fenced")
        # The request still on its way arrives: it never runs.
        err = await refused(bus, acting())
        assert err.code == "conflict" and "never ran" in err.message
        assert (await status(bus, "x0", fence=False)).state == "fenced"
        # Another run's key of the same name is its own.
        assert (await status(bus, "x0", fence=False, run_id="run-2")).state == "unknown"
        assert (await exec_on(bus, acting(key="x~1"))).ok
        done = await status(bus, "x~1")
        assert done.state == "finished" and done.result is not None and done.result.ok
    assert acted(root) == 1


async def test_a_malformed_status_query_is_a_structured_error(
    bus: Bus, tools_settings: Settings
) -> None:
    async with tools_process(bus.url, tools_settings):
        for body in (b"{nope", b'{"run_id": "run-1"}', b'{"run_id": "run-1", "key": "a.b"}'):
            with pytest.raises(RemoteError) as caught:
                await bus.request(s.TOOLS_CALL_STATUS, body, CallStatus)
            assert caught.value.code in ("malformed", "invalid_request")


# --- in doubt ----------------------------------------------------------------------------


async def test_a_running_record_past_its_time_is_in_doubt(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    """The record of a call whose process died long ago (written as it would have)."""
    async with tools_process(bus.url, tools_settings) as tools:
        call = acting()
        started = utc_now() - timedelta(minutes=5)
        record = call_records.running(call, call_records.fingerprint(call), "gone", started)
        assert await tools.records.create("run-1", "x0", record)
        err = await refused(bus, call)
        assert err.code == "in_doubt" and "shell_exec" in err.message
        assert "gone" in err.message
        doubt = await status(bus, "x0")
        assert doubt.state == "in_doubt" and doubt.started_at == started
    assert acted(root) == 0


@pytest.fixture
def orphans() -> Iterator[None]:
    """What a tools process killed mid-call left running ends with the test."""
    yield
    leftovers.kill_orphans()


def _tools_subprocess(url: str, settings: Settings, grace_s: float) -> subprocess.Popen[bytes]:
    """`rote serve tools` in a process of its own, with a short grace after a call's
    timeout (so the test need not wait out the real one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(
        ROTE_NATS_URL=url,
        ROTE_DATA_DIR=str(settings.data_dir),
        ROTE_TOOLS_ALLOW_COMMANDS=settings.allowed_commands[0],
        ROTE_TOOLS_PATH_ROOTS=settings.path_roots[0],
        ROTE_TOOLS_POOL_SIZE="0",
        ROTE_LOG_FORMAT="json",
    )
    code = (
        "import sys; from services.tools import call_records;"
        f" call_records.GRACE_S = {grace_s}; from services.cli import main;"
        " sys.exit(main(['serve', 'tools']))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _serving(bus: Bus) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                await bus.request(s.TOOLS_LIST, ListTools(), ToolList, timeout=2)
                return
            except RemoteError:
                await anyio.sleep(0.2)


@pytest.mark.usefixtures("orphans")
async def test_a_call_whose_process_died_mid_call_is_in_doubt(
    bus: Bus, tools_settings: Settings, root: Path
) -> None:
    await ensure_streams(bus.js)
    process = _tools_subprocess(bus.url, tools_settings, grace_s=1.0)
    try:
        await _serving(bus)
        # It acts, then holds (until killed): nobody waits for its reply.
        call = acting(f"{APPEND}; sleep 60", timeout_s=8.0)
        await bus.nc.publish(s.TOOLS_EXEC, msgspec.json.encode(call), reply=bus.nc.new_inbox())
        await wait_for(lambda: acted(root) == 1)
        process.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(process.wait)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    async with tools_process(bus.url, tools_settings):
        # Until its time is up, it may still be running somewhere.
        assert (await status(bus, "x0")).state == "running"
        # The repeat waits for it, then is told what is known: nothing.
        err = await refused(bus, acting(f"{APPEND}; sleep 60", timeout_s=8.0, call_id="a2-b0"))
        assert err.code == "in_doubt" and "shell_exec" in err.message, err
        assert (await status(bus, "x0")).state == "in_doubt"
    assert acted(root) == 1


# --- a lost reply ------------------------------------------------------------------------


async def test_a_reply_lost_to_a_nats_restart_is_asked_again_and_the_call_acts_once(
    tmp_path: Path, tools_settings: Settings, root: Path, written_logs: list[dict[str, Any]]
) -> None:
    server = EmbeddedNats(tmp_path / "nats-restarted", port=free_port()).start()
    caller = await connect(server.url, name="runner")
    try:
        async with tools_process(server.url, tools_settings):
            held = acting(f"{APPEND}; while [ ! -e go ]; do sleep 0.05; done")
            replies: list[ToolResult] = []

            async def send() -> None:
                replies.append(await ToolsClient(caller).call(held, timeout=60))

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                await wait_for(lambda: acted(root) == 1)
                # NATS goes away while the call runs: the reply may be lost with it.
                kill(server)
                await anyio.sleep(0.3)
                await restart(server)
                await wait_for(lambda: caller.reconnects > 0)
                (root / "go").touch()
        assert len(replies) == 1 and replies[0].ok
        assert acted(root) == 1
        # Its reply might have been lost: it was asked for again at the reconnect.
        resent = [e for e in written_logs if e.get("event") == "request_resent"]
        assert [e["subject"] for e in resent] == [s.TOOLS_EXEC]
    finally:
        await caller.close()
        server.stop()
