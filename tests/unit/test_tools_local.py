"""Local tools on real processes and files: timeouts kill the whole process group,
output is bounded, the environment carries no secrets, files stay in their roots."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path

import anyio
import pytest

from services.kernel.errors import ServiceError
from services.kernel.secrets import MASK, register_secret
from services.kernel.text import TRUNCATION_MARK
from services.tools import leftovers, local
from services.tools.outcome import ToolFailure
from services.tools.policy import PathRoots
from tests.orphan_call import alive, orphaned_call, sleeper_code

pytestmark = pytest.mark.anyio


async def test_runs_and_reports_exit_code_stdout_and_stderr(tmp_path: Path) -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    outcome = await local.shell_exec(
        [sys.executable, "-c", code], timeout=10, cwd=tmp_path, max_output_bytes=1000
    )
    assert outcome.output == {"exit_code": 3, "stdout": "out\n", "stderr": "err\n"}
    assert outcome.metadata.exit_code == 3 and not outcome.truncated


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The command starts a grandchild that would outlive a plain kill of its parent.
    code = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid));"
        "print('started', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    # Time enough to start both processes and print on a busy machine; far less than the
    # minute they would sleep.
    with pytest.raises(ToolFailure) as caught:
        await local.shell_exec(
            [sys.executable, "-c", code], timeout=5.0, cwd=tmp_path, max_output_bytes=1000
        )
    assert time.monotonic() - started < 30
    failure = caught.value
    assert failure.code == "timeout"
    assert failure.output["stdout"] == "started\n"  # what it printed is kept
    grandchild = int(pid_file.read_text())
    with anyio.fail_after(5):
        while alive(grandchild):
            await anyio.sleep(0.05)


async def test_background_children_do_not_outlive_the_call(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    code = (
        "import subprocess, sys;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    started = time.monotonic()
    outcome = await local.shell_exec(
        [sys.executable, "-c", code], timeout=30, cwd=tmp_path, max_output_bytes=1000
    )
    assert outcome.output["exit_code"] == 0
    # Did not wait for the sleeper: only the time shows it (waiting for its pipes, the
    # call would end as it does, a minute later). Half of that is room for a busy machine.
    assert time.monotonic() - started < 30
    background = int(pid_file.read_text())
    with anyio.fail_after(5):
        while alive(background):
            await anyio.sleep(0.05)


async def test_output_is_bounded_and_the_pipe_never_blocks(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('x' * 5_000_000); sys.stdout.flush()"
    outcome = await local.shell_exec(
        [sys.executable, "-c", code], timeout=30, cwd=tmp_path, max_output_bytes=10_000
    )
    assert outcome.truncated
    assert outcome.output["exit_code"] == 0
    assert outcome.output["stdout"].startswith("x" * 10_000)
    assert "4990000 more bytes dropped" in outcome.output["stdout"]


async def test_commands_see_no_secrets(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "PWD": "/srv/app",  # the working directory, not a password
        "ANTHROPIC_API_KEY": "sk-ant-secret-value-123",
        "MY_SERVICE_TOKEN": "tok-123456789",
        "ROTE_NATS_URL": "nats://u:pw@host:4222",
        "db_password": "lowercase-pw-88",
        "MYSQL_PWD": "mysql-pwd-777",
        "DB_PASS": "db-pass-555",
        "GITHUB_PAT": "ghp-pat-000",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.test/services/slack-hook-123",
        "DATABASE_URL": "postgresql://:empty-user-pw@db/x",
        "HTTP_PROXY": "http://proxy:proxy-pw-9@proxy:3128",
        "HARMLESS": "yes",
    }
    outcome = await local.shell_exec(
        ["env"], timeout=10, cwd=tmp_path, max_output_bytes=100_000, env=env
    )
    out = outcome.output["stdout"]
    assert "HARMLESS=yes" in out and "PWD=" in out and "PATH=" in out
    for hidden in env.keys() - {"PATH", "PWD", "HARMLESS"}:
        assert f"{hidden}=" not in out, hidden
    for value in ("sk-ant-secret", "tok-123456789", "pw@host", "-pw-", "-pwd-", "-pass-", "-pat-"):
        assert value not in out
    assert "slack-hook" not in out


async def test_unknown_command_is_a_failure(tmp_path: Path) -> None:
    with pytest.raises(ToolFailure) as caught:
        await local.shell_exec(
            ["no-such-command-rote"], timeout=5, cwd=tmp_path, max_output_bytes=100
        )
    assert caught.value.code == "command_failed"


async def test_a_working_directory_that_cannot_be_made_is_a_failure(tmp_path: Path) -> None:
    # The first path root is the command's working directory; a file in its way (or no
    # permission) is the call's failure, not the service's.
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolFailure) as caught:
        await local.shell_exec(
            ["true"], timeout=5, cwd=tmp_path / "file" / "work", max_output_bytes=100
        )
    assert caught.value.code == "command_failed" and "working directory" in str(caught.value)


def test_file_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "note.txt"
    written = local.file_write(path, "héllo\n", root=tmp_path)
    assert written.output == {"path": str(path), "bytes": 7}
    assert local.file_read(path, root=tmp_path, max_chars=100).output == "héllo\n"


def test_file_read_is_bounded_without_reading_everything(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("y" * 1_000_000)
    outcome = local.file_read(path, root=tmp_path, max_chars=1000)
    assert outcome.truncated
    assert outcome.output.startswith("y" * 1000) and len(outcome.output) < 1100


@pytest.mark.parametrize("extra", [0, 1, len(TRUNCATION_MARK), len(TRUNCATION_MARK) + 1])
def test_file_read_over_max_chars_shows_max_chars_then_the_mark(tmp_path: Path, extra: int) -> None:
    path = tmp_path / "edge.txt"
    path.write_text("y" * (100 + extra))
    outcome = local.file_read(path, root=tmp_path, max_chars=100)
    assert outcome.truncated == (extra > 0)
    assert outcome.output == ("y" * 100 if extra == 0 else "y" * 100 + TRUNCATION_MARK)


def test_file_read_cut_says_so_even_when_masking_made_it_short(tmp_path: Path) -> None:
    secret = "file-read-secret-" + "k" * 200
    register_secret(secret)
    path = tmp_path / "env.txt"
    path.write_text("a" * 10 + secret + "b" * 10)
    outcome = local.file_read(path, root=tmp_path, max_chars=100)
    assert outcome.truncated
    assert outcome.output == "a" * 10 + MASK + "b" * 10 + TRUNCATION_MARK


def test_file_read_failures(tmp_path: Path) -> None:
    with pytest.raises(ToolFailure) as caught:
        local.file_read(tmp_path / "missing.txt", root=tmp_path, max_chars=10)
    assert caught.value.code == "not_found"
    (tmp_path / "dir").mkdir()
    for directory in (tmp_path, tmp_path / "dir"):
        with pytest.raises(ToolFailure) as caught:
            local.file_read(directory, root=tmp_path, max_chars=10)
        assert caught.value.code == "io_error"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ToolFailure):  # refused, not blocked forever
        local.file_read(tmp_path / "fifo", root=tmp_path, max_chars=10)
    with pytest.raises(ToolFailure):  # no reader: refused, not blocked either
        local.file_write(tmp_path / "fifo", "x", root=tmp_path)


def _refused(call: Callable[[], object]) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        call()
    assert (caught.value.code, caught.value.field) == ("path_denied", "input.path")
    return caught.value


def test_a_symlink_swapped_in_after_the_check_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("secret")
    link = tmp_path / "swapped.txt"
    os.symlink(target, link)
    _refused(lambda: local.file_read(link, root=tmp_path, max_chars=100))
    _refused(lambda: local.file_write(link, "overwrite", root=tmp_path))
    assert target.read_text() == "secret"


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub" / "dir").mkdir(parents=True)
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "note.txt").write_text("secret")
    roots = PathRoots.of([root])
    # Checked while every directory on the way is real...
    to_read = roots.confine("sub/dir/note.txt")
    to_write = roots.confine("sub/dir/new.txt")
    to_make = roots.confine("fresh/deeper/new.txt")  # parents still to be made
    assert roots.root_of(to_read) == root.resolve()
    # ...then a directory on the way becomes a symlink out of the root.
    (root / "sub").rename(root / "sub.old")
    os.symlink(outside, root / "sub")
    os.symlink(outside, root / "fresh")

    err = _refused(lambda: local.file_read(to_read, root=root.resolve(), max_chars=100))
    assert "'sub'" in err.message
    _refused(lambda: local.file_write(to_write, "x", root=root.resolve()))
    _refused(lambda: local.file_write(to_make, "x", root=root.resolve()))
    assert sorted(p.name for p in outside.rglob("*")) == ["dir", "note.txt"]
    assert (outside / "dir" / "note.txt").read_text() == "secret"
    # The same paths work once the directories are real again.
    (root / "sub").unlink()
    (root / "sub.old").rename(root / "sub")
    (root / "fresh").unlink()
    local.file_write(to_make, "made", root=root.resolve())
    assert (root / "fresh" / "deeper" / "new.txt").read_text() == "made"


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.mark.parametrize(
    "argv",
    [
        ["./noshebang"],  # executable, but no `#!` line: exec fails with ENOEXEC
        ["./noshebang/x"],  # a file used as a directory: ENOTDIR
    ],
)
async def test_a_command_that_cannot_start_is_a_failure(tmp_path: Path, argv: list[str]) -> None:
    _executable(tmp_path / "noshebang", "echo hi\n")
    with pytest.raises(ToolFailure) as caught:
        await local.shell_exec(argv, timeout=5, cwd=tmp_path, max_output_bytes=100)
    assert caught.value.code == "command_failed"
    assert argv[0] in caught.value.message


async def test_a_descendant_that_left_the_group_does_not_hold_up_the_call(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "escaped.pid"
    # A grandchild in a session of its own survives the group kill and keeps stdout open.
    code = (
        "import subprocess;"
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True);"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid));"
        "print('done', flush=True)"
    )
    started = time.monotonic()
    try:
        outcome = await local.shell_exec(
            [sys.executable, "-c", code], timeout=20, cwd=tmp_path, max_output_bytes=1000
        )
        # The command ended at once: so does the call (not after the sleeper's minute,
        # which holds its stdout), with what it printed. Only the time shows it; half
        # of that minute is room for a busy machine.
        assert time.monotonic() - started < 30
        assert outcome.output == {"exit_code": 0, "stdout": "done\n", "stderr": ""}
    finally:
        if pid_file.exists():
            with suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_hard_link_to_a_file_outside_is_neither_read_nor_written(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("secret")
    os.link(outside, root / "alias.txt")
    err = _refused(lambda: local.file_read(root / "alias.txt", root=root, max_chars=100))
    assert "hard link" in err.message
    _refused(lambda: local.file_write(root / "alias.txt", "overwritten", root=root))
    assert outside.read_text() == "secret"  # not even truncated
    # A file with one name is written as before, new or existing.
    local.file_write(root / "new.txt", "one", root=root)
    local.file_write(root / "new.txt", "two", root=root)
    assert local.file_read(root / "new.txt", root=root, max_chars=100).output == "two"
    (root / "short.txt").write_text("a long first version")
    local.file_write(root / "short.txt", "v2", root=root)
    assert (root / "short.txt").read_text() == "v2"


async def test_the_calls_of_a_killed_tools_process_are_killed_by_a_sweep(
    tmp_path: Path,
) -> None:
    live_pid = tmp_path / "live.pid"
    # A call of a tools process in another PID namespace (a container): its pid and
    # start time mean nothing here, so it is not judged.
    foreign = await anyio.open_process(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, leftovers.OWNER_MARKER: "1.999999999.1"},
    )
    with orphaned_call(tmp_path) as orphan:
        try:
            async with anyio.create_task_group() as tg:
                # A call of a tools process that is alive (this one) is not an orphan.
                tg.start_soon(
                    partial(
                        local.shell_exec,
                        [sys.executable, "-c", sleeper_code(live_pid)],
                        timeout=30,
                        cwd=tmp_path,
                        max_output_bytes=100,
                    )
                )
                with anyio.fail_after(10):
                    while not (live_pid.exists() and live_pid.read_text()):
                        await anyio.sleep(0.05)
                assert leftovers.kill_orphans() >= 1
                with anyio.fail_after(5):
                    while alive(orphan):
                        await anyio.sleep(0.05)
                assert alive(int(live_pid.read_text())) and foreign.returncode is None
                tg.cancel_scope.cancel()  # the live call ends: its sleeper with it
        finally:
            foreign.kill()
            await foreign.aclose()


# Run in a process of its own: a file size limit makes the disk look full to it alone.
_WRITE_OVER_A_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from services.tools import local
from services.tools.outcome import ToolFailure

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as a quota or a full disk fails
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
root = Path(sys.argv[1])
for name in ("kept.txt", "new.txt"):
    try:
        local.file_write(root / name, "new " * 1000, root=root)
    except ToolFailure as failure:
        print(failure.code)
"""


def test_a_write_that_fails_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("the first version")
    failed = subprocess.run(
        [sys.executable, "-c", _WRITE_OVER_A_SIZE_LIMIT, str(tmp_path)],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.stdout.split() == ["io_error", "io_error"], failed.stderr
    # Neither emptied nor half overwritten, and no half-written new file (or spare).
    assert (tmp_path / "kept.txt").read_text() == "the first version"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]


# Run in a process of its own, as a user permissions hold back (root writes anything):
# a read-only file must stay as it is, though its directory lets a rename replace it.
_WRITE_OVER_A_READ_ONLY_FILE = """
import os, shutil, sys, tempfile
from pathlib import Path
from services.tools import local
from services.tools.outcome import ToolFailure

root = Path(tempfile.mkdtemp())
try:
    kept = root / "kept.txt"
    kept.write_text("the first version")
    kept.chmod(0o444)
    if os.geteuid() == 0:
        os.chown(root, 65534, 65534)
        os.chown(kept, 65534, 65534)
        os.setgid(65534)
        os.setuid(65534)
    try:
        local.file_write(kept, "overwritten", root=root)
        print("written")
    except ToolFailure as failure:
        print(failure.code)
    print(kept.read_text(), oct(kept.stat().st_mode & 0o777))
finally:
    shutil.rmtree(root, ignore_errors=True)
"""


def test_a_read_only_file_is_not_written() -> None:
    refused = subprocess.run(
        [sys.executable, "-c", _WRITE_OVER_A_READ_ONLY_FILE],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.stdout.splitlines() == ["io_error", "the first version 0o444"], refused.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_written_file_keeps_its_owner(tmp_path: Path) -> None:
    # Written as root (a container) into a file someone else owns: it stays theirs.
    kept = tmp_path / "theirs.txt"
    kept.write_text("the first version")
    os.chown(kept, 65534, 65534)
    kept.chmod(0o640)
    local.file_write(kept, "the second version", root=tmp_path)
    st = kept.stat()
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (65534, 65534, "0o640")
    assert kept.read_text() == "the second version"
