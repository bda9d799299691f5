"""rote.api.tools.{list,exec,close_session}: the tool catalogue, one tool call (with its
started/finished events on JetStream), and closing a run's browser context."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from contracts import subjects
from contracts.errors import ErrorInfo
from contracts.tools import (
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
from services.kernel.replies import Replies
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import register_from_env
from services.tools import leftovers
from services.tools.browser import BrowserPool
from services.tools.events import ToolEvents, password_fields
from services.tools.masking import masked
from services.tools.specs import check_nesting, definitions
from services.tools.toolbox import ToolBox, ToolsConfig

log = get_logger("rote.tools")

# How often the calls of tools processes that died without ending them are looked for.
ORPHAN_SWEEP_S = 60.0


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

    def __init__(self, toolbox: ToolBox, browsers: BrowserPool, events: ToolEvents) -> None:
        self.toolbox = toolbox
        self.browsers = browsers
        self.events = events
        # This process's name on the bus: a run's later calls come straight here.
        self.instance = uuid.uuid4().hex[:12]
        # A call sent again under its call_id (a re-sent `nats req`) gets the first one's
        # result: its action does not run twice, and its events (de-duplicated by
        # call_id) would not show a second run anyway. Refusals are not kept: nothing
        # ran, and asking again decides afresh. The record is this process's: a run's
        # calls come here once it is pinned (served_by).
        self.replies: Replies[ToolResult] = Replies(
            weigh=lambda outcome: len(encode(outcome)), remember=()
        )

    # --- endpoints ----------------------------------------------------------------------

    async def list_tools(self, req: ListTools) -> ToolList:
        return ToolList(tools=definitions(req.names))

    async def exec_tool(self, call: ExecTool) -> ToolResult:
        call_id = call.call_id or uuid.uuid4().hex[:16]
        # bind/reset rather than bound_contextvars(): the same, minus a generator.
        tokens = structlog.contextvars.bind_contextvars(
            run_id=call.run_id, task_id=call.task_id, tool=call.tool, call_id=call_id
        )
        try:
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
        tools = ToolsService(ToolBox(config, browsers), browsers, ToolEvents(ctx.bus, config))
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


async def _kill_orphans_forever() -> None:
    """Kill what shell_exec calls left running when their tools process was killed
    outright (this one's predecessor, or another on the machine): at start, then every
    ORPHAN_SWEEP_S."""
    while True:
        killed = await anyio.to_thread.run_sync(leftovers.kill_orphans)
        if killed:
            log.warning("tool_call_orphans_killed", processes=killed)
        await anyio.sleep(ORPHAN_SWEEP_S)
