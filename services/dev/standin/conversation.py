"""What the stand-in's policy sees and decides: a Messages API request read into a
conversation (the task prompt, the offered tools, the tool steps so far), and the turn
it answers with (a tool call, an answer, or an API failure)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# What a runner may append to a cut-off tool output; ignored when reading JSON.
TRUNCATION_NOTE = "\n[output truncated]"


@dataclass(frozen=True)
class Step:
    """One tool call the model made and its result."""

    name: str
    input: dict[str, Any]
    ok: bool
    output: Any = None
    error: str | None = None


@dataclass(frozen=True)
class Conversation:
    prompt: str
    tools: frozenset[str]
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]
    preface: str | None = None
    redacted: bool = False


@dataclass(frozen=True)
class Answer:
    text: str
    unsupported: bool = False


@dataclass(frozen=True)
class ApiFailure:
    status: int
    error_type: str
    message: str


Decision = ToolCall | Answer | ApiFailure


# --- reading a Messages API request -----------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def _result_value(block: dict[str, Any]) -> tuple[bool, Any, str | None]:
    text = _text_of(block.get("content", ""))
    if block.get("is_error"):
        return False, None, text or "tool failed"
    try:
        value = json.loads(text.removesuffix(TRUNCATION_NOTE))
    except (json.JSONDecodeError, ValueError):
        return True, text, None
    # A whole ToolResult object: unwrap it.
    if isinstance(value, dict) and "ok" in value and "output" in value:
        if not value.get("ok"):
            error = value.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return False, None, str(message or "tool failed")
        return True, value.get("output"), None
    return True, value, None


def read_conversation(body: dict[str, Any]) -> Conversation:
    """The prompt, the offered tools and the tool steps of a Messages API request."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompt = ""
    for message in messages:
        if message.get("role") == "user":
            prompt = _text_of(message.get("content"))
            break
    tools = frozenset(
        str(tool.get("name"))
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("name")
    )
    calls: list[tuple[str, str, dict[str, Any]]] = []
    results: dict[str, tuple[bool, Any, str | None]] = {}
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if message.get("role") == "assistant" and block.get("type") == "tool_use":
                tool_input = block.get("input")
                calls.append(
                    (
                        str(block.get("id")),
                        str(block.get("name")),
                        tool_input if isinstance(tool_input, dict) else {},
                    )
                )
            elif message.get("role") == "user" and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = _result_value(block)
    steps = []
    for call_id, name, tool_input in calls:
        ok, output, error = results.get(call_id, (False, None, "no result"))
        steps.append(Step(name=name, input=tool_input, ok=ok, output=output, error=error))
    return Conversation(prompt=prompt, tools=tools, steps=tuple(steps))
