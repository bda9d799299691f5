"""`rote up` / `rote serve` that cannot start: an unusable data dir, a setting NATS would
refuse, an event store that is not there, an embedded NATS that will not start, a stream
that differs from rote's. Each ends with one `rote: ...` line (no password on it) and an
exit code, never a traceback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig

from services.kernel.embedded_nats import EmbeddedNats, free_port

PASSWORD = "pg-s3cret-pw-0000"


def _rote(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(ROTE_DATA_DIR=str(data_dir), ROTE_LOG_FORMAT="json", **extra)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=90)


def _rote_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rote:")]


def test_a_data_dir_that_is_a_file_is_named(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for data_dir, why in (
        (afile, "is not a directory"),
        (afile / "sub", "cannot be created: Not a directory"),
    ):
        done = _run(_rote("up"), _env(data_dir))
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.strip() == f"rote: ROTE_DATA_DIR {data_dir} {why}"


def test_an_ack_wait_nats_cannot_hold_is_refused_before_start(tmp_path: Path) -> None:
    done = _run(_rote("serve", "runner"), _env(tmp_path, ROTE_RUNNER_ACK_WAIT_S="1e10"))
    assert done.returncode == 2
    assert done.stderr.strip() == "rote: ROTE_RUNNER_ACK_WAIT_S must be 86400 or less, got '1e10'"


def test_an_event_store_that_is_not_there_is_one_masked_line(tmp_path: Path) -> None:
    # A database the local server does not have (or no server at all): either way no
    # connection; connect_timeout keeps the wait short.
    url = f"postgresql://rote:{PASSWORD}@127.0.0.1:5432/rote_no_such_db?connect_timeout=2"
    done = _run(_rote("serve", "compiler"), _env(tmp_path / "d", ROTE_EVENT_STORE=url))
    assert done.returncode == 1, done.stderr[-2000:]
    assert _rote_lines(done.stderr) == [
        "rote: event store postgresql://rote:[redacted]@127.0.0.1:5432/rote_no_such_db"
        "?connect_timeout=2: couldn't get a connection after 2.00 sec"
    ]
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_an_embedded_nats_that_will_not_start_says_why(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    (data_dir / "nats").mkdir(parents=True)
    (data_dir / "nats" / "jetstream").write_text("in the way of the store")
    done = _run(_rote("serve", "system"), _env(data_dir, ROTE_LOG_LEVEL="debug"))
    assert done.returncode == 1
    lines = _rote_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("rote: nats-server exited with 1 on port ")
    assert lines[0].endswith("[FTL] Can't start JetStream: storage directory is not a directory")
    assert "Traceback" not in done.stderr
    # The whole story is still there for whoever asks the debug log.
    assert '"event": "rote_failed"' in done.stderr and "EmbeddedNatsError" in done.stderr


async def _memory_runs_stream(url: str) -> None:
    nc = await nats.connect(url)
    try:
        config = StreamConfig(
            name="ROTE_RUNS", subjects=["rote.evt.run.>"], storage=StorageType.MEMORY
        )
        await nc.jetstream().add_stream(config)
    finally:
        await nc.close()


def test_a_stream_nats_will_not_change_is_one_line(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", port=free_port()) as server:
        asyncio.run(_memory_runs_stream(server.url))
        done = _run(_rote("serve", "system", "--nats-url", server.url), _env(tmp_path / "d"))
    assert done.returncode == 1
    lines = _rote_lines(done.stderr)
    assert len(lines) == 1 and "storage type" in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_replicas_a_single_server_cannot_hold_say_what_to_do(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", port=free_port()) as server:
        env = _env(tmp_path / "d", ROTE_STREAM_REPLICAS="3")
        done = _run(_rote("serve", "system", "--nats-url", server.url), env)
    assert done.returncode == 1
    assert _rote_lines(done.stderr) == [
        "rote: streams with 3 replicas need a JetStream cluster of at least 3 servers, and"
        " this NATS is a single server that is not clustered: run a cluster"
        " (infra/nats/cluster/, see infra/README.md) or use ROTE_STREAM_REPLICAS=1 on a"
        " single server"
    ]


def test_a_nats_url_that_can_never_connect_is_refused_before_start(tmp_path: Path) -> None:
    """An http:// URL or a port out of range would otherwise be retried forever, with
    a log line a second that does not say which URL is wrong."""
    for args, env, line in [
        (("up", "--nats-url", "http://127.0.0.1:1"), {}, "rote: --nats-url: a NATS URL is"),
        (("serve", "system"), {"ROTE_NATS_URL": "nats://h:99999"}, "rote: not a usable NATS"),
        (("status", "--nats-url", "ftp://h"), {}, "rote: a NATS URL is nats://"),
    ]:
        done = _run(_rote(*args), _env(tmp_path, **env))
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert done.stderr.strip().startswith(line), (args, done.stderr)


def test_an_output_path_that_is_a_file_is_one_line_before_any_work(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("in the way")
    for args, line in [
        (("schema", str(afile)), f"rote: the output directory {afile} is not a directory"),
        (("infra", "streams", str(afile)), f"rote: the output directory {afile} is not a "),
        (("bench", "--quick", "--output", f"{afile}/x.json"), "rote bench: --output's directory"),
    ]:
        done = _run(_rote(*args), _env(tmp_path))
        assert done.returncode == 2, (args, done.stderr[-2000:])
        assert done.stderr.strip().startswith(line), (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_port_that_cannot_be_used_is_one_line(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", port=free_port()) as server:
        taken = server.url.rsplit(":", 1)[1]
        for args, code, text in [
            (("site", "serve", "--port", "99999"), 2, "a port is 0 to 65535, not 99999"),
            (("model", "serve", "--port", "-1"), 2, "a port is 0 to 65535, not -1"),
            (("site", "serve", "--port", taken), 1, f"rote: cannot listen on port {taken}"),
        ]:
            done = _run(_rote(*args), _env(tmp_path))
            assert done.returncode == code, (args, done.stderr[-2000:])
            assert text in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_output_file_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """The directory is usable, one file in it is not (here a directory in its place;
    elsewhere a read-only file of another user, a full disk): named, not a traceback."""
    for args, blocker in [
        (("schema", str(tmp_path / "schema")), tmp_path / "schema" / "CreateTask.json"),
        (("infra", "streams", str(tmp_path / "streams")), tmp_path / "streams" / "ROTE_RUNS.json"),
    ]:
        blocker.mkdir(parents=True)
        done = _run(_rote(*args), _env(tmp_path))
        assert done.returncode == 1, (args, done.stderr[-2000:])
        assert done.stderr.strip().startswith(f"rote: cannot write {blocker}: "), done.stderr
        assert "Traceback" not in done.stderr
