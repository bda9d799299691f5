"""rote-compiler: compiles captured traces into executors and keeps their health.

Listens: rote.evt.trace.*.*.captured (durable rote-compiler-traces on ROTE_TRACES) and
run outcomes rote.evt.run.*.*.{completed,failed,replay_failed} (durable
rote-compiler-runs on ROTE_RUNS). Answers rote.api.executors.{active,get,history,list,
invalidate,pin,stats}. Publishes what the store recorded to
rote.evt.executor.<task_id>.<event> through the relay, never directly.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from functools import partial

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from contracts import subjects as s
from contracts.base import Empty, utc_now
from contracts.executors import (
    ActiveExecutor,
    Executor,
    ExecutorHealth,
    ExecutorHistory,
    ExecutorList,
    ExecutorRef,
    HistoryQuery,
    InvalidateExecutor,
    ListExecutors,
    PinExecutor,
    SavingsStats,
    Skip,
)
from contracts.runs import RunEvent
from contracts.traces import Trace, TraceCaptured
from services import __version__
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler import outcomes, views
from services.compiler.aggregate import health_event
from services.compiler.compile import compile
from services.compiler.store import ExecutorStore
from services.executor.cost import full_run_cost
from services.kernel import blobs
from services.kernel.consumers import Reject, consume, durable_config
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env, open_application
from services.kernel.lease import Lease
from services.kernel.logs import get_logger
from services.kernel.pricing import PriceTable, PriceTableError, default_table, load_price_table
from services.kernel.relay import EventRelay, Outgoing
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import KV_TTL_S

log = get_logger("rote.compiler")

RELAY_LEASE = "relay.compiler"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # contracts.base.SubjectToken


def snapshot_every(settings: Settings) -> int:
    """Snapshot interval (events per aggregate); ROTE_COMPILER_SNAPSHOT_EVERY, 0 = off."""
    return max(0, settings.compiler_snapshot_every)


def convert(domain_event: object) -> Outgoing | None:
    """What the relay publishes for a stored event (the aggregate's creation is kept,
    not published)."""
    found = health_event(domain_event)
    if found is None:
        return None
    wire = views.to_wire(*found)
    return Outgoing(subject=s.executor_event(wire.task_id, wire.event), event=wire)


def _service_error(exc: h.HealthError) -> ServiceError:
    return ServiceError(exc.code, exc.message, field=exc.field, details=exc.details)


class Compiler:
    def __init__(
        self, store: ExecutorStore, relay: EventRelay, js: JetStreamContext, prices: PriceTable
    ) -> None:
        self.store = store
        self.relay = relay
        self.js = js
        self.prices = prices

    # --- consumers ----------------------------------------------------------------------

    async def on_trace(self, event: TraceCaptured, msg: Msg) -> None:
        trace = event.trace
        if not _TOKEN.match(trace.task_id) or not _TOKEN.match(trace.run_id):
            raise Reject(
                f"trace has an unusable task or run id: {trace.task_id!r}/{trace.run_id!r}"
            )
        with structlog.contextvars.bound_contextvars(task_id=trace.task_id, run_id=trace.run_id):
            await self._inline_outputs(trace)
            try:
                result: Executor | Skip = await anyio.to_thread.run_sync(
                    partial(compile, trace.task, trace, prices=self.prices)
                )
            except Exception as exc:  # a compiler bug is recorded as a skip, never retried
                log.exception("compile_failed")
                result = Skip(reason=f"compiler error: {type(exc).__name__}: {exc}")
            _, events = await anyio.to_thread.run_sync(
                self.store.record_trace,
                trace.task_id,
                trace.run_id,
                result if isinstance(result, Executor) else result.reason,
            )
            self.relay.wake()
            for item in events:
                if isinstance(item, ev.Compiled):
                    log.info("executor_compiled", version=item.version)
                elif isinstance(item, ev.Skipped):
                    log.info("executor_skipped", reason=item.reason)

    async def _inline_outputs(self, trace: Trace) -> None:
        """Large outputs were stored once as blobs; the data flow needs them."""
        for step in trace.steps:
            if step.output is None and step.output_ref:
                try:
                    step.output = msgspec.json.decode(await blobs.get(self.js, step.output_ref))
                except Exception as exc:  # compile() then refuses the trace, saying why
                    log.warning("blob_unreadable", ref=step.output_ref, error=str(exc))

    async def on_run(self, run: RunEvent, msg: Msg) -> None:
        if not _TOKEN.match(run.task_id):
            raise Reject(f"run event has an unusable task id: {run.task_id!r}")
        with structlog.contextvars.bound_contextvars(task_id=run.task_id, run_id=run.run_id):
            report = outcomes.replay_report(run)
            if report is not None:
                _, events = await anyio.to_thread.run_sync(
                    partial(
                        self.store.record_replay,
                        run.task_id,
                        run_id=run.run_id,
                        version=report.version,
                        ok=report.ok,
                        attempt=report.attempt,
                        step=report.step,
                        reason=report.reason,
                        tokens=report.tokens,
                        cost_usd=report.cost_usd,
                        cost_saved_usd=report.cost_saved_usd,
                        verification=report.verification,
                        heals=report.heals,
                    )
                )
                if events:
                    self.relay.wake()
                    log.info("replay_recorded", ok=report.ok, version=report.version)
                for item in events:
                    if isinstance(item, ev.Compiled):
                        log.info("executor_healed", version=item.version, reason=item.reason)
            cost = full_run_cost(run)
            if cost is not None:
                _, events = await anyio.to_thread.run_sync(
                    partial(
                        self.store.record_full_run, run.task_id, run_id=run.run_id, cost_usd=cost
                    )
                )
                if events:
                    # Published at once: runners drop their cached lookup (and its
                    # full_run_cost_usd, what the next replay saves against) on it.
                    self.relay.wake()

    # --- endpoints ----------------------------------------------------------------------

    async def active(self, ref: ExecutorRef) -> ActiveExecutor:
        try:
            executor, state = await anyio.to_thread.run_sync(self.store.lookup_active, ref.task_id)
        except h.HealthError as exc:
            raise _service_error(exc) from None
        self.relay.wake()  # a lookup may have superseded a stale or broken version
        if state is None:
            return ActiveExecutor(executor=None, health=views.none_health(ref.task_id))
        return ActiveExecutor(executor=executor, health=views.summary(state))

    async def _state(self, task_id: str) -> h.Health:
        state = await anyio.to_thread.run_sync(self.store.health_now, task_id)
        if state is None:
            raise ServiceError("not_found", f"task {task_id} has no executor")
        return state

    async def get(self, ref: ExecutorRef) -> ExecutorHealth:
        return views.summary(await self._state(ref.task_id))

    async def history(self, query: HistoryQuery) -> ExecutorHistory:
        state = await self._state(query.task_id)
        total, start, page = await anyio.to_thread.run_sync(
            self.store.history_page, query.task_id, query.limit, query.before
        )
        return views.history(query.task_id, state, page, start, total)

    async def _all_states(self, after: str | None = None) -> AsyncIterator[h.Health]:
        """Every task's state (health.as_of applied), in the order the tasks were first
        recorded, starting after task `after`; read lazily in worker threads."""
        task_ids = await anyio.to_thread.run_sync(self.store.task_ids)
        if after is not None:
            # Executors are never removed, so every next_after stays valid; an unknown
            # cursor answered with an empty page would read as the end of the listing.
            if after not in task_ids:
                raise ServiceError(
                    "not_found",
                    f"task {after} has no executor: `after` takes a next_after from a"
                    " previous page",
                    field="after",
                )
            task_ids = task_ids[task_ids.index(after) + 1 :]
        for task_id in task_ids:
            state = await anyio.to_thread.run_sync(self.store.health_now, task_id)
            if state is not None:
                yield state

    async def list(self, query: ListExecutors) -> ExecutorList:
        found: list[ExecutorHealth] = []
        async for state in self._all_states(query.after):
            summary = views.summary(state)
            if query.status is not None and summary.status != query.status:
                continue
            if len(found) == query.limit:  # one more matches: there is a next page
                return ExecutorList(executors=found, next_after=found[-1].task_id)
            found.append(summary)
        return ExecutorList(executors=found)

    async def invalidate(self, command: InvalidateExecutor) -> ExecutorHealth:
        try:
            state = await anyio.to_thread.run_sync(
                partial(
                    self.store.invalidate,
                    command.task_id,
                    reason=command.reason,
                    by=command.by,
                    version=command.version,
                )
            )
        except h.HealthError as exc:
            raise _service_error(exc) from None
        self.relay.wake()
        # As get answers (lookup-time rules applied), or the reply could call active a
        # version the next lookup supersedes.
        return views.summary(self.store.as_of(state))

    async def pin(self, command: PinExecutor) -> ExecutorHealth:
        try:
            state = await anyio.to_thread.run_sync(
                partial(self.store.pin, command.task_id, version=command.version, by=command.by)
            )
        except h.HealthError as exc:
            raise _service_error(exc) from None
        self.relay.wake()
        return views.summary(self.store.as_of(state))  # as get answers: see invalidate

    async def stats(self, _: Empty) -> SavingsStats:
        return views.savings([state async for state in self._all_states()])

    def endpoints(self) -> builtins.list[Endpoint]:
        def ep(name: str, subject: str, request: type, handler: object, text: str) -> Endpoint:
            return Endpoint(name, subject, request, handler, concurrent=True, description=text)  # type: ignore[arg-type]

        return [
            ep(
                "active",
                s.EXECUTORS_ACTIVE,
                ExecutorRef,
                self.active,
                "the executor to replay, or null",
            ),
            ep("get", s.EXECUTORS_GET, ExecutorRef, self.get, "health of a task's executor"),
            ep(
                "history",
                s.EXECUTORS_HISTORY,
                HistoryQuery,
                self.history,
                "a task's versions and events, a page at a time",
            ),
            ep("list", s.EXECUTORS_LIST, ListExecutors, self.list, "every task's executor health"),
            ep(
                "invalidate",
                s.EXECUTORS_INVALIDATE,
                InvalidateExecutor,
                self.invalidate,
                "stop replaying",
            ),
            ep("pin", s.EXECUTORS_PIN, PinExecutor, self.pin, "pin a version (null unpins)"),
            ep("stats", s.EXECUTORS_STATS, Empty, self.stats, "the savings ledger"),
        ]


def _prices(settings: Settings) -> PriceTable:
    try:
        return load_price_table(settings.prices_file)
    except PriceTableError as exc:
        log.warning("prices_unreadable", error=str(exc))
        return default_table()


async def serve(
    ctx: ServiceContext,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    clock: Callable[[], datetime] = utc_now,
) -> None:
    env = application_env(ctx.settings, "compiler")
    store = await anyio.to_thread.run_sync(
        open_application,
        partial(ExecutorStore, env, snapshot_every=snapshot_every(ctx.settings), clock=clock),
        "compiler",
    )
    relay = EventRelay(store, ctx.bus, convert, name="compiler")
    compiler = Compiler(store, relay, ctx.bus.js, _prices(ctx.settings))
    service = None
    try:
        async with anyio.create_task_group() as tg:
            # One compiler process publishes at a time (see kernel/relay.py).
            leases = await ctx.bus.js.key_value(s.BUCKET_LEASES)
            lease = Lease(leases, RELAY_LEASE, ttl_s=KV_TTL_S[s.BUCKET_LEASES])
            await tg.start(partial(relay.run_leased, lease))
            await tg.start(
                partial(
                    consume,
                    ctx.bus.js,
                    stream=s.STREAM_TRACES,
                    config=durable_config(
                        s.CONSUMER_COMPILER_TRACES,
                        filter_subjects=[s.trace_captured("*", "*")],
                    ),
                    type_=TraceCaptured,
                    handler=compiler.on_trace,
                )
            )
            await tg.start(
                partial(
                    consume,
                    ctx.bus.js,
                    stream=s.STREAM_RUNS,
                    config=durable_config(
                        s.CONSUMER_COMPILER_RUNS,
                        filter_subjects=[
                            s.run_events_of(event="completed"),
                            s.run_events_of(event="failed"),
                            s.run_events_of(event="replay_failed"),
                        ],
                    ),
                    type_=RunEvent,
                    handler=compiler.on_run,
                )
            )
            service = await start_service(
                ctx.bus,
                name="rote-compiler",
                version=__version__,
                description="Compiles traces into executors and keeps their health",
                endpoints=compiler.endpoints(),
                task_group=tg,
            )
            task_status.started()
            await anyio.sleep_forever()
    finally:
        if service is not None:
            await stop_service(service)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(store.close)
