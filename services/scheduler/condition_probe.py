"""The I/O of a condition check: reading the trigger's tool output through the tools
service (services/kernel/tools_client). Whether the condition holds of that output is
conditions.py's (pure); when each task's condition is probed, condition_watch.py's.

A probe is one tool call, allowed only the trigger's tool; with `url`, a
browser_navigate to it first, in the probe's own session, and the tool after it on the
process holding that page (the shared tools client pins them, as it pins a run's
calls). Both share the probe's time. A browser probe closes its session afterwards.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio

from contracts.tasks import ConditionTrigger
from contracts.tools import NAVIGATE, ExecTool, ToolResult
from services.kernel.bus import Bus
from services.kernel.errors import RemoteError
from services.kernel.tools_client import ToolsClient
from services.scheduler.conditions import (
    BrokenCheck,
    ConditionError,
    page_url_problem,
    refused_check,
)

# The whole probe (the page opened, the tool called) has this long.
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class _Session:
    """One probe of a trigger: its own tools session (the run_id its calls carry) and
    the deadline its calls share."""

    task_id: str
    trigger: ConditionTrigger
    session_id: str = field(default_factory=lambda: f"cond-{uuid.uuid4().hex[:20]}")
    deadline: float = field(default_factory=lambda: anyio.current_time() + PROBE_TIMEOUT_S)

    def request(self, tool: str, tool_input: dict[str, Any]) -> ExecTool:
        """A call of `tool` with the time the probe has left."""
        left = self.deadline - anyio.current_time()
        if left < 1:
            raise ConditionError(f"opening {self.trigger.url} took the check's whole time")
        tool_name = self.trigger.tool
        return ExecTool(
            run_id=self.session_id,
            task_id=self.task_id,
            allowed_tools=[NAVIGATE, tool_name] if self.trigger.url else [tool_name],
            tool=tool,
            input=tool_input,
            timeout_s=left,
            source="condition",
        )


class ToolsProbe:
    """`await probe(task_id, trigger)`: the trigger's tool output, read through the
    tools service (a condition_watch.Probe). Raises BrokenCheck when the check itself is
    wrong (the task is paused), ConditionError when it could not be made this time."""

    def __init__(self, bus: Bus) -> None:
        self.tools = ToolsClient(bus)

    async def __call__(self, task_id: str, trigger: ConditionTrigger) -> Any:
        if (problem := page_url_problem(trigger.tool, trigger.url)) is not None:
            # Stored before `url` was required: it would test a blank page forever.
            raise BrokenCheck(problem)
        session = _Session(task_id, trigger)
        try:
            if trigger.url:
                await self._open(session, trigger.url)
            result = await self._call(session, trigger.tool, trigger.input)
        finally:
            with anyio.CancelScope(shield=True):
                await self.tools.close(session.session_id)
        if not result.ok:
            message = result.error.message if result.error else "tool failed"
            raise ConditionError(f"{trigger.tool} failed: {message}")
        return result.output

    async def _open(self, session: _Session, url: str) -> None:
        opened = await self._call(session, NAVIGATE, {"url": url})
        if not opened.ok:
            message = opened.error.message if opened.error else "navigation failed"
            raise ConditionError(f"could not open {url}: {message}")

    async def _call(self, session: _Session, tool: str, tool_input: dict[str, Any]) -> ToolResult:
        request = session.request(tool, tool_input)
        try:
            return await self.tools.call(request, timeout=request.timeout_s + 5)
        except RemoteError as exc:
            # The code says whether the check itself is wrong (the watch pauses the
            # task) or the service could not make it this time (checked again later).
            raise refused_check(exc.code, exc.message, exc.info.field) from None
