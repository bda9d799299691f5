"""Local tools: shell_exec, file_read, file_write. The policy (policy.py) has already
confined paths and matched the command; this runs them with bounds and timeouts, and
opens files so that nothing swapped in since the check can lead out of the roots.

Whatever these tools show is masked before it is cut: a secret cut in half no longer
looks like one to the redaction that runs on the reply later."""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import subprocess
import uuid
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from contracts.tools import ToolMetadata
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.secrets import is_secret_name, redact, url_credentials
from services.kernel.text import TRUNCATION_MARK, cut_text
from services.tools import leftovers
from services.tools.outcome import Outcome, ToolFailure

log = get_logger("rote.tools.local")

# rote's own configuration: a NATS or event store URL may carry a password.
_ROTE_ENV = re.compile(r"^(ROTE|ANTHROPIC)_", re.IGNORECASE)


def _hidden(name: str, value: str) -> bool:
    """A variable a command must not see: one the secrets module masks by its name (the
    same rule, so what a command could print is what start-up registered), rote's own
    configuration, or any holding a URL with a password (HTTP_PROXY=http://u:pw@proxy)."""
    return is_secret_name(name) or bool(_ROTE_ENV.match(name) or url_credentials(value))


def command_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if not _hidden(k, v)}


# Text kept past a limit so that a secret straddling the limit is still whole when
# masked. When the kept text is itself cut short (more followed), its last SECRET_MARGIN
# characters once masked are never shown: they hold whatever the start of a secret cut
# there became, since masking at most triples a text's length, for any secret of up to
# a third of the margin. (Counted from the end, earlier masks cannot shift it.)
SECRET_MARGIN = 8192


def _masked(text: str, *, whole: bool) -> str:
    """`text` masked, ready to be cut anywhere. Unless it is `whole`, its tail (which may
    hold half a secret) is dropped after masking, when its place is still known."""
    masked = redact(text)
    return masked if whole else masked[: max(0, len(masked) - SECRET_MARGIN)]


class _Capture:
    """Keeps the first `limit` bytes of a stream (plus a margin, see SECRET_MARGIN) and
    counts (but drops) the rest, so a chatty command never blocks on a full pipe nor
    fills our memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.keep = limit + 2 * SECRET_MARGIN
        self.data = bytearray()
        self.dropped = 0

    async def drain(self, stream: ByteReceiveStream | None) -> None:
        if stream is None:
            return
        try:
            async for chunk in stream:
                room = self.keep - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    @property
    def truncated(self) -> bool:
        return len(self.data) + self.dropped > self.limit

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        if not self.truncated:
            return text
        shown = _masked(text, whole=not self.dropped).encode("utf-8")[: self.limit]
        more = len(self.data) + self.dropped - len(shown)
        # A character cut by the byte limit is left out, not shown as U+FFFD.
        return shown.decode("utf-8", errors="ignore") + f"\n[... {more} more bytes dropped]"


# How long output may still arrive once the command has exited and its group is dead.
DRAIN_GRACE_S = 0.5


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signal.SIGKILL)


async def _kill_leftovers(call_id: str) -> None:
    await anyio.to_thread.run_sync(leftovers.kill_call, call_id)


async def shell_exec(
    argv: list[str],
    *,
    timeout: float,
    cwd: Path,
    max_output_bytes: int,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run argv in its own process group (session). On timeout, cancellation or once
    the command exits, the whole group is killed, and so is every process still
    carrying the call's marker (leftovers.py): nothing it started outlives the call."""
    try:
        await anyio.Path(cwd).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in its way, no permission: the call's failure
        raise ToolFailure(
            "command_failed", f"cannot make the working directory {str(cwd)!r}: {exc.strerror}"
        ) from None
    call_id = uuid.uuid4().hex
    try:
        process = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env={**command_env(env), **leftovers.call_env(call_id)},
            start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolFailure("command_failed", f"no such command: {argv[0]!r}") from None
    except PermissionError:
        raise ToolFailure("command_failed", f"not executable: {argv[0]!r}") from None
    except OSError as exc:
        # Any other reason exec fails: no `#!` line (ENOEXEC), a file used as a
        # directory (`./file/x`: ENOTDIR), a name too long...
        raise ToolFailure(
            "command_failed", f"cannot run {argv[0]!r}: {exc.strerror or exc}"
        ) from None
    out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
    timed_out = swept = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.drain, process.stdout)
            tg.start_soon(err.drain, process.stderr)
            with anyio.move_on_after(timeout) as scope:
                await process.wait()
            timed_out = scope.cancelled_caught
            # Background children still holding the pipes would keep the drains open.
            _kill_group(process.pid)
            await _kill_leftovers(call_id)
            swept = True
            # One that escaped both (it cleared its environment) may hold the pipes for
            # ever: what is already written arrives at once, so after a short grace
            # stop reading (the pipes are closed below) and keep what was read.
            tg.cancel_scope.deadline = anyio.current_time() + DRAIN_GRACE_S
    finally:
        if process.returncode is None:
            _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            if not swept:  # cancelled (the service stopping) or failed before it
                await _kill_leftovers(call_id)
            await process.wait()
            await process.aclose()
    exit_code = process.returncode if process.returncode is not None else -signal.SIGKILL
    output = {"exit_code": exit_code, "stdout": out.text(), "stderr": err.text()}
    truncated = out.truncated or err.truncated
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


# Every open below is relative to a directory fd and refuses to follow a symlink: the
# policy resolved and confined the path, but any directory along it could be swapped
# for a symlink before we open it, and O_NOFOLLOW on the full path guards only its last
# component. O_NONBLOCK: opening a FIFO must not wait for a writer (or reader).
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
# A file_write goes to a new file first (O_EXCL: never one already there).
_SPARE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC


def _swapped(path: Path, name: str, dir_fd: int) -> ServiceError | None:
    """A refusal if `name` (in dir_fd) is now a symlink, which the policy never let by."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return _symlink_refusal(path, name) if stat.S_ISLNK(st.st_mode) else None


def _symlink_refusal(path: Path, name: str) -> ServiceError:
    return ServiceError(
        "path_denied",
        f"{name!r} on the way to {str(path)!r} became a symlink after the path was checked",
        field="input.path",
    )


def _parent_under(root: Path, path: Path, *, make_parents: bool = False) -> tuple[int, str]:
    """An fd of the directory holding `path` (resolved, inside `root`) and its last
    name, the directory opened one component at a time from `root`, following no
    symlink; with `make_parents`, missing directories are created on the way (mkdir
    relative to their parent's fd, never through a path)."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise ServiceError(
            "path_denied", f"{str(path)!r} is outside {str(root)!r}", field="input.path"
        ) from None
    if not parts:
        raise ToolFailure("io_error", f"{str(path)!r} is not a regular file")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                try:
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not make_parents:
                        raise
                    with suppress(FileExistsError):  # made meanwhile: opened just below
                        os.mkdir(name, 0o755, dir_fd=fd)
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                refusal = _swapped(path, name, fd)
                if refusal is not None:
                    raise refusal from None
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _open_under(root: Path, path: Path, flags: int) -> int:
    """Open `path` (resolved, inside `root`) from `root`, following no symlink."""
    dir_fd, name = _parent_under(root, path)
    try:
        return os.open(name, flags, 0o644, dir_fd=dir_fd)
    except OSError:
        refusal = _swapped(path, name, dir_fd)
        if refusal is not None:
            raise refusal from None
        raise
    finally:
        os.close(dir_fd)


def _refuse_unless_regular(st: os.stat_result, path: Path) -> None:
    """Only regular files are read or written (not a FIFO, a device, a directory), and
    only those with a single name: a hard link inside a root may name a file outside
    it, and nothing on the file says which of its names is the original."""
    if not stat.S_ISREG(st.st_mode):
        raise ToolFailure("io_error", f"{str(path)!r} is not a regular file")
    if st.st_nlink > 1:
        raise ServiceError(
            "path_denied",
            f"{str(path)!r} has {st.st_nlink} hard links; a file with more than one name "
            "may be one outside the allowed roots, so it is neither read nor written",
            field="input.path",
        )


def _regular_or_close(fd: int, path: Path) -> None:
    try:
        _refuse_unless_regular(os.fstat(fd), path)
    except (ToolFailure, ServiceError):
        os.close(fd)
        raise


def file_read(path: Path, *, root: Path, max_chars: int) -> Outcome:
    try:
        fd = _open_under(root, path, _READ_FLAGS)
    except FileNotFoundError:
        raise ToolFailure("not_found", f"no such file: {str(path)!r}") from None
    except OSError as exc:
        raise ToolFailure("io_error", f"cannot open {str(path)!r}: {exc.strerror}") from None
    _regular_or_close(fd, path)
    # Read past max_chars: a secret straddling it must be whole when masked.
    wanted = max_chars + 2 * SECRET_MARGIN
    try:
        with os.fdopen(fd, "rb") as f:
            # UTF-8 needs at most 4 bytes a character: this reads enough, never the
            # whole of a huge file.
            data = f.read(wanted * 4 + 4)
            more = f.read(1) != b""
    except OSError as exc:  # EIO, a file on a vanished network mount
        raise ToolFailure("io_error", f"cannot read {str(path)!r}: {exc.strerror}") from None
    text = data.decode("utf-8", errors="replace")
    truncated = more or len(text) > max_chars
    if truncated:
        whole = not more and len(text) <= wanted
        # `max_chars` of the file's text, then the mark.
        shown = _masked(text[:wanted], whole=whole)
        text = cut_text(shown, max_chars, mark=TRUNCATION_MARK, mark_after_limit=True)
        if len(text) <= max_chars:  # masking alone made it fit: the file still went on
            text += TRUNCATION_MARK
    return Outcome(text, ToolMetadata(), truncated)


def file_write(path: Path, content: str, *, root: Path) -> Outcome:
    """Write `content` to a new file beside `path`, then rename it over `path`: a write
    that fails (a full disk, a quota) leaves the file as it was, never emptied or half
    overwritten. The rename replaces the name, never follows it."""
    data = content.encode("utf-8")
    try:
        dir_fd, name = _parent_under(root, path, make_parents=True)
    except OSError as exc:
        raise ToolFailure("io_error", f"cannot write {str(path)!r}: {exc.strerror}") from None
    try:
        _replace(path, name, data, dir_fd)
    finally:
        os.close(dir_fd)
    return Outcome({"path": str(path), "bytes": len(data)}, ToolMetadata())


def _replace(path: Path, name: str, data: bytes, dir_fd: int) -> None:
    """Put `data` in place of `name` (in dir_fd) through a spare file, removed if the
    write or the rename fails."""
    spare = None
    try:
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None:
            if stat.S_ISLNK(now.st_mode):
                raise _symlink_refusal(path, name)
            _refuse_unless_regular(now, path)
            # The rename needs only the directory writable: a file made read-only
            # (0o444) is refused here, as writing into it would be.
            if not os.access(name, os.W_OK, dir_fd=dir_fd, effective_ids=True):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        # A fixed-length name: one derived from `name` could pass the name length limit.
        spare = f".rote-write-{uuid.uuid4().hex}.tmp"
        with os.fdopen(os.open(spare, _SPARE_FLAGS, 0o644, dir_fd=dir_fd), "wb") as f:
            if now is not None:  # the file keeps its owner (if ours to give) and mode
                with suppress(PermissionError):  # not root: the writer owns the new file
                    os.fchown(f.fileno(), now.st_uid, now.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(now.st_mode))
            f.write(data)
        os.rename(spare, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        spare = None
    except OSError as exc:  # a full disk, a quota, `name` now a directory
        raise ToolFailure("io_error", f"cannot write {str(path)!r}: {exc.strerror}") from None
    finally:
        if spare is not None:
            with suppress(OSError):
                os.unlink(spare, dir_fd=dir_fd)
