"""A secret a tool reads (a key on a page) reaches the model, but nothing rote keeps or
publishes: not the run's answer, its transcript, its trace, or any event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contracts import subjects as s
from contracts.runs import RunRef, RunStarted, StartRun, Transcript
from contracts.tasks import TaskSpec
from contracts.traces import TraceRef, TraceReply
from services.kernel.codec import encode
from services.kernel.replay_read import read_all
from tests.e2e.conftest import Rig
from tests.e2e.helpers import wait_finished, wait_for
from tests.local_site import QuietHandler, serve

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

KEY = "sk-ant-api03-LEAKLEAKLEAKLEAK1234567890"
PASSWORD = "hunter2secretpw"
PAGE = (
    "<html><head><title>Ops notes</title></head><body><h1>Ops notes</h1>"
    f"<p>API key: {KEY}</p><p>Database: postgresql://app:{PASSWORD}@db.internal/prod</p>"
    "<p>Rotate both monthly.</p></body></html>"
).encode()


@pytest.fixture
def leaky_page() -> Iterator[str]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

    with serve(Handler) as url:
        yield f"{url}/notes"


async def test_secrets_read_by_a_tool_are_masked_everywhere(rig: Rig, leaky_page: str) -> None:
    bus = rig.stack.bus
    spec = TaskSpec(name="notes", prompt=f"Open {leaky_page} and read the page")
    started = await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="notes"), RunStarted)
    done = await wait_finished(bus, started.run_id)
    assert done.status == "completed", done.error
    assert "Rotate both monthly." in (done.result or "")  # the page was read

    await wait_for(bus, s.STREAM_TRACES, s.trace_captured("notes", started.run_id), dict)
    kept = [
        encode(await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=started.run_id), Transcript)),
        encode(await bus.request(s.TRACES_GET, TraceRef(run_id=started.run_id), TraceReply)),
    ]
    for stream in (s.STREAM_RUNS, s.STREAM_ACTIVITY, s.STREAM_TRACES, s.STREAM_EXECUTORS):
        kept.extend(m.data for m in await read_all(bus.js, stream, ">"))
    everything = b"\n".join(kept)
    assert b"Ops notes" in everything  # we are looking at the right records
    assert KEY.encode() not in everything
    assert PASSWORD.encode() not in everything
    assert b"[redacted]" in everything
