"""Local tools: shell_exec, file_read, file_write. The policy (policy.py) has already
confined paths and matched the command; this runs them with bounds and timeouts."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from contracts.tools import ToolMetadata
from services.tools.outcome import Outcome, ToolFailure

# Variables a command must not see: credentials, and rote's own configuration (a NATS
# URL may carry a password).
_HIDDEN_ENV = re.compile(r"(KEY|TOKEN|PASSWORD|SECRET|CREDENTIALS?)$|^ROTE_|^ANTHROPIC_", re.I)


def command_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if not _HIDDEN_ENV.search(k)}


class _Capture:
    """Keeps the first `limit` bytes of a stream and counts (but drops) the rest, so a
    chatty command never blocks on a full pipe nor fills our memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    async def drain(self, stream: ByteReceiveStream | None) -> None:
        if stream is None:
            return
        try:
            async for chunk in stream:
                room = self.limit - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[... {self.dropped} more bytes dropped]"
        return text


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signal.SIGKILL)


async def shell_exec(
    argv: list[str],
    *,
    timeout: float,
    cwd: Path,
    max_output_bytes: int,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run argv in its own process group (session). On timeout, cancellation or once
    the command exits, the whole group is killed: nothing it started outlives the call."""
    await anyio.Path(cwd).mkdir(parents=True, exist_ok=True)
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=command_env(env),
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolFailure("command_failed", f"no such command: {argv[0]!r}") from None
    except PermissionError:
        raise ToolFailure("command_failed", f"not executable: {argv[0]!r}") from None
    out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
    timed_out = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.drain, process.stdout)
            tg.start_soon(err.drain, process.stderr)
            with anyio.move_on_after(timeout) as scope:
                await process.wait()
            timed_out = scope.cancelled_caught
            # Background children still holding the pipes would keep the drains open.
            _kill_group(process.pid)
    finally:
        if process.returncode is None:
            _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    exit_code = process.returncode if process.returncode is not None else -signal.SIGKILL
    output = {"exit_code": exit_code, "stdout": out.text(), "stderr": err.text()}
    truncated = bool(out.dropped or err.dropped)
    metadata = ToolMetadata(exit_code=exit_code)
    if timed_out:
        raise ToolFailure(
            "timeout",
            f"command did not finish within {timeout:g}s; its process group was killed",
            output=output,
            metadata=metadata,
            truncated=truncated,
        )
    return Outcome(output, metadata, truncated)


def _open_flags(write: bool) -> int:
    # O_NOFOLLOW: the path was resolved and confined; a symlink swapped in since then
    # must not be followed.
    base = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return base | (os.O_WRONLY | os.O_CREAT | os.O_TRUNC if write else os.O_RDONLY)


def file_read(path: Path, *, max_chars: int) -> Outcome:
    # Checked before opening: opening a FIFO would block until someone writes to it.
    if path.exists() and not path.is_file():
        raise ToolFailure("io_error", f"{str(path)!r} is not a regular file")
    try:
        fd = os.open(path, _open_flags(write=False))
    except FileNotFoundError:
        raise ToolFailure("not_found", f"no such file: {str(path)!r}") from None
    except OSError as exc:
        raise ToolFailure("io_error", f"cannot open {str(path)!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolFailure("io_error", f"{str(path)!r} is not a regular file")
        # UTF-8 needs at most 4 bytes a character: this reads enough, never the whole
        # of a huge file.
        data = f.read(max_chars * 4 + 4)
        more = f.read(1) != b""
    text = data.decode("utf-8", errors="replace")
    truncated = more or len(text) > max_chars
    if truncated:
        text = text[:max_chars] + "\n[... truncated]"
    return Outcome(text, ToolMetadata(), truncated)


def file_write(path: Path, content: str) -> Outcome:
    data = content.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, _open_flags(write=True), 0o644)
    except OSError as exc:
        raise ToolFailure("io_error", f"cannot write {str(path)!r}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return Outcome({"path": str(path), "bytes": len(data)}, ToolMetadata())
