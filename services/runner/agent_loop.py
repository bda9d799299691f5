"""Path B: the full LLM agent loop.

The model gets the task prompt and the task's allowed tools; every tool call it makes
goes through the tools service; the loop ends at end_turn (the final text is the
answer), at max_iterations, or when the run is stuck. Assistant turns go back to the
model exactly as they came — current models reject a conversation whose thinking
blocks were dropped or altered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from contracts.base import utc_now
from contracts.llm import (
    CompleteRequest,
    ContentBlock,
    Message,
    TextBlock,
    TextEvent,
    ToolResultBlock,
    ToolUseBlock,
)
from contracts.runs import FailureReason
from contracts.tools import ExecTool, ToolResult
from services.runner.accounting import Ledger
from services.runner.ports import PortError, RunScope
from services.runner.stuck import StuckDetector

SYSTEM_PROMPT = (
    "You are rote's agent. Complete the user's task with the tools you are given. "
    "When the task is done, reply with the final answer only, as plain text."
)
# Errors from the tools service that mean it cannot serve at all (rather than a tool
# that failed): the run cannot go on without it.
FATAL_TOOL_CODES = {"unavailable", "timeout"}
DEFAULT_TOOL_TIMEOUT_S = 60.0


@dataclass
class AgentOutcome:
    ok: bool
    result: str | None = None
    reason: FailureReason | None = None
    error: str | None = None
    iterations: int = 0
    tool_calls: int = 0
    ledger: Ledger = field(default_factory=Ledger)


def tool_result_text(result: ToolResult) -> str:
    """What the model reads back: the output as text, or the error."""
    if not result.ok:
        err = result.error
        return f"{err.code}: {err.message}" if err else "the tool failed"
    output = result.output
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if result.truncated:
        text += "\n[output truncated]"
    return text


def final_text(content: list[ContentBlock]) -> str:
    return "\n".join(b.text for b in content if isinstance(b, TextBlock)).strip()


class AgentLoop:
    def __init__(
        self,
        scope: RunScope,
        *,
        ledger: Ledger,
        tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    ) -> None:
        self.spec = scope.spec
        self.ports = scope.ports
        self.run_id = scope.run_id
        self.task_id = scope.task_id
        self.attempt = scope.attempt
        self.transcript = scope.transcript
        self.ledger = ledger
        self.tool_timeout_s = tool_timeout_s
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

    async def run(self) -> AgentOutcome:
        try:
            tools = await self.ports.list_tools(self.spec.allowed_tools)
        except PortError as exc:
            return self._outcome(False, reason="tool_error", error=exc.message)
        messages = [Message(role="user", content=self.spec.prompt)]
        self.transcript.message(messages[0])
        stuck = StuckDetector()

        while self.iterations < self.spec.max_iterations:
            self.iterations += 1
            try:
                reply = await self.ports.complete(
                    CompleteRequest(
                        model=self.spec.model,
                        system=SYSTEM_PROMPT,
                        messages=messages,
                        tools=tools,
                        run_id=self.run_id,
                        task_id=self.task_id,
                        purpose="agent",
                    )
                )
            except PortError as exc:
                if exc.billed is not None:
                    self.ledger.add(exc.billed)
                return self._outcome(False, reason="llm_error", error=f"{exc.code}: {exc.message}")
            self.ledger.add(reply)
            assistant = Message(role="assistant", content=list(reply.content))
            messages.append(assistant)
            self.transcript.message(assistant)
            for block in reply.content:
                if isinstance(block, TextBlock) and block.text.strip():
                    await self.ports.publish_text(
                        TextEvent(
                            run_id=self.run_id,
                            task_id=self.task_id,
                            text=block.text,
                            turn=self.iterations,
                            at=utc_now(),
                        )
                    )

            uses = [b for b in reply.content if isinstance(b, ToolUseBlock)]
            if not uses:
                answer = final_text(reply.content)
                if reply.stop_reason == "max_tokens" and not answer:
                    return self._outcome(
                        False, reason="llm_error", error="the model stopped at max_tokens"
                    )
                return self._outcome(True, result=answer)

            results: list[ContentBlock] = []
            for use in uses:
                result_block, error, fatal = await self._call_tool(use)
                results.append(result_block)
                if fatal:
                    return self._outcome(False, reason="tool_error", error=error)
                if stuck.observe(use.name, use.input, error):
                    return self._outcome(
                        False,
                        reason="stuck",
                        error=f"{use.name} failed {stuck.limit} times in a row: {error}",
                    )
            user = Message(role="user", content=results)
            messages.append(user)
            self.transcript.message(user)

        return self._outcome(
            False,
            reason="max_iterations",
            error=f"no answer after {self.spec.max_iterations} model turns",
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
            timeout_s=self.tool_timeout_s,
            step=step,
            source="full_llm",
            call_id=f"a{self.attempt}-b{step}",
            attempt=self.attempt,
            tool_use_id=use.id,
        )
        try:
            result = await self.ports.exec_tool(request)
        except PortError as exc:
            error = f"{exc.code}: {exc.message}"
            block = ToolResultBlock(tool_use_id=use.id, content=error, is_error=True)
            return block, error, exc.code in FATAL_TOOL_CODES
        text = tool_result_text(result)
        block = ToolResultBlock(tool_use_id=use.id, content=text, is_error=not result.ok)
        return block, (None if result.ok else text), False
