"""rote.api.tools.{list,exec,close_session}: the tool catalogue, one tool call (with its
started/finished events on JetStream), and closing a run's browser context."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from contracts import subjects
from contracts.base import utc_now
from contracts.errors import ErrorInfo
from contracts.tools import (
    CloseSession,
    ExecTool,
    ListTools,
    SessionClosed,
    ToolEvent,
    ToolList,
    ToolMetadata,
    ToolResult,
)
from services import __version__
from services.kernel.bus import Bus
from services.kernel.codec import encode
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.replies import Replies
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import (
    MASK,
    is_secret_field,
    redact,
    redact_struct,
    redact_value,
    register_from_env,
)
from services.tools import leftovers
from services.tools.browser import BrowserPool
from services.tools.specs import check_nesting, definitions
from services.tools.toolbox import ToolBox, ToolsConfig, event_input
from services.tools.vault import placeholder_name

log = get_logger("rote.tools")


class ToolEvents:
    """Publishes a call's started/finished events, in that order. Nats-Msg-Id
    `{run_id}:{call_id}:{event}`: a retried step has a new call_id, so its events are not
    de-duplicated away.

    The events go to ROTE_ACTIVITY without asking for acks: waiting for two acks would
    add two round trips to every call, replayed steps included. One connection keeps
    them in order, and for a cheap tool both events and the reply leave in one write.
    The tracer does not trust timing either: it waits until it has the event of every
    call the run's transcript shows."""

    def __init__(self, bus: Bus, config: ToolsConfig) -> None:
        self.bus = bus
        self.config = config

    async def publish(self, call: ExecTool, call_id: str, event: ToolEvent) -> None:
        await self.bus.publish_event_unacked(
            subjects.tool_event(call.run_id, event.event),
            event,
            msg_id=f"{call.run_id}:{call_id}:{event.event}",
        )

    def _input(self, call: ExecTool, shown: Callable[[str], bool]) -> tuple[dict[str, Any], bool]:
        bounded, cut = event_input(call.input, self.config.max_event_input_bytes)
        return redact_value(_mask_typed(call.tool, bounded, shown)), cut

    def started(self, call: ExecTool, call_id: str) -> ToolEvent:
        # Sent before the page is looked at, so whether a field is a password field is
        # not known yet: no typed text at all (the trace is built from finished events).
        masked, cut = self._input(call, lambda _: False)
        return ToolEvent(
            run_id=call.run_id,
            task_id=call.task_id,
            call_id=call_id,
            event="started",
            step=call.step,
            attempt=call.attempt,
            tool_use_id=call.tool_use_id,
            tool=call.tool,
            input=masked,
            input_truncated=cut,
            at=utc_now(),
            source=call.source,
        )

    def finished(
        self,
        started: ToolEvent,
        call: ExecTool,
        result: ToolResult | None,
        error: ErrorInfo,
        password_fields: set[str],
    ) -> ToolEvent:
        """The finished event of a call that produced a result (already masked), or of
        one that was refused (or cancelled) with `error`. Typed text is shown unless its
        target is named like a secret or was a password field (`password_fields`); when
        the call failed, which field it reached is unknown: none is shown."""
        if result is None:
            return msgspec.structs.replace(
                started, event="finished", at=utc_now(), ok=False, error=error, duration_ms=0
            )
        shown_input = started.input
        if call.tool in _TYPING_TOOLS:
            ok = result.ok

            def shown(target: str) -> bool:
                return ok and target not in password_fields and not is_secret_field(target)

            shown_input, _ = self._input(call, shown)
        return msgspec.structs.replace(
            started,
            event="finished",
            at=utc_now(),
            input=shown_input,
            ok=result.ok,
            # Already bounded by the toolbox to the same limit, and masked.
            output=result.output,
            truncated=result.truncated,
            error=result.error,
            duration_ms=result.duration_ms,
            metadata=result.metadata,
        )


# The tools that type text into a page, and where that text is in their input.
_TYPING_TOOLS = ("browser_type", "browser_fill_form")


def _mask_typed(tool: str, input: dict[str, Any], shown: Callable[[str], bool]) -> dict[str, Any]:
    """`input` with the text typed into targets not `shown` replaced by the mask (a
    password typed into a login form is not registered anywhere: only its target says
    what it is). Booleans (checkboxes), empty text and a secret's placeholder (the
    secret itself only ever reached the page) hide nothing."""

    def hides(value: Any) -> bool:
        return isinstance(value, str) and bool(value) and placeholder_name(value) is None

    if tool == "browser_type":
        selector, text = input.get("selector"), input.get("text")
        if hides(text) and not (isinstance(selector, str) and shown(selector)):
            return {**input, "text": MASK}
    elif tool == "browser_fill_form" and isinstance(input.get("fields"), dict):
        fields = {
            key: MASK if hides(value) and not shown(key) else value
            for key, value in input["fields"].items()
        }
        return {**input, "fields": fields}
    return input


def _password_fields(result: ToolResult) -> set[str]:
    """The targets a typing tool found to be password fields (browser_tools reports them
    in its output)."""
    output = result.output
    if not (result.ok and isinstance(output, dict)):
        return set()
    reported = output.get("password_fields")
    return {t for t in reported if isinstance(t, str)} if isinstance(reported, list) else set()


def _masked_error(error: ErrorInfo | None, *, query: bool = True) -> ErrorInfo | None:
    """A tool failure's error with secrets masked: messages quote what the call was
    given ("cannot open https://user:pw@host/")."""
    if error is None:
        return None
    masked = redact_struct(error, query=query)
    if masked is None:  # ErrorInfo has no constraints to break; never so, but typed
        return ErrorInfo(code=error.code, message=redact(error.message, query=query))
    return masked


async def _redacted(output: Any, *, query: bool) -> Any:
    if output is None or isinstance(output, int | float | bool):
        return output
    if len(msgspec.json.encode(output)) < 64 * 1024:
        return redact_value(output, query=query)
    # A bounded output is at most a few hundred KB: linear, but keep the loop free.
    return await anyio.to_thread.run_sync(partial(redact_value, output, query=query))


async def _masked(result: ToolResult, *, query: bool) -> ToolResult:
    """`result` (changed in place) with secrets masked in its output, metadata (the
    page's URL keeps a password it was opened with) and error; with `query`, credential
    query parameters too (see `redact`)."""
    result.output = await _redacted(result.output, query=query)
    result.metadata = redact_struct(result.metadata, query=query) or ToolMetadata()
    result.error = _masked_error(result.error, query=query)
    return result


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    config = ToolsConfig.from_settings(ctx.settings)
    # Commands and files can show this process's environment (/proc/<pid>/environ):
    # its secrets are masked here whoever started the service (idempotent).
    register_from_env()
    async with BrowserPool(config.browser) as browsers:
        toolbox = ToolBox(config, browsers)
        events = ToolEvents(ctx.bus, config)
        # This process's name on the bus: a run's later calls come straight here.
        instance = uuid.uuid4().hex[:12]
        # A call sent again under its call_id (a re-sent `nats req`) gets the first one's
        # result: its action does not run twice, and its events (de-duplicated by
        # call_id) would not show a second run anyway. Refusals are not kept: nothing
        # ran, and asking again decides afresh. The record is this process's: a run's
        # calls come here once it is pinned (served_by).
        replies: Replies[ToolResult] = Replies(
            weigh=lambda outcome: len(encode(outcome)), remember=()
        )

        async def list_tools(req: ListTools) -> ToolList:
            return ToolList(tools=definitions(req.names))

        async def exec_tool(call: ExecTool) -> ToolResult:
            call_id = call.call_id or uuid.uuid4().hex[:16]
            # bind/reset rather than bound_contextvars(): the same, minus a generator.
            tokens = structlog.contextvars.bind_contextvars(
                run_id=call.run_id, task_id=call.task_id, tool=call.tool, call_id=call_id
            )
            try:
                return await replies.by_call_id(
                    call.run_id,
                    call.call_id,
                    call,
                    lambda: run_call(call, call_id),
                    on_repeat=lambda: log.info("tool_call_repeated"),
                )
            finally:
                structlog.contextvars.reset_contextvars(**tokens)

        async def run_call(call: ExecTool, call_id: str) -> ToolResult:
            # Before the started event: recording the input walks it recursively.
            check_nesting(call.input)
            started = events.started(call, call_id)
            try:
                await events.publish(call, call_id, started)
            except Exception as exc:
                # A call whose start cannot even be sent must not run: its trace would lie.
                log.error("tool_event_unpublished", which="started", error=str(exc))
                raise ServiceError(
                    "unavailable", f"cannot record the tool call on JetStream: {exc}"
                ) from None
            result: ToolResult | None = None  # the reply
            recorded: ToolResult | None = None  # what the finished event shows
            refusal: ServiceError | None = None
            password_fields: set[str] = set()
            try:
                ran = await toolbox.run(toolbox.prepare(call))
                # Read before masking: compared with the call's input as written.
                password_fields = _password_fields(ran)
                # The reply goes to the model, which must be able to follow a page's
                # links (a reset ?token=, a presigned X-Amz-Security-Token): it keeps
                # credential query parameters. The event is kept, in the trace: fully
                # masked. (The runner masks fully what it logs and keeps of the reply.)
                reply = await _masked(ran, query=False)
                recorded = await _masked(msgspec.structs.replace(reply), query=True)
                result = reply
            except ServiceError as exc:
                refusal = exc
            except Exception as exc:
                # A bug of ours: the event and the reply say so (with a reference to the
                # logged traceback), never "cancelled".
                ref = uuid.uuid4().hex[:12]
                log.exception("tool_call_failed", ref=ref)
                refusal = ServiceError(
                    "internal",
                    f"{call.tool} failed ({type(exc).__name__}); see the tools service log, "
                    f"ref {ref}",
                )
            finally:
                # Neither a result nor an error: only cancellation leaves the try so.
                error = (
                    refusal.info()
                    if refusal is not None
                    else ErrorInfo(code="cancelled", message="the tools service stopped")
                )
                # Shielded only when the call was cut off (shutdown): then the finished
                # event must still go out; otherwise nothing here waits.
                with anyio.CancelScope(shield=recorded is None and refusal is None):
                    try:
                        finished = events.finished(started, call, recorded, error, password_fields)
                        await events.publish(call, call_id, finished)
                    except Exception as exc:
                        # The tool ran: its result matters more than the event.
                        log.error("tool_event_unpublished", which="finished", error=str(exc))
            if refusal is not None:
                if refusal.code != "internal":  # already logged, with its traceback
                    log.info("tool_refused", code=refusal.code, error=refusal.message)
                raise refusal
            assert result is not None
            log.info(
                "tool_called",
                ok=result.ok,
                duration_ms=result.duration_ms,
                error=result.error.code if result.error else None,
            )
            result.served_by = instance
            return result

        async def close_session(req: CloseSession) -> SessionClosed:
            closed = await browsers.close_session(req.run_id, attempt=req.attempt)
            return SessionClosed(run_id=req.run_id, closed=closed)

        service = await start_service(
            ctx.bus,
            name="rote-tools",
            version=__version__,
            description="Browser tools (one isolated context per run) and local tools",
            endpoints=[
                Endpoint(
                    "list", subjects.TOOLS_LIST, ListTools, list_tools, description="tool specs"
                ),
                Endpoint(
                    "exec",
                    subjects.TOOLS_EXEC,
                    ExecTool,
                    exec_tool,
                    concurrent=True,
                    description="run one tool call",
                ),
                Endpoint(
                    "close_session",
                    subjects.TOOLS_CLOSE_SESSION,
                    CloseSession,
                    close_session,
                    concurrent=True,
                    description="close a run's browser context",
                ),
                Endpoint(
                    "exec_here",
                    subjects.tools_exec_on(instance),
                    ExecTool,
                    exec_tool,
                    concurrent=True,
                    description="run one tool call in this process (where the run's session is)",
                ),
                Endpoint(
                    "close_session_here",
                    subjects.tools_close_session_on(instance),
                    CloseSession,
                    close_session,
                    concurrent=True,
                    description="close a run's browser context in this process",
                ),
            ],
            task_group=ctx.task_group,
            metadata={"instance": instance},
        )
        task_status.started()
        try:
            await _kill_orphans_forever()
        finally:
            await stop_service(service)


# How often the calls of tools processes that died without ending them are looked for.
ORPHAN_SWEEP_S = 60.0


async def _kill_orphans_forever() -> None:
    """Kill what shell_exec calls left running when their tools process was killed
    outright (this one's predecessor, or another on the machine): at start, then every
    ORPHAN_SWEEP_S."""
    while True:
        killed = await anyio.to_thread.run_sync(leftovers.kill_orphans)
        if killed:
            log.warning("tool_call_orphans_killed", processes=killed)
        await anyio.sleep(ORPHAN_SWEEP_S)
