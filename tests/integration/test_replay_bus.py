"""The replay's tool calls over real NATS, when the tools service does not answer: a
call no tools service took (no responders) is tried again, but an action whose reply
was lost may have acted and is not done a second time (a second order). A call is
never given more time than the run has left.

Only the bus (or the runner) runs here; stand-ins take tool calls at
rote.api.tools.exec and answer for the compiler at rote.api.executors.active.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ActiveExecutor, ExecutorHealth, ResultStep, ToolStep
from contracts.llm import ToolDefinition
from contracts.runs import RunEvent, RunRequest, RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolMetadata, ToolResult
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode
from services.kernel.lease import Lease
from services.kernel.run_store import RunStore
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.runner.adapters import bus_ports
from services.runner.ports import RunScope
from services.runner.replay import Replayer, ReplayResult
from services.runner.service import Runner
from services.runner.transcript import TranscriptRecorder
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

SPEC = TaskSpec(name="order", prompt="Order one widget", allowed_tools=["browser_fill_form"])


async def replay_order(bus: Bus, run_id: str) -> tuple[ReplayResult, int]:
    """Replay an executor whose one step submits an order form, with one retry; returns
    the result and how many times the replay tried the step."""
    executor = hand_built_executor(
        "order",
        [
            ToolStep(index=0, tool="browser_fill_form", input={"fields": {"#qty": 1}}),
            ResultStep(index=1, mode="template", template="ordered", example="ordered"),
        ],
    )
    transcript = TranscriptRecorder(run_id, "order")
    scope = RunScope(
        spec=SPEC,
        ports=bus_ports(bus),
        run_id=run_id,
        task_id="order",
        attempt=1,
        transcript=transcript,
    )
    replayer = Replayer(executor, scope, retries=1, backoff_s=0.0, tool_timeout_s=0.1)
    with anyio.fail_after(60):
        result = await replayer.run()
    tries = sum("failed" in (e.detail or {}) for e in transcript.build().entries)
    return result, tries


async def test_an_order_no_tools_service_took_is_tried_again(bus: Bus) -> None:
    result, tries = await replay_order(bus, "no-tools")  # nothing subscribes: no responders
    assert not result.ok and result.failed_step == 0 and result.infrastructure
    assert result.reason is not None and "unavailable" in result.reason
    assert tries == 2


async def test_an_order_whose_reply_was_lost_is_not_submitted_twice(bus: Bus) -> None:
    taken: list[bytes] = []

    async def swallow(msg: Msg) -> None:  # the form went in; the reply never came back
        taken.append(msg.data)

    await bus.nc.subscribe(s.TOOLS_EXEC, cb=swallow)
    result, tries = await replay_order(bus, "lost-reply")
    assert not result.ok and result.failed_step == 0
    assert result.reason is not None and "timeout" in result.reason
    assert len(taken) == 1 and tries == 1  # submitted once; the fallback run takes over


# --- the run's deadline ----------------------------------------------------------------


@pytest.fixture
async def runner_bus(settings: Settings) -> AsyncIterator[Bus]:
    # A short ack wait: a delivery that broke is redelivered within the test.
    async with open_stack(settings.with_(runner_ack_wait_s=3.0), ["runner", "scheduler"]) as stack:
        yield stack.bus


BUILD = ActiveExecutor(
    executor=hand_built_executor(
        "build",
        [
            ToolStep(index=0, tool="shell_exec", input={"command": "make", "timeout": 300}),
            ToolStep(index=1, tool="shell_exec", input={"command": "make test", "timeout": 300}),
            ResultStep(index=2, mode="template", template="Built and tested"),
        ],
    ),
    health=ExecutorHealth(task_id="build", status="active", version=1),
)


async def replay_build(
    bus: Bus, run_id: str, deadline_s: float, *, command_s: float, first_lookup_s: float = 0.0
) -> tuple[RunEvent, list[ExecTool]]:
    """Run the build task, replayed from BUILD: each command takes `command_s`; the
    first executor lookup answers after `first_lookup_s` with what is no executor,
    which breaks that delivery. Returns the run's end and the tool calls sent."""
    calls: list[ExecTool] = []
    lookups = 0

    async def compiler(msg: Msg) -> None:
        nonlocal lookups
        lookups += 1
        if lookups == 1 and first_lookup_s:
            await anyio.sleep(first_lookup_s)
            await msg.respond(b'{"executor": "not an executor"}')
        else:
            await msg.respond(encode(BUILD))

    async def tools_exec(msg: Msg) -> None:
        calls.append(decode(msg.data, ExecTool))
        await anyio.sleep(command_s)
        done = ToolResult(ok=True, output="", duration_ms=1, metadata=ToolMetadata(exit_code=0))
        await msg.respond(encode(done))

    await bus.nc.subscribe(s.EXECUTORS_ACTIVE, cb=compiler)
    await bus.nc.subscribe(s.TOOLS_EXEC, cb=tools_exec)
    spec = TaskSpec(
        name="build", prompt="Build and test", allowed_tools=["shell_exec"], deadline_s=deadline_s
    )
    await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="build", run_id=run_id), RunStarted)
    store = RunStore(bus)
    with anyio.fail_after(30):
        while (done := await store.finished(run_id)) is None:
            await anyio.sleep(0.1)
    return done, calls


async def test_a_replayed_call_late_in_a_run_gets_only_the_time_the_run_has_left(
    runner_bus: Bus,
) -> None:
    """The tools service runs a call for the time the call is given: a step replayed late
    in the run given the whole run's time would go on past the run's deadline, after
    the run has ended."""
    done, calls = await replay_build(runner_bus, "late-step", 6.0, command_s=1.0)

    assert (done.status, done.source, done.result) == ("completed", "executor", "Built and tested")
    # Asked at once, then after one command (1 s) of the 6 s.
    first, second = calls
    assert first.timeout_s <= 6.0 and second.timeout_s <= 5.0


async def test_a_redelivered_replay_gets_only_what_is_left_of_the_runs_deadline(
    runner_bus: Bus,
) -> None:
    """The first delivery uses 6 s of the run's 10 and breaks: the next one's replay has
    at most 4 s left, and its calls get no more."""
    done, calls = await replay_build(
        runner_bus, "redelivered-step", 10.0, command_s=0.0, first_lookup_s=6.0
    )

    assert (done.status, done.source, done.attempt) == ("completed", "executor", 2)
    assert [(call.attempt, call.timeout_s <= 4.0) for call in calls] == [(2, True)] * 2


async def test_a_replay_whose_step_came_back_past_the_deadline_ends_the_run_there(
    settings: Settings,
) -> None:
    """The step's reply came back after the deadline, before the deadline's cancel could
    land (here: a call that kept the loop busy): the next step is not started, and the
    run ends at its deadline with the replay cut off at that step, not falling back to
    a full run that has no time."""
    calls: list[ExecTool] = []
    lists = 0

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append(request)
        # Past the run's 0.5 s, blocking on purpose: no checkpoint for the cancel to land.
        time.sleep(0.8)  # noqa: ASYNC251
        return ToolResult(ok=True, output="", duration_ms=800, metadata=ToolMetadata(exit_code=0))

    async def active_executor(task_id: str) -> ActiveExecutor:
        return BUILD

    async def list_tools(allowed: list[str]) -> list[ToolDefinition]:
        nonlocal lists
        lists += 1
        return []

    request = RunRequest(
        run_id="past-deadline",
        task_id="build",
        spec=TaskSpec(name="build", prompt="Build and test", deadline_s=0.5),
        requested_at=utc_now(),
        origin="operator",
    )
    async with open_stack(settings, []) as stack:
        ports = dataclasses.replace(
            bus_ports(stack.bus),
            exec_tool=exec_tool,
            active_executor=active_executor,
            list_tools=list_tools,
        )
        runner = Runner(stack.context, ports)
        claim = await runner.claims.take(request)  # the run is new: its claim, not an ending
        assert isinstance(claim, Lease)
        done = await runner.execution.run(request, 1, claim)

    assert (done.status, done.reason, done.source) == ("failed", "deadline", "executor")
    assert [call.input["command"] for call in calls] == ["make"]  # "make test" never started
    assert not done.fell_back and lists == 0  # no full run started with no time
    assert done.replay is not None and (done.replay.ok, done.replay.step) == (False, 1)
    assert done.error is not None and "0.5 s deadline" in done.error
