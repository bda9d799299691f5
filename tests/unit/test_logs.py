"""What a log line shows, in a real process configured as the CLI configures it: secrets
masked in tracebacks and in values that only become text when the line is rendered."""

from __future__ import annotations

import json
import os
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
