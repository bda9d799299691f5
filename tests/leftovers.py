"""Finding processes a test started, however deep: every child inherits the marker in
its environment (rote, the Playwright driver, each Chromium process, nats-server)."""

from __future__ import annotations

import time
from pathlib import Path

MARK_VARIABLE = "ROTE_TEST_MARK"


def marked(marker: str) -> list[int]:
    found = []
    needle = f"{MARK_VARIABLE}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return found


def wait_gone(marker: str, timeout_s: float = 10.0) -> list[int]:
    """The marked processes still alive after `timeout_s` (empty: all gone)."""
    deadline = time.monotonic() + timeout_s
    while (alive := marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive
