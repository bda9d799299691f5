"""The CLI against a NATS that is not what it hoped for: unreachable, password
protected, without JetStream, or gone while a service runs. Each ends with a clear line
and an exit code, never a traceback or a password on screen."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats

from services.kernel.embedded_nats import find_server_binary, free_port, port_is_free

PASSWORD = "n4ts-s3cret-pw"


def _rote(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(ROTE_DATA_DIR=str(tmp_path / "data"), ROTE_LOG_FORMAT="json")
    return env


@contextmanager
def nats_server(tmp_path: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    store = tmp_path / f"nats-{port}"
    proc = subprocess.Popen(
        [find_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-sd", str(store), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while port_is_free(port):
            assert time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)
        yield proc, port
    finally:
        proc.kill()
        proc.wait()


def test_status_gives_up_on_an_unreachable_nats_and_hides_its_password(tmp_path: Path) -> None:
    url = f"nats://ops:{PASSWORD}@127.0.0.1:{free_port()}"
    done = subprocess.run(
        _rote("status", "--nats-url", url),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "rote: cannot reach NATS at nats://ops:[redacted]@127.0.0.1:" in done.stderr
    # One line, saying why, rather than a warning line per connection attempt.
    assert (
        done.stderr.count("\n") == 1
        and "(last error: " in done.stderr
        and "Connect call failed" in done.stderr
    )
    assert PASSWORD not in done.stdout + done.stderr


def test_status_against_a_peer_that_is_not_nats_says_what_went_wrong(tmp_path: Path) -> None:
    """A port that takes the connection and never says a word (some other service):
    the timeout has no text of its own, and "(last error: )" would say nothing."""
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        stop = threading.Event()

        def say_nothing() -> None:
            server.settimeout(0.2)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    held.append(server.accept()[0])

        thread = threading.Thread(target=say_nothing, daemon=True)
        thread.start()
        try:
            done = subprocess.run(
                _rote("status", "--nats-url", f"nats://127.0.0.1:{port}"),
                env=_env(tmp_path),
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            stop.set()
            thread.join()
            for conn in held:
                conn.close()
    assert done.returncode == 1
    assert "(last error: " in done.stderr and "(last error: )" not in done.stderr, done.stderr


async def _send_malformed(url: str, subject: str) -> None:
    nc = await nats.connect(url)
    try:
        reply = await nc.request(subject, b"{not json", timeout=5)
        assert reply.headers and reply.headers["Nats-Service-Error-Code"] == "400"
    finally:
        await nc.close()


def test_serve_and_status_show_the_nats_url_without_its_password(tmp_path: Path) -> None:
    with nats_server(tmp_path, "-js", "--user", "ops", "--pass", PASSWORD) as (_, port):
        url = f"nats://ops:{PASSWORD}@127.0.0.1:{port}"
        env = _env(tmp_path)
        proc = subprocess.Popen(
            _rote("serve", "system", "--nats-url", url),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready.startswith(f"rote serve: NATS nats://ops:[redacted]@127.0.0.1:{port} ")
            asyncio.run(_send_malformed(url, "rote.api.system.info"))
            status = subprocess.run(
                _rote("status", "--nats-url", url),
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert status.returncode == 0, status.stderr
            assert "rote-system" in status.stdout
            # Each endpoint with its counts, the error replied to included.
            assert "rote.api.system.info  1 request, 1 error (last: malformed: " in status.stdout
            assert PASSWORD not in ready + status.stdout + status.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert PASSWORD not in err
        assert "rote serve: warning" not in err  # a NATS URL was given: no local-only warning


def test_a_nats_without_jetstream_is_a_clear_error(tmp_path: Path) -> None:
    with nats_server(tmp_path) as (_, port):
        done = subprocess.run(
            _rote("serve", "system", "--nats-url", f"nats://127.0.0.1:{port}"),
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert done.returncode == 1
    assert f"rote: JetStream is not enabled (or not ready) on nats://127.0.0.1:{port}" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_service_stopped_while_its_nats_is_gone_stops_cleanly(tmp_path: Path) -> None:
    with nats_server(tmp_path, "-js") as (server, port):
        proc = subprocess.Popen(
            _rote("serve", "system", "--nats-url", f"nats://127.0.0.1:{port}"),
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("rote serve: NATS ")
            server.kill()  # NATS restarts, say, just as the service is being stopped
            server.wait()
            time.sleep(1.0)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err


def test_status_on_a_nats_where_no_service_runs_fails_like_nothing_running(
    tmp_path: Path,
) -> None:
    """Reached, but nothing answers: the same exit code as with no NATS at all, so that
    `until rote status; do sleep 1; done` waits for the services, not just for NATS."""
    with nats_server(tmp_path, "-js") as (_, port):
        url = f"nats://127.0.0.1:{port}"
        for args, out in [((), f"NATS {url}: 0 service instance(s)\n"), (("--json",), "[]\n")]:
            done = subprocess.run(
                _rote("status", "--nats-url", url, *args),
                env=_env(tmp_path),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 1, (args, done.stderr)
            assert done.stdout == out
            assert done.stderr == f"rote: no service answered on NATS {url} within 0.5 s\n"
