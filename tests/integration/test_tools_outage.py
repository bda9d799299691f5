"""A tools outage over real NATS, as a user of rote sees it.

- Runs that fail because no tools service answers are marked `infrastructure`: the task
  is not paused by them (max_failures counts the task's own failures), the ledger shows
  them failed with their cost, and the next run goes out once tools are back.
- A tools process that dies mid-run takes the run's browser session with it: the next
  browser call is not run on a fresh, blank page (where an extract "succeeds" with
  nothing) but comes back as a `session_lost` error the model reads and acts on; a
  replay stops there, and the failure is not held against its executor.

The runner and scheduler are real; the model and the tools processes are stand-ins at
the bus boundary (rote.api.llm.complete, rote.api.tools.*); in one test of a lost session
the model is rote's own stand-in (services/dev/standin) behind the real llm service.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from contracts import subjects as s
from contracts.executors import ResultStep, ToolStep
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    ContentBlock,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from contracts.runs import RunEvent, RunList, RunStarted, StartRun
from contracts.tasks import RunAccepted, TaskSpec, TaskView
from contracts.tools import CloseSession, ExecTool, SessionClosed, ToolList, ToolResult
from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode, encode
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.runner.adapters import bus_ports
from services.runner.ports import RunScope
from services.runner.replay import Replayer
from services.runner.transcript import TranscriptRecorder
from tests.e2e.helpers import wait_finished
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

URL = "https://acme.test/prices"
PRICES = ["ACME $42"]
TOOLS = ["browser_navigate", "browser_extract"]
# nats.micro's queue group: every tools process takes calls from it.
MICRO_QUEUE = "q"


class ToolsProcess:
    """One tools process: the shared exec subject (a queue group) and its own, where a
    run's browser session lives. A run's page is kept per process, as a browser context
    is: a run new to this process starts on about:blank, where an extract finds nothing."""

    def __init__(self, bus: Bus, instance: str) -> None:
        self.bus = bus
        self.instance = instance
        self.pages: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []  # (tool, the page it ran on)
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        nc = self.bus.nc
        self._subs = [
            await nc.subscribe(s.TOOLS_EXEC, queue=MICRO_QUEUE, cb=self._exec),
            await nc.subscribe(s.tools_exec_on(self.instance), cb=self._exec),
            await nc.subscribe(s.TOOLS_LIST, queue=MICRO_QUEUE, cb=self._list),
            await nc.subscribe(s.tools_close_session_on(self.instance), cb=self._close),
            await nc.subscribe(s.TOOLS_CLOSE_SESSION, queue=MICRO_QUEUE, cb=self._close),
        ]
        await routed(nc)

    async def stop(self) -> None:
        """The process dies: its subjects have no responders, its sessions are gone."""
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs = []
        self.pages.clear()
        await routed(self.bus.nc)

    def ran(self, tool: str) -> list[str]:
        return [page for name, page in self.calls if name == tool]

    def output(self, call: ExecTool, page: str) -> Any:
        """What the call returns on `page` (after a navigation: the page it opened)."""
        return {"url": page} if call.tool == "browser_navigate" else {
            "items": PRICES if page == URL else []
        }  # fmt: skip

    def run_call(self, msg: Msg) -> ToolResult:
        call = decode(msg.data, ExecTool)
        page = self.pages.get(call.run_id, "about:blank")
        self.calls.append((call.tool, page))
        if call.tool == "browser_navigate":
            self.pages[call.run_id] = page = call.input["url"]
        output = self.output(call, page)
        return ToolResult(ok=True, output=output, duration_ms=1, served_by=self.instance)

    async def _exec(self, msg: Msg) -> None:
        await msg.respond(encode(self.run_call(msg)))

    async def _list(self, msg: Msg) -> None:
        tools = [ToolDefinition(name=name, description=name, input_schema={}) for name in TOOLS]
        await msg.respond(encode(ToolList(tools=tools)))

    async def _close(self, msg: Msg) -> None:
        run_id = decode(msg.data, CloseSession).run_id
        closed = self.pages.pop(run_id, None) is not None
        await msg.respond(encode(SessionClosed(run_id=run_id, closed=closed)))


def use(n: int, tool: str, tool_input: dict[str, Any]) -> list[ContentBlock]:
    return [ToolUseBlock(id=f"toolu_{n}", name=tool, input=tool_input)]


def results_of(request: CompleteRequest) -> list[ToolResultBlock]:
    return [
        block
        for message in request.messages
        if message.role == "user" and isinstance(message.content, list)
        for block in message.content
        if isinstance(block, ToolResultBlock)
    ]


class Model:
    """The model, scripted: `decide(turn, request)` gives each reply's content."""

    def __init__(
        self, bus: Bus, decide: Callable[[int, CompleteRequest], Any], cost_usd: float = 0.01
    ) -> None:
        self.bus = bus
        self.decide = decide
        self.cost_usd = cost_usd
        self.requests: list[CompleteRequest] = []

    async def start(self) -> None:
        await self.bus.nc.subscribe(s.LLM_COMPLETE, cb=self._complete)

    async def _complete(self, msg: Msg) -> None:
        request = decode(msg.data, CompleteRequest)
        self.requests.append(request)
        turn = sum(m.role == "assistant" for m in request.messages)
        content = await self.decide(turn, request)
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
        reply = CompleteReply(
            id=f"msg_{turn}",
            model="claude-sonnet-5-5",
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=100, output_tokens=10),
            cost_usd=self.cost_usd,
        )
        await msg.respond(encode(reply))


async def ok(bus: Bus, subject: str, body: dict[str, Any], type_: type[Any]) -> Any:
    msg = await bus.nc.request(subject, msgspec.json.encode(body), timeout=10)
    assert "Nats-Service-Error" not in (msg.headers or {}), msg.data
    return decode(msg.data, type_)


# --- a tools outage does not pause the task ---------------------------------------------------


async def test_runs_failed_by_a_tools_outage_do_not_pause_the_task(settings: Settings) -> None:
    async with open_stack(settings, ["scheduler", "runner"]) as stack:  # no tools service
        bus = stack.bus
        body = {"name": "watch", "prompt": "Read the ACME price", "max_failures": 2}
        await ok(bus, s.TASKS_CREATE, body, TaskView)
        failed: list[RunEvent] = []
        for _ in range(3):  # more than max_failures
            accepted = await ok(bus, s.TASKS_RUN, {"task_id": "watch"}, RunAccepted)
            failed.append(await wait_finished(bus, accepted.run_id, timeout=30))
            with anyio.fail_after(10):  # the scheduler has recorded it: the slot is free
                while (await ok(bus, s.TASKS_GET, {"task_id": "watch"}, TaskView)).run_in_flight:
                    await anyio.sleep(0.05)
        for done in failed:
            assert (done.status, done.reason, done.infrastructure) == ("failed", "tool_error", True)
            assert done.error is not None and "no service answers" in done.error

        view = await ok(bus, s.TASKS_GET, {"task_id": "watch"}, TaskView)
        assert (view.status, view.status_reason) == ("active", None)
        assert (view.consecutive_failures, view.last_run_status) == (0, "failed")
        runs = (await ok(bus, s.RUNS_LIST, {"task_id": "watch"}, RunList)).runs
        assert [(r.status, r.infrastructure) for r in runs] == [("failed", True)] * 3

        # Tools are back: the next run goes out and completes, no operator needed.
        await ToolsProcess(bus, "back").start()

        async def answer(turn: int, request: CompleteRequest) -> list[ContentBlock]:
            return [TextBlock(text="ACME costs $42")]

        await Model(bus, answer).start()
        accepted = await ok(bus, s.TASKS_RUN, {"task_id": "watch"}, RunAccepted)
        done = await wait_finished(bus, accepted.run_id, timeout=30)
        assert (done.status, done.infrastructure) == ("completed", False)


# --- a tools process dies mid-run -------------------------------------------------------------


async def test_a_session_lost_mid_run_is_an_error_the_model_sees_not_a_blank_page(
    settings: Settings,
) -> None:
    async with open_stack(settings, ["runner", "scheduler"]) as stack:
        bus = stack.bus
        first, second = ToolsProcess(bus, "first"), ToolsProcess(bus, "second")
        await first.start()

        async def decide(turn: int, request: CompleteRequest) -> list[ContentBlock]:
            results = results_of(request)
            if turn == 0:
                return use(0, "browser_navigate", {"url": URL})
            if turn in (1, 2):
                if turn == 2:  # the process holding the session dies; another takes over
                    await first.stop()
                    await second.start()
                return use(turn, "browser_extract", {"selector": ".price"})
            if turn == 3 and results[-1].is_error:
                return use(3, "browser_navigate", {"url": URL})  # what the error says to do
            if turn == 4:
                return use(4, "browser_extract", {"selector": ".price"})
            return [TextBlock(text=f"Read: {results[-1].content}")]

        model = Model(bus, decide)
        await model.start()
        spec = TaskSpec(name="prices", prompt="Read the ACME prices", allowed_tools=TOOLS)
        started = await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="prices"), RunStarted)
        done = await wait_finished(bus, started.run_id, timeout=30)

        # The model was told, in the extract's tool_result, that the session was lost.
        lost = results_of(model.requests[3])[-1]
        assert lost.tool_use_id == "toolu_2" and lost.is_error
        assert isinstance(lost.content, str) and lost.content.startswith("session_lost: ")
        assert "navigate again" in lost.content
        # Nothing ran on a blank page: the other process saw the run first at a navigate.
        assert second.calls[0] == ("browser_navigate", "about:blank")
        assert second.ran("browser_extract") == [URL]
        assert first.ran("browser_extract") == [URL]
        # The run went on and answered from the page, not from an empty extract.
        assert (done.status, done.infrastructure) == ("completed", False)
        assert done.result is not None and "ACME $42" in done.result


NEWS = "https://news.test/"
HEADLINES = ["Bridge approved", "Team wins", "Storm warning", "Fair opens"]


class NewsProcess(ToolsProcess):
    """A tools process serving a news page whose headlines only `li.item` finds. With
    `dies_at`, it dies while serving its call number `dies_at` (from 0), its answer
    still sent, and `heir` takes over the queue group before the runner hears back."""

    def __init__(
        self, bus: Bus, instance: str, dies_at: int | None = None, heir: ToolsProcess | None = None
    ) -> None:
        super().__init__(bus, instance)
        self.dies_at, self.heir = dies_at, heir
        self._dying: asyncio.Task[None] | None = None

    def output(self, call: ExecTool, page: str) -> Any:
        if call.tool == "browser_navigate":
            return {"url": page, "status": 200, "title": "News"}
        wanted = page == NEWS and call.input.get("selector") == "li.item"
        return HEADLINES if wanted else []

    async def _exec(self, msg: Msg) -> None:
        result = self.run_call(msg)
        if len(self.calls) - 1 == self.dies_at and self.heir is not None:
            # Not from this callback's task: unsubscribing cancels it.
            self._dying = asyncio.create_task(self._die_then_respond(msg, result))
            return
        await msg.respond(encode(result))

    async def _die_then_respond(self, msg: Msg, result: ToolResult) -> None:
        assert self.heir is not None
        await self.stop()
        await self.heir.start()
        await msg.respond(encode(result))


async def test_the_standin_navigates_again_after_a_session_lost_and_answers(
    settings: Settings, standin: StandinServer
) -> None:
    # rote's stand-in model plays the run, as in the demo, and the tools process dies
    # after the stand-in's first probe: its next probe is refused with session_lost.
    async with open_stack(settings, ["llm", "runner", "scheduler"]) as stack:
        bus = stack.bus
        second = NewsProcess(bus, "second")
        first = NewsProcess(bus, "first", dies_at=1, heir=second)
        await first.start()
        spec = TaskSpec(
            name="news",
            prompt=f"Open {NEWS} and report the top 3 headlines",
            allowed_tools=["browser_navigate", "browser_extract"],
        )
        started = await bus.request(s.RUNS_START, StartRun(spec=spec, task_id="news"), RunStarted)
        done = await wait_finished(bus, started.run_id, timeout=30)

        assert first.calls == [("browser_navigate", "about:blank"), ("browser_extract", NEWS)]
        # The stand-in read the session_lost error, navigated again and probed the fresh
        # page from its first selector (.headline, article .title, then li.item), not
        # from where it was on the lost page.
        assert second.calls == [
            ("browser_navigate", "about:blank"),
            ("browser_extract", NEWS),
            ("browser_extract", NEWS),
            ("browser_extract", NEWS),
        ]
        lost = [
            block
            for sent in standin.received
            for message in sent["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result" and block.get("is_error")
        ]
        assert lost and str(lost[-1]["content"]).startswith("session_lost: ")
        assert (done.status, done.infrastructure) == ("completed", False), done.error
        assert done.result == "Top 3 headlines:\n1. Bridge approved\n2. Team wins\n3. Storm warning"


async def test_a_replay_whose_session_is_lost_stops_and_does_not_blame_its_executor(
    bus: Bus,
) -> None:
    first, second = ToolsProcess(bus, "first"), ToolsProcess(bus, "second")
    await first.start()
    extract = {"selector": ".price"}
    executor = hand_built_executor(
        "prices",
        [
            ToolStep(index=0, tool="browser_navigate", input={"url": URL}),
            ToolStep(index=1, tool="browser_extract", input=extract),
            ToolStep(index=2, tool="browser_extract", input=extract),
            ResultStep(index=3, mode="template", template="{{step_2.items}}", example="x"),
        ],
    )
    ports = bus_ports(bus)
    real_exec = ports.exec_tool

    swapped = False

    async def exec_tool(request: ExecTool) -> ToolResult:
        nonlocal swapped
        if request.step == 2 and not swapped:  # the session's process dies between steps
            swapped = True
            await first.stop()
            await second.start()
        return await real_exec(request)

    transcript = TranscriptRecorder("replay-lost", "prices")
    scope = RunScope(
        spec=TaskSpec(name="prices", prompt="Read the ACME prices", allowed_tools=TOOLS),
        ports=dataclasses.replace(ports, exec_tool=exec_tool),
        run_id="replay-lost",
        task_id="prices",
        attempt=1,
        transcript=transcript,
    )
    with anyio.fail_after(30):
        result = await Replayer(executor, scope, retries=1, backoff_s=0.0).run()

    assert not result.ok and result.failed_step == 2
    assert result.infrastructure  # the executor's health does not count it
    assert result.reason is not None and "session_lost" in result.reason
    assert second.calls == []  # no extract on a fresh, blank page
    tries = sum("failed" in (e.detail or {}) for e in transcript.build().entries)
    assert tries == 1  # asking again would only be told the same
