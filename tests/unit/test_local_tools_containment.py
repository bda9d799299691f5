"""Local tools stay contained: command patterns never lead out of the directory they name,
nothing a command starts outlives its call (even outside its process group), and a
secret straddling a cut is masked whole, never shown in half."""

from __future__ import annotations

import os
import sys
import time
import uuid
from functools import partial
from pathlib import Path

import anyio
import pytest

from services.kernel.errors import ServiceError
from services.kernel.secrets import redact, register_from_env
from services.tools import local
from services.tools.outcome import ToolFailure
from services.tools.policy import check_command, split_command
from tests.orphan_call import alive

# --- command patterns --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("/opt/scripts/../../../bin/sh -c id", "/opt/scripts/* **"),
        ("/opt/scripts/sub/../../../bin/sh", "/opt/scripts/**"),
        ("cat /data/../../etc/passwd", "cat /data/*"),
        ("cat /data/..", "cat /data/*"),
        ("ls /data/..", "ls /data/??"),
        ("cat /data/a/b.log", "cat /data/*"),
        ("cat /etc/x.log", "cat *.log"),
        ("cat ../../x.log", "cat *.log"),
        ("cat ../x.log", "cat *.log"),
        ("cat ../../a.log", "cat ../*.log"),
        ("cat /data//etc/x.csv", "cat /data/**/*.csv"),
        ("cat /etc/passwd.txt", "cat **.txt"),  # `**` inside a component is a `*`
        ("cat /etc/passwd x", "cat ** x"),  # a whole-word `**` is not an absolute path
        ("df /", "df *"),
        ("tail --file=/etc/shadow", "tail --file=*"),
        # A wildcard never matches an empty component: a relative pattern admits no
        # absolute path, and `//` does not stand for a directory the pattern names.
        ("cat /etc/passwd", "cat */*/*"),
        ("ls /etc", "ls */*"),
        ("cat /srv//config.yml", "cat /srv/*/config.yml"),
        # Nor does a wildcard standing for a file name admit an option with its value
        # glued on, ending the way the file name should: the program it names, or the
        # files it reads, are the caller's.
        ("""python3 '-cimport os; os.system("id")#.py'""", "python3 *.py"),
        ("sort --files0-from=names.csv", "sort *.csv"),
        ("wc -l --files0-from=names.log", "wc -l *.log"),
        ("cat -A.log", "cat ?*.log"),
        ("cat --x/a.csv", "cat **/*.csv"),
    ],
)
def test_a_wildcard_never_leads_out_of_the_directory_the_pattern_names(
    command: str, pattern: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        check_command(split_command(command), [pattern])
    assert caught.value.code == "command_denied"


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("/opt/scripts/report.sh --since today", "/opt/scripts/* **"),
        ("/opt/scripts/daily/report.sh", "/opt/scripts/**"),
        ("cat /data/a.log", "cat /data/*"),
        ("cat /data/a.csv", "cat /data/**/*.csv"),
        ("cat /data/2024/05/a.csv", "cat /data/**/*.csv"),
        ("cat app.log", "cat *.log"),
        ("cat ../a.log", "cat ../*.log"),  # a `..` the pattern itself writes
        ("df -h", "df *"),  # a whole-word `*` is any one word, an option too
        ("df -h", "df -h"),
        ("python3 -u run.py", "python3 -u *.py"),  # options the pattern spells out
        ("head -5 a.log", "head -* *.log"),
        ("tail --file=app.log", "tail --file=*"),
        ("cat logs/app/x.log", "cat */*/*"),
        ("echo ''", "echo *"),  # an empty argument is no path
        ("ls a/b c", "ls ** c"),
        # A last `**` still admits any further words, paths included.
        ("echo /etc/passwd ../x", "echo **"),
    ],
)
def test_patterns_still_admit_what_they_name(command: str, pattern: str) -> None:
    assert check_command(split_command(command), [pattern])


# --- leftovers ---------------------------------------------------------------------------


def _kill(pid: int) -> None:
    if alive(pid):
        os.kill(pid, 9)


async def _gone_soon(pid: int) -> None:
    """The process is gone within 2 s (killed after the check either way)."""
    try:
        with anyio.fail_after(2):
            while alive(pid):
                await anyio.sleep(0.02)
    finally:
        _kill(pid)


_SLEEPER = "[sys.executable, '-c', 'import time; time.sleep(400)']"
_DAEMONS = {
    # setsid(): a new session and process group.
    "setsid": (
        "import subprocess, sys;"
        f"p = subprocess.Popen({_SLEEPER}, start_new_session=True);"
        "open(sys.argv[1], 'w').write(str(p.pid))"
    ),
    # setpgid(0, 0): a process group of its own in the same session.
    "setpgid": (
        "import subprocess, sys;"
        f"p = subprocess.Popen({_SLEEPER}, process_group=0);"
        "open(sys.argv[1], 'w').write(str(p.pid))"
    ),
    # The classic daemon: fork, setsid, fork again, the middle one exits (ppid 1).
    "double fork": (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        time.sleep(400)\n"
        "    open(sys.argv[1], 'w').write(str(pid))\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    ),
}


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("how", list(_DAEMONS))
async def test_a_daemon_that_left_the_process_group_dies_with_the_call(
    tmp_path: Path, how: str
) -> None:
    pid_file = tmp_path / "daemon.pid"
    started = time.monotonic()
    outcome = await local.shell_exec(
        [sys.executable, "-c", _DAEMONS[how], str(pid_file)],
        timeout=30,
        cwd=tmp_path,
        max_output_bytes=1000,
    )
    assert outcome.output["exit_code"] == 0
    daemon = int(pid_file.read_text())
    try:
        # Killed before the call returned: only its exit may still be under way.
        with anyio.fail_after(2):
            while alive(daemon):
                await anyio.sleep(0.02)
        # It held our stdout, yet the call did not wait for it (for its 400 s): only the
        # time shows it, with ample room for a busy machine.
        assert time.monotonic() - started < 60
    finally:
        _kill(daemon)


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
async def test_a_daemon_dies_when_the_call_times_out(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    script = 'setsid sleep 400 >/dev/null 2>&1 & echo $! > "$0"; sleep 400'
    with pytest.raises(ToolFailure) as caught:
        await local.shell_exec(
            ["sh", "-c", script, str(pid_file)],
            timeout=2,
            cwd=tmp_path,
            max_output_bytes=1000,
        )
    assert caught.value.code == "timeout"
    await _gone_soon(int(pid_file.read_text()))


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
async def test_a_daemon_dies_when_the_call_is_cancelled(tmp_path: Path) -> None:
    # What the tools service stopping does to a call in flight.
    pid_file = tmp_path / "daemon.pid"
    script = 'setsid sleep 400 >/dev/null 2>&1 & echo $! > "$0"; sleep 400'
    with anyio.move_on_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                partial(
                    local.shell_exec,
                    ["sh", "-c", script, str(pid_file)],
                    timeout=60,
                    cwd=tmp_path,
                    max_output_bytes=1000,
                )
            )
            while not pid_file.exists() or not pid_file.read_text().strip():
                await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    await _gone_soon(int(pid_file.read_text()))


@pytest.mark.anyio
async def test_a_call_ending_leaves_another_calls_processes_alone(tmp_path: Path) -> None:
    slow = [sys.executable, "-c", "import time; time.sleep(1.5); print('done')"]
    quick = [sys.executable, "-c", "print('quick')"]
    results: dict[str, object] = {}

    async def run(name: str, argv: list[str]) -> None:
        results[name] = await local.shell_exec(
            argv, timeout=30, cwd=tmp_path, max_output_bytes=1000
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "slow", slow)
        await anyio.sleep(0.3)
        tg.start_soon(run, "quick", quick)
    assert results["slow"].output == {"exit_code": 0, "stdout": "done\n", "stderr": ""}  # type: ignore[attr-defined]


# --- secrets cut in half -----------------------------------------------------------------


def _secret(chars: int = 67) -> str:
    """A fresh secret, registered at start-up like any secret-named variable."""
    secret = ("Zq7" + uuid.uuid4().hex * (chars // 32 + 1))[:chars]
    register_from_env({"HARDENING_TEST_TOKEN": secret})
    return secret


def _leaks(secret: str, shown: str) -> bool:
    """Whether what a user sees (the reply is masked once more) holds 8+ characters of
    the secret's start."""
    return secret[:8] in redact(shown, query=False)


@pytest.mark.anyio
async def test_command_output_cut_inside_a_secret_shows_none_of_it(tmp_path: Path) -> None:
    secret = _secret()
    code = f"import sys; sys.stdout.write('x' * 990 + {secret!r} + 'y' * 5000)"
    outcome = await local.shell_exec(
        [sys.executable, "-c", code], timeout=30, cwd=tmp_path, max_output_bytes=1000
    )
    stdout = outcome.output["stdout"]
    assert outcome.truncated and stdout.startswith("x" * 990)
    assert not _leaks(secret, stdout), stdout[980:1040]


@pytest.mark.anyio
async def test_command_output_cut_where_masks_moved_a_half_secret_shows_none_of_it(
    tmp_path: Path,
) -> None:
    # Long secrets shrink, once masked, the text kept past the limit: the half secret at
    # the very end of what was kept must not move into what is shown.
    secret, long_secret = _secret(), _secret(400)
    keep = 1000 + 2 * getattr(local, "SECRET_MARGIN", 8192)
    copies = (keep - 20) // len(long_secret)
    code = (
        f"import sys; lead = {long_secret!r} * {copies};"
        f"sys.stdout.write(lead + 'x' * ({keep - 20} - len(lead)) + {secret!r} + 'y' * 5000)"
    )
    outcome = await local.shell_exec(
        [sys.executable, "-c", code], timeout=30, cwd=tmp_path, max_output_bytes=1000
    )
    assert outcome.truncated
    assert not _leaks(secret, outcome.output["stdout"])


def test_file_read_cut_inside_a_secret_shows_none_of_it(tmp_path: Path) -> None:
    secret = _secret()
    path = tmp_path / "env.txt"
    path.write_text("x" * 990 + secret + "y" * 50_000)
    outcome = local.file_read(path, root=tmp_path, max_chars=1000)
    assert outcome.truncated and outcome.output.startswith("x" * 990)
    assert not _leaks(secret, outcome.output), outcome.output[980:1040]


def test_a_refused_command_quoted_in_the_error_shows_no_half_secret() -> None:
    secret = _secret()
    for argv in (
        ["curl", "x" * 180, secret],
        ["curl", "-s", "x" * 150 + f" https://user:{secret}@db.example/"],
    ):
        with pytest.raises(ServiceError) as caught:
            check_command(argv, ["echo **"])
        assert caught.value.code == "command_denied"
        assert not _leaks(secret, caught.value.message), caught.value.message
