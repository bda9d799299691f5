"""A run's answer too large for one NATS message: the run still ends once, its terminal
event carries the head of the answer and a reference to the whole of it in the blob
store, runs.get says the same, and the tracer compiles from the whole answer, never
from its head.

Only the runner (or the tracer) runs here; stand-ins take tool calls at
rote.api.tools.exec and answer for the compiler at rote.api.executors.active, as in
test_replay_bus.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.executors import ActiveExecutor, ExecutorHealth, ResultStep, ToolStep
from contracts.runs import RunRef, RunStarted, RunView, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolMetadata, ToolResult
from services.kernel import blobs
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode
from services.kernel.run_store import RunStore
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.hand_built_replay import hand_built_executor
from tests.integration.test_compiler_service import until
from tests.integration.test_tracer_capture import (
    captured,
    news_calls,
    publish_run,
    rejected,
    tracer,
    transcript_of,
)

pytestmark = pytest.mark.anyio

# Five reads of a tool output each just under the tools service's 256 KB bound: the
# replay's template joins them into an answer over NATS' 1 MB max payload.
PARTS = 5
PART_CHARS = 250_000


def part(n: int) -> str:
    return f"[part {n}]" + "x" * PART_CHARS


REPORT = ActiveExecutor(
    executor=hand_built_executor(
        "report",
        [
            *(ToolStep(index=n, tool="read_file", input={"path": f"/p{n}"}) for n in range(PARTS)),
            ResultStep(
                index=PARTS,
                mode="template",
                template="\n".join(f"{{{{step_{n}}}}}" for n in range(PARTS)),
            ),
        ],
    ),
    health=ExecutorHealth(task_id="report", status="active", version=1),
)
FULL_ANSWER = "\n".join(part(n) for n in range(PARTS))


@pytest.fixture
async def runner_bus(settings: Settings) -> AsyncIterator[Bus]:
    # A short ack wait: a delivery that broke would be redelivered within the test.
    async with open_stack(settings.with_(runner_ack_wait_s=3.0), ["runner", "scheduler"]) as stack:
        yield stack.bus


async def test_an_answer_over_the_max_payload_ends_the_run_once_and_is_kept_whole(
    runner_bus: Bus,
) -> None:
    bus = runner_bus
    calls: list[ExecTool] = []

    async def compiler(msg: Msg) -> None:
        await msg.respond(encode(REPORT))

    async def tools_exec(msg: Msg) -> None:
        call = decode(msg.data, ExecTool)
        calls.append(call)
        n = int(str(call.input["path"]).removeprefix("/p"))
        done = ToolResult(ok=True, output=part(n), duration_ms=1, metadata=ToolMetadata())
        await msg.respond(encode(done))

    await bus.nc.subscribe(s.EXECUTORS_ACTIVE, cb=compiler)
    await bus.nc.subscribe(s.TOOLS_EXEC, cb=tools_exec)
    assert len(encode(FULL_ANSWER)) > bus.nc.max_payload
    spec = TaskSpec(name="report", prompt="Join the parts", allowed_tools=["read_file"])
    run_id = "big-answer"
    await bus.request(
        s.RUNS_START, StartRun(spec=spec, task_id="report", run_id=run_id), RunStarted
    )
    store = RunStore(bus)
    with anyio.fail_after(30):
        while (done := await store.finished(run_id)) is None:
            await anyio.sleep(0.1)
    await anyio.sleep(1.0)  # a redelivery, had the ending not gone out, would show by now

    assert (done.status, done.source, done.attempt) == ("completed", "executor", 1), done.error
    assert len(calls) == PARTS  # every read ran once: the run was not run again
    assert done.result_truncated and done.result_ref is not None
    assert done.result is not None and FULL_ANSWER.startswith(done.result)
    assert 0 < len(done.result) < len(FULL_ANSWER)
    assert (await blobs.get(bus.js, done.result_ref)).decode() == FULL_ANSWER
    ended = [e for e in await store.events(run_id) if e.event in ("completed", "failed")]
    assert len(ended) == 1

    view = await bus.request(s.RUNS_GET, RunRef(run_id=run_id), RunView)
    assert (view.status, view.result, view.result_truncated, view.result_ref) == (
        "completed",
        done.result,
        True,
        done.result_ref,
    )


async def test_an_answer_that_fits_stays_inline_with_no_reference(runner_bus: Bus) -> None:
    # 200 KB: long, but the event still fits one message, and a subscriber wants the
    # answer itself rather than a reference to fetch.
    bus = runner_bus
    page = "hello " * 33_000
    small = ActiveExecutor(
        executor=hand_built_executor(
            "small",
            [
                ToolStep(index=0, tool="read_file", input={"path": "/a"}),
                ResultStep(index=1, mode="template", template="Read: {{step_0}}"),
            ],
        ),
        health=ExecutorHealth(task_id="small", status="active", version=1),
    )

    async def compiler(msg: Msg) -> None:
        await msg.respond(encode(small))

    async def tools_exec(msg: Msg) -> None:
        done = ToolResult(ok=True, output=page, duration_ms=1, metadata=ToolMetadata())
        await msg.respond(encode(done))

    await bus.nc.subscribe(s.EXECUTORS_ACTIVE, cb=compiler)
    await bus.nc.subscribe(s.TOOLS_EXEC, cb=tools_exec)
    spec = TaskSpec(name="small", prompt="Read it", allowed_tools=["read_file"])
    await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="small", run_id="r"), RunStarted)
    store = RunStore(bus)
    with anyio.fail_after(30):
        while (done := await store.finished("r")) is None:
            await anyio.sleep(0.1)
    assert (done.status, done.result, done.result_truncated, done.result_ref) == (
        "completed",
        f"Read: {page}",
        False,
        None,
    )


# --- the tracer ------------------------------------------------------------------------


async def test_the_tracer_captures_a_cut_answer_whole_from_the_blob_store(
    settings: Settings, bus: Bus
) -> None:
    calls = news_calls()
    whole = "7-2" + " and then some" * 10_000
    async with tracer(settings, bus):
        ref = await blobs.put(bus.js, whole.encode())
        await publish_run(
            bus,
            "r-cut-answer",
            calls,
            transcript=transcript_of("r-cut-answer", calls, {}),
            result_truncated=True,
            result_ref=ref,
        )
        trace, _ = await until(lambda: captured(bus, "r-cut-answer"))
    assert trace.answer == whole  # never the head "7-2" the event carried


async def test_the_tracer_does_not_capture_an_answer_cut_and_not_kept(
    settings: Settings, bus: Bus, written_logs: list[dict[str, Any]]
) -> None:
    calls = news_calls()
    async with tracer(settings, bus):
        await publish_run(
            bus,
            "r-lost-answer",
            calls,
            transcript=transcript_of("r-lost-answer", calls, {}),
            result_truncated=True,
        )
        reason = await rejected(written_logs)
        await anyio.sleep(0.5)
        assert await captured(bus, "r-lost-answer") is None
    assert "answer" in reason
