"""The stand-in's wire rules: the 400s of the current models, thinking signatures, token
estimates, prompt caching and the response shape."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.dev.standin import protocol
from services.dev.standin.conversation import Answer, ToolCall
from services.dev.standin.signing import DEFAULT_KEY

KEY = DEFAULT_KEY
TOOLS = [{"name": "browser_navigate", "description": "d", "input_schema": {"type": "object"}}]


def body(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 1000,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "Open http://x.test/ and report its title"}],
    }
    base.update(changes)
    return base


def tool_turn(key: bytes = KEY, redacted: bool = False) -> dict[str, Any]:
    """An assistant turn as the stand-in builds it."""
    call = ToolCall(
        "browser_navigate", {"url": "http://x.test/"}, preface="Let me look.", redacted=redacted
    )
    message = protocol.build_message(call, body(), key, protocol.PromptCache())
    return {"role": "assistant", "content": message["content"]}


def with_turn(turn: dict[str, Any]) -> dict[str, Any]:
    tool_id = next(b["id"] for b in turn["content"] if b["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": '{"title": "X"}'}
    return body(messages=[*body()["messages"], turn, {"role": "user", "content": [result]}])


def rejection(request: Any) -> str:
    with pytest.raises(protocol.ApiError) as caught:
        protocol.validate(request, KEY)
    assert caught.value.status == 400
    assert caught.value.error_type == "invalid_request_error"
    return caught.value.message


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"thinking": {"type": "disabled"}}, "disabled"),
        ({"tool_choice": {"type": "any"}}, "forced tool use"),
        ({"tool_choice": {"type": "tool", "name": "browser_navigate"}}, "forced tool use"),
        ({"temperature": 0.2}, "temperature"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 5}, "top_k"),
        ({"output_config": {"effort": "extreme"}}, "effort"),
        ({"stream": True}, "stream"),
        ({"model": ""}, "model"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        # The older Haiku and Sonnet answer 400 to effort, dated snapshots too.
        ({"model": "claude-haiku-4-5", "output_config": {"effort": "low"}}, "effort"),
        ({"model": "claude-sonnet-4-5-20250929", "output_config": {"effort": "high"}}, "effort"),
        ({"messages": []}, "at least one message"),
        ({"messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "first message"),
        ({"tools": [{"name": "t"}]}, "input_schema"),
    ],
)
def test_requests_the_current_models_refuse(changes: dict[str, Any], needle: str) -> None:
    assert needle in rejection(body(**changes))


def test_allowed_options_pass() -> None:
    protocol.validate(
        body(
            thinking={"type": "adaptive"},
            tool_choice={"type": "auto"},
            output_config={"effort": "low"},
            cache_control={"type": "ephemeral"},
        ),
        KEY,
    )
    protocol.validate(body(max_tokens=1), KEY)
    for model in ("claude-opus-4-5", "claude-haiku-5-5"):
        protocol.validate(body(model=model, output_config={"effort": "low"}), KEY)
    protocol.validate(body(model="claude-haiku-4-5"), KEY)  # no effort: fine


def test_assistant_prefill_is_refused() -> None:
    request = body(messages=[*body()["messages"], {"role": "assistant", "content": "Sure"}])
    assert "prefill" in rejection(request)


def test_an_intact_tool_turn_passes_and_any_change_is_refused() -> None:
    turn = tool_turn()
    protocol.validate(with_turn(turn), KEY)

    dropped = copy.deepcopy(turn)
    dropped["content"] = [b for b in dropped["content"] if b["type"] != "thinking"]
    assert "thinking blocks that were dropped" in rejection(with_turn(dropped))

    altered_thinking = copy.deepcopy(turn)
    altered_thinking["content"][0]["thinking"] = "I changed my mind"
    assert "Invalid `signature`" in rejection(with_turn(altered_thinking))

    altered_input = copy.deepcopy(turn)
    altered_input["content"][-1]["input"]["url"] = "http://evil.test/"
    assert "Invalid `signature`" in rejection(with_turn(altered_input))

    altered_text = copy.deepcopy(turn)
    altered_text["content"][1]["text"] = "Let me look again."
    assert "Invalid `signature`" in rejection(with_turn(altered_text))

    moved = copy.deepcopy(turn)
    moved["content"] = moved["content"][1:] + moved["content"][:1]
    assert "must come first" in rejection(with_turn(moved))

    other_key = tool_turn(key=b"another-server")
    assert "Invalid `signature`" in rejection(with_turn(other_key))


def test_redacted_thinking_is_verified_too() -> None:
    turn = tool_turn(redacted=True)
    assert [b["type"] for b in turn["content"]][:2] == ["thinking", "redacted_thinking"]
    protocol.validate(with_turn(turn), KEY)
    altered = copy.deepcopy(turn)
    altered["content"][1]["data"] = "forged"
    assert "redacted_thinking" in rejection(with_turn(altered))


def _without(turn: dict[str, Any], kind: str) -> dict[str, Any]:
    return {**turn, "content": [b for b in turn["content"] if b["type"] != kind]}


def _thinking_swapped(turn: dict[str, Any]) -> dict[str, Any]:
    first, second, *rest = turn["content"]
    return {**turn, "content": [second, first, *rest]}


def _redacted_twice(turn: dict[str, Any]) -> dict[str, Any]:
    first, second, *rest = turn["content"]
    return {**turn, "content": [first, second, second, *rest]}


@pytest.mark.parametrize(
    "change",
    [
        lambda turn: _without(turn, "redacted_thinking"),
        # Only the redacted block left: still a thinking block, but not the turn's own.
        lambda turn: _without(turn, "thinking"),
        _thinking_swapped,
        _redacted_twice,
    ],
    ids=["redacted dropped", "thinking dropped", "reordered", "duplicated"],
)
def test_the_thinking_sequence_of_a_turn_is_bound_whole(change: Any) -> None:
    turn = tool_turn(redacted=True)
    assert "Invalid `" in rejection(with_turn(change(turn)))


def test_a_forged_signature_with_any_character_is_a_400_not_a_crash() -> None:
    turn = copy.deepcopy(tool_turn())
    turn["content"][0]["signature"] = "standin1.ßigné"
    assert "Invalid `signature`" in rejection(with_turn(turn))


def test_tool_use_needs_its_tool_result_next() -> None:
    turn = tool_turn()
    request = body(messages=[*body()["messages"], turn, {"role": "user", "content": "well?"}])
    assert "without tool_result" in rejection(request)
    stray = body(
        messages=[
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
            }
        ]
    )
    assert "unexpected tool_use_id" in rejection(stray)


def test_not_json_objects_are_refused() -> None:
    assert "JSON object" in rejection([1, 2])
    assert "content" in rejection(body(messages=[{"role": "user", "content": 5}]))


def test_tool_call_message_shape_and_usage() -> None:
    message = protocol.build_message(
        ToolCall("browser_navigate", {"url": "u"}), body(), KEY, protocol.PromptCache()
    )
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["stop_reason"] == "tool_use"
    thinking, tool_use = message["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == ""
    assert thinking["signature"].startswith("standin1.")
    assert tool_use["type"] == "tool_use" and tool_use["id"].startswith("toolu_")
    assert message["usage"]["input_tokens"] == protocol.count_input_tokens(body())
    assert message["usage"]["output_tokens"] >= 1


def test_answers_are_cut_at_max_tokens() -> None:
    long_answer = Answer("word " * 200)
    message = protocol.build_message(long_answer, body(max_tokens=10), KEY, protocol.PromptCache())
    assert message["stop_reason"] == "max_tokens"
    assert len(message["content"][0]["text"]) == 40
    short = protocol.build_message(Answer("ok"), body(), KEY, protocol.PromptCache())
    assert short["stop_reason"] == "end_turn" and short["content"] == [
        {"type": "text", "text": "ok"}
    ]


def test_an_unsupported_answer_starts_with_a_server_tool_block() -> None:
    plain = protocol.build_message(Answer("ok"), body(), KEY, protocol.PromptCache())
    message = protocol.build_message(
        Answer("ok", unsupported=True), body(), KEY, protocol.PromptCache()
    )
    server_call, text = message["content"]
    assert server_call["type"] == "server_tool_use" and server_call["id"].startswith("srvtoolu_")
    assert text == {"type": "text", "text": "ok"}
    assert message["stop_reason"] == "end_turn"
    assert message["usage"] == plain["usage"]  # billed like any answer


def test_token_estimate_is_a_quarter_of_the_characters() -> None:
    assert protocol.estimate_tokens("") == 0
    assert protocol.estimate_tokens("abcd") == 1
    assert protocol.estimate_tokens("abcde") == 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_prompt_cache_writes_then_reads_and_expires() -> None:
    clock = Clock()
    cache = protocol.PromptCache(min_tokens=0, clock=clock)
    first = body(cache_control={"type": "ephemeral", "ttl": "5m"})
    total = protocol.count_input_tokens(first)
    written = cache.account(first)
    assert (written.cache_write_5m, written.cache_read, written.input_tokens) == (total, 0, 0)

    # The next turn shares the whole first prompt as its prefix.
    turn = tool_turn()
    second = with_turn(turn) | {"cache_control": {"type": "ephemeral", "ttl": "5m"}}
    total2 = protocol.count_input_tokens(second)
    read = cache.account(second)
    assert read.cache_read == total
    assert read.cache_write_5m == total2 - total
    assert read.input_tokens == 0

    clock.now += 301  # the first prefix expired (the second was written later: also 5m)
    again = cache.account(first)
    assert again.cache_read == 0 and again.cache_write_5m == total


def test_prompt_cache_one_hour_ttl_and_minimum_size() -> None:
    cache = protocol.PromptCache(min_tokens=0, clock=Clock())
    one_hour = cache.account(body(cache_control={"type": "ephemeral", "ttl": "1h"}))
    assert one_hour.cache_write_1h > 0 and one_hour.cache_write_5m == 0
    big_minimum = protocol.PromptCache(min_tokens=10_000, clock=Clock())
    small = big_minimum.account(body(cache_control={"type": "ephemeral"}))
    assert small.cache_write_5m == small.cache_read == 0
    no_marker = protocol.PromptCache(min_tokens=0).account(body())
    assert no_marker.input_tokens == protocol.count_input_tokens(body())


def _tool_id(turn: dict[str, Any]) -> str:
    return str(next(b["id"] for b in turn["content"] if b["type"] == "tool_use"))


def _result(turn: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": _tool_id(turn), "content": "ok"}


def test_a_tool_result_answers_only_the_turn_just_before_it() -> None:
    # The API: "Each `tool_result` block must have a corresponding `tool_use` block in the
    # previous message" -- a result for an older call (resent, or kept by mistake) is a 400.
    first, second = tool_turn(), tool_turn()
    prompt = body()["messages"]
    request = body(
        messages=[
            *prompt,
            first,
            {"role": "user", "content": [_result(first)]},
            second,
            {"role": "user", "content": [_result(second), _result(first)]},
        ]
    )
    assert "unexpected tool_use_id" in rejection(request)
    after_a_user_turn = body(
        messages=[
            *prompt,
            first,
            {"role": "user", "content": [_result(first)]},
            {"role": "user", "content": [_result(first)]},
        ]
    )
    assert "unexpected tool_use_id" in rejection(after_a_user_turn)


def test_tool_results_come_first_in_the_turn_after_the_calls() -> None:
    # The API: "Did not find 1 tool_result block(s) at the beginning of this message".
    turn = tool_turn()
    note = {"type": "text", "text": "Here is what the tool said:"}
    request = body(
        messages=[*body()["messages"], turn, {"role": "user", "content": [note, _result(turn)]}]
    )
    assert "at the beginning of this message" in rejection(request)
    after = body(
        messages=[*body()["messages"], turn, {"role": "user", "content": [_result(turn), note]}]
    )
    protocol.validate(after, KEY)


def _answered(assistant: Any, then: Any = "and now?") -> dict[str, Any]:
    return body(
        messages=[
            *body()["messages"],
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": then},
        ]
    )


@pytest.mark.parametrize(
    ("request_", "needle"),
    [
        (body(messages=[{"role": "user", "content": ""}]), "user messages must have non-empty"),
        (body(messages=[{"role": "user", "content": []}]), "user messages must have non-empty"),
        (body(messages=[{"role": "user", "content": "\n"}]), "non-whitespace text"),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": ""}, {"type": "text", "text": "x"}],
                    }
                ]
            ),
            "text content blocks must be non-empty",
        ),
        (_answered([{"type": "text", "text": ""}]), "text content blocks must be non-empty"),
        (_answered([{"type": "text", "text": " "}]), "non-whitespace text"),
        (
            body(system=[{"type": "text", "text": ""}]),
            "system: text content blocks must be non-empty",
        ),
        (body(system="  "), "system: text content blocks must contain non-whitespace text"),
    ],
)
def test_empty_text_is_refused_like_the_api_does(request_: dict[str, Any], needle: str) -> None:
    # What the API answers 400 (it may itself return an empty text block beside a tool
    # call, but refuses it when the turn comes back).
    assert needle in rejection(request_)


def test_empty_text_the_api_accepts_passes() -> None:
    protocol.validate(_answered([]), KEY)  # an empty assistant turn (an empty answer)
    protocol.validate(_answered(""), KEY)
    protocol.validate(
        _answered([{"type": "text", "text": " "}, {"type": "text", "text": "ok"}]), KEY
    )
    protocol.validate(body(system=""), KEY)
    user = [{"type": "text", "text": "hi"}, {"type": "text", "text": " "}]
    protocol.validate(body(messages=[{"role": "user", "content": user}]), KEY)
    turn = tool_turn()
    for content in ("", [], [{"type": "text", "text": ""}]):  # empty tool output is fine
        result = {**_result(turn), "content": content}
        protocol.validate(
            body(messages=[*body()["messages"], turn, {"role": "user", "content": [result]}]), KEY
        )
