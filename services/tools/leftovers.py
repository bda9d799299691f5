"""The processes a shell_exec call started, found again once the call is over.

Every call's processes carry `ROTE_TOOL_CALL=<owner>.<call id>` in their environment,
inherited by whatever they start: how a process that left the call's group (setsid,
setpgid, a double fork) is still found when the call ends. The owner is the tools
process that ran the call, named by its pid and start time (a pid is reused, the pair
is not): a tools process killed outright (SIGKILL, the OOM killer) cannot end its calls,
and the next sweep of any tools process on the machine finds their owner gone.

Linux only (/proc), this user's processes only; one that clears its environment
(env -i) or changes user escapes both.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

from services.kernel.logs import get_logger

log = get_logger("rote.tools.leftovers")

CALL_MARKER = "ROTE_TOOL_CALL"
_PREFIX = f"{CALL_MARKER}=".encode()
_PROC = Path("/proc")
# Sweeps until one finds nothing new: a process may fork while the sweep runs.
_MAX_ROUNDS = 20


def _start_time(pid: int) -> str | None:
    """When `pid` started, in clock ticks since boot (field 22 of /proc/<pid>/stat; the
    command name before it may hold spaces and parentheses); None once it has exited
    (a zombie, not yet reaped by its parent, has exited)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def owner() -> str:
    """This process as the owner of the calls it runs: `<pid>.<start time>`."""
    pid = os.getpid()
    return f"{pid}.{_start_time(pid) or 0}"


def call_marker(call_id: str) -> tuple[str, str]:
    """The environment variable (name, value) that marks one call's processes."""
    return CALL_MARKER, f"{owner()}.{call_id}"


def _marked() -> Iterator[tuple[int, bytes]]:
    """(pid, marker value) of every process of this user whose environment is marked."""
    uid = os.getuid()
    for proc in _PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != uid:
                continue
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(_PREFIX):
                yield int(proc.name), entry.removeprefix(_PREFIX)
                break


def _kill_while_found(matches: Callable[[bytes], bool]) -> int:
    """SIGKILL every marked process whose marker `matches`, until a sweep finds no new
    one; how many were killed."""
    if not (_PROC / "self" / "environ").exists():
        return 0
    killed = set[int]()
    for _ in range(_MAX_ROUNDS):
        # One killed last round but not yet reaped may still show its environment.
        new = {pid for pid, value in _marked() if matches(value)} - killed
        if not new:
            return len(killed)
        for pid in new:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= new
    log.warning("tool_call_leftovers_kept_forking", killed=len(killed))
    return len(killed)


def kill_call(value: str) -> int:
    """SIGKILL every process of the call whose marker value is `value`."""
    wanted = value.encode()
    return _kill_while_found(lambda found: found == wanted)


def kill_orphans() -> int:
    """SIGKILL every process of a call whose owner is gone; how many were killed."""
    alive: dict[bytes, bool] = {}

    def orphaned(value: bytes) -> bool:
        pid, _, rest = value.partition(b".")
        start, _, _ = rest.partition(b".")
        if not (pid.isdigit() and start.isdigit()):
            return False  # not a marker this code wrote: leave it be
        key = pid + b"." + start
        if key not in alive:
            alive[key] = _start_time(int(pid)) == start.decode()
        return not alive[key]

    return _kill_while_found(orphaned)
