"""The agent loop over real NATS: a request the bus cannot carry is an error the caller
can handle, a conversation longer than one message still completes its run, and a
refused answer or a lost text event ends the run as a user expects — once, with no
redelivery.

Only the runner runs here; the model and the tools are small stand-ins answering at
the bus boundary (rote.api.llm.complete, rote.api.tools.*).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    TextBlock,
    ToolResultBlock,
    Usage,
)
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolList, ToolResult
from services.kernel.bus import Bus, connect
from services.kernel.codec import decode, encode
from services.kernel.embedded_nats import EmbeddedNats
from services.kernel.errors import RemoteError
from services.kernel.run_store import RunStore
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.e2e.helpers import work_queue_settled
from tests.unit.test_agent_loop import TOOL, tool_turn

pytestmark = pytest.mark.anyio

ECHO = "rote.test.echo"
# What the tools service caps one output at.
OUTPUT_CHARS = 256_000


# --- the bus -------------------------------------------------------------------------------


async def test_a_request_over_the_max_payload_is_a_too_large_remote_error(bus: Bus) -> None:
    async def echo(msg: Msg) -> None:
        await msg.respond(b'"ok"')

    await bus.nc.subscribe(ECHO, cb=echo)
    limit = bus.nc.max_payload
    assert await bus.request(ECHO, b"x" * limit, str) == "ok"  # at the limit: carried

    with pytest.raises(RemoteError) as caught:
        await bus.request(ECHO, b"x" * (limit + 1), str)
    error = caught.value
    assert (error.code, error.status, error.subject) == ("too_large", 413, ECHO)
    assert f"is {limit + 1} bytes" in error.message
    assert f"max payload of {limit} bytes" in error.message


async def test_a_request_on_a_closed_connection_is_an_unavailable_remote_error(
    nats_server: EmbeddedNats,
) -> None:
    closed = await connect(nats_server.url, name="rote-test-closed")
    await closed.close()
    with pytest.raises(RemoteError) as caught:
        await closed.request(ECHO, b"{}", str)
    assert caught.value.code == "unavailable" and "ConnectionClosedError" in caught.value.message


# --- runs ----------------------------------------------------------------------------------


def page_output(n: int) -> str:
    return (f"page {n}: " + "y" * OUTPUT_CHARS)[:OUTPUT_CHARS]


class Stand:
    """The model and the tools, scripted: the model reads `pages` pages, one a turn,
    then answers `answer` with `stop_reason`."""

    def __init__(
        self, pages: int, answer: str, stop_reason: str = "end_turn", delay_s: float = 0.0
    ) -> None:
        self.pages = pages
        self.answer = answer
        self.stop_reason = stop_reason
        self.delay_s = delay_s  # how long the model takes over each turn
        self.requests: list[CompleteRequest] = []
        self.sizes: list[int] = []
        self.calls: list[ExecTool] = []

    async def complete(self, msg: Msg) -> None:
        request = decode(msg.data, CompleteRequest)
        self.requests.append(request)
        await anyio.sleep(self.delay_s)
        self.sizes.append(len(msg.data))
        turn = sum(m.role == "assistant" for m in request.messages)
        content, stop = (
            (tool_turn(turn), "tool_use")
            if turn < self.pages
            else ([TextBlock(text=self.answer)], self.stop_reason)
        )
        reply = CompleteReply(
            id=f"msg_{turn}",
            model="claude-sonnet-5-5",
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=100, output_tokens=10),
            cost_usd=0.01,
        )
        await msg.respond(encode(reply))

    async def list_tools(self, msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[TOOL])))

    async def exec_tool(self, msg: Msg) -> None:
        call = decode(msg.data, ExecTool)
        self.calls.append(call)
        result = ToolResult(ok=True, output=page_output(call.input["page"]), duration_ms=1)
        await msg.respond(encode(result))

    async def serve(self, bus: Bus) -> None:
        await bus.nc.subscribe(s.LLM_COMPLETE, cb=self.complete)
        await bus.nc.subscribe(s.TOOLS_LIST, cb=self.list_tools)
        await bus.nc.subscribe(s.TOOLS_EXEC, cb=self.exec_tool)


@pytest.fixture
async def runner_bus(settings: Settings) -> AsyncIterator[Bus]:
    # A short ack wait: a delivery that broke is redelivered within the test.
    async with open_stack(settings.with_(runner_ack_wait_s=3.0), ["runner", "scheduler"]) as stack:
        yield stack.bus


async def run_once(
    bus: Bus, run_id: str, stand: Stand, deadline_s: float = 600.0
) -> tuple[RunEvent, list[str]]:
    """Start a run, wait for its end; returns the end and every run event published."""
    await stand.serve(bus)
    published: list[str] = []

    async def on(msg: Msg) -> None:
        published.append(msg.subject.rsplit(".", 1)[-1])

    await bus.nc.subscribe(s.run_events_of(run_id=run_id), cb=on)
    spec = TaskSpec(
        name="pages",
        prompt="Read every page",
        allowed_tools=["browser_read_page"],
        deadline_s=deadline_s,
    )
    await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="pages", run_id=run_id), RunStarted)
    store = RunStore(bus)
    with anyio.fail_after(30):
        while (done := await store.finished(run_id)) is None:
            await anyio.sleep(0.1)
    await work_queue_settled(bus)
    await anyio.sleep(0.3)
    return done, published


async def test_a_conversation_longer_than_one_message_still_completes_the_run(
    runner_bus: Bus,
) -> None:
    pages = 6  # six capped outputs: 1.5 MB of conversation, over NATS' 1 MB
    stand = Stand(pages, answer="Read all 6 pages.")
    done, published = await run_once(runner_bus, "long-talk", stand)

    assert (done.status, done.result, done.attempt) == ("completed", "Read all 6 pages.", 1)
    assert published.count("started") == 1  # no crash, no redelivery, paid once
    assert done.cost_usd == pytest.approx(0.01 * (pages + 1))
    assert len(stand.requests) == pages + 1
    assert max(stand.sizes) <= runner_bus.nc.max_payload
    last = stand.requests[-1]
    # Every assistant turn came back as sent, thinking signatures included...
    assistant = [m for m in last.messages if m.role == "assistant"]
    assert [encode(m.content) for m in assistant] == [encode(tool_turn(n)) for n in range(pages)]
    # ...the newest output whole, the oldest elided with a note saying so.
    results = [
        b
        for m in last.messages
        if isinstance(m.content, list)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert results[-1].content == page_output(pages - 1)
    assert results[0].content == (
        f"[output of an earlier call elided to fit the request: {OUTPUT_CHARS} chars]"
    )
    # The transcript keeps the run's whole (bounded) story, ending with the answer.
    transcript = await RunStore(runner_bus).transcript("long-talk")
    assert transcript is not None
    final = transcript.entries[-1].message
    assert final is not None and final.content == [TextBlock(text="Read all 6 pages.")]


async def test_a_refused_task_fails_the_run_instead_of_completing_it(runner_bus: Bus) -> None:
    stand = Stand(1, answer="I can't help with that.", stop_reason="refusal")
    done, published = await run_once(runner_bus, "refused", stand)

    assert (done.status, done.reason, done.attempt) == ("failed", "llm_error", 1)
    assert done.result is None
    assert done.error is not None and "refused" in done.error and "refusal" in done.error
    assert published.count("started") == 1 and "completed" not in published


async def test_a_text_event_the_stream_cannot_take_does_not_fail_the_run(
    runner_bus: Bus,
) -> None:
    # The stream that keeps rote.evt.llm.<run>.text is gone: every publish fails.
    await runner_bus.js.delete_stream(s.STREAM_ACTIVITY)
    stand = Stand(2, answer="Read both pages.")
    done, published = await run_once(runner_bus, "no-activity", stand)

    assert (done.status, done.result, done.attempt) == ("completed", "Read both pages.", 1)
    assert published.count("started") == 1


async def test_a_tool_call_late_in_a_run_gets_only_the_time_the_run_has_left(
    runner_bus: Bus,
) -> None:
    """The tools service runs a call for the time the call is given: a call asked for
    late in the run given the whole run's time would go on past the run's deadline,
    after the run has ended."""
    stand = Stand(2, answer="Read both pages.", delay_s=1.0)
    done, _ = await run_once(runner_bus, "late-call", stand, deadline_s=6.0)

    assert (done.status, done.result) == ("completed", "Read both pages."), done.error
    # Asked after one model turn (1 s) of the 6 s, then after two.
    first, second = stand.calls
    assert first.timeout_s <= 5.0 and second.timeout_s <= 4.0
