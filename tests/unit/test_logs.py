"""What a log line shows, in a real process configured as the CLI configures it: secrets
masked in tracebacks and in values that only become text when the line is rendered."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "Zq8vLx3mRt9WbKc2Hn7PdYf4GsJ6aE1uNh5TkQw0Zq8vLx3mRt9WbKc2Hn7PdYf4"  # 64 chars
TOKEN = "gw_" + "A1b2C3d4E5f6G7h8I9j0" * 3

SCRIPT = """
import os
from services.cli.common import load_settings
from services.kernel.logs import get_logger

settings = load_settings()
log = get_logger("test")


class Holder:  # logged as a value: text only once the line is rendered
    def __repr__(self) -> str:
        return "Holder(" + os.environ["ANTHROPIC_AUTH_TOKEN"] + ")"


def handler(request):
    s = settings  # a handler's locals hold the settings and the headers it sends
    headers = {"authorization": "Bearer " + os.environ["ANTHROPIC_AUTH_TOKEN"]}
    raise RuntimeError("boom")


try:
    handler({"x": 1})
except Exception:
    log.exception("handler_failed")
log.info("holding", holder=Holder(), settings=settings)
"""


def test_tracebacks_and_rendered_values_show_no_secret(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ROTE_NATS_URL": f"nats://rote:{PASSWORD}@nats.internal:4222",
        "ROTE_EVENT_STORE": f"postgresql://rote:{PASSWORD}@db.internal:5432/rote",
        "ANTHROPIC_AUTH_TOKEN": TOKEN,
        "ROTE_LOG_FORMAT": "json",
        "ROTE_LOG_LEVEL": "info",
        "ROTE_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # still JSON lines
    assert [line["event"] for line in lines] == ["handler_failed", "holding"]
    for chunk in (PASSWORD[:12], PASSWORD[-12:], TOKEN[:12], TOKEN[-12:]):
        assert chunk not in done.stderr + done.stdout
    (error,) = lines[0]["exception"]
    assert error["exc_value"] == "boom" and error["frames"][-1]["name"] == "handler"
    assert all("locals" not in frame for frame in error["frames"])
    assert lines[1]["holder"] == "Holder([redacted])"
    assert "nats_url='nats://rote:[redacted]@nats.internal:4222'" in lines[1]["settings"]


FORMATS_SCRIPT = """
import structlog
from services.cli.common import load_settings
from services.kernel.logs import configure_logging, get_logger

load_settings()
configure_logging("json")  # a second configuration is ignored: the first one holds
with structlog.contextvars.bound_contextvars(run_id="run-7", task_id="news"):
    get_logger("test").info("step_done", tool="browser_extract", key="sk-ant-" + "x" * 40)
"""


def _log_formats_env(tmp_path: Path, fmt: str) -> dict[str, str]:
    return {**os.environ, "ROTE_LOG_FORMAT": fmt, "ROTE_DATA_DIR": str(tmp_path)}


def _log_to_a_pipe(tmp_path: Path, fmt: str) -> str:
    """What FORMATS_SCRIPT writes on stderr when that is a pipe."""
    done = subprocess.run(
        [sys.executable, "-c", FORMATS_SCRIPT],
        cwd=REPO,
        env=_log_formats_env(tmp_path, fmt),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


def test_auto_writes_json_lines_to_a_pipe_with_the_bound_ids(tmp_path: Path) -> None:
    stderr = _log_to_a_pipe(tmp_path, "auto")
    (line,) = [json.loads(text) for text in stderr.splitlines()]
    assert line["event"] == "step_done" and line["level"] == "info"
    assert (line["run_id"], line["task_id"]) == ("run-7", "news")
    assert "sk-ant-xxxx" not in stderr


def _console_line(text: str) -> str:
    (line,) = [ln for ln in text.splitlines() if "step_done" in ln]
    return line


def test_console_format_is_readable_text_with_the_bound_ids(tmp_path: Path) -> None:
    stderr = _log_to_a_pipe(tmp_path, "console")
    line = _console_line(stderr)
    assert not line.lstrip().startswith("{")  # not JSON, though configured as json later
    assert "run_id=run-7" in line and "task_id=news" in line and "tool=browser_extract" in line
    assert "\x1b[" not in line  # no colours written to a pipe
    assert "sk-ant-xxxx" not in stderr


def test_auto_on_a_terminal_is_the_console(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", FORMATS_SCRIPT],
            cwd=REPO,
            env=_log_formats_env(tmp_path, "auto"),
            stdout=subprocess.DEVNULL,
            stderr=follower,
        )
        os.close(follower)
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process is done writing
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    # Colour codes sit between the key and its value on a terminal: strip them first.
    text = re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode())
    line = _console_line(text)
    assert not line.lstrip().startswith("{")
    assert "run_id=run-7" in line and "task_id=news" in line
    assert "sk-ant-xxxx" not in text
