"""A tool call's started/finished events on JetStream, and the typed text they mask."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from contracts import subjects
from contracts.base import utc_now
from contracts.errors import ErrorInfo
from contracts.tools import ExecTool, ToolEvent, ToolResult
from services.kernel.bus import Bus
from services.kernel.secrets import MASK, is_secret_field, redact_value
from services.tools.toolbox import ToolsConfig, event_input
from services.tools.vault import placeholder_name


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
        return redact_value(mask_typed(call.tool, bounded, shown)), cut

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
        if call.tool in TYPING_TOOLS:
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
TYPING_TOOLS = ("browser_type", "browser_fill_form")


def mask_typed(tool: str, input: dict[str, Any], shown: Callable[[str], bool]) -> dict[str, Any]:
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


def password_fields(result: ToolResult) -> set[str]:
    """The targets a typing tool found to be password fields (the form tools report them
    in their output)."""
    output = result.output
    if not (result.ok and isinstance(output, dict)):
        return set()
    reported = output.get("password_fields")
    return {t for t in reported if isinstance(t, str)} if isinstance(reported, list) else set()
