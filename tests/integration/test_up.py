"""`rote up` from an empty data dir: embedded NATS, discoverable services, `rote status`,
clean shutdown on SIGTERM with no nats-server left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from contracts import subjects as s
from contracts.system import SystemInfo
from services.kernel.bus import connect
from services.kernel.codec import decode
from services.kernel.discovery import gather
from services.kernel.embedded_nats import EmbeddedNats

ALL_SERVICES = {
    f"rote-{name}"
    for name in ("system", "llm", "tools", "compiler", "tracer", "runner", "scheduler")
}


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(ROTE_DATA_DIR=str(data_dir), ROTE_LOG_FORMAT="json")
    return env


def _rote(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def _nats_pids(store: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "--", f"-sd {store}"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


async def _probe(url: str) -> tuple[list[dict], list[dict], SystemInfo]:
    bus = await connect(url)
    try:
        pings = await gather(bus, "$SRV.PING")
        infos = await gather(bus, "$SRV.INFO")
        reply = await bus.nc.request(s.SYSTEM_INFO, b"{}", timeout=2)
        return pings, infos, decode(reply.data, SystemInfo)
    finally:
        await bus.close()


def test_rote_up_status_and_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    env = _env(data_dir)
    proc = subprocess.Popen(
        _rote("up"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("rote up: NATS nats://127.0.0.1:"), first
        url = first.split()[3]
        assert (data_dir / "nats.url").read_text().strip() == url
        assert _nats_pids(data_dir / "nats"), "embedded nats-server should be running"

        # Every service rote has, up in this one process (the tools service launches
        # Chromium, so wait for the last to register).
        deadline = time.monotonic() + 60
        while True:
            pings, infos, info = anyio.run(_probe, url, backend="asyncio")
            if {p["name"] for p in pings} >= ALL_SERVICES or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {p["name"] for p in pings} == ALL_SERVICES
        assert {i["name"] for i in infos} == ALL_SERVICES
        system = next(i for i in infos if i["name"] == "rote-system")
        assert [e["subject"] for e in system["endpoints"]] == [s.SYSTEM_INFO]
        assert info.embedded_nats and info.data_dir == str(data_dir)
        assert info.event_store == "sqlite"
        assert {f"rote-{name}" for name in info.services_running} == ALL_SERVICES

        status = subprocess.run(_rote("status"), env=env, capture_output=True, text=True)
        assert status.returncode == 0, status.stderr
        for name in ALL_SERVICES:
            assert name in status.stdout
        for subject in (s.SYSTEM_INFO, s.LLM_COMPLETE, s.TOOLS_EXEC, s.RUNS_START, s.TASKS_CREATE):
            assert subject in status.stdout
        as_json = subprocess.run(_rote("status", "--json"), env=env, capture_output=True, text=True)
        assert any(i["name"] == "rote-system" for i in json.loads(as_json.stdout))

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while _nats_pids(data_dir / "nats") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _nats_pids(data_dir / "nats") == []
    assert not (data_dir / "nats.url").exists()
    # Stopped: status says so and fails.
    status = subprocess.run(_rote("status"), env=env, capture_output=True, text=True)
    assert status.returncode == 1 and "nothing running" in status.stderr


def test_unknown_service_and_bad_settings_fail_clearly(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad = subprocess.run(_rote("serve", "nope"), env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    env["ROTE_EVENT_STORE"] = "mysql://x"
    bad = subprocess.run(_rote("up"), env=env, capture_output=True, text=True, timeout=20)
    assert bad.returncode == 2 and "ROTE_EVENT_STORE" in bad.stderr


def test_schema_writes_every_contract(tmp_path: Path) -> None:
    out = subprocess.run(_rote("schema", str(tmp_path / "schema")), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    files = list((tmp_path / "schema").glob("*.json"))
    assert len(files) > 50
    schema = json.loads((tmp_path / "schema" / "CreateTask.json").read_text())
    assert "$defs" in schema or "properties" in schema


def test_second_rote_up_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    env = _env(tmp_path / "d")
    first = subprocess.Popen(_rote("up"), env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("rote up:")
        second = subprocess.run(_rote("up"), env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "already running" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0


def test_sigterm_during_start_up_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "early"
    proc = subprocess.Popen(_rote("up"), env=_env(data_dir), stdout=subprocess.PIPE, text=True)
    try:
        # Wait only until the embedded server exists, then stop while services start.
        deadline = time.monotonic() + 30
        while not _nats_pids(data_dir / "nats") and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while _nats_pids(data_dir / "nats") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _nats_pids(data_dir / "nats") == []


def test_embedded_nats_dies_with_a_killed_rote_but_not_with_its_ctrl_c(tmp_path: Path) -> None:
    data_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        _rote("serve", "system"),
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a job of its own, as in a terminal
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("rote serve: NATS nats://127.0.0.1:")
        [nats_pid] = _nats_pids(data_dir / "nats")
        # Its own session: a Ctrl-C to rote's job reaches rote, which stops the server
        # after its services; it does not reach the server directly.
        assert os.getsid(nats_pid) == nats_pid != os.getsid(proc.pid)
        proc.kill()  # no clean-up at all: the kernel still stops the server
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while _nats_pids(data_dir / "nats") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _nats_pids(data_dir / "nats") == []


def _serve_system(env: dict[str, str]) -> tuple[str, str]:
    """`rote serve system` until it is up, then SIGTERM: its banner and its stderr."""
    proc = subprocess.Popen(
        _rote("serve", "system"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    return banner, err


def test_serve_without_a_nats_url_warns_that_it_is_local_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "island"
    banner, err = _serve_system(_env(data_dir))
    assert banner.startswith("rote serve: NATS nats://127.0.0.1:"), banner
    assert banner.rstrip().endswith("(embedded); services: system"), banner
    url = banner.split()[3]
    [warning] = [line for line in err.splitlines() if line.startswith("rote serve: warning:")]
    assert warning == (
        f"rote serve: warning: ROTE_NATS_URL is not set, so system is on its own embedded"
        f" NATS at {url}: only processes on this machine pointed at that URL can reach it;"
        " a deployment sets ROTE_NATS_URL on every process"
    )


def test_serve_beside_a_running_up_says_whose_nats_it_joined(tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    # The first one starts the embedded NATS; the second, with no URL, joins it.
    first = subprocess.Popen(
        _rote("serve", "system"), env=_env(data_dir), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        assert first.stdout.readline().rstrip().endswith("(embedded); services: system")
        banner, err = _serve_system(_env(data_dir))
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert banner.rstrip().endswith("(embedded, of the running rote up); services: system")
    assert "the embedded NATS of a running `rote up`" in err


def test_serve_with_rote_nats_url_does_not_warn(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats") as server:
        env = {**_env(tmp_path / "d"), "ROTE_NATS_URL": server.url}
        banner, err = _serve_system(env)
    assert banner.startswith(f"rote serve: NATS {server.url} (external); services: system")
    assert "warning" not in err.lower(), err[-3000:]


def test_a_stack_whose_embedded_nats_dies_stops_and_says_so(tmp_path: Path) -> None:
    """The embedded server is rote's own child: nothing brings it back once it is
    gone, so rote stops (for a supervisor to start it again) instead of trying to
    reconnect to it forever while `rote status` says nothing is running."""
    data_dir = tmp_path / "orphaned"
    proc = subprocess.Popen(
        _rote("serve", "system"),
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("rote serve: NATS nats://127.0.0.1:")
        [nats_pid] = _nats_pids(data_dir / "nats")
        os.kill(nats_pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("rote:")]
    assert len(lines) == 1 and "the embedded NATS" in lines[0] and "SIGKILL" in lines[0], err
    assert "Traceback" not in err
    assert not (data_dir / "nats.url").exists()


def test_up_and_serve_help_say_which_nats_they_use_and_how_they_stop() -> None:
    """What the command table (services/cli/README.md) says of them, where a user looks first."""
    for command, words in [
        ("up", ("ROTE_NATS_URL", "embedded NATS", "SIGINT", "SIGTERM")),
        ("serve", ("ROTE_NATS_URL", "running `rote up`", "ROTE_DATA_DIR", "SIGTERM")),
    ]:
        done = subprocess.run(_rote(command, "--help"), capture_output=True, text=True)
        assert done.returncode == 0
        said = " ".join(done.stdout.split())
        assert all(word in said for word in words), (command, said)
