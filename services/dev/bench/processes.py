"""Services as separate OS processes (`rote serve NAME`), for benchmarks that measure
what several processes do on the machine's cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def serve(name: str, nats_url: str, data_dir: Path, **env: str) -> subprocess.Popen[str]:
    """Start `rote serve NAME` and return once it says it is up."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    environment.update(
        ROTE_NATS_URL=nats_url,
        ROTE_DATA_DIR=str(data_dir),
        ROTE_LOG_FORMAT="json",
        ROTE_LOG_LEVEL="warning",
        **env,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", name],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("rote serve:"):
        proc.kill()
        raise RuntimeError(f"rote serve {name} did not start: {line!r}")
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def serving(
    names: list[str], nats_url: str, data_dir: Path, **env: str
) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, name in enumerate(names):
            procs.append(serve(name, nats_url, data_dir / f"{name}-{i}", **env))
        yield procs
    finally:
        for proc in reversed(procs):
            stop(proc)
