"""Condition triggers against the real tools service: the check is a `shell_exec` tool
call through rote.api.tools.exec; a false predicate dispatches nothing, a true one
dispatches a run, and the cooldown holds the next one back. A browser check opens its
trigger's `url` in its own session first (real Chromium, a local page)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from contracts import subjects as s
from contracts.errors import ErrorInfo
from contracts.executors import ExecutorEvent
from contracts.runs import RunEvent
from contracts.tasks import (
    Below,
    ConditionTrigger,
    Contains,
    NotContains,
    TaskEvent,
    TaskView,
)
from contracts.tools import CloseSession, ExecTool, SessionClosed, ToolEvent, ToolResult
from services.kernel.bus import Bus
from services.kernel.codec import encode
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.scheduler.condition_probe import ToolsProbe
from services.scheduler.conditions import BrokenCheck, ConditionError
from services.scheduler.engine import SchedulerConfig
from services.scheduler.service import serve as serve_scheduler
from services.tools.service import serve as serve_tools
from tests.e2e.helpers import stored
from tests.local_site import QuietHandler, serve

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def tools_and_scheduler(
    settings: Settings, bus: Bus, *, tools: bool = True
) -> AsyncIterator[None]:
    """The scheduler, with the tools service beside it unless `tools` is False."""
    await ensure_streams(bus.js)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings,
            bus=bus,
            task_group=tg,
            services=("tools", "scheduler") if tools else ("scheduler",),
            nats_url=bus.url,
            embedded_nats=False,
        )
        if tools:
            await tg.start(serve_tools, ctx)
        await tg.start(partial(serve_scheduler, ctx, config=SchedulerConfig(tick_s=0.2)))
        yield
        tg.cancel_scope.cancel()


async def requested(bus: Bus) -> list[RunEvent]:
    """Runs the scheduler sent out (each also a RunRequest on the work queue), read to
    the end of the stream."""
    return await stored(bus, s.STREAM_RUNS, s.run_events_of(event="requested"), RunEvent)


async def condition_checks(bus: Bus) -> list[ToolEvent]:
    return await stored(bus, s.STREAM_ACTIVITY, s.tool_event("*", "finished"), ToolEvent)


async def test_condition_true_false_and_cooldown_through_the_tools_service(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    flag = tmp_path / "status.txt"
    flag.write_text("service DOWN\n")
    settings = settings.with_(allowed_commands=(f"cat {flag}",))
    create = {
        "name": "service up",
        "prompt": "The service is up again: run the smoke test",
        "trigger": {
            "kind": "condition",
            "tool": "shell_exec",
            "input": {"command": f"cat {flag}"},
            "predicate": {"op": "contains", "text": "UP", "path": "stdout"},
            "every_s": 1,
            "cooldown_s": 4,
        },
    }
    async with tools_and_scheduler(settings, bus):
        await bus.request(s.TASKS_CREATE, encode(create), TaskView)

        # False: checks happen (real tool calls), nothing is dispatched. A condition that
        # held would be checked no more until its run was done (none finishes here), so
        # each check seen after the first shows the one before it dispatched nothing.
        with anyio.fail_after(30):
            while len(checks := await condition_checks(bus)) < 3:
                await anyio.sleep(0.2)
        assert len(checks) >= 2
        assert all(c.source == "condition" and c.tool == "shell_exec" and c.ok for c in checks)
        assert all(c.task_id == "service-up" for c in checks)
        assert "DOWN" in checks[0].output["stdout"]
        assert await requested(bus) == []

        # True: one run goes out, with the condition as its origin.
        flag.write_text("service UP\n")
        with anyio.fail_after(30):
            while not (sent := await requested(bus)):
                await anyio.sleep(0.1)
        (first,) = sent
        assert first.origin == "condition" and first.task_id == "service-up"

        # The run finishes at once; the condition is still true, but the cooldown holds.
        await bus.publish_event(
            s.run_event("service-up", first.run_id, "completed"),
            _completed(first),
            msg_id=f"{first.run_id}:completed",
        )
        # The compiler's word on its trace: the next run need not wait for an executor.
        skipped = ExecutorEvent(
            task_id="service-up",
            event="skipped",
            at=datetime.now(UTC),
            run_id=first.run_id,
            reason="fewer than 2 successful tool steps (1)",
        )
        await bus.publish_event(
            s.executor_event("service-up", "skipped"), skipped, msg_id=f"skip:{first.run_id}"
        )
        with anyio.fail_after(30):
            while len(sent := await requested(bus)) < 2:
                await anyio.sleep(0.2)
        # Nothing went out within the cooldown: the next run, in the stream's order, is
        # the first one after it. The cooldown runs from the first run's send-out (its
        # `at`) and both times are the scheduler's clock: a busy machine can only make
        # the second later, so this bound holds exactly, with no margin to tune.
        assert sent[0].run_id == first.run_id
        assert sent[1].at >= first.at + timedelta(seconds=4)
        work = await bus.js.stream_info(s.STREAM_WORK)
        assert work.state.messages == 2


def _completed(request: RunEvent) -> RunEvent:
    return RunEvent(
        task_id=request.task_id,
        run_id=request.run_id,
        event="completed",
        status="completed",
        at=datetime.now(UTC),
        source="full_llm",
    )


async def view_of(bus: Bus, task_id: str) -> TaskView:
    return await bus.request(s.TASKS_GET, encode({"task_id": task_id}), TaskView)


def checked_every_second(task_id: str, tool: str, tool_input: dict[str, object]) -> dict:
    """A tasks.create body whose condition calls `tool` every second."""
    return {
        "task_id": task_id,
        "name": "t",
        "prompt": "p",
        "trigger": {
            "kind": "condition",
            "tool": tool,
            "input": tool_input,
            "predicate": {"op": "contains", "text": "x"},
            "every_s": 1,
        },
    }


@pytest.mark.parametrize(
    ("tool", "tool_input", "says"),
    [
        ("nope", {}, "no tool 'nope'"),
        ("shell_exec", {}, "missing required field `command`"),
    ],
    ids=["unknown-tool", "input-the-tool-refuses"],
)
async def test_a_check_the_tools_service_refuses_pauses_the_task_saying_why(
    settings: Settings, bus: Bus, tool: str, tool_input: dict[str, object], says: str
) -> None:
    create = checked_every_second("c51", tool, tool_input)
    async with tools_and_scheduler(settings, bus):
        # Accepted: whether the tools service knows the tool is its word, not the
        # scheduler's (it need not be up when a task is defined).
        created = await bus.request(s.TASKS_CREATE, encode(create), TaskView)
        assert created.status == "active"
        with anyio.fail_after(30):
            while (view := await view_of(bus, "c51")).status == "active":
                await anyio.sleep(0.2)
        assert view.status == "paused"
        assert view.status_reason is not None
        assert f"check ({tool}) cannot be made" in view.status_reason
        assert says in view.status_reason
        assert "update the trigger, then resume the task" in view.status_reason
        with anyio.fail_after(10):  # the event reaches the bus just after the store
            while not (
                events := await stored(
                    bus, s.STREAM_TASKS, s.task_event("c51", "paused"), TaskEvent
                )
            ):
                await anyio.sleep(0.1)
        assert [e.reason for e in events] == [view.status_reason]
        assert await requested(bus) == []


async def test_a_check_that_cannot_reach_the_tools_service_keeps_the_task_active(
    settings: Settings, bus: Bus
) -> None:
    create = checked_every_second("c52", "shell_exec", {"command": "df -h"})
    async with tools_and_scheduler(settings, bus, tools=False):
        await bus.request(s.TASKS_CREATE, encode(create), TaskView)
        await anyio.sleep(2.5)  # a few checks, each with no tools service to answer
        view = await view_of(bus, "c52")
    # Away now is not wrong for good: it is checked again, as before.
    assert (view.status, view.status_reason) == ("active", None)
    assert view.next_due_at is not None


async def test_a_browser_checks_session_is_closed_on_the_process_that_holds_it(
    bus: Bus,
) -> None:
    """With several tools processes, a close sent to the shared subject reaches any of
    them, mostly one without the session: the context would stay open until the idle
    reaper, one more per check. The close goes to the process that served the check."""
    closes: list[str] = []

    async def exec_handler(msg: Any) -> None:
        await msg.respond(
            encode(ToolResult(ok=True, output="in stock", duration_ms=1, served_by="p2"))
        )

    async def close_handler(msg: Any) -> None:
        closes.append(msg.subject)
        run_id = msgspec.json.decode(msg.data)["run_id"]
        await msg.respond(encode(SessionClosed(run_id=run_id, closed=True)))

    subs = [
        await bus.nc.subscribe(s.TOOLS_EXEC, cb=exec_handler),
        await bus.nc.subscribe(s.tools_exec_on("p2"), cb=exec_handler),
        await bus.nc.subscribe(s.TOOLS_CLOSE_SESSION, cb=close_handler),
        await bus.nc.subscribe(s.tools_close_session_on("p2"), cb=close_handler),
    ]
    try:
        trigger = ConditionTrigger(
            tool="browser_read_page",
            input={},
            url="https://shop.example/item",
            predicate=Contains(text="in stock"),
            every_s=60,
        )
        assert await ToolsProbe(bus)("t1", trigger) == "in stock"
    finally:
        for sub in subs:
            await sub.unsubscribe()
    assert closes == [s.tools_close_session_on("p2")]


# --- a browser check of a page: `url` opens it in the check's own session ---------------


class _PriceHandler(QuietHandler):
    price = "$12.50"

    def do_GET(self) -> None:
        if self.path != "/item":
            self.send_html("<title>Not found</title>", status=404)
            return
        self.send_html(
            f"<!doctype html><title>Widget</title><h1>Widget</h1>"
            f'<span class="price">{type(self).price}</span>'
        )


@pytest.mark.browser
async def test_a_browser_extract_check_reads_the_price_on_its_url_and_closes_the_session(
    settings: Settings, bus: Bus
) -> None:
    """The issue's example: `browser_extract` of a price. The check opens `url` in its
    own session, extracts there (on the same tools process), the predicate decides on
    the real number, and the session is closed after every check."""
    handler = type("Prices", (_PriceHandler,), {"price": "$12.50"})
    closes: list[tuple[str, str]] = []

    async def seen_close(msg: Any) -> None:  # a listener beside the tools service
        closes.append((msg.subject, msgspec.json.decode(msg.data)["run_id"]))

    with serve(handler) as site:
        create = {
            "task_id": "cheap",
            "name": "cheap widget",
            "prompt": "The widget is cheap: buy one",
            "trigger": {
                "kind": "condition",
                "tool": "browser_extract",
                "input": {"selector": ".price"},
                "url": f"{site}/item",
                "predicate": {"op": "below", "value": 10},
                "every_s": 1,
                "cooldown_s": 3600,
            },
        }
        listener = await bus.nc.subscribe(f"{s.TOOLS_CLOSE_SESSION}.>", cb=seen_close)
        try:
            async with tools_and_scheduler(settings, bus):
                await bus.request(s.TASKS_CREATE, encode(create), TaskView)
                with anyio.fail_after(60):
                    while (
                        len(extracts := _calls(await condition_checks(bus), "browser_extract")) < 2
                    ):
                        await anyio.sleep(0.2)
                # Above the limit: read, not true, nothing dispatched.
                assert all(c.ok and c.output == ["$12.50"] for c in extracts), extracts
                assert await requested(bus) == []

                handler.price = "$8.99"
                with anyio.fail_after(30):
                    while not (sent := await requested(bus)):
                        await anyio.sleep(0.1)
                (run,) = sent
                assert run.origin == "condition" and run.task_id == "cheap"

                checks = await condition_checks(bus)
                navigations = _calls(checks, "browser_navigate")
                extracts = _calls(checks, "browser_extract")
                assert extracts[-1].output == ["$8.99"]
                # Each check: navigate, then extract in the same session (run_id).
                assert {c.run_id for c in extracts} <= {c.run_id for c in navigations}
                assert all(c.run_id.startswith("cond-") and c.ok for c in navigations)
                assert all(c.input == {"url": f"{site}/item"} for c in navigations)
                # Closed on the process that holds it (a listener on its own subject).
                with anyio.fail_after(10):
                    while not {c.run_id for c in extracts} <= {r for _, r in closes}:
                        await anyio.sleep(0.1)
                instance = closes[0][0].rsplit(".", 1)[-1]
                assert all(subject == s.tools_close_session_on(instance) for subject, _ in closes)
                # Nothing left open: closing the last check's session again finds none.
                again = await bus.request(
                    s.tools_close_session_on(instance),
                    CloseSession(run_id=extracts[-1].run_id),
                    SessionClosed,
                )
                assert again.closed is False
        finally:
            await listener.unsubscribe()


def _calls(events: list[ToolEvent], tool: str) -> list[ToolEvent]:
    return [e for e in events if e.tool == tool]


async def test_a_browser_check_navigates_then_calls_its_tool_on_the_same_process(
    bus: Bus,
) -> None:
    """Navigate goes to the shared subject; the tool follows it to the process that
    served it (where the page is), allowed both tools, within the one check."""
    calls: list[tuple[str, ExecTool]] = []
    closes: list[str] = []

    def answering(served_by: str) -> Any:
        async def handler(msg: Any) -> None:
            call = msgspec.json.decode(msg.data, type=ExecTool)
            calls.append((msg.subject, call))
            output = None if call.tool == "browser_navigate" else ["$8.99"]
            reply = ToolResult(ok=True, output=output, duration_ms=1, served_by=served_by)
            await msg.respond(encode(reply))

        return handler

    async def close_handler(msg: Any) -> None:
        closes.append(msg.subject)
        run_id = msgspec.json.decode(msg.data)["run_id"]
        await msg.respond(encode(SessionClosed(run_id=run_id, closed=True)))

    subs = [
        await bus.nc.subscribe(s.TOOLS_EXEC, cb=answering("p1")),
        await bus.nc.subscribe(s.tools_exec_on("p1"), cb=answering("p1")),
        await bus.nc.subscribe(s.TOOLS_CLOSE_SESSION, cb=close_handler),
        await bus.nc.subscribe(s.tools_close_session_on("p1"), cb=close_handler),
    ]
    try:
        trigger = ConditionTrigger(
            tool="browser_extract",
            input={"selector": ".price"},
            url="https://shop.example/item",
            predicate=Below(value=10),
            every_s=60,
        )
        assert await ToolsProbe(bus)("t1", trigger) == ["$8.99"]
    finally:
        for sub in subs:
            await sub.unsubscribe()
    (nav_subject, nav), (tool_subject, tool) = calls
    assert (nav_subject, nav.tool, nav.input) == (
        s.TOOLS_EXEC,
        "browser_navigate",
        {"url": "https://shop.example/item"},
    )
    assert (tool_subject, tool.tool, tool.input) == (
        s.tools_exec_on("p1"),
        "browser_extract",
        {"selector": ".price"},
    )
    assert nav.run_id == tool.run_id and nav.run_id.startswith("cond-")
    assert nav.allowed_tools == tool.allowed_tools == ["browser_navigate", "browser_extract"]
    assert nav.source == tool.source == "condition" and nav.task_id == "t1"
    assert closes == [s.tools_close_session_on("p1")]


async def test_a_failed_navigation_is_a_failed_check_and_the_session_is_closed(
    bus: Bus,
) -> None:
    calls: list[str] = []
    closes: list[str] = []

    async def exec_handler(msg: Any) -> None:
        call = msgspec.json.decode(msg.data, type=ExecTool)
        calls.append(call.tool)
        error = ErrorInfo(code="navigation_failed", message="net::ERR_NAME_NOT_RESOLVED")
        reply = ToolResult(ok=False, error=error, duration_ms=1, served_by="p1")
        await msg.respond(encode(reply))

    async def close_handler(msg: Any) -> None:
        closes.append(msg.subject)
        run_id = msgspec.json.decode(msg.data)["run_id"]
        await msg.respond(encode(SessionClosed(run_id=run_id, closed=True)))

    subs = [
        await bus.nc.subscribe(s.TOOLS_EXEC, cb=exec_handler),
        await bus.nc.subscribe(s.TOOLS_CLOSE_SESSION, cb=close_handler),
        await bus.nc.subscribe(s.tools_close_session_on("p1"), cb=close_handler),
    ]
    try:
        trigger = ConditionTrigger(
            tool="browser_extract",
            input={"selector": ".price"},
            url="https://shop.invalid/item",
            predicate=Below(value=10),
            every_s=60,
        )
        with pytest.raises(ConditionError) as caught:
            await ToolsProbe(bus)("t1", trigger)
    finally:
        for sub in subs:
            await sub.unsubscribe()
    assert not isinstance(caught.value, BrokenCheck)  # the site may be back next time
    assert "ERR_NAME_NOT_RESOLVED" in str(caught.value)
    assert "https://shop.invalid/item" in str(caught.value)
    assert calls == ["browser_navigate"]  # the tool is not called on a blank page
    assert closes == [s.tools_close_session_on("p1")]


async def test_a_stored_page_check_without_url_pauses_asking_for_it_not_checking_blank(
    bus: Bus,
) -> None:
    """Stored before `url` existed: checking it would read a blank page forever (and a
    `not_contains` would hold every time). The check is refused as broken, so the
    engine pauses the task asking for the url; no tool is called."""
    calls: list[str] = []

    async def exec_handler(msg: Any) -> None:
        calls.append(msg.subject)
        await msg.respond(encode(ToolResult(ok=True, output=[""], duration_ms=1)))

    sub = await bus.nc.subscribe(s.TOOLS_EXEC, cb=exec_handler)
    try:
        trigger = ConditionTrigger(
            tool="browser_extract",
            input={"selector": ".price"},
            predicate=NotContains(text="Sold out"),
            every_s=60,
        )
        with pytest.raises(BrokenCheck) as caught:
            await ToolsProbe(bus)("t1", trigger)
    finally:
        await sub.unsubscribe()
    assert "starts blank" in str(caught.value) and "`url`" in str(caught.value)
    assert calls == []
