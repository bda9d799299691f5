"""Request parameters never carry what the 5.5 models refuse; replies keep every block
verbatim; usage is read as the API reported it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from contracts.runs import Transcript
from services.llm.messages import (
    MAX_NESTING,
    RequestRefused,
    UnreadableReply,
    api_params,
    check_request,
    content_from_api,
    nesting_depth,
    usage_from_api,
)

TOOL = ToolDefinition(name="browser_navigate", description="open", input_schema={"type": "object"})


def _request(**changes: Any) -> CompleteRequest:
    base: dict[str, Any] = {"messages": [Message(role="user", content="hi")]}
    return CompleteRequest(**{**base, **changes})


def test_params_are_the_minimum_and_never_include_refused_options() -> None:
    params = api_params(_request(), "claude-sonnet-5-5")
    assert params == {
        "model": "claude-sonnet-5-5",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
    }
    full = api_params(
        _request(system="be brief", tools=[TOOL], effort="low", cache="1h", max_tokens=50),
        "claude-haiku-5-5",
    )
    assert full["output_config"] == {"effort": "low"}
    assert full["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert full["system"] == "be brief"
    assert full["tools"] == [
        {"name": "browser_navigate", "description": "open", "input_schema": {"type": "object"}}
    ]
    for refused in ("thinking", "tool_choice", "temperature", "top_p", "top_k"):
        assert refused not in full


def test_effort_is_left_out_for_a_model_that_does_not_take_it() -> None:
    req = _request(effort="low")
    assert "output_config" not in api_params(req, "claude-haiku-4-5", accepts_effort=False)
    assert api_params(req, "claude-opus-4-5")["output_config"] == {"effort": "low"}


def test_assistant_turns_are_sent_verbatim() -> None:
    turn = [
        ThinkingBlock(thinking="", signature="sig-1"),
        RedactedThinkingBlock(data="opaque"),
        TextBlock(text="Let me look."),
        ToolUseBlock(id="toolu_1", name="browser_navigate", input={"url": "http://x"}),
    ]
    req = _request(
        messages=[
            Message(role="user", content="go"),
            Message(role="assistant", content=turn),
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id="toolu_1", content='{"status": 200}')],
            ),
        ]
    )
    sent = api_params(req, "claude-sonnet-5-5")["messages"][1]["content"]
    assert sent == [
        {"type": "thinking", "thinking": "", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Let me look."},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "browser_navigate",
            "input": {"url": "http://x"},
        },
    ]


def test_an_empty_text_block_beside_tool_calls_is_left_out_of_the_turn_sent_back() -> None:
    """The model wrote it; the API refuses it coming back ("text content blocks must be
    non-empty"), which would end every run whose model did so."""
    calls = ToolUseBlock(id="toolu_1", name="browser_navigate", input={"url": "http://x"})
    thinking = ThinkingBlock(thinking="", signature="sig-1")
    req = _request(
        messages=[
            Message(role="user", content="go"),
            Message(role="assistant", content=[thinking, TextBlock(text=""), calls]),
            Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="ok")]),
            Message(role="assistant", content=[TextBlock(text=" \n"), calls]),
            Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="ok")]),
        ]
    )
    sent = api_params(req, "claude-sonnet-5-5")["messages"]
    assert [block["type"] for block in sent[1]["content"]] == ["thinking", "tool_use"]
    assert [block["type"] for block in sent[3]["content"]] == ["tool_use"]
    assert sent[1]["content"][0] == {"type": "thinking", "thinking": "", "signature": "sig-1"}


def test_prefill_is_refused_before_any_call() -> None:
    req = _request(
        messages=[Message(role="user", content="q"), Message(role="assistant", content="The ")]
    )
    with pytest.raises(RequestRefused) as caught:
        check_request(req)
    assert caught.value.field == "messages[1].role"
    check_request(_request())  # a user-final conversation passes


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_depth_counts_containers_without_recursing() -> None:
    assert nesting_depth("x") == 0
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(_nested(100_000)) == 100_000  # far past Python's stack


def test_deeply_nested_tool_inputs_and_schemas_are_refused_before_any_call() -> None:
    use = ToolUseBlock(id="t1", name="browser_navigate", input={"q": _nested(MAX_NESTING - 1)})
    deep_use = ToolUseBlock(id="t1", name="browser_navigate", input={"q": _nested(5000)})
    check_request(_request(messages=[Message(role="user", content=[use])]))
    with pytest.raises(RequestRefused) as caught:
        check_request(
            _request(messages=[Message(role="user", content=[TextBlock(text="a"), deep_use])])
        )
    assert caught.value.field == "messages[0].content[1].input"
    schema = ToolDefinition(name="t", description="d", input_schema={"x": _nested(500)})
    with pytest.raises(RequestRefused) as caught:
        check_request(_request(tools=[TOOL, schema]))
    assert caught.value.field == "tools[1].input_schema"


def test_reply_content_round_trips_unchanged() -> None:
    blocks = [
        {"type": "thinking", "thinking": "", "signature": "abc"},
        {"type": "redacted_thinking", "data": "zzz"},
        {"type": "text", "text": "hello"},
        {"type": "tool_use", "id": "t1", "name": "n", "input": {"a": [1, {"b": None}]}},
    ]
    content = content_from_api(blocks)
    assert msgspec.to_builtins(content) == blocks


def test_unknown_block_types_are_unreadable() -> None:
    with pytest.raises(UnreadableReply, match="server_tool_use"):
        content_from_api([{"type": "server_tool_use", "id": "x", "name": "web", "input": {}}])


def test_a_block_that_is_no_object_is_unreadable_not_a_crash() -> None:
    # The SDK passes a server's non-object block through as it came; the service must
    # still answer `upstream` (and count the billed call), not fail on the block itself.
    with pytest.raises(UnreadableReply, match="str"):
        content_from_api([{"type": "text", "text": "hi"}, "hi"])  # type: ignore[list-item]


def test_usage_with_and_without_cache_breakdown() -> None:
    usage = usage_from_api(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 40,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
        }
    )
    assert (usage.input_tokens, usage.output_tokens) == (10, 5)
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (300, 200)
    assert usage.cache_read_tokens == 40
    assert usage.prompt_tokens == 350
    # Only the total, from a server without the breakdown: the TTL the request asked for.
    total_only = {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 70}
    assert usage_from_api(total_only, cache_ttl="1h").cache_write_1h_tokens == 70
    assert usage_from_api(total_only, cache_ttl="5m").cache_write_1h_tokens == 0
    assert usage_from_api(total_only).cache_write_1h_tokens == 0
    breakdown = {**total_only, "cache_creation": {"ephemeral_5m_input_tokens": 70}}
    assert usage_from_api(breakdown, cache_ttl="1h").cache_write_1h_tokens == 0  # its word
    bare = usage_from_api({"input_tokens": 3, "output_tokens": 4})
    assert (bare.cache_write_tokens, bare.cache_read_tokens, bare.cache_write_1h_tokens) == (
        0,
        0,
        0,
    )


def test_run_id_must_be_a_subject_token() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"messages":[{"role":"user","content":"x"}],"run_id":"a.b"}', type=CompleteRequest
        )


def test_requests_are_strict_at_every_depth_while_replies_and_transcripts_stay_tolerant() -> None:
    extra_block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    with pytest.raises(msgspec.ValidationError, match="unknown field `cache_control`"):
        msgspec.json.decode(
            msgspec.json.encode({"messages": [{"role": "user", "content": [extra_block]}]}),
            type=CompleteRequest,
        )
    # A reply from a newer llm service, or a transcript a newer runner stored, may carry
    # fields this version does not know: they must still be read, as the same classes.
    reply = msgspec.json.decode(
        msgspec.json.encode(
            {
                "id": "m",
                "model": "x",
                "content": [extra_block],
                "stop_reason": "end_turn",
                "usage": {},
                "cost_usd": 0.0,
            }
        ),
        type=CompleteReply,
    )
    assert isinstance(reply.content[0], TextBlock) and reply.content[0].text == "hi"
    transcript = msgspec.json.decode(
        msgspec.json.encode(
            {
                "run_id": "r",
                "task_id": "t",
                "entries": [
                    {
                        "at": "2026-01-01T00:00:00Z",
                        "kind": "message",
                        "message": {"role": "user", "content": [extra_block], "name": "n"},
                    }
                ],
            }
        ),
        type=Transcript,
    )
    message = transcript.entries[0].message
    assert message is not None and isinstance(message.content[0], TextBlock)
    assert content_from_api([extra_block]) == [TextBlock(text="hi")]
    # A request built in Python from those (tolerant) structs goes through unchanged.
    req = _request(messages=[Message(role="user", content=[TextBlock(text="hi")])], tools=[TOOL])
    again = msgspec.json.decode(msgspec.json.encode(req), type=CompleteRequest)
    assert msgspec.to_builtins(again) == msgspec.to_builtins(req)
    assert isinstance(again.messages[0], Message) and isinstance(again.tools[0], ToolDefinition)
