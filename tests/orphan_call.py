"""A shell_exec call left running by a tools process that was SIGKILLed mid-call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def sleeper_code(pid_file: Path) -> str:
    """A command that writes its pid to `pid_file`, then sleeps a minute."""
    return f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"


@contextmanager
def orphaned_call(tmp_path: Path) -> Iterator[int]:
    """Start a stand-in tools process running one call (a sleeper), SIGKILL it mid-call
    and reap it; yields the sleeper's pid, still running. Killed at the end regardless."""
    pid_file = tmp_path / "orphan.pid"
    owner = (
        "import anyio, sys; from pathlib import Path; from services.tools import local\n"
        "anyio.run(lambda: local.shell_exec([sys.executable, '-c', sys.argv[1]], timeout=60,"
        " cwd=Path(sys.argv[2]), max_output_bytes=100))"
    )
    tools = subprocess.Popen(
        [sys.executable, "-c", owner, sleeper_code(pid_file), str(tmp_path)], cwd=ROOT
    )
    sleeper = 0
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()):
            assert tools.poll() is None and time.monotonic() < deadline, "the call never ran"
            time.sleep(0.05)
        sleeper = int(pid_file.read_text())
        tools.send_signal(signal.SIGKILL)
        tools.wait()
        time.sleep(0.2)
        assert alive(sleeper)  # nothing else ends it: its tools process is gone
        yield sleeper
    finally:
        if tools.poll() is None:
            tools.kill()
            tools.wait()
        if sleeper:
            with suppress(ProcessLookupError):
                os.kill(sleeper, signal.SIGKILL)
