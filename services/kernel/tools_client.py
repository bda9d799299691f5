"""Tool calls through the tools service, as the runner and the scheduler's condition
checks make them: each run's calls pinned to the tools process that holds its browser
session, and a lost session reported as such rather than read as a blank page.

The first call of a run goes to the tools queue group; the process that answers names
itself (`served_by`) and the run's later calls go to that process's own subject. When
that process is gone (no responder past the reconnect grace), its sessions went with
it: a call that needs the run's page fails with `session_lost` until the run navigates
again, and any other call starts afresh on another process.

An acting call sent under an idempotency key (ExecTool.idempotency_key) is sent again
when NATS reconnects while its reply is awaited (the reply may have been lost): the
tools service answers a repeat from its record of the first instead of acting twice.
So a lost reply costs a reconnect, not the call's whole timeout. `call_status` asks
what became of such a call (services/tools/README.md#acting-calls-once).
"""

from __future__ import annotations

from contracts import subjects as s
from contracts.errors import ErrorInfo
from contracts.tools import (
    NAVIGATE,
    SESSION_LOST,
    CallStatus,
    CallStatusQuery,
    CloseSession,
    ExecTool,
    SessionClosed,
    ToolResult,
    is_browser_tool,
)
from services.kernel.bus import Bus
from services.kernel.errors import RemoteError
from services.kernel.logs import get_logger

log = get_logger("rote.tools_client")

# How many times a call under an idempotency key is sent again after a reconnect.
RESEND = 3


class ToolsClient:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        # run_id -> the tools process holding that run's browser session.
        self._pinned: dict[str, str] = {}
        # Runs that used the browser: only those have a session to close.
        self._browsing: set[str] = set()
        # Runs whose browser session died with its tools process.
        self._lost: set[str] = set()

    def _session_lost(self, request: ExecTool) -> RemoteError | None:
        """The error for a call that needs the run's lost page; None if it may go on."""
        if request.run_id not in self._lost or not is_browser_tool(request.tool):
            return None
        if request.tool == NAVIGATE:
            return None
        message = (
            "the browser session was lost (its tools service stopped); the page is blank"
            " now: navigate again"
        )
        return RemoteError(s.TOOLS_EXEC, ErrorInfo(code=SESSION_LOST, message=message))

    async def _send(self, subject: str, request: ExecTool, timeout: float) -> ToolResult:
        # Just after a NATS reconnect, no responder does not mean no tools process: ours
        # came back first and theirs is on its way (with the run's page intact). The
        # call was not delivered, so the bus sends it again until its reconnect grace
        # is over; only then is the process taken for gone.
        return await self.bus.request(
            subject,
            request,
            ToolResult,
            timeout=timeout,
            retry_undelivered=True,
            # Sent again only when a repeat is answered from the record of the first.
            resend=RESEND if request.idempotency_key is not None else 0,
        )

    async def call(self, request: ExecTool, timeout: float) -> ToolResult:
        """One tool call; RemoteError when the tools service refuses it or cannot be
        reached (code `session_lost` when it needs a page that is gone)."""
        run_id = request.run_id
        had_session = run_id in self._browsing
        if is_browser_tool(request.tool):
            self._browsing.add(run_id)
        if refused := self._session_lost(request):
            raise refused
        pinned = self._pinned.get(run_id)
        if pinned is None:
            result = await self._send(s.TOOLS_EXEC, request, timeout)
        else:
            try:
                result = await self._send(s.tools_exec_on(pinned), request, timeout)
            except RemoteError as exc:
                if exc.code != "unavailable":
                    raise
                log.warning("tools_instance_gone", instance=pinned, session=had_session)
                self._pinned.pop(run_id, None)
                if had_session:
                    self._lost.add(run_id)
                if refused := self._session_lost(request):
                    raise refused from None
                result = await self._send(s.TOOLS_EXEC, request, timeout)
        if request.tool == NAVIGATE:
            self._lost.discard(run_id)  # a page of its own again
        if result.served_by:
            self._pinned[run_id] = result.served_by
        return result

    async def call_status(self, query: CallStatusQuery, timeout: float = 10.0) -> CallStatus:
        """What became of the call sent under `query.key` for the run (with `fence`, a
        key no call used is closed so none ever runs under it). Any tools process
        answers; RemoteError when none can (or the query is refused)."""
        return await self.bus.request(
            s.TOOLS_CALL_STATUS, query, CallStatus, timeout=timeout, retry_undelivered=True
        )

    async def close(self, run_id: str, attempt: int | None = None) -> None:
        """Close the run's browser session on the process holding it (None: whichever
        delivery opened it). Nothing to do for a run that never used the browser; a
        close that fails is logged, since the tools service closes idle sessions."""
        pinned = self._pinned.pop(run_id, None)
        self._lost.discard(run_id)  # whatever comes next starts from a fresh session
        if run_id not in self._browsing:
            return
        self._browsing.discard(run_id)
        # To the process holding the session: the shared subject reaches any of several.
        subject = s.tools_close_session_on(pinned) if pinned else s.TOOLS_CLOSE_SESSION
        try:
            closing = CloseSession(run_id=run_id, attempt=attempt)
            await self.bus.request(subject, closing, SessionClosed, timeout=10)
        except RemoteError as exc:
            log.warning("close_session_failed", error=exc.message)
