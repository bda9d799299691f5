"""rote-scheduler on NATS: task endpoints, the durable task intake, run outcomes in, and
recorded task events (plus run requests) out through the store's notification log.

    rote.api.tasks.create|update|pause|resume|delete|run|get|list   micro endpoints
    rote.api.runs.list                                              the run ledger
    rote.api.runs.start                     one run of an inline spec (adhoc.py)
    rote.intake.tasks.<verb>        durable, in order; refusals on rote.evt.task.rejected
    rote.evt.run.*.*.{started,completed,failed}    durable; outcomes free the slots
    rote.evt.task.<task_id>.<event>, rote.evt.run.<task>.<run>.requested, rote.work.runs
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import anyio
import msgspec
import nats.errors
from anyio.abc import TaskGroup, TaskStatus
from eventsourcing.persistence import Notification, PersistenceError
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.micro.service import Service

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ExecutorEvent
from contracts.runs import ListRuns, RunEvent, StartRun
from contracts.tasks import (
    CreateTask,
    ListTasks,
    RunTask,
    TaskRef,
    TaskRejected,
    UpdateTask,
)
from services import __version__
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode
from services.kernel.consumers import (
    RESTORE_BACKOFF_S,
    consume,
    describe_fetch_error,
    durable_config,
    ensure_consumer,
    replace_lost,
)
from services.kernel.endpoints import Endpoint, Handler, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env, open_application
from services.kernel.lease import Lease, LeaseLost
from services.kernel.logs import get_logger
from services.kernel.pricing import PriceTable, PriceTableError, load_price_table
from services.kernel.relay import EventRelay
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import redact, redact_value
from services.kernel.streams import KV_TTL_S
from services.scheduler.adhoc import AdHocRuns
from services.scheduler.application import Tasks
from services.scheduler.clock import Clock, SystemClock
from services.scheduler.condition_probe import ToolsProbe
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task

log = get_logger("rote.scheduler")

INTAKE_PREFIX = s.intake_task("")
# A command that keeps failing for reasons other than its content (a bug, a store that
# stays down) is refused after this many deliveries rather than blocking the intake.
MAX_INTAKE_DELIVERIES = 5
# How much of a refused command its rejection event shows.
MAX_REJECTED_PAYLOAD_CHARS = 64 * 1024
BACKLOG_WAIT_S = 10.0


class SchedulerRelay(EventRelay):
    """The kernel relay, fanning each recorded Task event out to several messages
    (see outbox.py), each with its own Nats-Msg-Id (a run request's is its run_id)."""

    def __init__(self, app: Tasks, bus: Bus, *, name: str = "scheduler") -> None:
        super().__init__(app, bus, lambda _: None, name=name)
        self._task_ids: dict[uuid.UUID, str] = {}

    async def _task_id(self, aggregate_id: uuid.UUID) -> str | None:
        """The task_id of a Task aggregate (None: its events cannot be read). A store
        briefly away raises: the relay keeps its position and tries this event again,
        where passing it over would lose a run request for good."""
        task_id = self._task_ids.get(aggregate_id)
        if task_id is None:
            try:
                task: Task = await anyio.to_thread.run_sync(self.app.repository.get, aggregate_id)
            except (PersistenceError, OSError):
                raise
            except Exception:
                log.exception("relay_task_unreadable", aggregate_id=str(aggregate_id))
                return None
            task_id = self._task_ids[aggregate_id] = task.task_id
        return task_id

    async def _publish(self, notification: Notification) -> None:
        try:
            domain_event: Any = self.app.mapper.to_domain_event(notification)
        except Exception:
            # An event this code can no longer read must not block every later one.
            log.exception("relay_convert_failed", notification_id=notification.id)
            return
        if not isinstance(domain_event, Task.Event):
            return
        if isinstance(domain_event, Task.Defined):
            self._task_ids[domain_event.originator_id] = domain_event.event.task_id
        task_id = await self._task_id(domain_event.originator_id)
        if task_id is None:
            return
        try:
            messages = messages_for(domain_event, task_id)
        except Exception:
            log.exception("relay_convert_failed", notification_id=notification.id)
            return
        for message in messages:
            # One message too large for the bus is left out, not retried forever.
            await self.send(notification, message.subject, message.event, msg_id=message.msg_id)


def shown_payload(data: bytes) -> str:
    """A refused command's payload as its rejection shows it: secrets masked. JSON is
    masked value by value, as task events mask the spec: its text may hide a secret
    behind escapes (Go writes `&` as \\u0026, PHP `/` as \\/) that text masking misses.
    Written again only when that masked something; otherwise the text as sent."""
    text = data.decode("utf-8", errors="replace")
    try:
        value = decode(data, Any)
        masked = redact_value(value)
        if masked != value:
            text = encode(masked).decode()
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass  # not JSON, or nested too deep to walk: masked as text only
    return redact(text)


def intake_key(msg: Msg) -> str:
    """The idempotency key of an intake command: its Nats-Msg-Id, else its place in the
    stream and the time it was stored, so a command sent by a plain `nats pub` is still
    applied once when it is redelivered (the scheduler stopped after applying it, before
    its ack)."""
    msg_id = (msg.headers or {}).get(s.HEADER_MSG_ID)
    return msg_id or stored_at(msg)


def stored_at(msg: Msg) -> str:
    """An intake message's place in the stream and the time it was stored: the same for
    each delivery of it; the time tells apart commands of a stream recreated from
    sequence 1."""
    meta = msg.metadata
    return f"{s.STREAM_INTAKE}:{meta.sequence.stream}:{meta.timestamp.isoformat()}"


def _intake_consumer() -> ConsumerConfig:
    """One command at a time, in stream order: max_ack_pending=1 means a command being
    retried holds back the ones behind it, never reorders them."""
    return durable_config(
        s.CONSUMER_SCHEDULER_INTAKE,
        filter_subjects=[s.INTAKE_TASKS_ALL],
        max_deliver=-1,
        max_ack_pending=1,
    )


def _runs_consumer() -> ConsumerConfig:
    return durable_config(
        s.CONSUMER_SCHEDULER_RUNS,
        filter_subjects=[
            s.run_events_of(event="started"),
            s.run_events_of(event="completed"),
            s.run_events_of(event="failed"),
        ],
    )


async def _unsubscribe(sub: Subscription | JetStreamContext.PullSubscription) -> None:
    try:
        await sub.unsubscribe()
    except Exception as exc:  # already gone with the connection
        log.debug("unsubscribe_failed", error=str(exc))


class SchedulerService:
    """The scheduler while it holds the lease: its engine over the task store, the relay
    out of that store, and what comes in (endpoints, the intake, run outcomes, executor
    hints)."""

    def __init__(self, bus: Bus, app: Tasks, clock: Clock, config: SchedulerConfig) -> None:
        self.bus = bus
        self.app = app
        self.config = config
        self.relay = SchedulerRelay(app, bus)
        self.engine = Scheduler(
            app,
            clock,
            config,
            probe=ToolsProbe(bus),
            on_saved=self.relay.wake,
        )
        self.adhoc = AdHocRuns(bus, app.prices)

    async def run(
        self,
        service_group: TaskGroup,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled; the micro service's requests run in `service_group`."""
        await anyio.to_thread.run_sync(self.app.catalog.catch_up)
        hints = await self._subscribe_hints()
        async with anyio.create_task_group() as tg:
            await self._recover(tg)
            await tg.start(self.run_intake)
            service = await self._start_service(service_group)
            tg.start_soon(self.engine.run_ticks)
            tg.start_soon(self.engine.run_condition_checks)
            log.info(
                "scheduler_started",
                tasks=len(self.app.catalog.tasks),
                max_concurrent=self.config.max_concurrent,
                daily_budget_usd=self.config.daily_budget_usd,
            )
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                await stop_service(service)
                with anyio.CancelScope(shield=True):
                    for sub in hints:
                        await _unsubscribe(sub)

    async def _recover(self, tg: TaskGroup) -> None:
        """The relay and the run outcomes first; recovery once the outcomes that arrived
        while no scheduler ran are recorded, so that it judges no finished run
        abandoned."""
        await tg.start(self.relay.run)
        await tg.start(
            partial(
                consume,
                self.bus.js,
                stream=s.STREAM_RUNS,
                config=_runs_consumer(),
                type_=RunEvent,
                handler=self.on_run_event,
            )
        )
        await self._wait_for_backlog(s.STREAM_RUNS, s.CONSUMER_SCHEDULER_RUNS)
        await self.engine.tick()  # recovery first, before anyone can ask for anything

    async def _wait_for_backlog(self, stream: str, consumer: str) -> None:
        with anyio.move_on_after(BACKLOG_WAIT_S):
            while True:
                info = await self.bus.js.consumer_info(stream, consumer)
                if not info.num_pending and not info.num_ack_pending:
                    return
                await anyio.sleep(0.05)
        log.warning("run_backlog_not_drained", waited_s=BACKLOG_WAIT_S)

    async def _start_service(self, service_group: TaskGroup) -> Service:
        config = self.config
        return await start_service(
            self.bus,
            name="rote-scheduler",
            version=__version__,
            description="Tasks, their triggers, and the dispatch of their runs",
            endpoints=self.endpoints(),
            task_group=service_group,
            metadata={
                "max_concurrent": str(config.max_concurrent),
                # "" is unlimited; a budget of 0 (nothing runs) is shown as such.
                "daily_budget_usd": (
                    "" if config.daily_budget_usd is None else str(config.daily_budget_usd)
                ),
            },
        )

    # --- run outcomes and executor hints ------------------------------------------------

    async def on_run_event(self, event: RunEvent, msg: Msg) -> None:
        await self.engine.on_run_event(event)

    async def _subscribe_hints(self) -> list[Subscription]:
        # A hint, not a record (core NATS): missed, the task waits compile_wait_s.
        return [
            await self.bus.nc.subscribe(s.executor_event("*", name), cb=self.on_executor_event)
            for name in ("compiled", "skipped")
        ]

    async def on_executor_event(self, msg: Msg) -> None:
        try:
            event = decode(msg.data, ExecutorEvent)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("executor_event_unreadable", error=str(exc))
            return
        self.engine.on_executor_event(event.task_id, event.run_id)

    # --- the intake ---------------------------------------------------------------------

    async def run_intake(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        config = _intake_consumer()
        await ensure_consumer(self.bus.js, s.STREAM_INTAKE, config)
        sub = await self.bus.js.pull_subscribe_bind(
            durable=s.CONSUMER_SCHEDULER_INTAKE, stream=s.STREAM_INTAKE
        )
        task_status.started()
        backoff = RESTORE_BACKOFF_S[0]
        try:
            while True:
                try:
                    msgs = await sub.fetch(1, timeout=2.0)
                except nats.errors.TimeoutError:
                    continue  # nothing to do
                except (
                    nats.errors.ConnectionClosedError,
                    nats.errors.ConnectionReconnectingError,
                ):
                    await anyio.sleep(0.5)
                    continue
                except Exception as exc:  # the consumer (or its stream) is gone: put it back
                    problem = describe_fetch_error(exc)
                    restored = await replace_lost(
                        self.bus.js, s.STREAM_INTAKE, config, sub, problem, backoff
                    )
                    backoff = min(backoff * 2, RESTORE_BACKOFF_S[1])
                    if restored is not None:
                        sub = restored
                    continue
                backoff = RESTORE_BACKOFF_S[0]
                for msg in msgs:
                    try:
                        await self._intake_one(msg)
                    except Exception as exc:  # NATS away while settling: redelivered later
                        log.warning("intake_settle_failed", error=str(exc))
        finally:
            with anyio.CancelScope(shield=True):
                await _unsubscribe(sub)

    async def _intake_one(self, msg: Msg) -> None:
        verb = msg.subject.removeprefix(INTAKE_PREFIX)
        msg_id = (msg.headers or {}).get(s.HEADER_MSG_ID)
        try:
            await self.engine.handle(verb, msg.data, key=intake_key(msg))
        except ServiceError as exc:
            await self._reject(msg, verb, exc, msg_id)
        except Exception as exc:
            if msg.metadata.num_delivered < MAX_INTAKE_DELIVERIES:
                log.warning("intake_retry", verb=verb, error=str(exc)[:500])
                await msg.nak(delay=1.0 * msg.metadata.num_delivered)
                return
            log.exception("intake_gave_up", verb=verb)
            error = ServiceError("internal", f"could not apply {verb}: {exc}")
            await self._reject(msg, verb, error, msg_id)
        await msg.ack()

    async def _reject(self, msg: Msg, verb: str, error: ServiceError, msg_id: str | None) -> None:
        # Bounded: a payload near the 1 MB limit, escaped into JSON, would not fit in the
        # rejection, which could then never be published, holding the intake up for good.
        payload = shown_payload(msg.data)
        rejected = TaskRejected(
            verb=verb,
            error=error.info(),
            payload=payload[:MAX_REJECTED_PAYLOAD_CHARS],
            payload_truncated=len(payload) > MAX_REJECTED_PAYLOAD_CHARS,
            at=utc_now(),
            msg_id=msg_id,
        )
        # Keyed by the intake message, so a redelivered command is not refused twice.
        await self.bus.publish_event(s.TASK_REJECTED, rejected, msg_id=f"rejected:{stored_at(msg)}")
        log.info("intake_rejected", verb=verb, code=error.code, field=error.field)

    # --- endpoints ----------------------------------------------------------------------

    def endpoints(self) -> list[Endpoint]:
        engine = self.engine

        def ep(
            name: str, subject: str, request: type[msgspec.Struct], handler: Handler, text: str
        ) -> Endpoint:
            return Endpoint(name, subject, request, handler, concurrent=True, description=text)

        return [
            ep("tasks_create", s.TASKS_CREATE, CreateTask, engine.create, "define a task"),
            ep("tasks_update", s.TASKS_UPDATE, UpdateTask, engine.update, "change some fields"),
            ep("tasks_pause", s.TASKS_PAUSE, TaskRef, engine.pause, "stop scheduling a task"),
            ep("tasks_resume", s.TASKS_RESUME, TaskRef, engine.resume, "schedule a task again"),
            ep("tasks_delete", s.TASKS_DELETE, TaskRef, engine.delete, "delete a task"),
            ep(
                "tasks_run", s.TASKS_RUN, RunTask, engine.run, "run a task now; replies with run_id"
            ),
            ep("tasks_get", s.TASKS_GET, TaskRef, engine.get, "one task"),
            ep(
                "tasks_list",
                s.TASKS_LIST,
                ListTasks,
                engine.list,
                "tasks, by status, a page at a time",
            ),
            ep("runs_list", s.RUNS_LIST, ListRuns, engine.runs, "the run ledger, newest first"),
            # One request at a time: checking that a chosen run_id is free and queuing
            # the run are one step, so two starts under one run_id cannot both pass.
            Endpoint(
                "runs_start",
                s.RUNS_START,
                StartRun,
                self.adhoc.start,
                description="run an inline spec once, with no task",
            ),
        ]


async def serve(
    ctx: ServiceContext,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    clock: Clock | None = None,
    config: SchedulerConfig | None = None,
) -> None:
    """`clock` and `config` are for tests; the service reads the real clock and takes
    its limits from settings (ROTE_MAX_CONCURRENT, ROTE_DAILY_BUDGET_USD).

    One scheduler acts at a time: its limits (runs in flight, the daily budget) and its
    trigger clock are one process's. A second scheduler waits as a standby, not started,
    until the first one's lease is released or expires, then starts like a restart.
    A scheduler that loses its lease (stalled past it: a paused process, NATS away)
    stops and stands by in turn, rather than taking every service of its process down."""
    try:
        # The table the llm service prices calls by: a task may name only its models.
        prices = load_price_table(ctx.settings.prices_file)
    except PriceTableError as exc:
        log.error("price_file_invalid", error=str(exc), hint="fix or unset ROTE_PRICES_FILE")
        raise
    # A dead scheduler's lease outlives it by the bucket's TTL.
    leases = await ctx.bus.js.key_value(s.BUCKET_LEASES)
    lease = Lease(leases, "scheduler", ttl_s=KV_TTL_S[s.BUCKET_LEASES])
    started = False
    while True:
        await lease.acquire()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lease.keep)
                await tg.start(partial(_serve, ctx, prices, clock=clock, config=config))
                if not started:
                    task_status.started()
                    started = True
        except* LeaseLost as lost:
            # Another scheduler may be dispatching by now: stopped before anything more
            # is dispatched here; this one takes over again once the lease is free.
            log.warning("scheduler_lease_lost", error=str(lost.exceptions[0]))
        finally:
            await lease.release()


async def _serve(
    ctx: ServiceContext,
    prices: PriceTable,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    clock: Clock | None = None,
    config: SchedulerConfig | None = None,
) -> None:
    """One lease term: the task store opened, served until cancelled, closed."""
    settings = ctx.settings
    config = config or SchedulerConfig(
        max_concurrent=settings.max_concurrent, daily_budget_usd=settings.daily_budget_usd
    )
    tasks = partial(Tasks, env=application_env(settings, "scheduler"), prices=prices)
    app = await anyio.to_thread.run_sync(open_application, tasks, "scheduler")
    try:
        scheduler = SchedulerService(ctx.bus, app, clock or SystemClock(), config)
        await scheduler.run(ctx.task_group, task_status=task_status)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(app.close)
