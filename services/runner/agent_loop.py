"""Path B: the full LLM agent loop.

The model gets the task prompt and the task's allowed tools; every tool call it makes
goes through the tools service; the loop ends at end_turn (the final text is the
answer), at max_iterations, at the run's deadline, or when the run is stuck. Assistant
turns go back to the model exactly as they came — current models reject a conversation
whose thinking blocks were dropped or altered. When the conversation outgrows one bus
message, the oldest tool outputs are elided from the request (never an assistant turn).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import msgspec

from contracts.base import utc_now
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    ContentBlock,
    Message,
    RequestMessage,
    RequestToolDefinition,
    TextBlock,
    TextEvent,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from contracts.runs import FailureReason
from contracts.tools import ExecTool, ToolResult
from services.kernel.codec import encode
from services.kernel.logs import get_logger
from services.runner.accounting import Ledger
from services.runner.effects import resume_note
from services.runner.ports import PortError, RunScope
from services.runner.stuck import StuckDetector

SYSTEM_PROMPT = (
    "You are rote's agent. Complete the user's task with the tools you are given. "
    "When the task is done, reply with the final answer only, as plain text."
)
# Errors from the tools service that mean it cannot serve at all (rather than a tool
# that failed): the run cannot go on without it.
FATAL_TOOL_CODES = {"unavailable", "timeout"}
# A model call that could not be served, whatever the task: no llm service answered,
# or the model API stayed rate limited, overloaded or failing through the llm service's
# retries (as a replay counts them too). Not "timeout": the llm service also says so
# when the model API is slow, which a task's own huge conversation can cause; not
# "auth": a bad key fails every run, and pausing the tasks makes that loud.
UNSERVED_LLM_CODES = {"unavailable", "rate_limited", "overloaded", "upstream"}
DEFAULT_TOOL_TIMEOUT_S = 60.0
# The longest one tool call may take (ExecTool.timeout_s's bound).
MAX_TOOL_TIMEOUT_S = 600.0
# Output room for one model turn. The current models think before they act and the
# thinking counts against max_tokens, so the request's default (4096) cuts a hard turn
# off. Not more: the turn is not streamed, and must arrive within the llm service's
# call budget (270 s).
AGENT_MAX_TOKENS = 16_000
# The stop reasons of a finished answer. Any other reply without a tool call is not one:
# "refusal", "max_tokens" (the answer was cut off), "pause_turn" (server tools rote
# does not carry), "model_context_window_exceeded".
ANSWER_STOPS = {"end_turn", "stop_sequence"}
# Stop reasons whose tool calls are not run, and how the turn ended: a turn cut off (at
# max_tokens, or at the context window, which cuts output the same way) may end inside a
# tool call's input (half a form, half a command); a refused one was stopped by the
# safety classifiers, and what it asked for is not acted on.
UNRUNNABLE_STOPS = {
    "max_tokens": "cut off at max_tokens inside a tool call, whose input may be incomplete",
    "model_context_window_exceeded": "cut off at the model's context window inside a tool"
    " call, whose input may be incomplete",
    "refusal": "refused, tool calls included",
}
# Bytes kept free under the bus's max payload when fitting a model request: room for
# headers, which NATS counts against the same limit.
PAYLOAD_HEADROOM = 4096

log = get_logger("rote.runner.agent")


@dataclass
class AgentOutcome:
    ok: bool
    result: str | None = None
    reason: FailureReason | None = None
    error: str | None = None
    iterations: int = 0
    tool_calls: int = 0
    ledger: Ledger = field(default_factory=Ledger)
    # The run failed because a rote service could not be reached (RunEvent.infrastructure).
    infrastructure: bool = False


def tool_error_text(result: ToolResult) -> str:
    """A failed call's error: what stuck detection compares."""
    err = result.error
    return f"{err.code}: {err.message}" if err else "the tool failed"


def tool_result_text(result: ToolResult) -> str:
    """What the model reads back: the output as text, or the error followed by what the
    tool produced before it failed (a timed-out command's output so far: the prompt it
    waited on is what the model needs to do better)."""
    output = result.output
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if result.truncated:
        text += "\n[output truncated]"
    if result.ok:
        return text
    error = tool_error_text(result)
    return error if output is None else f"{error}\n{text}"


def call_timeout(tool_input: dict[str, Any], default_s: float, limit_s: float) -> float:
    """The time one call gets: `default_s`, or room for the `timeout` the call asks for
    (shell_exec's, up to 600 s): the tools service runs a command within about 90% of
    the call's time (the rest reports its output), so the default alone killed a 300 s
    command after 54 s, every time. Never more than `limit_s` (the run's time left)."""
    asked = tool_input.get("timeout")
    if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
        return min(default_s, limit_s)
    return min(limit_s, max(default_s, asked / 0.9 + 1.0))


def time_left(deadline: float | None) -> float:
    """Seconds until `deadline`, on anyio's clock (a cancel scope's deadline); None: no
    deadline, all the time in the world."""
    return math.inf if deadline is None else deadline - anyio.current_time()


def final_text(content: list[ContentBlock]) -> str:
    return "\n".join(b.text for b in content if isinstance(b, TextBlock)).strip()


def answer_problem(reply: CompleteReply, answer: str) -> str | None:
    """Why a reply without a tool call is not the run's answer (None: it is)."""
    stop = reply.stop_reason
    if stop == "refusal":
        return "the model refused the task (stop_reason refusal)"
    if stop == "max_tokens":
        return "the model's answer was cut off at max_tokens (stop_reason max_tokens)"
    if stop not in ANSWER_STOPS:
        return f"the model stopped without an answer or a tool call (stop_reason {stop})"
    if not answer:
        return f"the model's answer is empty (stop_reason {stop})"
    return None


def elided_note(chars: int) -> str:
    return f"[output of an earlier call elided to fit the request: {chars} chars]"


def request_messages(messages: list[Message]) -> list[RequestMessage]:
    """`messages` as CompleteRequest types them. Its fields name the strict twins the
    llm service decodes into; built here, a request encodes any Message by its shape
    (as the contract says), so this only tells the type checker so."""
    return cast(list[RequestMessage], messages)


def request_tools(tools: list[ToolDefinition]) -> list[RequestToolDefinition]:
    """`tools` as CompleteRequest types them (see request_messages)."""
    return cast(list[RequestToolDefinition], tools)


def _chars(content: str | Sequence[TextBlock]) -> int:
    return len(content) if isinstance(content, str) else sum(len(b.text) for b in content)


def fit_request(request: CompleteRequest, max_bytes: int) -> tuple[CompleteRequest, int] | None:
    """`request` with its oldest tool outputs replaced by a short note until it encodes
    to at most `max_bytes`, and how many were elided; None when eliding every one is not
    enough. Only tool_result contents change: assistant turns, the prompt and the newest
    outputs (kept whole as long as possible) go as they are."""
    size = len(encode(request))
    if size <= max_bytes:
        return request, 0
    messages: list[Message] = list(request.messages)
    elided = 0
    for index, message in enumerate(messages):
        if message.role != "user" or isinstance(message.content, str):
            continue
        blocks: list[ContentBlock] = list(message.content)
        for position, block in enumerate(blocks):
            if not isinstance(block, ToolResultBlock):
                continue
            note = elided_note(_chars(block.content))
            # Exact: one JSON value is swapped for another inside the same encoding.
            saved = len(encode(block.content)) - len(encode(note))
            if saved <= 0:
                continue
            blocks[position] = msgspec.structs.replace(block, content=note)
            size -= saved
            elided += 1
            if size <= max_bytes:
                break
        messages[index] = Message(role=message.role, content=blocks)
        if size <= max_bytes:
            return msgspec.structs.replace(request, messages=request_messages(messages)), elided
    return None


class AgentLoop:
    def __init__(
        self,
        scope: RunScope,
        *,
        ledger: Ledger,
        tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
        max_tool_timeout_s: float = MAX_TOOL_TIMEOUT_S,
        deadline: float | None = None,
    ) -> None:
        self.spec = scope.spec
        self.ports = scope.ports
        self.run_id = scope.run_id
        self.task_id = scope.task_id
        self.attempt = scope.attempt
        self.transcript = scope.transcript
        self.effects = scope.effects
        self.ledger = ledger
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_timeout_s = max_tool_timeout_s
        # When the run's time is up (anyio's clock); None: no deadline.
        self.deadline = deadline
        self.step = 0
        self.iterations = 0

    def _outcome(self, ok: bool, **kwargs: Any) -> AgentOutcome:
        return AgentOutcome(
            ok=ok,
            iterations=self.iterations,
            tool_calls=self.step,
            ledger=self.ledger,
            **kwargs,
        )

    def _time_left(self) -> float:
        return time_left(self.deadline)

    def _out_of_time(self) -> AgentOutcome | None:
        """The run's end when its time is up. The caller's cancel ends it too, but may land
        only after the next call went out (a model call then billed, a tool call then
        acting, after the run ended): nothing is started with no time left."""
        if self._time_left() > 0:
            return None
        return self._outcome(False, reason="deadline", error="the run passed its deadline")

    async def run(self) -> AgentOutcome:
        try:
            tools = await self.ports.list_tools(self.spec.allowed_tools)
        except PortError as exc:
            return self._outcome(
                False,
                reason="tool_error",
                error=exc.message,
                infrastructure=exc.code in FATAL_TOOL_CODES,
            )
        messages = [Message(role="user", content=self._prompt())]
        self.transcript.message(messages[0])
        stuck = StuckDetector()

        while self.iterations < self.spec.max_iterations:
            if ended := self._out_of_time():
                return ended
            self.iterations += 1
            reply = await self._ask(messages, tools)
            if isinstance(reply, AgentOutcome):
                return reply
            uses = [b for b in reply.content if isinstance(b, ToolUseBlock)]
            if ended := self._turn_ends_run(reply, uses):
                return ended
            results = await self._run_tools(uses, stuck)
            if isinstance(results, AgentOutcome):
                return results
            user = Message(role="user", content=results)
            messages.append(user)
            self.transcript.message(user)

        return self._outcome(
            False,
            reason="max_iterations",
            error=f"no answer after {self.spec.max_iterations} model turns",
        )

    def _prompt(self) -> str:
        """The task's prompt; for a run resumed after some of its actions happened, with
        what they were and returned, so the model does not do them again."""
        note = resume_note(self.effects.happened()) if self.effects is not None else None
        return self.spec.prompt if note is None else f"{self.spec.prompt}\n\n{note}"

    async def _ask(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> CompleteReply | AgentOutcome:
        """One model turn on the conversation so far: its reply, added to `messages`
        (and the record); or the run's end when the call cannot be made or fails."""
        max_bytes = self.ports.max_payload - PAYLOAD_HEADROOM
        request = CompleteRequest(
            model=self.spec.model,
            system=SYSTEM_PROMPT,
            messages=request_messages(messages),
            tools=request_tools(tools),
            run_id=self.run_id,
            task_id=self.task_id,
            purpose="agent",
            max_tokens=AGENT_MAX_TOKENS,
        )
        # `messages` stays whole (the record); only what is sent is fitted.
        fitted = fit_request(request, max_bytes)
        if fitted is None:
            return self._outcome(
                False,
                reason="llm_error",
                error=f"the conversation does not fit one model request of {max_bytes}"
                " bytes, even with every earlier tool output elided",
            )
        request, elided = fitted
        if elided:
            log.info("llm_request_fitted", elided_outputs=elided, max_bytes=max_bytes)
        try:
            reply = await self.ports.complete(request)
        except PortError as exc:
            if exc.billed is not None:
                self.ledger.add(exc.billed)
            return self._outcome(
                False,
                reason="llm_error",
                error=f"{exc.code}: {exc.message}",
                infrastructure=exc.code in UNSERVED_LLM_CODES,
            )
        self.ledger.add(reply)
        assistant = Message(role="assistant", content=list(reply.content))
        messages.append(assistant)
        self.transcript.message(assistant)
        for block in reply.content:
            if isinstance(block, TextBlock) and block.text.strip():
                await self._publish_text(block.text)
        return reply

    def _turn_ends_run(self, reply: CompleteReply, uses: list[ToolUseBlock]) -> AgentOutcome | None:
        """The run's end at this turn: its answer (no tool call), or a turn whose tool
        calls must not run; None when its tool calls are to run."""
        if uses and (how := UNRUNNABLE_STOPS.get(reply.stop_reason or "")):
            return self._outcome(
                False,
                reason="llm_error",
                error=f"the model's turn was {how} (stop_reason {reply.stop_reason});"
                " nothing was run",
            )
        if uses:
            return None
        answer = final_text(reply.content)
        problem = answer_problem(reply, answer)
        if problem is not None:
            return self._outcome(False, reason="llm_error", error=problem)
        return self._outcome(True, result=answer)

    async def _run_tools(
        self, uses: list[ToolUseBlock], stuck: StuckDetector
    ) -> list[ContentBlock] | AgentOutcome:
        """The turn's tool calls, in order: their results for the model; or the run's
        end (out of time, the tools service gone, or stuck)."""
        results: list[ContentBlock] = []
        for use in uses:
            if ended := self._out_of_time():
                return ended
            result_block, error, fatal = await self._call_tool(use)
            results.append(result_block)
            if fatal:  # the tools service itself is gone, not the task's doing
                return self._outcome(False, reason="tool_error", error=error, infrastructure=True)
            if stuck.observe(use.name, use.input, error):
                return self._outcome(
                    False,
                    reason="stuck",
                    error=f"{use.name} failed {stuck.limit} times in a row: {error}",
                )
        return results

    async def _publish_text(self, text: str) -> None:
        """Best effort: the text event is for watchers (the transcript keeps the text),
        so a lost one (a JetStream ack timeout) must not cost the run."""
        event = TextEvent(
            run_id=self.run_id,
            task_id=self.task_id,
            text=text,
            turn=self.iterations,
            at=utc_now(),
            attempt=self.attempt,
        )
        try:
            await self.ports.publish_text(event)
        except Exception as exc:
            log.warning(
                "llm_text_unpublished",
                turn=self.iterations,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _call_tool(self, use: ToolUseBlock) -> tuple[ToolResultBlock, str | None, bool]:
        """Run one tool_use; returns its tool_result, the error text (None on success)
        and whether the failure means the tools service itself is gone."""
        step = self.step
        self.step += 1
        request = ExecTool(
            run_id=self.run_id,
            task_id=self.task_id,
            allowed_tools=self.spec.allowed_tools,
            tool=use.name,
            input=use.input,
            # Never more than the run has left: the tools service runs the call for the time
            # it is given, and would otherwise go on after the run ended at its deadline.
            timeout_s=call_timeout(
                use.input,
                self.tool_timeout_s,
                min(self.max_tool_timeout_s, self._time_left()),
            ),
            step=step,
            source="full_llm",
            call_id=f"a{self.attempt}-b{step}",
            attempt=self.attempt,
            tool_use_id=use.id,
        )
        try:
            if self.effects is not None:
                # A repeat of an action the run already did gets that one's result.
                result = await self.effects.run_call(request, self.ports.exec_tool)
            else:
                result = await self.ports.exec_tool(request)
        except PortError as exc:
            error = f"{exc.code}: {exc.message}"
            block = ToolResultBlock(tool_use_id=use.id, content=error, is_error=True)
            return block, error, exc.code in FATAL_TOOL_CODES
        text = tool_result_text(result)
        block = ToolResultBlock(tool_use_id=use.id, content=text, is_error=not result.ok)
        return block, (None if result.ok else tool_error_text(result)), False
