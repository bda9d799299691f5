"""Between rote's contracts and the Messages API: request parameters out, content and
usage back.

Assistant turns go back exactly as they came (thinking blocks with their signatures,
redacted_thinking blocks), because the current models reject a conversation whose
earlier thinking was dropped or altered; only an empty text block, which the API
refuses, is left out. rote never sends what the 5.5 models refuse:
`thinking: {"type": "disabled"}`, a forced `tool_choice`, sampling parameters
(temperature, top_p, top_k) or assistant prefill. The contract has no field for the
first three; prefill is refused here before any call is made. `effort` goes only to
the models that take it (not the 4.5 Haiku and Sonnet).
"""

from __future__ import annotations

from typing import Any

import msgspec

from contracts.llm import CompleteRequest, ContentBlock, ToolUseBlock, Usage
from services.kernel.codec import nesting_depth

# How deeply a tool input or input schema may nest. Real ones nest a handful of
# levels; a thousand exhausts Python's stack in the SDK's JSON encoding (RecursionError),
# and the API would refuse the request anyway.
MAX_NESTING = 100


class RequestRefused(ValueError):
    """The request cannot be sent as it is; `field` names the culprit."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnreadableReply(ValueError):
    """The API answered content rote's contracts cannot carry."""


def _check_nesting(value: Any, field: str) -> None:
    if nesting_depth(value) > MAX_NESTING:
        raise RequestRefused(f"nested more than {MAX_NESTING} levels deep", field=field)


def check_request(req: CompleteRequest) -> None:
    for i, message in enumerate(req.messages):
        if isinstance(message.content, list):
            for j, block in enumerate(message.content):
                if isinstance(block, ToolUseBlock):
                    _check_nesting(block.input, f"messages[{i}].content[{j}].input")
    for k, tool in enumerate(req.tools):
        _check_nesting(tool.input_schema, f"tools[{k}].input_schema")
    if req.messages[-1].role != "user":
        raise RequestRefused(
            "the last message must have role 'user': rote never sends assistant prefill "
            "(the current models answer it with 400)",
            field=f"messages[{len(req.messages) - 1}].role",
        )


def _sendable(message: dict[str, Any]) -> dict[str, Any]:
    """`message` as the API takes it back. A model sometimes writes an empty text block
    beside its tool calls, and the API refuses that same block coming back ("text
    content blocks must be non-empty"): it is left out. Nothing else is touched."""
    content = message["content"]
    if message["role"] != "assistant" or not isinstance(content, list):
        return message
    kept = [block for block in content if block["type"] != "text" or block["text"].strip()]
    return message if not kept or len(kept) == len(content) else message | {"content": kept}


def api_params(
    req: CompleteRequest, model_id: str, *, accepts_effort: bool = True
) -> dict[str, Any]:
    """Keyword arguments for `AsyncAnthropic.messages.create`. `effort` is left out for
    a model that does not take it (it would answer 400): it tunes the work, it is not
    the work, so the call is still worth making."""
    params: dict[str, Any] = {
        "model": model_id,
        "max_tokens": req.max_tokens,
        "messages": [_sendable(message) for message in msgspec.to_builtins(req.messages)],
    }
    if req.system:
        params["system"] = req.system
    if req.tools:
        params["tools"] = msgspec.to_builtins(req.tools)
    if req.effort is not None and accepts_effort:
        params["output_config"] = {"effort": req.effort}
    if req.cache is not None:
        params["cache_control"] = {"type": "ephemeral", "ttl": req.cache}
    return params


def content_from_api(blocks: list[dict[str, Any]]) -> list[ContentBlock]:
    try:
        return msgspec.convert(blocks, list[ContentBlock])
    except msgspec.ValidationError as exc:
        # A block may be no object at all (the SDK passes one through as it came).
        kinds = sorted(
            {
                str(block.get("type")) if isinstance(block, dict) else type(block).__name__
                for block in blocks
            }
        )
        raise UnreadableReply(
            f"the model answered content rote cannot carry (block types {kinds}): {exc}"
        ) from None


def usage_from_api(usage: dict[str, Any], cache_ttl: str | None = None) -> Usage:
    """The API's usage object: cache_creation splits cache writes by TTL when present.
    A server that sends only the total (some Anthropic-compatible proxies) wrote them
    with the TTL the request asked for (`cache_ttl`): 1 h writes cost twice the input."""
    writes = int(usage.get("cache_creation_input_tokens") or 0)
    creation = usage.get("cache_creation")
    if isinstance(creation, dict):
        writes_1h = int(creation.get("ephemeral_1h_input_tokens") or 0)
    else:
        writes_1h = writes if cache_ttl == "1h" else 0
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cache_write_tokens=writes,
        cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
        cache_write_1h_tokens=writes_1h,
    )
