"""The chaos rig: rote's services as separate processes on a real NATS, the counting
site, the gated stand-in model, the fault log and the run watch, and what every
scenario does with them (define a form task, run it, judge it)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from contracts import subjects as s
from contracts.executors import ExecutorEvent
from contracts.runs import RunEvent
from contracts.tasks import CreateTask, RunAccepted, RunTask, TaskRef, TaskView
from contracts.tools import ToolEvent
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode
from services.kernel.errors import RemoteError
from services.kernel.replay_read import read_all
from tests.chaos.ledger import (
    Case,
    FaultLog,
    RunWatch,
    Verdict,
    journal_of,
    judge,
    wait_ended,
)
from tests.chaos.model import GatedStandin
from tests.chaos.procs import ServiceProcess, Services, runner_of
from tests.chaos.site import CountingSite, Hold

# Bounds on waiting, generous for a busy 2-CPU machine: a killed runner's run waits for
# the ack wait and for its claim to expire (15 s) before it goes on.
RUN_END_S = 150.0
BOUNDARY_S = 90.0
ASK_S = 90.0
NO_JOURNAL = "no effect journal (bucket rote_effects) on this build: its checks were skipped"
T = TypeVar("T")


def form_prompt(url: str, key: str) -> str:
    """The stand-in's form task (vocabulary item 3): open, fill and submit, read."""
    return (
        f"Open {url}, fill the form with name={key}, email={key}@example.test"
        " and report the confirmation"
    )


@dataclass
class Rig:
    services: Services
    bus: Bus
    site: CountingSite
    model: GatedStandin
    faults: FaultLog
    watch: RunWatch
    cases: list[Case] = field(default_factory=list)
    _subs: list[Subscription] = field(default_factory=list)

    # --- tasks and runs

    async def ask(self, subject: str, payload: msgspec.Struct, reply: type[T]) -> T:
        """A request to a service that may be away for a while after a fault (a
        scheduler whose lease lapsed in a NATS outage waits out its own stale key before
        it serves again): asked again until it answers."""
        with anyio.fail_after(ASK_S):
            while True:
                try:
                    return await self.bus.request(
                        subject, payload, reply, timeout=10, retry_undelivered=True
                    )
                except RemoteError as exc:
                    if exc.code not in ("unavailable", "timeout"):
                        raise
                await anyio.sleep(0.5)

    async def task(self, name: str, key: str) -> Case:
        """A form task of its own (manual trigger), under key `key` on the site."""
        prompt = form_prompt(self.site.form_url(key), key)
        await self.ask(s.TASKS_CREATE, CreateTask(task_id=key, name=name, prompt=prompt), TaskView)
        return Case(name=name, task_id=key, key=key)

    async def start(self, case: Case) -> Case:
        """Run the case's task now; the case records the run and the posts before it."""
        case.posts_before = len(self.site.posts_of(case.key))
        accepted = await self.ask(s.TASKS_RUN, RunTask(task_id=case.task_id), RunAccepted)
        case.run_id = accepted.run_id
        self.cases.append(case)
        return case

    async def compiled(self, task_id: str, version: int = 1, timeout: float = 120.0) -> None:
        """Until the task's executor `version` is compiled."""
        subject = s.executor_event(task_id, "compiled")
        with anyio.fail_after(timeout):
            while True:
                events = [
                    decode(m.data, ExecutorEvent)
                    for m in await read_all(self.bus.js, s.STREAM_EXECUTORS, subject)
                ]
                if any(e.version == version for e in events):
                    return
                await anyio.sleep(0.25)

    async def prepared_replay(self, name: str, key: str) -> Case:
        """A task with executor v1 compiled from one calm full run: its next run replays."""
        case = await self.task(name, key)
        first = await self.start(Case(name=f"{name}:first", task_id=key, key=key))
        ended = await wait_ended(self.bus, first.run_id, RUN_END_S)
        assert ended is not None and ended.event == "completed", ended
        await self.compiled(key)
        self.cases.remove(first)  # not under a fault: not judged with the others
        return case

    async def on_tool(
        self, case: Case, tool: str, event: str, action: Callable[[], object]
    ) -> Hold:
        """Call `action` the moment the tools service publishes `event` (started or
        finished) of a call of `tool` in the case's run: on core NATS, before the
        runner has done much with it. Subscribed now, so call it before the run starts;
        the hold returned has `arrived` once it fired (nothing is held)."""
        fired = Hold("POST", case.key)

        async def on_event(msg: Msg) -> None:
            found = decode(msg.data, ToolEvent)
            if not fired.arrived.is_set() and found.run_id == case.run_id and found.tool == tool:
                action()
                fired.arrived.set()

        sub = await self.bus.nc.subscribe(f"{s.PREFIX}.evt.tool.*.{event}", cb=on_event)
        await routed(self.bus.nc)
        self._subs.append(sub)
        return fired

    async def reached(self, hold: Hold, cases: list[Case], what: str) -> bool:
        """Whether the runs got to the point `hold` waits for. A run that never does
        (it failed before, or a fault before this one took it elsewhere) gets no fault
        there: noted in the report, and the test's count of faults falls short."""
        if await hold.wait_arrived(BOUNDARY_S):
            return True
        hold.release()
        for case in cases:
            case.note = f"never reached {what}: no fault injected there"
        self.faults.notes.append(f"{', '.join(c.name for c in cases)} never reached {what}")
        return False

    # --- faults

    async def runner_of(self, case: Case) -> ServiceProcess | None:
        """The runner process that holds the case's run (its claim); None if no live
        runner of ours holds it within a while."""
        with anyio.move_on_after(BOUNDARY_S):
            return await runner_of(self.services, self.bus, case.run_id)
        self.faults.notes.append(f"{case.name}: no runner of ours holds the run")
        return None

    def kill_runner(self, runner: ServiceProcess | None, where: str) -> None:
        """kill -9 a runner, and start another in its place."""
        if runner is None:
            return
        self.services.kill(runner, signal.SIGKILL)
        self.faults.injected("runner_kill", where)
        self.services.spawn("runner")

    # --- judging

    async def settled(self, timeout: float = RUN_END_S) -> bool:
        """Until every run request on the work queue is delivered and acked, and a
        moment more for a straggling delivery to show itself; False if it never was."""
        with anyio.move_on_after(timeout):
            while True:
                try:
                    info = await self.bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
                    if info.num_pending == 0 and info.num_ack_pending == 0:
                        await anyio.sleep(3)
                        return True
                except Exception:  # NATS away for a moment
                    pass
                await anyio.sleep(0.25)
        return False

    async def verdicts(self) -> list[Verdict]:
        """Judge every case once its run ended (or was given up on as lost: the runs
        are waited for together, within one bound)."""
        ended: dict[str, RunEvent | None] = {}

        async def wait(case: Case) -> None:
            ended[case.run_id] = await wait_ended(self.bus, case.run_id, RUN_END_S)

        async with anyio.create_task_group() as tg:
            for case in self.cases:
                tg.start_soon(wait, case)
        if not await self.settled():
            self.faults.notes.append("the work queue never settled")
        verdicts = []
        for case in self.cases:
            task = await self.ask(s.TASKS_GET, TaskRef(task_id=case.task_id), TaskView)
            posts = len(self.site.posts_of(case.key)) - case.posts_before
            endings = self.watch.endings(case.run_id)
            starts = self.watch.started(case.run_id)
            journal = await journal_of(self.bus, case.run_id)
            if journal is None and NO_JOURNAL not in self.faults.notes:
                self.faults.notes.append(NO_JOURNAL)
            verdicts.append(judge(case, ended[case.run_id], endings, posts, starts, task, journal))
        self.faults.notes.extend(f"service exit: {line}" for line in self.services.exits)
        return verdicts

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self.site.release_all()
        self.model.release_all()
        await self.services.stop_all()
