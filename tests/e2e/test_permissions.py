"""infra/nats/permissions.conf holds every service to its own subjects and still lets
rote work: each service runs under its own user (as `rote serve NAME` would), an
operator drives a task through its whole life with API requests and watches its run
events, a condition task's page is checked and paused through the intake, and the
server refuses nothing along the way."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.executors import ExecutorHealth, ExecutorRef
from contracts.runs import RunEvent, RunRef, Transcript
from contracts.tasks import (
    ConditionTrigger,
    Contains,
    CreateTask,
    RunAccepted,
    RunTask,
    TaskRef,
    TaskView,
)
from contracts.tools import ToolEvent
from contracts.traces import TraceRef, TraceReply
from services.dev.demo.site import DemoSite
from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus, connect
from services.kernel.codec import decode
from services.kernel.discovery import service_infos
from services.kernel.errors import RemoteError
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.integration.test_infra_nats import Servers, servers
from tests.integration.test_infra_permissions import Permissioned

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

__all__ = ["servers"]  # the fixture: every nats-server started here is killed at the end

# The order `rote up` starts them in: what a run needs is serving before runs go out.
SERVICES = ("system", "llm", "tools", "compiler", "tracer", "runner", "scheduler")


class RunWatch:
    """The operator's `nats sub 'rote.evt.run.>'`: each run's events as they come."""

    def __init__(self) -> None:
        self.events: dict[str, list[RunEvent]] = {}

    async def on_msg(self, msg: Msg) -> None:
        event = decode(msg.data, RunEvent)
        self.events.setdefault(event.run_id, []).append(event)

    async def finished(self, run_id: str) -> RunEvent:
        with anyio.fail_after(90):
            while True:
                for event in self.events.get(run_id, []):
                    if event.event in ("completed", "failed"):
                        return event
                await anyio.sleep(0.1)


async def run_now(operator: Bus, watch: RunWatch, task_id: str) -> RunEvent:
    accepted = await operator.request(s.TASKS_RUN, RunTask(task_id=task_id), RunAccepted)
    done = await watch.finished(accepted.run_id)
    assert done.status == "completed", done.error
    return done


async def active_version(operator: Bus, task_id: str) -> int:
    with anyio.fail_after(30):
        while True:
            try:
                health = await operator.request(
                    s.EXECUTORS_GET, ExecutorRef(task_id=task_id), ExecutorHealth
                )
            except RemoteError as exc:  # not compiled yet
                if exc.code != "not_found":
                    raise
                await anyio.sleep(0.2)
                continue
            if health.status == "active" and health.version is not None:
                return health.version
            await anyio.sleep(0.2)


async def watch_a_page(operator: Bus, site: DemoSite) -> None:
    """A condition task: the scheduler checks the page through the tools service (a
    predicate that does not hold, so no run), then a pause sent to the intake stops it."""
    checks: list[ToolEvent] = []

    async def on_tool(msg: Msg) -> None:
        event = decode(msg.data, ToolEvent)
        if event.task_id == "watch" and event.source == "condition":
            checks.append(event)

    await operator.nc.subscribe(s.TOOL_EVENTS_ALL, cb=on_tool)
    page = {"url": f"{site.url}/news"}
    trigger = ConditionTrigger(
        tool="browser_navigate", input=page, predicate=Contains(text="no such words"), every_s=1
    )
    create = CreateTask(task_id="watch", name="watch", prompt="p", trigger=trigger)
    await operator.request(s.TASKS_CREATE, create, TaskView)
    with anyio.fail_after(30):
        while not any(e.event == "finished" and e.ok for e in checks):
            await anyio.sleep(0.1)
    await operator.js.publish(s.intake_task("pause"), b'{"task_id": "watch"}')
    with anyio.fail_after(30):
        while (await operator.request(s.TASKS_GET, TaskRef(task_id="watch"), TaskView)).status != (
            "paused"
        ):
            await anyio.sleep(0.1)


async def test_a_task_lives_with_every_service_under_its_own_user(
    servers: Servers, tmp_path: Path, site: DemoSite, standin: StandinServer
) -> None:
    server = Permissioned(servers)
    base = Settings(
        data_dir=tmp_path / "data", event_store="sqlite", log_format="json", replay_backoff_s=0.2
    )
    async with AsyncExitStack() as running:
        for name in SERVICES:
            settings = base.with_(nats_url=server.url(name))
            await running.enter_async_context(open_stack(settings, [name]))
        operator = await connect(server.url("operator"), name="operator")
        running.push_async_callback(operator.close)
        watch = RunWatch()
        await operator.nc.subscribe(s.RUN_EVENTS_ALL, cb=watch.on_msg)

        prompt = f"Open {site.url}/news and report the top 3 headlines"
        create = CreateTask(task_id="news", name="news", prompt=prompt)
        await operator.request(s.TASKS_CREATE, create, TaskView)
        full = await run_now(operator, watch, "news")
        assert full.source == "full_llm"
        assert await active_version(operator, "news") == 1
        replay = await run_now(operator, watch, "news")
        assert (replay.source, replay.executor_version) == ("executor", 1)
        assert replay.result == full.result

        # A task that acts: its runs journal the submit (rote_effects, rote_tool_calls).
        prompt = (
            f"Open {site.url}/signup, fill the form with name=Ada, email=ada@example.org"
            " and report the confirmation"
        )
        signup = CreateTask(task_id="signup", name="signup", prompt=prompt)
        await operator.request(s.TASKS_CREATE, signup, TaskView)
        signed = await run_now(operator, watch, "signup")
        assert signed.status == "completed" and "Ada" in (signed.result or ""), signed.error
        assert await active_version(operator, "signup") == 1
        again = await run_now(operator, watch, "signup")
        assert (again.status, again.source) == ("completed", "executor"), again.error

        # What an operator reads afterwards: the run, its transcript, its trace, and
        # which services run (`nats micro ls`).
        ref = RunRef(run_id=full.run_id)
        assert (await operator.request(s.RUNS_TRANSCRIPT, ref, Transcript)).entries
        trace = await operator.request(s.TRACES_GET, TraceRef(run_id=full.run_id), TraceReply)
        assert trace.trace.answer == full.result
        names = {info["name"] for info in await service_infos(operator)}
        assert names == {f"rote-{name}" for name in SERVICES}
        await watch_a_page(operator, site)
    assert server.violations() == []
