"""rote-scheduler over real NATS: endpoints (raw `nats req` payloads and malformed ones),
dispatch through the work queue under the concurrency limit, the daily budget, the run
ledger, and recovery after a restart.

The runner is being built elsewhere; here a small stand-in plays it at the bus
boundary: it pulls RunRequests from rote.work.runs and publishes real RunEvents.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import msgspec
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import PubAck

from contracts import subjects as s
from contracts.runs import RunEvent, RunList, RunRequest
from contracts.tasks import RunAccepted, TaskEvent, TaskList, TaskView
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.consumers import durable_config, ensure_consumer
from services.kernel.run_store import RunStore
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.runner.run_view import fold
from services.scheduler.clock import Clock, ManualClock
from services.scheduler.engine import SchedulerConfig
from services.scheduler.service import serve

pytestmark = pytest.mark.anyio
T = TypeVar("T")


@asynccontextmanager
async def scheduler(
    settings: Settings, bus: Bus, *, clock: Clock | None = None, **config: Any
) -> AsyncIterator[None]:
    await ensure_streams(bus.js)
    config.setdefault("tick_s", 0.1)
    config.setdefault("max_concurrent", settings.max_concurrent)
    config.setdefault("daily_budget_usd", settings.daily_budget_usd)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings,
            bus=bus,
            task_group=tg,
            services=("scheduler",),
            nats_url=bus.url,
            embedded_nats=False,
        )
        await tg.start(partial(serve, ctx, clock=clock, config=SchedulerConfig(**config)))
        yield
        tg.cancel_scope.cancel()


class StandInRunner:
    """Plays the runner: takes run requests off the work queue, works `work_s`, reports
    `completed` (with `cost_usd`) or nothing at all (`silent`)."""

    def __init__(self, bus: Bus, *, work_s: float = 0.05, cost_usd: float = 0.0) -> None:
        self.bus = bus
        self.work_s = work_s
        self.cost_usd = cost_usd
        self.silent = False
        self.requests: list[RunRequest] = []
        self.msg_ids: list[str | None] = []  # each request's Nats-Msg-Id, in order
        self.in_flight: set[str] = set()
        self.most_in_flight = 0
        self.completed: list[str] = []

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        await ensure_streams(self.bus.js)
        await ensure_consumer(
            self.bus.js,
            s.STREAM_WORK,
            durable_config("stand-in-runner", filter_subjects=[s.WORK_RUNS]),
        )
        sub = await self.bus.js.pull_subscribe_bind(durable="stand-in-runner", stream=s.STREAM_WORK)
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    try:
                        msgs = await sub.fetch(10, timeout=0.2)
                    except TimeoutError:  # nats' own, or asyncio's for a batch
                        continue
                    for msg in msgs:
                        tg.start_soon(self._work, msg)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.unsubscribe()

    async def _work(self, msg: Msg) -> None:
        request = decode(msg.data, RunRequest)
        await msg.ack()
        self.requests.append(request)
        self.msg_ids.append((msg.headers or {}).get("Nats-Msg-Id"))
        if self.silent:
            return
        self.in_flight.add(request.run_id)
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        started = datetime.now(UTC)
        await self._report(request, "started", started)
        await anyio.sleep(self.work_s)
        self.in_flight.discard(request.run_id)
        self.completed.append(request.task_id)
        await self._report(request, "completed", started)

    async def _report(self, request: RunRequest, event: str, started: datetime) -> None:
        now = datetime.now(UTC)
        done = event == "completed"
        await self.bus.publish_event(
            s.run_event(request.task_id, request.run_id, event),  # type: ignore[arg-type]
            RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event=event,  # type: ignore[arg-type]
                at=now,
                status="completed" if done else "running",
                source="executor" if done else None,
                executor_version=2 if done else None,
                cost_usd=self.cost_usd if done else 0.0,
                cost_saved_usd=0.05 if done else 0.0,
                duration_ms=int((now - started).total_seconds() * 1000) if done else None,
            ),
            msg_id=f"{request.run_id}:{event}",
        )


async def _runner_says(
    bus: Bus, task_id: str, run_id: str, event: Literal["started", "completed"]
) -> PubAck:
    """A runner's own run event, under the runner's Nats-Msg-Id (`finished` for its
    ending, which the scheduler's terminal event shares)."""
    started = event == "started"
    return await bus.publish_event(
        s.run_event(task_id, run_id, event),
        RunEvent(
            task_id=task_id,
            run_id=run_id,
            event=event,
            at=datetime.now(UTC),
            status="running" if started else "completed",
        ),
        msg_id=f"{run_id}:{'started' if started else 'finished'}",
    )


async def call(bus: Bus, subject: str, body: bytes | dict[str, Any]) -> tuple[dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await bus.nc.request(subject, data, timeout=5)
    return dict(msg.headers or {}), json.loads(msg.data)


async def ok(bus: Bus, subject: str, body: bytes | dict[str, Any], type_: type[T]) -> T:
    headers, reply = await call(bus, subject, body)
    assert "Nats-Service-Error" not in headers, reply
    return msgspec.convert(reply, type_)


async def stream_events(
    bus: Bus, subject: str, type_: type[T], count: int, timeout: float = 10
) -> list[T]:
    """The first `count` events on `subject`, read from its stream from the start."""
    sub = await bus.js.subscribe(subject, ordered_consumer=True)
    found: list[T] = []
    try:
        with anyio.fail_after(timeout):
            while len(found) < count:
                try:
                    msg = await sub.next_msg(timeout=timeout)
                except nats.errors.TimeoutError:
                    break
                found.append(decode(msg.data, type_))
    finally:
        await sub.unsubscribe()
    return found


async def stream_count(bus: Bus, stream: str, subject: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def eventually(check: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not await check():
            await anyio.sleep(0.05)


# --- endpoints -----------------------------------------------------------------------------

NATS_REQ_CREATE = (
    b'{"name": "ACME price", "prompt": "Open https://acme.test and read the price",'
    b' "trigger": {"kind": "interval", "every_s": 2},'
    b' "allowed_tools": ["browser_navigate", "browser_extract"], "deadline_s": 120}'
)


async def test_a_task_created_with_a_raw_nats_req_payload_runs_on_its_schedule(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus, cost_usd=0.01)
    async with scheduler(settings, bus), anyio.create_task_group() as tg:
        await tg.start(runner.run)
        view = await ok(bus, s.TASKS_CREATE, NATS_REQ_CREATE, TaskView)
        assert view.task_id == "acme-price" and view.status == "active"
        assert view.spec.model == "sonnet" and view.spec.max_failures == 3

        # Runs at once, then again every 2 s, each through the work queue and the runner.
        # The slots are fixed (its creation, then every 2 s); a busy machine only sends a
        # run out late, never before its slot, so no gap between two dispatches is fixed.
        every = timedelta(seconds=2)
        assert view.next_due_at == view.created_at
        await eventually(lambda: _ran(runner, 2), timeout=30)
        first, second = runner.requests[:2]
        # `catch_up` when the first went out past the second slot (a very busy machine).
        assert first.origin in ("schedule", "catch_up") and first.spec.prompt == view.spec.prompt
        assert first.requested_at >= view.created_at
        assert second.requested_at >= view.created_at + every
        # Between runs the task is due at a later slot of the same schedule, at least
        # one per run sent out (a late run uses up every slot passed by then).
        between: list[TaskView] = []

        async def between_runs() -> bool:
            between[:] = [await ok(bus, s.TASKS_GET, {"task_id": "acme-price"}, TaskView)]
            return between[0].run_in_flight is None and between[0].runs_dispatched >= 2

        await eventually(between_runs)
        assert between[0].next_due_at is not None
        slots, off_slot = divmod(between[0].next_due_at - view.created_at, every)
        assert off_slot == timedelta(0) and slots >= between[0].runs_dispatched
        # Each request is de-duplicated by its run_id: a resend of one is stored once.
        assert runner.msg_ids[:2] == [first.run_id, second.run_id]

        requested = await stream_events(
            bus, s.run_events_of("acme-price", first.run_id, "requested"), RunEvent, 1
        )
        assert requested[0].status == "requested" and requested[0].spec == view.spec
        events = await stream_events(bus, s.task_event("acme-price", "*"), TaskEvent, 3)
        assert [e.event for e in events] == ["defined", "run_dispatched", "run_started"]

        async def ledger_has_both() -> bool:
            runs = await ok(bus, s.RUNS_LIST, {"task_id": "acme-price"}, RunList)
            return [r.status for r in runs.runs][-2:] == ["completed", "completed"]

        await eventually(ledger_has_both)
        # Runs go on every 2 s meanwhile: a page big enough to reach back to the first.
        runs = (
            await ok(bus, s.RUNS_LIST, b'{"task_id": "acme-price", "limit": 1000}', RunList)
        ).runs
        oldest = runs[-1]
        assert oldest.run_id == first.run_id
        assert (oldest.source, oldest.executor_version, oldest.origin) == (
            "executor",
            2,
            first.origin,
        )
        assert oldest.cost_usd == 0.01 and oldest.cost_saved_usd == 0.05
        # The duration the runner reported, not one the ledger made up.
        (completed,) = await stream_events(
            bus, s.run_events_of("acme-price", first.run_id, "completed"), RunEvent, 1
        )
        assert oldest.duration_ms is not None and oldest.duration_ms == completed.duration_ms
        assert oldest.requested_at and oldest.started_at and oldest.finished_at
        tg.cancel_scope.cancel()


async def test_a_run_in_flight_is_the_tasks_last_run_with_its_own_status(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus)

    async def last_run(task_id: str = "shown") -> tuple[str | None, str | None]:
        view = await ok(bus, s.TASKS_GET, {"task_id": task_id}, TaskView)
        return view.last_run_id, view.last_run_status

    async with scheduler(settings, bus), anyio.create_task_group() as tg:
        await tg.start(runner.run)
        await ok(bus, s.TASKS_CREATE, {"name": "shown", "prompt": "p"}, TaskView)
        first = await ok(bus, s.TASKS_RUN, {"task_id": "shown"}, RunAccepted)

        async def first_done() -> bool:
            return await last_run() == (first.run_id, "completed")

        await eventually(first_done)
        runner.silent = True  # takes the next run and says nothing yet
        second = await ok(bus, s.TASKS_RUN, {"task_id": "shown"}, RunAccepted)
        await eventually(lambda: _requested(runner, 2))
        # Not the previous run's "completed" beside the new run's id.
        assert await last_run() == (second.run_id, "requested")

        await _runner_says(bus, "shown", second.run_id, "started")

        async def running() -> bool:
            return await last_run() == (second.run_id, "running")

        await eventually(running)
        tg.cancel_scope.cancel()


async def _ran(runner: StandInRunner, n: int) -> bool:
    return len(runner.completed) >= n


async def test_task_endpoints_reply_with_the_task(settings: Settings, bus: Bus) -> None:
    async with scheduler(settings, bus):
        body = {
            "name": "Report",
            "prompt": "p",
            "trigger": {"kind": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Paris"},
        }
        created = await ok(bus, s.TASKS_CREATE, body, TaskView)
        assert created.next_due_at is not None and created.next_due_at.minute == 0
        got = await ok(bus, s.TASKS_GET, {"task_id": "report"}, TaskView)
        assert got == created
        updated = await ok(bus, s.TASKS_UPDATE, {"task_id": "report", "max_failures": 5}, TaskView)
        assert updated.spec.max_failures == 5 and updated.version == 2
        paused = await ok(bus, s.TASKS_PAUSE, {"task_id": "report", "reason": "holiday"}, TaskView)
        assert (paused.status, paused.status_reason) == ("paused", "holiday")
        assert (await ok(bus, s.TASKS_RESUME, {"task_id": "report"}, TaskView)).status == "active"
        accepted = await ok(bus, s.TASKS_RUN, {"task_id": "report"}, RunAccepted)
        assert accepted.task_id == "report" and accepted.run_id
        # The work queue gets the run that was asked for. (Before the delete below: a
        # task deleted before its queued run goes out skips that run.)
        await eventually(lambda: _has(bus, s.STREAM_WORK, s.WORK_RUNS, 1))
        listed = await ok(bus, s.TASKS_LIST, b"", TaskList)
        assert [t.task_id for t in listed.tasks] == ["report"]
        deleted = await ok(bus, s.TASKS_DELETE, {"task_id": "report"}, TaskView)
        assert deleted.status == "deleted"
        assert (await ok(bus, s.TASKS_LIST, {}, TaskList)).tasks == []
        assert len((await ok(bus, s.TASKS_LIST, {"status": "deleted"}, TaskList)).tasks) == 1


async def test_task_replies_mask_a_password_in_the_spec_as_task_events_do(
    settings: Settings, bus: Bus
) -> None:
    prompt = "Check https://deploy:hunter2pw@status.example.com/health and report"
    body = {
        "task_id": "status",
        "name": "status via https://deploy:hunter2pw@status.example.com",
        "prompt": prompt,
        "trigger": {
            "kind": "condition",
            "tool": "browser_read_page",
            "input": {},
            "url": "https://deploy:hunter2pw@status.example.com/health",
            "predicate": {"op": "contains", "text": "down"},
            "every_s": 3600,
        },
    }
    async with scheduler(settings, bus):
        replies = [
            (await call(bus, s.TASKS_CREATE, body))[1],
            (await call(bus, s.TASKS_GET, {"task_id": "status"}))[1],
            (await call(bus, s.TASKS_LIST, {}))[1]["tasks"][0],
            (await call(bus, s.TASKS_PAUSE, {"task_id": "status"}))[1],
        ]
        (defined,) = await stream_events(bus, s.task_event("status", "defined"), TaskEvent, 1)
    assert defined.spec is not None
    for reply in replies:
        assert "hunter2pw" not in json.dumps(reply)
        # Shown as the task's events show it, masked where the secret stood.
        assert msgspec.convert(reply["spec"], type=type(defined.spec)) == defined.spec
    assert "https://deploy:[redacted]@status.example.com/health" in replies[1]["spec"]["prompt"]


async def _has(bus: Bus, stream: str, subject: str, n: int) -> bool:
    return await stream_count(bus, stream, subject) >= n


MALFORMED = [
    (b"{not json", "malformed", None),
    (b'{"colour": "red"}', "invalid_request", "colour"),
    (b"[1, 2]", "invalid_request", None),
]


async def test_malformed_requests_to_every_endpoint_get_structured_errors(
    settings: Settings, bus: Bus
) -> None:
    endpoints = [
        s.TASKS_CREATE,
        s.TASKS_UPDATE,
        s.TASKS_PAUSE,
        s.TASKS_RESUME,
        s.TASKS_DELETE,
        s.TASKS_RUN,
        s.TASKS_GET,
        s.TASKS_LIST,
        s.RUNS_LIST,
    ]

    def create(**fields: Any) -> dict[str, Any]:
        return {"name": "a", "prompt": "b", **fields}

    cron = {"kind": "cron", "expr": "0 9 * * *"}
    cron_x = {**cron, "expr": "x"}
    fast = {"kind": "interval", "every_s": 0.1}
    bad = "invalid_request"
    specific = [
        (s.TASKS_CREATE, create(trigger={**cron, "expr": "61 * * *"}), "400", bad, "trigger.expr"),
        (s.TASKS_CREATE, create(trigger={**cron, "tz": "Mars/Base"}), "400", bad, "trigger.tz"),
        (s.TASKS_CREATE, create(trigger=fast), "400", bad, "trigger.every_s"),
        (s.TASKS_CREATE, create(trigger={"kind": "weekly"}), "400", bad, "trigger.kind"),
        (s.TASKS_CREATE, create(task_id="has.dot"), "400", bad, "task_id"),
        (s.TASKS_CREATE, {"prompt": "b"}, "400", bad, "name"),
        (s.TASKS_CREATE, create(trigger={"kind": "cron"}), "400", bad, "trigger.expr"),
        (s.TASKS_UPDATE, {"task_id": "nope", "prompt": "x"}, "404", "not_found", "task_id"),
        (s.TASKS_UPDATE, {"task_id": "known", "trigger": cron_x}, "400", bad, "trigger.expr"),
        (s.TASKS_GET, {"task_id": "nope"}, "404", "not_found", "task_id"),
        (s.TASKS_RUN, {"task_id": "nope"}, "404", "not_found", "task_id"),
        (s.TASKS_PAUSE, {"task_id": "nope"}, "404", "not_found", "task_id"),
        (s.TASKS_CREATE, {"name": "known", "prompt": "other"}, "409", "conflict", "task_id"),
        (s.TASKS_LIST, {"status": "sleeping"}, "400", bad, "status"),
        (s.RUNS_LIST, {"limit": 0}, "400", bad, "limit"),
    ]  # fmt: skip
    async with scheduler(settings, bus):
        await ok(bus, s.TASKS_CREATE, {"name": "known", "prompt": "p"}, TaskView)
        cases = [
            (subject, body, None, code, field)
            for subject in endpoints
            for body, code, field in MALFORMED
        ]
        for subject, body, status, code, field in [*cases, *specific]:
            headers, reply = await call(bus, subject, body)
            assert headers.get("Nats-Service-Error"), (subject, body, reply)
            if status:
                assert headers["Nats-Service-Error-Code"] == status, (subject, body, reply)
            assert reply["error"]["code"] == code, (subject, body, reply)
            assert reply["error"].get("field") == field, (subject, body, reply)
            # Still serving, and the bad request changed nothing.
            known = await ok(bus, s.TASKS_GET, {"task_id": "known"}, TaskView)
            assert known.version == 1 and known.spec.prompt == "p"


# --- dispatch limits ------------------------------------------------------------------------


async def test_twenty_due_tasks_never_more_than_two_in_flight_and_all_run(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus, work_s=0.1)
    async with scheduler(settings, bus, max_concurrent=2), anyio.create_task_group() as tg:
        await tg.start(runner.run)
        for i in range(20):
            body = {
                "name": f"task {i:02d}",
                "prompt": "p",
                "trigger": {"kind": "interval", "every_s": 3600},
            }
            await ok(bus, s.TASKS_CREATE, body, TaskView)
        await eventually(lambda: _ran(runner, 20), timeout=30)
        await anyio.sleep(0.5)  # anything more would show up now
        assert sorted(runner.completed) == [f"task-{i:02d}" for i in range(20)]
        assert runner.most_in_flight == 2
        assert len(runner.requests) == 20
        assert await stream_count(bus, s.STREAM_RUNS, s.run_events_of(event="requested")) == 20

        async def all_finished() -> bool:  # the scheduler hears of the last a moment later
            tasks = (await ok(bus, s.TASKS_LIST, {}, TaskList)).tasks
            assert all(t.runs_dispatched == 1 for t in tasks)
            return all(t.run_in_flight is None for t in tasks)

        await eventually(all_finished)
        tg.cancel_scope.cancel()


async def test_over_budget_the_next_due_run_is_skipped_with_an_event(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus, cost_usd=0.6)
    async with scheduler(settings, bus, daily_budget_usd=1.0), anyio.create_task_group() as tg:
        await tg.start(runner.run)
        body = {"name": "spender", "prompt": "p", "trigger": {"kind": "interval", "every_s": 1}}
        await ok(bus, s.TASKS_CREATE, body, TaskView)
        (skipped,) = await stream_events(
            bus, s.task_event("spender", "run_skipped"), TaskEvent, 1, timeout=15
        )
        assert len(runner.completed) == 2  # 0.6 + 0.6 reached the 1.0 budget
        assert skipped.reason is not None and "daily budget reached" in skipped.reason
        assert "$1.2000" in skipped.reason and skipped.origin == "schedule"
        headers, reply = await call(bus, s.TASKS_RUN, {"task_id": "spender"})
        assert headers["Nats-Service-Error-Code"] == "402"
        assert reply["error"]["code"] == "over_budget"
        assert len(runner.requests) == 2
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(("budget", "shown"), [(0.0, "0.0"), (2.5, "2.5"), (None, "")])
async def test_micro_info_shows_the_daily_budget_a_zero_one_too(
    settings: Settings, bus: Bus, budget: float | None, shown: str
) -> None:
    # ROTE_DAILY_BUDGET_USD=0 lets nothing run: shown as "" it would read as unlimited.
    async with scheduler(settings, bus, daily_budget_usd=budget):
        reply = await bus.nc.request("$SRV.INFO.rote-scheduler", b"", timeout=2)
        assert json.loads(reply.data)["metadata"]["daily_budget_usd"] == shown


# --- recovery ---------------------------------------------------------------------------------


async def test_restart_with_a_run_past_its_deadline_marks_it_abandoned(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    settings = settings.with_(event_store="sqlite", data_dir=tmp_path / "persistent")
    clock = ManualClock(datetime.now(UTC))
    runner = StandInRunner(bus)
    runner.silent = True  # takes the run and dies: no outcome ever
    async with anyio.create_task_group() as tg:
        await tg.start(runner.run)
        async with scheduler(settings, bus, clock=clock, grace_s=30):
            body = {"name": "doomed", "prompt": "p", "deadline_s": 60}
            await ok(bus, s.TASKS_CREATE, body, TaskView)
            accepted = await ok(bus, s.TASKS_RUN, {"task_id": "doomed"}, RunAccepted)
            await eventually(lambda: _requested(runner, 1))
        # Down for longer than deadline + grace.
        clock.advance(91)
        async with scheduler(settings, bus, clock=clock, grace_s=30):
            (failed,) = await stream_events(
                bus, s.run_event("doomed", accepted.run_id, "failed"), RunEvent, 1
            )
            assert (failed.status, failed.reason) == ("failed", "abandoned")
            assert failed.error is not None and "deadline_s=60" in failed.error
            view = await ok(bus, s.TASKS_GET, {"task_id": "doomed"}, TaskView)
            assert view.run_in_flight is None and view.last_run_status == "failed"
            (run,) = (await ok(bus, s.RUNS_LIST, {"task_id": "doomed"}, RunList)).runs
            assert (run.run_id, run.status, run.reason) == (accepted.run_id, "failed", "abandoned")
            # The slot is free again.
            runner.silent = False
            await ok(bus, s.TASKS_RUN, {"task_id": "doomed"}, RunAccepted)
            await eventually(lambda: _ran(runner, 1))
        tg.cancel_scope.cancel()


async def test_a_running_scheduler_abandons_a_lost_run_with_its_terminal_event(
    settings: Settings, bus: Bus
) -> None:
    clock = ManualClock(datetime.now(UTC))
    runner = StandInRunner(bus)
    runner.silent = True  # takes the run and is never heard of again
    async with anyio.create_task_group() as tg:
        await tg.start(runner.run)
        async with scheduler(settings, bus, clock=clock, grace_s=30):
            await ok(
                bus, s.TASKS_CREATE, {"name": "lost", "prompt": "p", "deadline_s": 60}, TaskView
            )
            accepted = await ok(bus, s.TASKS_RUN, {"task_id": "lost"}, RunAccepted)
            await eventually(lambda: _requested(runner, 1))
            # No restart: the ticking scheduler notices the run outlived deadline + grace.
            clock.advance(91)
            subject = s.run_event("lost", accepted.run_id, "failed")
            (failed,) = await stream_events(bus, subject, RunEvent, 1)
            assert (failed.status, failed.reason) == ("failed", "abandoned")
            # It is the run's one terminal event: the runner's own completion shares its
            # Nats-Msg-Id, so a late one is dropped and runs.get agrees with runs.list.
            stored = await bus.js.get_last_msg(s.STREAM_RUNS, subject)
            assert (stored.headers or {}).get("Nats-Msg-Id") == f"{accepted.run_id}:finished"
            ack = await _runner_says(bus, "lost", accepted.run_id, "completed")
            assert ack.duplicate
            view = fold(await RunStore(bus).events(accepted.run_id))
            assert view is not None and (view.status, view.reason) == ("failed", "abandoned")
            (run,) = (await ok(bus, s.RUNS_LIST, {"task_id": "lost"}, RunList)).runs
            assert (run.status, run.reason) == ("failed", "abandoned")
            # One lost run does not block its task: the next one goes out.
            runner.silent = False
            await ok(bus, s.TASKS_RUN, {"task_id": "lost"}, RunAccepted)
            await eventually(lambda: _ran(runner, 1))
        tg.cancel_scope.cancel()


async def test_a_queued_run_a_pause_skips_ends_with_its_own_terminal_event(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus)
    runner.silent = True  # the first run stays in flight: the second one waits
    async with anyio.create_task_group() as tg:
        await tg.start(runner.run)
        async with scheduler(settings, bus):
            await ok(bus, s.TASKS_CREATE, {"name": "held", "prompt": "p"}, TaskView)
            await ok(bus, s.TASKS_RUN, {"task_id": "held"}, RunAccepted)
            await eventually(lambda: _requested(runner, 1))
            queued = await ok(bus, s.TASKS_RUN, {"task_id": "held"}, RunAccepted)
            assert queued.queued
            await ok(bus, s.TASKS_PAUSE, {"task_id": "held", "reason": "holiday"}, TaskView)
            # Whoever asked for it and waits on its subject hears that it ended, and why.
            subject = s.run_event("held", queued.run_id, "failed")
            (ended,) = await stream_events(bus, subject, RunEvent, 1)
            assert (ended.status, ended.reason, ended.origin) == ("failed", "skipped", "manual")
            assert ended.error is not None and "holiday" in ended.error
            view = fold(await RunStore(bus).events(queued.run_id))
            assert view is not None and (view.status, view.reason) == ("failed", "skipped")
            assert len(runner.requests) == 1  # it never went out
        tg.cancel_scope.cancel()


async def test_a_queued_run_is_found_by_runs_get_and_runs_list_before_it_goes_out(
    settings: Settings, bus: Bus
) -> None:
    runner = StandInRunner(bus)
    runner.silent = True  # the first run stays in flight: the second one waits
    async with anyio.create_task_group() as tg:
        await tg.start(runner.run)
        async with scheduler(settings, bus):
            await ok(bus, s.TASKS_CREATE, {"name": "held", "prompt": "p"}, TaskView)
            first = await ok(bus, s.TASKS_RUN, {"task_id": "held"}, RunAccepted)
            await eventually(lambda: _requested(runner, 1))
            queued = await ok(bus, s.TASKS_RUN, {"task_id": "held"}, RunAccepted)
            assert queued.queued

            # The run_id the asker holds names a run at once, as runs.get reads it.
            async def found() -> bool:
                return fold(await RunStore(bus).events(queued.run_id)) is not None

            await eventually(found)
            view = fold(await RunStore(bus).events(queued.run_id))
            assert view is not None and (view.status, view.origin) == ("requested", "manual")
            runs = (await ok(bus, s.RUNS_LIST, {"task_id": "held"}, RunList)).runs
            assert [(r.run_id, r.status) for r in runs] == [
                (queued.run_id, "requested"),
                (first.run_id, "requested"),
            ]
            assert runs[0].requested_at is not None and runs[0].origin == "manual"

            # Once the first run ends, it goes out: still one `requested` event of it.
            await _runner_says(bus, "held", first.run_id, "completed")
            await eventually(lambda: _requested(runner, 2))
            assert runner.requests[1].run_id == queued.run_id
            requested = s.run_events_of("held", queued.run_id, "requested")
            assert await stream_count(bus, s.STREAM_RUNS, requested) == 1
        tg.cancel_scope.cancel()


async def _requested(runner: StandInRunner, n: int) -> bool:
    return len(runner.requests) >= n


async def test_recorded_events_reach_the_bus_once_across_restarts(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    settings = settings.with_(event_store="sqlite", data_dir=tmp_path / "persistent")
    async with scheduler(settings, bus):
        await ok(bus, s.TASKS_CREATE, {"name": "a", "prompt": "p"}, TaskView)
        await ok(bus, s.TASKS_PAUSE, {"task_id": "a"}, TaskView)
    async with scheduler(settings, bus):
        await ok(bus, s.TASKS_RESUME, {"task_id": "a"}, TaskView)
        events = await stream_events(bus, s.task_event("a", "*"), TaskEvent, 3)
        assert [(e.event, e.version) for e in events] == [
            ("defined", 1),
            ("paused", 2),
            ("resumed", 3),
        ]
        await anyio.sleep(0.3)
        assert await stream_count(bus, s.STREAM_TASKS, s.task_event("a", "*")) == 3
