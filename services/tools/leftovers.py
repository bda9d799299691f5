"""The processes a shell_exec call started, found again once the call is over.

Every call's processes carry two variables in their environment, inherited by whatever
they start: `ROTE_TOOL_CALL=<call id>`, how a process that left the call's group
(setsid, setpgid, a double fork) is still found when the call ends, and
`ROTE_TOOL_OWNER=<PID namespace>.<pid>.<start time>`, the tools process that ran the
call (a pid is reused, the triple is not). A tools process killed outright (SIGKILL,
the OOM killer) cannot end its calls: the next sweep of a tools process in the same PID
namespace finds their owner gone. (One in another namespace, a container, sees other
pids: it judges none of those calls.)

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
OWNER_MARKER = "ROTE_TOOL_OWNER"
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


def _namespace() -> str:
    """This process's PID namespace (its inode), "0" where there is none to read."""
    try:
        return str(os.stat(_PROC / "self" / "ns" / "pid").st_ino)
    except OSError:
        return "0"


def owner() -> str:
    """This process as the owner of the calls it runs: `<namespace>.<pid>.<start time>`."""
    pid = os.getpid()
    return f"{_namespace()}.{pid}.{_start_time(pid) or 0}"


def call_env(call_id: str) -> dict[str, str]:
    """The variables that mark one call's processes."""
    return {CALL_MARKER: call_id, OWNER_MARKER: owner()}


def _marked(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, value) of every process of this user whose environment has `name`."""
    prefix = f"{name}=".encode()
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
            if entry.startswith(prefix):
                yield int(proc.name), entry.removeprefix(prefix)
                break


def _kill_while_found(name: str, matches: Callable[[bytes], bool]) -> int:
    """SIGKILL every process whose variable `name` `matches`, until a sweep finds no new
    one; how many were killed."""
    if not (_PROC / "self" / "environ").exists():
        return 0
    killed = set[int]()
    for _ in range(_MAX_ROUNDS):
        # One killed last round but not yet reaped may still show its environment.
        new = {pid for pid, value in _marked(name) if matches(value)} - killed
        if not new:
            return len(killed)
        for pid in new:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= new
    log.warning("tool_call_leftovers_kept_forking", killed=len(killed))
    return len(killed)


def kill_call(call_id: str) -> int:
    """SIGKILL every process of the call `call_id`."""
    wanted = call_id.encode()
    return _kill_while_found(CALL_MARKER, lambda found: found == wanted)


def kill_orphans() -> int:
    """SIGKILL every process of a call whose owner is gone; how many were killed."""
    here = _namespace().encode()
    alive: dict[tuple[bytes, bytes], bool] = {}

    def orphaned(value: bytes) -> bool:
        namespace, pid, start, *_ = [*value.split(b"."), b"", b""]
        if namespace != here or not (pid.isdigit() and start.isdigit()):
            return False  # another namespace's call, or a value this code did not write
        if (pid, start) not in alive:
            alive[pid, start] = _start_time(int(pid)) == start.decode()
        return not alive[pid, start]

    return _kill_while_found(OWNER_MARKER, orphaned)
