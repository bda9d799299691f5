"""The runner service: consumes rote.work.runs (a durable pull consumer shared by every
runner process), runs each request, and publishes the run's lifecycle.

Endpoints: rote.api.runs.get (a run's latest state, from its events) and
rote.api.runs.transcript. (rote.api.runs.start, a run of an inline spec, is the
scheduler's: it checks the spec as tasks.create does.)
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from datetime import datetime

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import ActiveExecutor, ExecutorRef
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    TextEvent,
    ToolDefinition,
    Usage,
    UsageEvent,
)
from contracts.runs import (
    ReplayOutcome,
    RunEvent,
    RunRef,
    RunRequest,
    RunSource,
    RunView,
    Transcript,
)
from contracts.tools import ExecTool, ListTools, ToolList, ToolResult
from services import __version__
from services.executor.fingerprint import task_fingerprint
from services.kernel import blobs
from services.kernel.bus import Bus, headers_size, routed
from services.kernel.codec import decode, encode
from services.kernel.consumers import (
    MaxDeliveries,
    Reject,
    Retry,
    consume,
    durable_config,
    max_deliveries_subject,
)
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import RemoteError, ServiceError
from services.kernel.lease import Lease, LeaseLost, run_key
from services.kernel.logs import get_logger
from services.kernel.replay_read import read_all
from services.kernel.run_store import RunStore, TranscriptUnreadable
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import redact, redact_struct
from services.kernel.streams import DUPLICATE_WINDOW_S, KV_TTL_S
from services.kernel.text import cut_text, json_size
from services.kernel.tools_client import ToolsClient
from services.runner.accounting import Ledger, spent_before
from services.runner.agent_loop import (
    DEFAULT_TOOL_TIMEOUT_S,
    MAX_TOOL_TIMEOUT_S,
    AgentLoop,
    AgentOutcome,
)
from services.runner.bounds import (
    MAX_EVENT_ERROR_CHARS,
    REF_PLACEHOLDER,
)
from services.runner.ports import PortError, Ports, RunScope, named_call
from services.runner.replay import Replayer, ReplayResult
from services.runner.run_view import fold
from services.runner.transcript import TranscriptRecorder

log = get_logger("rote.runner")

LLM_TIMEOUT_S = 300.0
# Re-sends of a model call when NATS reconnected while it waited (its reply may have
# been lost; the llm service answers a repeat from its record), all within
# LLM_TIMEOUT_S. A slow call is not re-sent: it looks just like a lost one, and a
# re-send another llm process took would pay for it twice.
LLM_RESENDS = 3
# Deliveries of one run request (the consumer's max_deliver) before it is given up.
MAX_DELIVERIES = 3
# How often a delivery waiting on another runner's claim on its run looks again.
CLAIM_POLL_S = 1.0
# Bound what an unexpected error adds to an abandoned run's event.
MAX_ABANDON_ERROR_CHARS = 500
# How long a broken attempt may spend saving its transcript (it holds up a shutdown).
TRANSCRIPT_SAVE_S = 5.0
# How long a runner stopping during a run's last delivery may spend ending the run.
STOP_GIVE_UP_S = 5.0
# The longest gap between a run's in-progress heartbeats. Every runner process shares
# one consumer, whose ack wait is the one the runner that started last set: beating at
# least this often keeps a run alive whatever another runner set, down to about 2x this.
MAX_HEARTBEAT_S = 5.0


def abandon_error(failure: BaseException) -> str:
    """What an abandoned run's event says broke it: masked before it is cut, since a
    secret cut in half would no longer be recognised as one."""
    return redact(f"{type(failure).__name__}: {failure}")[:MAX_ABANDON_ERROR_CHARS]


def last_delivery_error(failure: BaseException) -> str:
    return f"unexpected error on the last of {MAX_DELIVERIES} deliveries: " + abandon_error(failure)


def stopped_every_time(deliveries: int) -> str:
    return (
        f"each of its {deliveries} deliveries ended without an outcome"
        " (the runner stopped or died during it)"
    )


def elapsed_since(first_started_at: datetime | None, now: datetime) -> float:
    """Seconds since the run first started (0 if it never did). The first start may be
    stamped by another runner host whose clock is ahead: a start "in the future" counts
    as just now, never as extra time beyond the deadline."""
    if first_started_at is None:
        return 0.0
    return max(0.0, (now - first_started_at).total_seconds())


def deadline_error(deadline_s: float, attempt: int, elapsed_s: float) -> str:
    """What a run cut off by its deadline says; `elapsed_s` is what earlier deliveries
    had used of it when this one (`attempt`) began."""
    if elapsed_s <= 0:
        return f"the run passed its {deadline_s:g} s deadline"
    if elapsed_s >= deadline_s:
        return (
            f"the run's {deadline_s:g} s deadline passed across its deliveries: it first"
            f" started {elapsed_s:.1f} s before delivery {attempt}, which had no time left"
        )
    return (
        f"the run passed its {deadline_s:g} s deadline across {attempt} deliveries: it"
        f" first started {elapsed_s:.1f} s before delivery {attempt}"
    )


class ExecutorCache:
    """Each task's active executor, as the compiler last said, kept until an executor
    event for that task (compiled, superseded, invalidated, a replay or a full run
    recorded...) or `ttl_s` passes. Every run asks for its executor; without this each
    would wait on the compiler, which then caps how many runs a second the whole system
    does."""

    def __init__(self, bus: Bus, ttl_s: float = 30.0) -> None:
        self.bus = bus
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, ActiveExecutor]] = {}
        # Bumped by every event of a task: a lookup answered while an event arrived
        # may already be out of date, so it is not kept.
        self._generation: dict[str, int] = {}
        self._subscribed = False

    async def start(self) -> None:
        async def forget(msg: Msg) -> None:
            parts = msg.subject.split(".")  # rote.evt.executor.<task_id>.<event>
            if len(parts) == 5:
                self._entries.pop(parts[3], None)
                self._generation[parts[3]] = self._generation.get(parts[3], 0) + 1

        await self.bus.nc.subscribe(s.EXECUTOR_EVENTS_ALL, cb=forget)
        # In place before the runner says it started, so an invalidation published
        # right after that is not missed by a cached lookup.
        try:
            await routed(self.bus.nc)
        except TimeoutError:  # NATS away right now: the subscription still comes into force
            log.warning("executor_cache_subscribe_unconfirmed")
        self._subscribed = True

    async def get(self, task_id: str) -> ActiveExecutor | None:
        now = time.monotonic()
        cached = self._entries.get(task_id)
        if self._subscribed and cached is not None and cached[0] > now:
            return cached[1]
        generation = self._generation.get(task_id, 0)
        try:
            active = await self.bus.request(
                s.EXECUTORS_ACTIVE, ExecutorRef(task_id=task_id), ActiveExecutor, timeout=10
            )
        except RemoteError as exc:
            # No compiler, or it cannot answer: run the full loop rather than not at all.
            log.warning("executor_lookup_failed", code=exc.code, error=exc.message)
            return None
        if self._generation.get(task_id, 0) == generation:
            self._entries[task_id] = (now + self.ttl_s, active)
        return active


def _billed(exc: RemoteError) -> CompleteReply | None:
    """What a failed model call cost, when the llm service says the API billed it."""
    details = exc.info.details or {}
    if "cost_usd" not in details or "usage" not in details:
        return None
    try:
        return CompleteReply(
            id="billed-error",
            model=str(details.get("model") or "unknown"),
            content=[],
            stop_reason=None,
            usage=msgspec.convert(details["usage"], Usage),
            cost_usd=float(details["cost_usd"]),
        )
    except (msgspec.ValidationError, TypeError, ValueError):
        return None


def bus_ports(bus: Bus, executors: ExecutorCache | None = None) -> Ports:
    """The runner's view of the llm, tools and compiler services, over NATS."""
    executors = executors or ExecutorCache(bus, ttl_s=0.0)
    tools = ToolsClient(bus)

    async def complete(request: CompleteRequest) -> CompleteReply:
        try:
            return await bus.request(
                s.LLM_COMPLETE,
                named_call(request),
                CompleteReply,
                timeout=LLM_TIMEOUT_S,
                resend=LLM_RESENDS,
            )
        except RemoteError as exc:
            raise PortError(exc.code, exc.message, billed=_billed(exc)) from None

    async def exec_tool(request: ExecTool) -> ToolResult:
        try:
            return await tools.call(request, timeout=request.timeout_s + 15)
        except RemoteError as exc:
            raise PortError(exc.code, exc.message) from None

    async def close_session(run_id: str, attempt: int) -> None:
        await tools.close(run_id, attempt)

    async def list_tools(names: list[str]) -> list[ToolDefinition]:
        try:
            return (await bus.request(s.TOOLS_LIST, ListTools(names=names), ToolList)).tools
        except RemoteError as exc:
            raise PortError(exc.code, exc.message) from None

    async def publish_text(event: TextEvent) -> None:
        event.text = redact(event.text)
        await bus.publish_event(
            s.llm_event(event.run_id, "text"),
            event,
            msg_id=(
                f"{event.run_id}:text:{event.attempt}:{event.turn}:"
                f"{zlib.crc32(event.text.encode()):08x}"
            ),
        )

    return Ports(
        complete=complete,
        exec_tool=exec_tool,
        list_tools=list_tools,
        publish_text=publish_text,
        active_executor=executors.get,
        close_session=close_session,
        max_payload=bus.nc.max_payload,
    )


@dataclass
class _Attempt:
    """What one attempt at a run has done so far (path A, then perhaps path B)."""

    outcome: AgentOutcome | None = None
    source: RunSource = "full_llm"
    version: int | None = None
    fell_back: bool = False
    replay: ReplayOutcome | None = None
    full_run_cost_usd: float = 0.0
    replayer: Replayer | None = None  # set while path A runs
    # The run ledger's cost when path B's full loop began (None: it never began).
    loop_from_usd: float | None = None

    def cut_off_replay(self, ledger: Ledger, reason: str) -> None:
        """The deadline stopped the replay mid-step: the executor failed this run (its
        health must hear of it) and what its steps spent is part of the run's cost."""
        replayer = self.replayer
        if replayer is None or self.replay is not None or self.version is None:
            return
        ledger.merge(replayer.ledger)
        self.source = "executor"
        self.replay = ReplayOutcome(
            version=self.version,
            ok=False,
            step=replayer.current_step,
            reason=reason,
            tokens=replayer.ledger.snapshot(),
            cost_usd=round(replayer.ledger.cost_usd, 8),
            duration_ms=int((time.monotonic() - replayer.started) * 1000),
        )


class Runner:
    def __init__(self, ctx: ServiceContext, ports: Ports | None = None) -> None:
        self.ctx = ctx
        self.bus = ctx.bus
        self.executors = ExecutorCache(ctx.bus)
        self.ports = ports or bus_ports(ctx.bus, self.executors)
        self.store = RunStore(ctx.bus)
        self._leases: KeyValue | None = None

    async def publish(self, event: RunEvent, msg_id: str) -> None:
        # An answer or an error can quote what a tool read (a config file, a page):
        # mask secrets before the event is kept, and before it is cut (half a secret
        # is no longer recognised as one).
        if event.result:
            event.result = redact(event.result)
        if event.error:
            event.error = cut_text(redact(event.error), MAX_EVENT_ERROR_CHARS)
        if event.replay is not None and event.replay.reason:
            # It quotes tool errors.
            event.replay.reason = cut_text(redact(event.replay.reason), MAX_EVENT_ERROR_CHARS)
        headers = {s.HEADER_MSG_ID: msg_id}
        await self._fit_result(event, headers)
        await self.bus.publish_event(
            s.run_event(event.task_id, event.run_id, event.event), event, msg_id=msg_id
        )

    async def _fit_result(self, event: RunEvent, headers: dict[str, str]) -> None:
        """An answer larger than the rest of the event leaves of one NATS message is
        stored whole in the blob store, and the event carries its head and the
        reference (only then: a subscriber wants the answer itself). Refused, the
        publish would break the delivery, and the redelivered run would act again."""
        if event.result is None:
            return
        sized = msgspec.structs.replace(
            event, result="", result_truncated=True, result_ref=REF_PLACEHOLDER
        )
        rest = len(encode(sized)) - json_size("")
        room = self.bus.nc.max_payload - headers_size(headers) - rest
        if json_size(event.result) <= room:
            return
        whole = event.result.encode()
        try:
            event.result_ref = await blobs.put(self.bus.js, whole)
        except Exception as exc:
            # The run's ending matters more than the answer's tail: it goes out with the
            # head, marked cut, and no reference (the tracer compiles nothing from it).
            log.error("run_answer_unstored", size=len(whole), error=str(exc))
        else:
            log.info("run_answer_stored", size=len(whole), ref=event.result_ref)
        event.result = cut_text(event.result, room, mark="", size=json_size)
        event.result_truncated = True

    async def handle(self, request: RunRequest, msg: Msg) -> None:
        attempt = msg.metadata.num_delivered if msg.metadata else 1
        with structlog.contextvars.bound_contextvars(
            run_id=request.run_id, task_id=request.task_id, attempt=attempt
        ):
            # The same run delivered twice (redelivery, a duplicate request past the
            # de-duplication window) must never run twice: one claim per run keeps a
            # second delivery from running it alongside, and a run found finished once
            # the claim is held is only acked.
            try:
                claimed = await self._claim(request)
            except Exception as exc:
                if attempt < MAX_DELIVERIES:
                    raise  # redelivered: NATS may be back by then
                # No delivery comes after this one. The error may have struck while
                # another runner holds the claim and runs the run: only a claim known
                # to be free makes this run abandoned.
                if await self._claim_free(request.run_id, mine=None):
                    await self._give_up(request, attempt, last_delivery_error(exc))
                raise Reject(f"run {request.run_id}: no claim on the last delivery") from exc
            if isinstance(claimed, RunEvent):
                log.info("run_already_finished", status=claimed.status)
                return
            try:
                await self._run_claimed(request, attempt, claimed)
            except anyio.get_cancelled_exc_class():
                if attempt >= MAX_DELIVERIES:
                    await self._stopped_on_last_delivery(request, attempt, msg)
                raise
            finally:
                await claimed.release()

    async def _stopped_on_last_delivery(self, request: RunRequest, attempt: int, msg: Msg) -> None:
        """This runner is stopping during the run's last delivery: handed back, it could
        never be delivered again, and the server's word that its deliveries ran out may
        reach no runner (none is listening while all restart). It ends here, as the
        advisory would have ended it."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_GIVE_UP_S):
            await self._give_up(request, attempt, stopped_every_time(attempt))
            try:
                await msg.term()
            except Exception as exc:  # the ack wait lets it go in the end
                log.warning("work_request_not_terminated", error=str(exc))

    async def _run_lease(self, run_id: str) -> Lease:
        """The run's claim (not yet taken): one key per run in the leases bucket."""
        if self._leases is None:
            self._leases = await self.bus.js.key_value(s.BUCKET_LEASES)
        return Lease(self._leases, run_key(run_id), ttl_s=KV_TTL_S[s.BUCKET_LEASES])

    async def _claim_free(self, run_id: str, mine: str | None) -> bool:
        """Whether the run's claim is known to be free, or still ours: not merely
        unreadable (NATS trouble is the usual reason a claim was lost)."""
        for tried in range(3):
            if tried:
                await anyio.sleep(1.0)
            try:
                holder = await (await self._run_lease(run_id)).current_holder()
            except Exception as exc:
                log.warning("run_claim_unreadable", error=str(exc))
                continue
            return holder is None or holder == mine
        return False

    async def _claim(self, request: RunRequest) -> Lease | RunEvent:
        """The run's claim, once this delivery holds it; or the run's terminal event,
        if the run has finished. While another runner holds the claim this waits: the
        consumer's heartbeat keeps the delivery in progress, so it is neither
        redelivered nor dropped (it may be the holder's own message, redelivered after a
        blip). A dead holder's claim expires within the leases' TTL; then this takes over."""
        run_id = request.run_id
        claim = await self._run_lease(run_id)
        # A request older than the duplicate window may be a republished one, arriving
        # after the run it asks for has ended: look past a last `requested` event.
        thorough = (utc_now() - request.requested_at).total_seconds() > DUPLICATE_WINDOW_S
        waited = False
        while True:
            if await claim.try_acquire():
                # Looked at only now that no one else can be running it: a holder may
                # have finished the run and let go just before.
                try:
                    done = await self.store.finished(run_id, thorough=thorough)
                except BaseException:
                    await claim.release()  # not left to block the run for a whole TTL
                    raise
                if done is None:
                    if waited:
                        log.info("run_claim_taken_over")
                    return claim
                await claim.release()
                return done
            done = await self.store.finished(run_id, thorough=thorough)
            if done is not None:
                return done
            if not waited:
                log.info("run_claimed_elsewhere", held_by=await claim.current_holder())
                waited = True
            await anyio.sleep(CLAIM_POLL_S)

    async def _run_claimed(self, request: RunRequest, attempt: int, claim: Lease) -> None:
        """Execute the run while renewing its claim. A claim that can no longer be
        vouched for stops the run: another runner may be running it now."""
        lost: LeaseLost | None = None
        failure: Exception | None = None
        ran = False
        async with anyio.create_task_group() as tg:

            async def keep() -> None:
                nonlocal lost
                try:
                    await claim.keep()
                except LeaseLost as exc:
                    lost = exc
                    tg.cancel_scope.cancel()

            tg.start_soon(keep)
            try:
                await self.execute(request, attempt, claim)
                ran = True
            except Exception as exc:  # settled below, outside the task group
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if lost is not None and not ran:
            log.warning("run_claim_lost", error=str(lost))
            if attempt < MAX_DELIVERIES:
                raise Retry(str(lost))
            # No delivery comes after this one: unless another runner may hold the
            # claim now (and will finish the run), the run ends here, abandoned.
            if not await self._claim_free(request.run_id, mine=claim.holder):
                raise Retry(str(lost))
            await self._give_up(request, attempt, last_delivery_error(lost))
            raise Reject(f"run {request.run_id} abandoned: {lost}")
        if failure is None:
            return
        if attempt < MAX_DELIVERIES:
            raise failure  # redelivered: the next attempt may get through
        await self._give_up(request, attempt, last_delivery_error(failure))
        raise Reject(f"run {request.run_id} abandoned after {attempt} deliveries") from failure

    async def on_max_deliveries(self, msg: Msg) -> None:
        """JetStream's advisory that a run request used up its deliveries, none acked:
        the runner stopped or died during each, so no code of theirs could end the run.
        Someone must, or it stays `running` for good (the scheduler's recovery covers
        only the runs it dispatched, not an operator's)."""
        try:
            advisory = decode(msg.data, MaxDeliveries)
            stored = await self.bus.js.get_msg(s.STREAM_WORK, advisory.stream_seq)
            request = decode(stored.data or b"", RunRequest)
        except Exception as exc:  # gone already, or not a run request: nothing to end
            log.warning("max_deliveries_unreadable", error=str(exc))
            return
        with structlog.contextvars.bound_contextvars(
            run_id=request.run_id, task_id=request.task_id
        ):
            if await self._claim_free(request.run_id, mine=None):
                await self._give_up(
                    request, advisory.deliveries, stopped_every_time(advisory.deliveries)
                )
            try:  # never delivered again: it would only sit in the work queue
                await self.bus.js.delete_msg(s.STREAM_WORK, advisory.stream_seq)
            except Exception as exc:
                log.warning("work_request_not_deleted", error=str(exc))

    async def _give_up(self, request: RunRequest, attempt: int, error: str) -> None:
        """The last permitted delivery broke (`error` says how): publish the run's
        terminal event, or the run would stay `running` for good for whoever watches or
        asked for it."""
        try:
            if await self.store.finished(request.run_id, thorough=True) is not None:
                return  # it ended meanwhile (or another delivery ended it): one ending
        except Exception as exc:
            log.warning("run_finished_unknown", error=str(exc))
        log.error("run_abandoned", error=error)
        spent = await self._spent_before(request.run_id, utc_now())
        try:
            await self.publish(
                RunEvent(
                    task_id=request.task_id,
                    run_id=request.run_id,
                    event="failed",
                    at=utc_now(),
                    status="failed",
                    reason="abandoned",
                    error=error,
                    tokens=spent.snapshot(),
                    cost_usd=round(spent.cost_usd, 8),
                    origin=request.origin,
                    attempt=attempt,
                ),
                msg_id=f"{request.run_id}:finished",
            )
        except Exception as exc:  # NATS gone too: the scheduler's recovery is what is left
            log.error("run_abandon_unpublished", error=str(exc))

    async def _spent_before(self, run_id: str, before: datetime) -> Ledger:
        """The run's model spend before `before`, as the llm service's usage events say
        (empty if they cannot be read: the run's ending matters more)."""
        try:
            msgs = await read_all(self.bus.js, s.STREAM_ACTIVITY, s.llm_event(run_id, "usage"))
            return spent_before((decode(m.data, UsageEvent) for m in msgs), before)
        except Exception as exc:
            log.warning("earlier_spend_unknown", error=str(exc))
            return Ledger()

    async def _first_started(self, request: RunRequest) -> datetime | None:
        """When the run first started, from its `started` events; None if it never did
        (an earlier delivery broke before starting it) or they cannot be read."""
        try:
            msgs = await read_all(
                self.bus.js,
                s.STREAM_RUNS,
                s.run_event(request.task_id, request.run_id, "started"),
            )
        except Exception as exc:
            # Better a run that may overrun than one that cannot run at all.
            log.warning("first_start_unknown", error=str(exc))
            return None
        starts = []
        for msg in msgs:
            try:
                starts.append(decode(msg.data, RunEvent).at)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue  # not a run event rote wrote: the others still say when
        return min(starts, default=None)

    async def _carry_over(self, transcript: TranscriptRecorder, run_id: str) -> None:
        """An attempt with no time left runs nothing: rather than write over the earlier
        attempts' record (what they did, what broke them), it adds how the run ended."""
        try:
            earlier = await self.store.transcript(run_id)
        except Exception as exc:
            log.warning("transcript_unreadable", error=str(exc))
            return
        if earlier is not None:
            transcript.carry_over(earlier)

    async def execute(
        self, request: RunRequest, attempt: int, claim: Lease | None = None
    ) -> RunEvent:
        spec = request.spec
        # The deadline bounds the run's wall-clock time, not each delivery's: a
        # redelivered run gets only what its first start left of it.
        first_started_at = await self._first_started(request) if attempt > 1 else None
        started = time.monotonic()
        started_at = utc_now()
        elapsed = elapsed_since(first_started_at, started_at)
        remaining = spec.deadline_s - elapsed
        await self.publish(
            RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event="started",
                at=started_at,
                status="running",
                spec=redact_struct(spec),
                origin=request.origin,
                attempt=attempt,
            ),
            msg_id=f"{request.run_id}:started:{attempt}",
        )
        log.info("run_started", model=spec.model)
        transcript = TranscriptRecorder(request.run_id, request.task_id)
        scope = RunScope(
            spec=spec,
            ports=self.ports,
            run_id=request.run_id,
            task_id=request.task_id,
            attempt=attempt,
            transcript=transcript,
        )
        ledger = Ledger()
        attempt_ = _Attempt()
        if remaining <= 0:
            # Still `started` above: the ledger shows every delivery that took the run
            # up, and this one's `failed` says why it ran nothing.
            log.warning("run_deadline_passed_before_delivery", elapsed_s=round(elapsed, 3))
            await self._carry_over(transcript, request.run_id)
        try:
            with anyio.move_on_after(remaining) as deadline:
                # Nothing starts with no time left (a replay cut off before its first
                # step would count as the executor's failure): it ends below, `deadline`.
                if remaining > 0:
                    await self._path_a(scope, request, ledger, attempt_, deadline.deadline)
                    if attempt_.outcome is None:
                        attempt_.loop_from_usd = ledger.cost_usd
                        attempt_.outcome = await AgentLoop(
                            scope,
                            ledger=ledger,
                            tool_timeout_s=min(DEFAULT_TOOL_TIMEOUT_S, remaining),
                            max_tool_timeout_s=min(MAX_TOOL_TIMEOUT_S, remaining),
                            deadline=deadline.deadline,
                        ).run()
        except BaseException as broke:
            # Whatever broke the attempt (the message is redelivered), its browser
            # context must not outlive it: the next attempt starts from a clean one.
            with anyio.CancelScope(shield=True):
                await self.close_session(request.run_id, attempt)
                # Its record so far, and what broke it: a later attempt writes over it;
                # when none comes, it is the run's transcript.
                if isinstance(broke, Exception):
                    transcript.note(f"attempt {attempt} broke: {abandon_error(broke)}")
                else:
                    transcript.note(f"attempt {attempt} was stopped with its runner")
                with anyio.move_on_after(TRANSCRIPT_SAVE_S):
                    try:
                        if claim is None or await self._record_is_ours(claim, request.run_id):
                            await self.store.save_transcript(transcript.encoded(), request.run_id)
                    except Exception as exc:
                        log.warning("transcript_save_failed", error=str(exc))
            raise
        outcome = attempt_.outcome
        # The loop (or the replay) ends as `deadline` itself when a call came back just as
        # time ran out.
        if deadline.cancelled_caught or outcome is None or outcome.reason == "deadline":
            error = deadline_error(spec.deadline_s, attempt, elapsed)
            attempt_.cut_off_replay(ledger, error)
            outcome = AgentOutcome(ok=False, reason="deadline", error=error, ledger=ledger)
        # Before the earlier attempts' spend joins the ledger: a full run's cost, which
        # replays are measured against, is one full loop, never the dead attempts' too.
        loop_cost = (
            None if attempt_.loop_from_usd is None else ledger.cost_usd - attempt_.loop_from_usd
        )
        if attempt > 1:  # what the earlier, broken attempts spent is this run's cost too
            ledger.merge(await self._spent_before(request.run_id, started_at))
        replayed = attempt_.source == "executor" and outcome.ok
        cost = ledger.cost_usd
        saved = attempt_.full_run_cost_usd - cost if replayed else 0.0  # not floored: see RunEvent
        with anyio.CancelScope(shield=True):
            await self.close_session(request.run_id, attempt)
            if outcome.error:
                transcript.note(outcome.error, reason=outcome.reason)
            # One terminal event per run: completed and failed share a Nats-Msg-Id. That
            # dedupes only within the stream's window, and a run that outlived its
            # deadline may meanwhile have been declared abandoned by the scheduler.
            late = (utc_now() - request.requested_at).total_seconds() > spec.deadline_s
            earlier = await self.store.finished(request.run_id) if late else None
            # A runner that took the run over writes its record and its ending.
            taken_over = claim is not None and not await self._ending_is_ours(claim, request)
            if not taken_over:
                try:
                    await self.store.save_transcript(transcript.encoded(), request.run_id)
                except Exception as exc:  # the run's outcome matters more than its record
                    log.warning("transcript_save_failed", error=str(exc))
            finished = RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event="completed" if outcome.ok else "failed",
                at=utc_now(),
                status="completed" if outcome.ok else "failed",
                source=attempt_.source,
                executor_version=attempt_.version if attempt_.source == "executor" else None,
                fell_back=attempt_.fell_back,
                result=outcome.result,
                tokens=ledger.snapshot(),
                cost_usd=round(cost, 8),
                cost_saved_usd=round(saved, 8),
                loop_cost_usd=None if loop_cost is None else round(loop_cost, 8),
                duration_ms=int((time.monotonic() - started) * 1000),
                reason=outcome.reason,
                error=outcome.error,
                infrastructure=outcome.infrastructure and not outcome.ok,
                replay=attempt_.replay,
                origin=request.origin,
                attempt=attempt,
            )
            if earlier is not None:
                log.warning("run_outcome_dropped", already=earlier.reason or earlier.status)
            elif taken_over:
                log.warning("run_outcome_dropped", already="claimed by another runner")
            else:
                await self.publish(finished, msg_id=f"{request.run_id}:finished")
        log.info(
            "run_finished",
            status=finished.status,
            source=finished.source,
            fell_back=finished.fell_back,
            reason=finished.reason,
            cost_usd=finished.cost_usd,
            duration_ms=finished.duration_ms,
        )
        return finished

    async def _ending_is_ours(self, claim: Lease, request: RunRequest) -> bool:
        """Whether this runner may end the run. A claim that expired unnoticed (NATS
        away) is taken back when no other runner holds it and none ended the run
        meanwhile; held by another, the run is theirs to end."""
        try:
            if await claim.confirm():
                return True
            if not await claim.try_acquire():
                return False
            log.info("run_claim_taken_back")
            return await self.store.finished(request.run_id) is None
        except Exception as exc:  # unknown: the publish that follows needs NATS anyway
            log.warning("run_claim_unconfirmed", error=str(exc))
            return True

    async def _record_is_ours(self, claim: Lease, run_id: str) -> bool:
        """Whether a broken attempt's record may stand as the run's transcript: not once
        another runner holds the run, or has ended it (its record is the run's)."""
        if await claim.current_holder() not in (None, claim.holder):
            return False
        return await self.store.finished(run_id) is None

    async def _path_a(
        self,
        scope: RunScope,
        request: RunRequest,
        ledger: Ledger,
        state: _Attempt,
        deadline: float,
    ) -> None:
        """Replay the task's active executor, if it has one. On success `state.outcome`
        is set; on failure the failure is published and the run falls back to path B.
        `deadline`: when the run's time is up (anyio's clock)."""
        if scope.attempt > 1 and await self._fell_back_before(scope, request, state):
            return
        active = await self.ports.active_executor(request.task_id)
        if active is None or active.executor is None:
            return
        executor = active.executor
        # Runs see the spec as events show it (secrets masked), and so did the compiler.
        asked = task_fingerprint(redact_struct(request.spec) or request.spec)
        if executor.task_fingerprint not in (None, asked):
            # The task was edited since this version was compiled: its answer would be
            # the old task's. The full run's trace compiles one for the task as it is.
            log.info("replay_skipped", version=executor.version, reason="task changed")
            return
        state.version = executor.version
        state.full_run_cost_usd = active.health.full_run_cost_usd
        log.info("replay_started", version=executor.version, steps=len(executor.steps))
        state.replayer = Replayer(
            executor,
            scope,
            retries=self.ctx.settings.replay_retries,
            backoff_s=self.ctx.settings.replay_backoff_s,
            # As long as a full run gives the call: a step that was slow then (a long
            # command, a slow page) must not time out on every replay. Never more than
            # the run has left, which the replayer sees from `deadline`.
            tool_timeout_s=DEFAULT_TOOL_TIMEOUT_S,
            max_tool_timeout_s=MAX_TOOL_TIMEOUT_S,
            deadline=deadline,
        )
        result: ReplayResult = await state.replayer.run()
        if result.out_of_time:
            # The deadline passed just before a step's call: the run ends there, as when
            # it cuts the replay off mid-step (execute records the replay's failure).
            state.outcome = AgentOutcome(ok=False, reason="deadline", ledger=ledger)
            return
        ledger.merge(result.ledger)
        state.replay = ReplayOutcome(
            version=executor.version,
            ok=result.ok,
            step=result.failed_step,
            reason=result.reason,
            tokens=result.ledger.snapshot(),
            cost_usd=round(result.ledger.cost_usd, 8),
            duration_ms=result.duration_ms,
            infrastructure=result.infrastructure,
        )
        if result.ok:
            state.source = "executor"
            state.outcome = AgentOutcome(ok=True, result=result.answer, ledger=ledger)
            return
        log.info(
            "replay_failed", version=executor.version, step=result.failed_step, reason=result.reason
        )
        scope.transcript.note(
            f"replay of v{executor.version} failed at step {result.failed_step}: {result.reason};"
            " falling back to the full LLM run"
        )
        state.fell_back = True
        await self.publish(
            RunEvent(
                task_id=request.task_id,
                run_id=request.run_id,
                event="replay_failed",
                at=utc_now(),
                status="running",
                source="executor",
                executor_version=executor.version,
                replay=state.replay,
                origin=request.origin,
                attempt=scope.attempt,
            ),
            msg_id=f"{request.run_id}:replay_failed:{scope.attempt}",
        )
        # Path B gets a fresh browser session: whatever state the broken replay left
        # behind (a half-filled form, a wrong page) must not steer the full run.
        await self.close_session(request.run_id, scope.attempt)

    async def _fell_back_before(
        self, scope: RunScope, request: RunRequest, state: _Attempt
    ) -> bool:
        """Whether an earlier delivery of this run replayed and failed: then this one goes
        on with the full run it had fallen back to. Replaying again would redo the
        executor's actions (a second order) to break the same way, and count the same
        failure twice. The earlier replay's outcome stays the run's."""
        try:
            earlier = await self.store.last_event(request.run_id, "replay_failed")
        except Exception as exc:  # unknown: as before there was this rule, replay
            log.warning("earlier_replay_unknown", error=str(exc))
            return False
        if earlier is None or earlier.replay is None:
            return False
        replay = earlier.replay
        state.fell_back = True
        state.version = replay.version
        state.replay = msgspec.structs.replace(replay, attempt=replay.attempt or earlier.attempt)
        log.info("replay_skipped", version=replay.version, reason="an earlier delivery's failed")
        scope.transcript.note(
            f"delivery {state.replay.attempt} replayed v{replay.version} and failed at step"
            f" {replay.step}: {replay.reason}; this delivery goes on with the full LLM run"
        )
        return True

    async def close_session(self, run_id: str, attempt: int) -> None:
        """Close the attempt's browser session. However that breaks, it never decides the
        run: a run that has answered must not be redelivered (and act again) over it, and
        the tools service closes an idle session in the end anyway."""
        try:
            await self.ports.close_session(run_id, attempt)
        except Exception as exc:
            log.warning("close_session_failed", error=abandon_error(exc))

    # --- endpoints ---------------------------------------------------------------------

    async def get(self, ref: RunRef) -> RunView:
        view = fold(await self.store.events(ref.run_id))
        if view is None:
            raise ServiceError("not_found", f"no run {ref.run_id}", field="run_id")
        return view

    async def transcript(self, ref: RunRef) -> Transcript:
        try:
            transcript = await self.store.stored_transcript(ref.run_id)
        except TranscriptUnreadable:
            detail = "what is stored for it is not a transcript this version of rote can read"
        else:
            if transcript is not None:
                return transcript
            known = await self.store.last_event(ref.run_id)
            if known is None:
                detail = "no such run"
            elif known.event in ("completed", "failed"):
                detail = "the run ended without writing one"
            else:
                detail = "it is written when the run ends"
        raise ServiceError("not_found", f"no transcript for {ref.run_id}: {detail}")


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    runner = Runner(ctx)
    await runner.executors.start()
    service = await start_service(
        ctx.bus,
        name="rote-runner",
        version=__version__,
        description="Runs tasks: replays executors, falls back to the full LLM loop",
        endpoints=[
            Endpoint("get", s.RUNS_GET, RunRef, runner.get, description="a run's latest state"),
            Endpoint(
                "transcript",
                s.RUNS_TRANSCRIPT,
                RunRef,
                runner.transcript,
                concurrent=True,
                description="a run's transcript",
            ),
        ],
        task_group=ctx.task_group,
    )
    ack_wait = ctx.settings.runner_ack_wait_s
    config = durable_config(
        s.CONSUMER_RUNNER,
        filter_subjects=[s.WORK_RUNS],
        ack_wait_s=ack_wait,
        max_deliver=MAX_DELIVERIES,
    )
    await _warn_if_ack_wait_differs(ctx.bus, ack_wait)
    # One runner process (a queue group) ends each run whose deliveries ran out.
    advisories = await ctx.bus.nc.subscribe(
        max_deliveries_subject(s.STREAM_WORK, s.CONSUMER_RUNNER),
        queue=s.CONSUMER_RUNNER,
        cb=runner.on_max_deliveries,
    )
    try:
        await consume(
            ctx.bus.js,
            stream=s.STREAM_WORK,
            config=config,
            type_=RunRequest,
            handler=runner.handle,
            workers=max(1, ctx.settings.runner_slots),
            heartbeat_s=max(0.2, min(ack_wait / 3, MAX_HEARTBEAT_S)),
            task_status=task_status,
        )
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await advisories.unsubscribe()
            except Exception as exc:  # the connection is going away anyway
                log.debug("advisories_unsubscribe_failed", error=str(exc))
        await stop_service(service)


async def _warn_if_ack_wait_differs(bus: Bus, ack_wait_s: float) -> None:
    """Runner processes share one consumer: a different ROTE_RUNNER_ACK_WAIT_S here
    changes it for all of them (and an idle one puts its own back later). Say so."""
    try:
        info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
    except NotFoundError:
        return  # the first runner: nothing to differ from
    except Exception as exc:  # NATS briefly away: consume() copes, this is advice only
        log.debug("runner_consumer_info_failed", error=str(exc))
        return
    current = info.config.ack_wait
    if current is not None and abs(current - ack_wait_s) > 0.001:
        log.warning(
            "runner_ack_wait_differs",
            configured_s=ack_wait_s,
            consumer_s=current,
            hint="every runner process must set the same ROTE_RUNNER_ACK_WAIT_S",
        )
