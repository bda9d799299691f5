"""rote.api.tools.{list,exec,close_session,call_status}: the tool catalogue, one tool
call (with its started/finished events on JetStream), closing a run's browser context,
and what became of an acting call sent under an idempotency key (call_records.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from contracts import subjects
from contracts.base import utc_now
from contracts.errors import ErrorInfo
from contracts.tools import (
    CallStatus,
    CallStatusQuery,
    CloseSession,
    ExecTool,
    ListTools,
    SessionClosed,
    ToolEvent,
    ToolList,
    ToolResult,
)
from services import __version__
from services.kernel.codec import encode
from services.kernel.endpoints import Endpoint, Handler, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.replies import KeyReused, Replies
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import register_from_env
from services.tools import call_records, leftovers
from services.tools.browser import BrowserPool
from services.tools.call_records import CallRecord, CallRecords, RecordUnreadable
from services.tools.events import ToolEvents, password_fields
from services.tools.masking import masked
from services.tools.specs import check_nesting, definitions
from services.tools.toolbox import ToolBox, ToolsConfig

log = get_logger("rote.tools")

# How often the calls of tools processes that died without ending them are looked for.
ORPHAN_SWEEP_S = 60.0
# A record that changes under a call reading it (created, then removed by a refusal)
# is read again, this many times at most.
RECORD_TRIES = 5
# How often a repeat of a call running on another process looks whether it finished.
SETTLE_POLL_S = 0.05
MAX_SETTLE_POLL_S = 1.0
# How long the finished record of a call that ran is retried across a NATS hiccup
# before the reply goes out without it (the record then turns in doubt at its `until`).
RECORD_END_S = 30.0


@dataclass
class _Ran:
    """What one call came to: a reply (and the fully masked copy its finished event
    shows), or a refusal; neither when it was cancelled."""

    reply: ToolResult | None = None
    recorded: ToolResult | None = None
    refusal: ServiceError | None = None
    password_fields: set[str] = field(default_factory=set)

    def error(self) -> ErrorInfo:
        """The error a finished event without a result shows."""
        if self.refusal is not None:
            return self.refusal.info()
        # Neither a result nor an error: only cancellation leaves a call so.
        return ErrorInfo(code="cancelled", message="the tools service stopped")


class ToolsService:
    """One tools process's endpoints: its toolbox, its browser pool, and the events of
    the calls it runs."""

    def __init__(
        self, toolbox: ToolBox, browsers: BrowserPool, events: ToolEvents, records: CallRecords
    ) -> None:
        self.toolbox = toolbox
        self.browsers = browsers
        self.events = events
        self.records = records
        # This process's name on the bus: a run's later calls come straight here.
        self.instance = uuid.uuid4().hex[:12]
        # A call sent again under its call_id (a re-sent `nats req`) gets the first one's
        # result: its action does not run twice, and its events (de-duplicated by
        # call_id) would not show a second run anyway. Refusals are not kept: nothing
        # ran, and asking again decides afresh. The record is this process's: a run's
        # calls come here once it is pinned (served_by). A call under an idempotency key
        # is kept here by that key, and in `records` for every process.
        self.replies: Replies[ToolResult] = Replies(
            weigh=lambda outcome: len(encode(outcome)), remember=()
        )

    # --- endpoints ----------------------------------------------------------------------

    async def list_tools(self, req: ListTools) -> ToolList:
        return ToolList(tools=definitions(req.names))

    async def exec_tool(self, call: ExecTool) -> ToolResult:
        call_id = call.call_id or uuid.uuid4().hex[:16]
        # bind/reset rather than bound_contextvars(): the same, minus a generator.
        keyed = {} if call.idempotency_key is None else {"key": call.idempotency_key}
        tokens = structlog.contextvars.bind_contextvars(
            run_id=call.run_id, task_id=call.task_id, tool=call.tool, call_id=call_id, **keyed
        )
        try:
            if call.idempotency_key is not None:
                return await self._exec_once(call, call_id, call.idempotency_key)
            return await self.replies.by_call_id(
                call.run_id,
                call.call_id,
                call,
                lambda: self._run_call(call, call_id),
                on_repeat=lambda: log.info("tool_call_repeated"),
            )
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    async def close_session(self, req: CloseSession) -> SessionClosed:
        closed = await self.browsers.close_session(req.run_id, attempt=req.attempt)
        return SessionClosed(run_id=req.run_id, closed=closed)

    async def call_status(self, query: CallStatusQuery) -> CallStatus:
        """What became of the call under `query.key`, from the record any process reads;
        a key no call used is closed for good when `fence` asks so."""
        run_id, key = query.run_id, query.key
        for _ in range(RECORD_TRIES):
            try:
                found = await self.records.get(run_id, key)
            except RecordUnreadable as exc:
                log.warning("tool_call_record_unreadable", key=key, error=str(exc)[:300])
                return CallStatus(run_id=run_id, key=key, state="in_doubt")
            if found is not None:
                return call_records.status(run_id, key, found[0], utc_now())
            if not query.fence:
                return call_records.status(run_id, key, None, utc_now())
            # Created only if still absent: a call that took the key meanwhile is read.
            if await self.records.create(run_id, key, call_records.fenced(utc_now())) is not None:
                log.info("tool_call_fenced", key=key)
                return CallStatus(run_id=run_id, key=key, state="fenced")
        raise _changing()

    # --- a call under an idempotency key ------------------------------------------------

    async def _exec_once(self, call: ExecTool, call_id: str, key: str) -> ToolResult:
        """The call run at most once under its key by any tools process: a repeat in
        this process waits for the first or gets its answer from memory; otherwise the
        record tells (a call that finished, runs elsewhere, died mid-call, or a key a
        status check closed)."""
        check_nesting(call.input)  # before its fingerprint walks the input
        print_ = call_records.fingerprint(call)
        try:
            return await self.replies.once(
                ("key", call.run_id, key),
                print_.encode(),
                lambda: self._recorded(call, call_id, key, print_),
                on_repeat=lambda: log.info("tool_call_repeated", recorded="memory"),
            )
        except KeyReused:
            raise _key_reused(key) from None

    async def _recorded(self, call: ExecTool, call_id: str, key: str, print_: str) -> ToolResult:
        for _ in range(RECORD_TRIES):
            record = call_records.running(call, print_, self.instance, utc_now())
            try:
                revision = await self.records.create(call.run_id, key, record)
            except ServiceError as exc:
                # Like its started event: a call that cannot be recorded does not run.
                log.error("tool_call_unrecorded", error=exc.message)
                raise
            if revision is not None:
                return await self._run_recorded(call, call_id, key, record, revision)
            earlier = await self._settled(call, key, print_)
            if earlier is not None:
                return self._repeat(earlier)
        raise _changing()

    async def _run_recorded(
        self, call: ExecTool, call_id: str, key: str, record: CallRecord, revision: int
    ) -> ToolResult:
        """Run the call whose running record was just written, then record its end.
        Cancelled (the service stopping), its record stays running: in doubt later."""
        try:
            result = await self._run_call(call, call_id)
        except ServiceError as exc:
            if exc.code == "internal":  # it may have acted: its answer is kept
                ended = call_records.finished(record, utc_now(), refusal=exc.info())
                await self._record_end(call.run_id, key, ended)
            else:  # refused before acting: asked again, it is decided afresh
                await self._forget(call.run_id, key, revision)
            raise
        # Kept fully masked, as its finished event: a repeat answered from the bucket
        # (after this process is gone) shows credential query parameters masked.
        kept = await masked(msgspec.structs.replace(result), query=True)
        ended = call_records.finished(record, utc_now(), result=kept)
        await self._record_end(call.run_id, key, ended)
        return result

    async def _settled(self, call: ExecTool, key: str, print_: str) -> CallRecord | None:
        """The record of the call that took the key first, once it has finished or can
        no longer be running (past its `until`); None if it is gone meanwhile (that
        call was refused: nothing ran). Another request under the key is refused."""
        pause = SETTLE_POLL_S
        while True:
            try:
                found = await self.records.get(call.run_id, key)
            except RecordUnreadable as exc:
                log.warning("tool_call_record_unreadable", error=str(exc)[:300])
                raise ServiceError(
                    "in_doubt", "the record of this idempotency key is unreadable"
                ) from None
            if found is None:
                return None
            record = found[0]
            if record.state != "fenced" and record.fingerprint != print_:
                raise _key_reused(key)
            if record.state != "running" or record.until is None:
                return record
            left = (record.until - utc_now()).total_seconds()
            if left <= 0:
                return record
            await anyio.sleep(min(pause, left))
            pause = min(pause * 2, MAX_SETTLE_POLL_S)

    def _repeat(self, record: CallRecord) -> ToolResult:
        """The answer to a call whose key an earlier call (or a status check) took."""
        state = call_records.state_of(record, utc_now())
        if state == "fenced":
            raise ServiceError("conflict", "this call was closed by a status check; it never ran")
        if state != "finished":
            log.warning("tool_call_in_doubt", instance=record.instance, started=record.started_at)
            raise call_records.in_doubt(record)
        log.info("tool_call_repeated", recorded="bucket", instance=record.instance)
        if record.refusal is not None:
            refusal = record.refusal
            raise ServiceError(
                refusal.code, refusal.message, field=refusal.field, details=refusal.details
            )
        assert record.result is not None
        return record.result

    async def _record_end(self, run_id: str, key: str, record: CallRecord) -> None:
        """Write a call's finished record, retried across a NATS hiccup for up to
        RECORD_END_S. Shielded: a call that ran is recorded even as the service stops."""
        pause = 0.25
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + RECORD_END_S):
            while True:
                try:
                    await self.records.put(run_id, key, record)
                    return
                except ServiceError as exc:
                    log.warning("tool_call_record_retried", error=exc.message)
                await anyio.sleep(pause)
                pause = min(pause * 2, 4.0)
        # Its repeats wait for it, then are told it is in doubt.
        log.error("tool_call_record_unwritten", within_s=RECORD_END_S)

    async def _forget(self, run_id: str, key: str, revision: int) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.records.forget(run_id, key, revision)
            except ServiceError as exc:
                # Its repeats wait until it would have ended, then are told it is in doubt.
                log.warning("tool_call_record_kept", error=exc.message)

    # --- one call -----------------------------------------------------------------------

    async def _run_call(self, call: ExecTool, call_id: str) -> ToolResult:
        # Before the started event: recording the input walks it recursively.
        check_nesting(call.input)
        started = self.events.started(call, call_id)
        await self._publish_started(call, call_id, started)
        ran = _Ran()
        try:
            await self._run_tool(call, ran)
        finally:
            await self._publish_finished(call, call_id, started, ran)
        return self._answer(ran)

    async def _publish_started(self, call: ExecTool, call_id: str, started: ToolEvent) -> None:
        try:
            await self.events.publish(call, call_id, started)
        except Exception as exc:
            # A call whose start cannot even be sent must not run: its trace would lie.
            log.error("tool_event_unpublished", which="started", error=str(exc))
            raise ServiceError(
                "unavailable", f"cannot record the tool call on JetStream: {exc}"
            ) from None

    async def _run_tool(self, call: ExecTool, ran: _Ran) -> None:
        """Run the call, filling in `ran`; a cancellation leaves it empty."""
        try:
            result = await self.toolbox.run(self.toolbox.prepare(call))
            # Read before masking: compared with the call's input as written.
            ran.password_fields = password_fields(result)
            # The reply goes to the model, which must be able to follow a page's links
            # (a reset ?token=, a presigned X-Amz-Security-Token): it keeps credential
            # query parameters. The event is kept, in the trace: fully masked. (The
            # runner masks fully what it logs and keeps of the reply.)
            reply = await masked(result, query=False)
            ran.recorded = await masked(msgspec.structs.replace(reply), query=True)
            ran.reply = reply
        except ServiceError as exc:
            ran.refusal = exc
        except Exception as exc:
            # A bug of ours: the event and the reply say so (with a reference to the
            # logged traceback), never "cancelled".
            ref = uuid.uuid4().hex[:12]
            log.exception("tool_call_failed", ref=ref)
            ran.refusal = ServiceError(
                "internal",
                f"{call.tool} failed ({type(exc).__name__}); see the tools service log, ref {ref}",
            )

    async def _publish_finished(
        self, call: ExecTool, call_id: str, started: ToolEvent, ran: _Ran
    ) -> None:
        # Shielded only when the call was cut off (shutdown): then the finished event
        # must still go out; otherwise nothing here waits.
        with anyio.CancelScope(shield=ran.recorded is None and ran.refusal is None):
            try:
                finished = self.events.finished(
                    started, call, ran.recorded, ran.error(), ran.password_fields
                )
                await self.events.publish(call, call_id, finished)
            except Exception as exc:
                # The tool ran: its result matters more than the event.
                log.error("tool_event_unpublished", which="finished", error=str(exc))

    def _answer(self, ran: _Ran) -> ToolResult:
        """The reply to a call that ended (was not cancelled), or its refusal raised."""
        if ran.refusal is not None:
            if ran.refusal.code != "internal":  # already logged, with its traceback
                log.info("tool_refused", code=ran.refusal.code, error=ran.refusal.message)
            raise ran.refusal
        result = ran.reply
        assert result is not None
        log.info(
            "tool_called",
            ok=result.ok,
            duration_ms=result.duration_ms,
            error=result.error.code if result.error else None,
        )
        result.served_by = self.instance
        return result

    # --- wiring -------------------------------------------------------------------------

    def endpoints(self) -> list[Endpoint]:
        def ep(
            name: str, subject: str, request: type[msgspec.Struct], handler: Handler, text: str
        ) -> Endpoint:
            return Endpoint(name, subject, request, handler, concurrent=True, description=text)

        return [
            Endpoint(
                "list", subjects.TOOLS_LIST, ListTools, self.list_tools, description="tool specs"
            ),
            ep("exec", subjects.TOOLS_EXEC, ExecTool, self.exec_tool, "run one tool call"),
            ep(
                "close_session",
                subjects.TOOLS_CLOSE_SESSION,
                CloseSession,
                self.close_session,
                "close a run's browser context",
            ),
            ep(
                "exec_here",
                subjects.tools_exec_on(self.instance),
                ExecTool,
                self.exec_tool,
                "run one tool call in this process (where the run's session is)",
            ),
            ep(
                "call_status",
                subjects.TOOLS_CALL_STATUS,
                CallStatusQuery,
                self.call_status,
                "what became of an acting call sent under an idempotency key",
            ),
            ep(
                "close_session_here",
                subjects.tools_close_session_on(self.instance),
                CloseSession,
                self.close_session,
                "close a run's browser context in this process",
            ),
        ]


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    config = ToolsConfig.from_settings(ctx.settings)
    # Commands and files can show this process's environment (/proc/<pid>/environ):
    # its secrets are masked here whoever started the service (idempotent).
    register_from_env()
    async with BrowserPool(config.browser) as browsers:
        tools = ToolsService(
            ToolBox(config, browsers),
            browsers,
            ToolEvents(ctx.bus, config),
            CallRecords(ctx.bus),
        )
        service = await start_service(
            ctx.bus,
            name="rote-tools",
            version=__version__,
            description="Browser tools (one isolated context per run) and local tools",
            endpoints=tools.endpoints(),
            task_group=ctx.task_group,
            metadata={"instance": tools.instance},
        )
        task_status.started()
        try:
            await _kill_orphans_forever()
        finally:
            await stop_service(service)


def _key_reused(key: str) -> ServiceError:
    return ServiceError(
        "invalid_request",
        f"idempotency_key {key!r} was already used for a different request",
        field="idempotency_key",
    )


def _changing() -> ServiceError:
    return ServiceError(
        "unavailable", "the record of this call kept changing while it was read; try again"
    )


async def _kill_orphans_forever() -> None:
    """Kill what shell_exec calls left running when their tools process was killed
    outright (this one's predecessor, or another on the machine): at start, then every
    ORPHAN_SWEEP_S."""
    while True:
        killed = await anyio.to_thread.run_sync(leftovers.kill_orphans)
        if killed:
            log.warning("tool_call_orphans_killed", processes=killed)
        await anyio.sleep(ORPHAN_SWEEP_S)
