"""`rote up` runs the tools service; stopping rote leaves no Chromium behind."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from contracts import subjects as s
from contracts.tools import ExecTool, ListTools, ToolList, ToolResult
from services.kernel.bus import connect
from tests.leftovers import marked

pytestmark = pytest.mark.browser


def _is_chromium(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return b"chrom" in raw.split(b"\0", 1)[0] or b"headless_shell" in raw


async def _use_the_browser(url: str) -> None:
    bus = await connect(url)
    try:
        tools = await bus.request(s.TOOLS_LIST, ListTools(), ToolList, timeout=10)
        assert "browser_navigate" in [t.name for t in tools.tools]
        call = ExecTool(
            run_id="up-check",
            allowed_tools=["browser_read_page"],
            tool="browser_read_page",
            timeout_s=20,
        )
        result = await bus.request(s.TOOLS_EXEC, call, ToolResult, timeout=30)
        assert result.ok, result.error
        assert result.metadata.url == "about:blank"
    finally:
        await bus.close()


def test_rote_up_serves_tools_and_leaves_no_chromium(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(ROTE_DATA_DIR=str(tmp_path / "data"), ROTE_LOG_FORMAT="json", ROTE_TEST_MARK=marker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # Every service must start; a hang is a failure, not a stuck test run.
        ready, _, _ = select.select([proc.stdout], [], [], 90)
        assert ready, "rote up printed nothing within 90 s"
        first = proc.stdout.readline()
        assert first.startswith("rote up: NATS "), first
        assert "tools" in first.split("services:")[1]
        anyio.run(_use_the_browser, first.split()[3], backend="asyncio")
        assert any(_is_chromium(pid) for pid in marked(marker))

        status = subprocess.run(
            [sys.executable, "-m", "services.cli", "status"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stderr
        assert "rote-tools" in status.stdout and s.TOOLS_EXEC in status.stdout

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Everything rote started is gone (allow the kernel a moment to reap).
    deadline = time.monotonic() + 5
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(marker) == []


def test_ctrl_c_on_rote_up_stops_the_browser_without_noise(tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to rote's whole process group, Playwright's driver
    included) stops rote cleanly: exit 0, no asyncio "never retrieved" report of a
    Playwright future on stderr, nothing left behind."""
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(ROTE_DATA_DIR=str(tmp_path / "data"), ROTE_LOG_FORMAT="json", ROTE_TEST_MARK=marker)
    err_path = tmp_path / "stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "up"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # a job of its own, as in a terminal
        )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 90)
        assert ready, "rote up printed nothing within 90 s"
        first = proc.stdout.readline()
        assert first.startswith("rote up: NATS "), first
        # A browser is up and in use (the driver handles SIGINT once it launched one).
        anyio.run(_use_the_browser, first.split()[3], backend="asyncio")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, err_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err_path.read_text()
    assert "never retrieved" not in stderr, stderr[-3000:]
    assert "Connection closed while reading from the driver" not in stderr, stderr[-3000:]
    assert "rote_stopped" in stderr
    deadline = time.monotonic() + 5
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(marker) == []
