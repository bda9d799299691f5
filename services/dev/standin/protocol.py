"""The stand-in's side of the Messages API wire format: what a request may contain,
the 400s the current models answer, token estimates, prompt caching, and the
response JSON. Pure apart from the prompt cache's clock.

Rules enforced like the 5.5 models: no `thinking: {"type": "disabled"}`, no forced
`tool_choice` (`any` or `tool`), no sampling parameters (temperature, top_p, top_k), no
assistant prefill (the last message must be the user's), max_tokens of at least 1, and
every earlier assistant turn with a tool call must come back with its thinking blocks
intact, all of them and in order (signatures are checked). Like the real API, the 4.5
Haiku and Sonnet ids answer 400 to `effort`; a user turn's tool_result blocks answer
the tool_use blocks of the assistant turn just before it and come first in it; and no
text block may be empty, no message or system prompt be all whitespace, no user turn
be empty (a tool_result's own content may be). Token counts are estimates: one token
per 4 characters of JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.dev.standin import signing
from services.dev.standin.conversation import Answer, ApiFailure, Decision, ToolCall

SAMPLING_PARAMETERS = ("temperature", "top_p", "top_k")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
# Older models that answer 400 to `effort` (their dated snapshot ids too).
NO_EFFORT_MODELS = ("claude-haiku-4-5", "claude-sonnet-4-5")
_SNAPSHOT = re.compile(r"^(?P<base>.+)-\d{8}$")
THINKING_TYPES = ("enabled", "adaptive", "between_tools")
CACHE_TTLS = {"5m": 300.0, "1h": 3600.0}
# The API caches nothing shorter than this (per model family; one value here).
DEFAULT_MIN_CACHE_TOKENS = 1024


class ApiError(Exception):
    """An error answer in the Anthropic shape."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self, request_id: str) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.error_type, "message": self.message},
            "request_id": request_id,
        }


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def count_input_tokens(body: dict[str, Any]) -> int:
    """The estimate POST /v1/messages would report as input tokens (before caching)."""
    segments = [_json({"system": body.get("system"), "tools": body.get("tools")})]
    segments += [_json(message) for message in body.get("messages") or []]
    return sum(estimate_tokens(segment) for segment in segments)


# --- validation -------------------------------------------------------------------------


def _is_model(model: str, ids: tuple[str, ...]) -> bool:
    snapshot = _SNAPSHOT.match(model)
    return model in ids or (snapshot is not None and snapshot.group("base") in ids)


def _check_params(body: dict[str, Any]) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise invalid("max_tokens: Field required (an integer)")
    if max_tokens < 1:
        raise invalid("max_tokens: Input should be greater than or equal to 1")
    if body.get("stream"):
        raise invalid("stream: the stand-in model does not stream; send stream=false")
    for name in SAMPLING_PARAMETERS:
        if name in body:
            raise invalid(
                f"`{name}` is not supported on this model: sampling parameters were removed "
                "from the current models"
            )
    thinking = body.get("thinking")
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, dict) else None
        if kind == "disabled":
            raise invalid('thinking: {"type": "disabled"} is not supported on this model')
        if kind not in THINKING_TYPES:
            raise invalid(f"thinking.type: must be one of {', '.join(THINKING_TYPES)}")
    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        kind = tool_choice.get("type") if isinstance(tool_choice, dict) else None
        if kind in ("any", "tool"):
            raise invalid(
                "tool_choice: forced tool use is not supported on this model; use "
                '{"type": "auto"} or leave it out'
            )
        if kind not in ("auto", "none"):
            raise invalid("tool_choice.type: must be auto or none")
    output_config = body.get("output_config")
    if output_config is not None:
        if not isinstance(output_config, dict):
            raise invalid("output_config: must be an object")
        effort = output_config.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise invalid(f"output_config.effort: must be one of {', '.join(EFFORTS)}")
        if effort is not None and _is_model(model, NO_EFFORT_MODELS):
            raise invalid(f"output_config.effort: the effort parameter is not supported on {model}")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise invalid("system: must be a string or a list of text blocks")
    if system:
        _check_text(_blocks(system, "system"), "system")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise invalid("tools: must be a list")
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or not tool.get("name"):
                raise invalid(f"tools.{index}.name: Field required")
            if not isinstance(tool.get("input_schema"), dict):
                raise invalid(f"tools.{index}.input_schema: Field required")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise invalid(f"{where}.content: must be a string or a list of content blocks")
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid(f"{where}.content.{index}: must be a content block with a type")
    return content


def _check_text(blocks: list[dict[str, Any]], where: str) -> None:
    """The API's rules for text blocks: none empty, and not only whitespace when text is
    all there is (a tool_result's own content is not held to them)."""
    texts = [block.get("text") for block in blocks if block["type"] == "text"]
    if any(text == "" for text in texts):
        raise invalid(f"{where}: text content blocks must be non-empty")
    if texts and len(texts) == len(blocks) and not any(str(text).strip() for text in texts):
        raise invalid(f"{where}: text content blocks must contain non-whitespace text")


def _check_assistant_turn(key: bytes, blocks: list[dict[str, Any]], where: str) -> None:
    kinds = [block["type"] for block in blocks]
    thinking_at = [i for i, k in enumerate(kinds) if k in ("thinking", "redacted_thinking")]
    if "tool_use" in kinds and not thinking_at:
        raise invalid(
            f"{where}.content: this assistant turn had thinking blocks that were dropped; "
            "when tools are used, pass each assistant turn back unchanged, thinking blocks "
            "included"
        )
    if thinking_at and thinking_at != list(range(len(thinking_at))):
        raise invalid(f"{where}.content: thinking blocks must come first in an assistant turn")
    problem = signing.verify_turn(key, blocks)
    if problem is not None:
        raise invalid(f"{where}.{problem}")


def validate(body: Any, key: bytes) -> None:
    """Raise ApiError(400) for anything the current models refuse."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    _check_params(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: at least one message is required")
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"{where}.role: must be user or assistant")
        blocks = _blocks(message.get("content"), where)
        if message["role"] == "user" and not blocks:
            raise invalid(f"{where}: user messages must have non-empty content")
        _check_text(blocks, "messages")
        turns.append((message["role"], blocks))
    if turns[0][0] != "user":
        raise invalid("messages.0.role: the first message must use the user role")
    if turns[-1][0] == "assistant":
        raise invalid(
            "This model does not support assistant message prefill. The conversation must "
            "end with a user message."
        )
    for index, (role, blocks) in enumerate(turns):
        where = f"messages.{index}"
        if role == "assistant":
            _check_assistant_turn(key, blocks, where)
            pending = [str(b.get("id")) for b in blocks if b["type"] == "tool_use"]
            if pending:
                following = turns[index + 1][1]
                answered = {
                    str(b.get("tool_use_id")) for b in following if b["type"] == "tool_result"
                }
                missing = [tool_id for tool_id in pending if tool_id not in answered]
                if turns[index + 1][0] != "user" or missing:
                    raise invalid(
                        f"{where}: tool_use ids were found without tool_result blocks "
                        f"immediately after: {', '.join(missing or pending)}"
                    )
                leading = next(
                    (i for i, b in enumerate(following) if b["type"] != "tool_result"),
                    len(following),
                )
                if leading < len(pending):
                    raise invalid(
                        f"messages.{index + 1}: Did not find {len(pending)} tool_result "
                        "block(s) at the beginning of this message. Messages following "
                        "tool_use blocks must begin with a matching number of tool_result blocks."
                    )
        else:
            before = turns[index - 1] if index else ("user", [])
            calls = {str(b.get("id")) for b in before[1] if b["type"] == "tool_use"}
            for b_index, block in enumerate(blocks):
                if block["type"] == "tool_result":
                    if before[0] != "assistant" or str(block.get("tool_use_id")) not in calls:
                        raise invalid(
                            f"{where}.content.{b_index}: unexpected tool_use_id "
                            f"{block.get('tool_use_id')!r} in tool_result block: each tool_result "
                            "block must have a corresponding tool_use block in the previous message"
                        )
                elif block["type"] in ("thinking", "redacted_thinking", "tool_use"):
                    raise invalid(
                        f"{where}.content.{b_index}: {block['type']} blocks belong to "
                        "assistant turns"
                    )


# --- prompt caching ---------------------------------------------------------------------


@dataclass(frozen=True)
class InputUsage:
    input_tokens: int
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    cache_read: int = 0


def _has_cache_control(value: Any) -> str | None:
    """The ttl of the last cache_control marker inside `value`, if any."""
    found: str | None = None
    if isinstance(value, dict):
        marker = value.get("cache_control")
        if isinstance(marker, dict):
            found = str(marker.get("ttl") or "5m")
        for child in value.values():
            found = _has_cache_control(child) or found
    elif isinstance(value, list):
        for child in value:
            found = _has_cache_control(child) or found
    return found


class PromptCache:
    """Prefix caching like the API's: a breakpoint (top-level cache_control, or the last
    block-level marker) caches the prompt up to it; a later prompt sharing a cached
    prefix reads it at a tenth of the price. Prefixes end at message boundaries."""

    def __init__(
        self,
        min_tokens: int = DEFAULT_MIN_CACHE_TOKENS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_tokens = min_tokens
        self._clock = clock
        self._expires: dict[str, float] = {}
        self._lock = threading.Lock()

    def account(self, body: dict[str, Any]) -> InputUsage:
        segments = [_json({"system": body.get("system"), "tools": body.get("tools")})]
        segments += [_json(message) for message in body["messages"]]
        sizes = [estimate_tokens(segment) for segment in segments]
        total = sum(sizes)
        top = body.get("cache_control")
        breakpoint_at: int | None = None
        ttl = "5m"
        if isinstance(top, dict):
            breakpoint_at, ttl = len(segments) - 1, str(top.get("ttl") or "5m")
        else:
            parts: list[Any] = [[body.get("system"), body.get("tools")], *body["messages"]]
            for index, part in enumerate(parts):
                marked = _has_cache_control(part)
                if marked is not None:
                    breakpoint_at, ttl = index, marked
        if breakpoint_at is None or ttl not in CACHE_TTLS:
            return InputUsage(input_tokens=total)
        cumulative, hashes = [], []
        running = 0
        digest = hashlib.sha256(str(body.get("model")).encode())
        for segment, size in zip(segments, sizes, strict=True):
            running += size
            digest.update(segment.encode())
            cumulative.append(running)
            hashes.append(digest.copy().hexdigest())
        if cumulative[breakpoint_at] < self.min_tokens:
            return InputUsage(input_tokens=total)
        now = self._clock()
        with self._lock:
            read = 0
            for index in range(breakpoint_at, -1, -1):
                if self._expires.get(hashes[index], 0.0) > now:
                    read = cumulative[index]
                    # A hit refreshes the entry's lifetime.
                    self._expires[hashes[index]] = max(
                        self._expires[hashes[index]], now + CACHE_TTLS[ttl]
                    )
                    break
            write = cumulative[breakpoint_at] - read
            if write:
                self._expires[hashes[breakpoint_at]] = now + CACHE_TTLS[ttl]
        return InputUsage(
            input_tokens=total - read - write,
            cache_write_5m=write if ttl == "5m" else 0,
            cache_write_1h=write if ttl == "1h" else 0,
            cache_read=read,
        )


# --- responses --------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}_standin_{uuid.uuid4().hex[:24]}"


def _output_tokens(content: list[dict[str, Any]]) -> int:
    text = ""
    for block in content:
        if block["type"] == "text":
            text += block["text"]
        elif block["type"] == "thinking":
            text += block["thinking"]
        elif block["type"] == "tool_use":
            text += block["name"] + _json(block["input"])
    return max(1, estimate_tokens(text))


def build_message(
    decision: ToolCall | Answer, body: dict[str, Any], key: bytes, cache: PromptCache
) -> dict[str, Any]:
    """The Message JSON for a tool call or an answer."""
    content: list[dict[str, Any]]
    max_tokens = int(body["max_tokens"])
    if isinstance(decision, ToolCall):
        turn: list[dict[str, Any]] = []
        if decision.preface:
            turn.append({"type": "text", "text": decision.preface})
        turn.append(
            {
                "type": "tool_use",
                "id": new_id("toolu"),
                "name": decision.name,
                "input": decision.input,
            }
        )
        thinking: list[dict[str, Any]] = [{"type": "thinking", "thinking": "", "signature": ""}]
        if decision.redacted:
            thinking.append({"type": "redacted_thinking", "data": ""})
        content, stop_reason = signing.sign_turn(key, thinking + turn), "tool_use"
    else:
        text, stop_reason = decision.text, "end_turn"
        if estimate_tokens(text) > max_tokens:
            text, stop_reason = text[: max_tokens * 4], "max_tokens"
        content = [{"type": "text", "text": text}] if text else []
        if decision.unsupported:
            # A server-side tool call (a web search the server ran), before the answer:
            # a block type rote's contracts do not carry.
            server_call = {"type": "server_tool_use", "id": new_id("srvtoolu")}
            content.insert(0, {**server_call, "name": "web_search", "input": {"query": text[:80]}})
    inputs = cache.account(body)
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": inputs.input_tokens,
            "output_tokens": _output_tokens(content) if content else 0,
            "cache_creation_input_tokens": inputs.cache_write_5m + inputs.cache_write_1h,
            "cache_read_input_tokens": inputs.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": inputs.cache_write_5m,
                "ephemeral_1h_input_tokens": inputs.cache_write_1h,
            },
            "service_tier": "standard",
        },
    }


def error_for(failure: ApiFailure) -> ApiError:
    return ApiError(failure.status, failure.error_type, failure.message)


def respond(body: Any, key: bytes, cache: PromptCache, decide: Callable[[Any], Decision]) -> Any:
    """Validate, decide, build: the whole of POST /v1/messages but the HTTP."""
    validate(body, key)
    decision = decide(body)
    if isinstance(decision, ApiFailure):
        raise error_for(decision)
    return build_message(decision, body, key, cache)
