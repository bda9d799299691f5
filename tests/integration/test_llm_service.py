"""The llm service over real NATS, calling the stand-in model over HTTP through the real
anthropic SDK: tool conversations, pricing, usage events, retries, thinking blocks,
structured errors, concurrency, and keeping the API key out of everything."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import nats.errors
import pytest
from structlog.testing import capture_logs

from contracts import subjects as s
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    Message,
    ModelsReply,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    UsageEvent,
)
from services.dev.standin.scripts import CANDIDATE_SELECTORS
from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.embedded_nats import free_port
from services.kernel.errors import RemoteError
from services.kernel.pricing import load_price_table
from services.kernel.runtime import Stack, open_stack
from services.kernel.settings import Settings
from services.llm.calls import CallFailed, ModelCaller, make_client

pytestmark = pytest.mark.anyio

TOOLS = [
    ToolDefinition(name=name, description=name, input_schema={"type": "object"})
    for name in ("browser_navigate", "browser_extract", "browser_click", "browser_read_page")
]
PROMPT = "Open http://news.test/ and report the top 3 headlines."
HEADLINES = ["Rain returns", "Markets calm", "Cats win cup", "Fourth story"]
# The v1 layout of a page: only the third candidate selector matches.
MATCHING_SELECTOR = CANDIDATE_SELECTORS[2]
PRICES = load_price_table(None)
SECRET = "rote-it-secret-key-4f9d2c"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandinServer]:
    with StandinServer(min_cache_tokens=0) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-secret")
        yield server


@asynccontextmanager
async def llm(settings: Settings, **changes: Any) -> AsyncIterator[Stack]:
    async with open_stack(settings.with_(**changes), ["llm"]) as stack:
        yield stack


def tool_output(block: ToolUseBlock) -> Any:
    if block.name == "browser_navigate":
        return {"url": block.input["url"], "status": 200, "title": "News"}
    return HEADLINES if block.input.get("selector") == MATCHING_SELECTOR else []


async def complete(bus: Bus, messages: list[Message], **fields: Any) -> CompleteReply:
    req = CompleteRequest(messages=messages, tools=TOOLS, **fields)
    return await bus.request(s.LLM_COMPLETE, req, CompleteReply, timeout=30)


async def run_conversation(bus: Bus, **fields: Any) -> tuple[list[Message], list[CompleteReply]]:
    """Play the runner: call the model, run the (canned) tools, repeat to end_turn."""
    messages = [Message(role="user", content=PROMPT)]
    replies: list[CompleteReply] = []
    for _ in range(15):
        reply = await complete(bus, messages, **fields)
        replies.append(reply)
        messages.append(Message(role="assistant", content=reply.content))
        if reply.stop_reason != "tool_use":
            return messages, replies
        results: list[Any] = [
            ToolResultBlock(tool_use_id=block.id, content=json.dumps(tool_output(block)))
            for block in reply.content
            if isinstance(block, ToolUseBlock)
        ]
        messages.append(Message(role="user", content=results))
    raise AssertionError("the conversation never ended")


async def usage_events(
    bus: Bus, run: str, expected: int
) -> list[tuple[dict[str, str], UsageEvent]]:
    sub = await bus.js.subscribe(s.llm_event(run, "usage"), ordered_consumer=True)
    out = []
    try:
        for _ in range(expected):
            msg = await sub.next_msg(timeout=5)
            out.append((dict(msg.headers or {}), decode(msg.data, UsageEvent)))
        with pytest.raises(nats.errors.TimeoutError):  # and no more than that
            await sub.next_msg(timeout=0.3)
    finally:
        await sub.unsubscribe()
    return out


def expected_cost(model_id: str, reply: CompleteReply) -> float:
    price = PRICES.price(model_id)
    assert price is not None
    band = price.bands[-1] if len(price.bands) == 1 else None
    if band is None:
        band = next(
            b
            for b in price.bands
            if b.up_to_prompt_tokens is None or reply.usage.prompt_tokens <= b.up_to_prompt_tokens
        )
    u = reply.usage
    return (
        (u.input_tokens + 1.25 * (u.cache_write_tokens - u.cache_write_1h_tokens))
        * band.input_per_mtok
        + 2.0 * u.cache_write_1h_tokens * band.input_per_mtok
        + 0.1 * u.cache_read_tokens * band.input_per_mtok
        + u.output_tokens * band.output_per_mtok
    ) / 1_000_000


# --- conversations ----------------------------------------------------------------------


async def test_multi_turn_tool_conversation_completes_with_usage_and_cost(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        _, replies = await run_conversation(bus, model="sonnet", run_id="run-1")
    final = replies[-1]
    assert final.stop_reason == "end_turn"
    assert final.content == [
        TextBlock(text="Top 3 headlines:\n1. Rain returns\n2. Markets calm\n3. Cats win cup")
    ]
    # navigate, two empty probes, the probe that matched, the answer
    assert [r.stop_reason for r in replies] == ["tool_use"] * 4 + ["end_turn"]
    calls = [(b.name, b.input) for r in replies for b in r.content if isinstance(b, ToolUseBlock)]
    assert calls == [
        ("browser_navigate", {"url": "http://news.test/"}),
        ("browser_extract", {"selector": CANDIDATE_SELECTORS[0]}),
        ("browser_extract", {"selector": CANDIDATE_SELECTORS[1]}),
        ("browser_extract", {"selector": CANDIDATE_SELECTORS[2]}),
    ]
    for reply in replies:
        assert reply.model == "claude-sonnet-5-5"
        assert reply.attempts == 1
        assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
        assert reply.cost_usd == pytest.approx(
            (reply.usage.input_tokens * 2 + reply.usage.output_tokens * 10) / 1_000_000
        )
    # The prompt grows every turn, and so does what it costs.
    inputs = [r.usage.input_tokens for r in replies]
    assert inputs == sorted(inputs) and len(set(inputs)) == len(inputs)
    # Nothing the 5.5 models refuse reached the API.
    for sent in standin.received:
        assert not {"thinking", "tool_choice", "temperature", "top_p", "top_k"} & set(sent)
        assert sent["messages"][-1]["role"] == "user"
        assert sent["model"] == "claude-sonnet-5-5"


async def test_haiku_cost_uses_its_band_and_effort_reaches_the_api(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        reply = await complete(
            bus, [Message(role="user", content=PROMPT)], model="haiku", effort="low"
        )
    assert reply.model == "claude-haiku-5-5"
    assert reply.cost_usd == pytest.approx(
        (reply.usage.input_tokens * 0.10 + reply.usage.output_tokens * 0.50) / 1_000_000
    )
    assert standin.received[-1]["output_config"] == {"effort": "low"}


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-haiku-4-5-20251001"])
async def test_effort_is_not_sent_to_older_models_that_refuse_it(
    settings: Settings, bus: Bus, standin: StandinServer, model: str
) -> None:
    async with llm(settings, llm_max_attempts=1):
        reply = await complete(
            bus, [Message(role="user", content=PROMPT)], model=model, effort="low"
        )
    assert reply.stop_reason == "tool_use"
    assert "output_config" not in standin.received[-1]


async def test_prompt_caching_is_priced_with_the_cache_multipliers(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        # Different models: the cache is per model, so one run cannot read another's.
        _, hour = await run_conversation(bus, model="opus", cache="1h")
        _, five = await run_conversation(bus, model="sonnet", cache="5m")
        _, plain = await run_conversation(bus, model="sonnet")
    assert standin.received[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour[0].usage.cache_write_tokens > 0
    assert hour[0].usage.cache_write_1h_tokens == hour[0].usage.cache_write_tokens
    assert five[0].usage.cache_write_tokens > 0 and five[0].usage.cache_write_1h_tokens == 0
    assert all(r.usage.cache_read_tokens > 0 for r in hour[1:] + five[1:])
    assert all(r.usage.cache_write_tokens == r.usage.cache_read_tokens == 0 for r in plain)
    for reply in hour:
        assert reply.cost_usd == pytest.approx(expected_cost("claude-opus-5-5", reply))
    for reply in five + plain:
        assert reply.cost_usd == pytest.approx(expected_cost("claude-sonnet-5-5", reply))
    # Same conversation, same tokens: reading the growing prefix from the cache makes the
    # whole run cheaper than sending it fresh every turn.
    assert [r.usage.prompt_tokens for r in five] == [r.usage.prompt_tokens for r in plain]
    assert sum(r.cost_usd for r in five) < sum(r.cost_usd for r in plain)


async def test_usage_events_are_published_with_the_right_cost(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        _, replies = await run_conversation(
            bus, model="sonnet", run_id="run-ev", task_id="task-ev", purpose="full_llm"
        )
        adhoc = await complete(bus, [Message(role="user", content="hello")], model="haiku")
        events = await usage_events(bus, "run-ev", len(replies))
        adhoc_events = await usage_events(bus, "adhoc", 1)
    assert [e.cost_usd for _, e in events] == [r.cost_usd for r in replies]
    assert [e.usage for _, e in events] == [r.usage for r in replies]
    msg_ids = {h["Nats-Msg-Id"] for h, _ in events}
    assert len(msg_ids) == len(events)
    for _, event in events:
        assert (event.run_id, event.task_id, event.purpose) == ("run-ev", "task-ev", "full_llm")
        assert event.model == "claude-sonnet-5-5" and event.attempts == 1
    headers, adhoc_event = adhoc_events[0]
    assert adhoc_event.run_id == "adhoc" and adhoc_event.cost_usd == adhoc.cost_usd
    assert headers["Nats-Msg-Id"]


# --- failures ---------------------------------------------------------------------------


async def test_overloaded_twice_then_success_is_one_reply_with_attempts_counted(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    standin.inject(statuses=[529, 529])  # no retry-after: our own backoff applies
    async with llm(settings, llm_max_attempts=4):
        reply = await complete(bus, [Message(role="user", content=PROMPT)], run_id="run-r")
        ((_, event),) = await usage_events(bus, "run-r", 1)
    assert reply.attempts == 3 and reply.stop_reason == "tool_use"
    assert event.attempts == 3
    stats = standin.stats()
    assert stats["messages:529"] == 2 and stats["messages:200"] == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [(529, "overloaded"), (429, "rate_limited"), (500, "upstream"), (503, "upstream")],
)
async def test_retryable_failures_give_up_after_the_configured_attempts(
    settings: Settings, bus: Bus, standin: StandinServer, status: int, code: str
) -> None:
    standin.inject(statuses=[status] * 5, retry_after_ms=10)
    async with llm(settings, llm_max_attempts=3):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content=PROMPT)])
    assert caught.value.code == code
    assert caught.value.info.details is not None
    assert caught.value.info.details["attempts"] == 3
    assert caught.value.info.details["status"] == status
    assert standin.stats()["messages"] == 3


async def test_bad_request_is_invalid_request_at_once(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    standin.inject(statuses=[400])
    async with llm(settings, llm_max_attempts=4):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content=PROMPT)])
        assert caught.value.code == "invalid_request"
        assert caught.value.info.details is not None
        assert caught.value.info.details["attempts"] == 1
        assert standin.stats()["messages"] == 1
        # The next call is fine: the failure was the request's, not the service's.
        assert (await complete(bus, [Message(role="user", content=PROMPT)])).content


async def test_unreachable_api_is_upstream_after_retries(
    settings: Settings, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-unreachable")
    async with llm(settings, llm_max_attempts=2):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content=PROMPT)])
    assert caught.value.code == "upstream"
    assert caught.value.info.details == {"attempts": 2, "model": "claude-sonnet-5-5"}


async def test_marker_failure_reaches_the_caller(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings, llm_max_attempts=1):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content="do it [standin:fail:529]")])
    assert caught.value.code == "overloaded"


# --- thinking blocks --------------------------------------------------------------------


async def test_thinking_blocks_survive_a_multi_turn_conversation_unchanged(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        _, replies = await run_conversation(bus, model="sonnet")
    assert replies[-1].stop_reason == "end_turn"
    thinking = [b for r in replies for b in r.content if isinstance(b, ThinkingBlock)]
    assert len(thinking) == 4 and all(b.thinking == "" and b.signature for b in thinking)
    # What the stand-in received as each earlier assistant turn is exactly the reply the
    # service handed back, block for block.
    last_request = standin.received[-1]["messages"]
    sent_turns = [m["content"] for m in last_request if m["role"] == "assistant"]
    assert sent_turns == [msgspec.to_builtins(r.content) for r in replies[:-1]]


async def test_redacted_thinking_survives_too(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        # A marker only counts in the task prompt, not the system prompt.
        _, plain = await run_conversation(bus, model="sonnet", system="[standin:redacted]")
        assert not any(
            type(b).__name__ == "RedactedThinkingBlock" for r in plain for b in r.content
        )
        redacted_prompt = PROMPT + " [standin:redacted]"
        first = await complete(bus, [Message(role="user", content=redacted_prompt)])
        types = [type(b).__name__ for b in first.content]
        assert types[:2] == ["ThinkingBlock", "RedactedThinkingBlock"]
        tool_use = next(b for b in first.content if isinstance(b, ToolUseBlock))

        def conversation(turn: list[Any]) -> list[Message]:
            result = ToolResultBlock(
                tool_use_id=tool_use.id, content=json.dumps(tool_output(tool_use))
            )
            return [
                Message(role="user", content=redacted_prompt),
                Message(role="assistant", content=turn),
                Message(role="user", content=[result]),
            ]

        second = await complete(bus, conversation(first.content))
        # Left with only its redacted_thinking, the turn is not the one the model wrote.
        only_redacted = [b for b in first.content if not isinstance(b, ThinkingBlock)]
        with pytest.raises(RemoteError, match="redacted_thinking") as caught:
            await complete(bus, conversation(only_redacted))
    assert second.stop_reason == "tool_use"
    assert caught.value.code == "invalid_request"


async def test_dropped_or_altered_thinking_comes_back_as_invalid_request(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings, llm_max_attempts=4):
        messages, _ = await run_conversation(bus)
        upto = messages[:5]  # prompt, turn, results, turn, results

        dropped = copy.deepcopy(upto)
        dropped[3].content = [b for b in dropped[3].content if not isinstance(b, ThinkingBlock)]  # type: ignore[union-attr]
        before = standin.stats()["messages"]
        with pytest.raises(RemoteError) as caught:
            await complete(bus, dropped)
        assert caught.value.code == "invalid_request"
        assert "thinking" in caught.value.message
        assert caught.value.info.details is not None
        assert caught.value.info.details["attempts"] == 1
        assert standin.stats()["messages"] == before + 1  # not retried

        altered = copy.deepcopy(upto)
        block = altered[1].content[0]  # type: ignore[index]
        assert isinstance(block, ThinkingBlock)
        block.signature = block.signature[:-2] + "xx"
        with pytest.raises(RemoteError, match="signature") as caught:
            await complete(bus, altered)
        assert caught.value.code == "invalid_request"

        # The untouched conversation still goes through.
        assert (await complete(bus, upto)).content


# --- malformed requests -----------------------------------------------------------------


async def test_malformed_requests_get_structured_errors_and_the_service_stays_up(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    good = {"messages": [{"role": "user", "content": "hello"}]}
    cases: list[tuple[bytes, str, str | None]] = [
        (b"{not json", "malformed", None),
        (b"{}", "invalid_request", None),
        (json.dumps({**good, "temperature": 0.5}).encode(), "invalid_request", "temperature"),
        (json.dumps({"messages": []}).encode(), "invalid_request", "messages"),
        (json.dumps({**good, "max_tokens": 0}).encode(), "invalid_request", "max_tokens"),
        (json.dumps({**good, "run_id": "a.b"}).encode(), "invalid_request", "run_id"),
        (json.dumps({**good, "effort": "huge"}).encode(), "invalid_request", "effort"),
        (
            json.dumps(
                {"messages": [{"role": "user", "content": [{"type": "picture", "x": 1}]}]}
            ).encode(),
            "invalid_request",
            "messages[0].content",
        ),
        (
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "prefill"},
                    ]
                }
            ).encode(),
            "invalid_request",
            "messages[1].role",
        ),
    ]
    async with llm(settings):
        for data, code, field in cases:
            msg = await bus.nc.request(s.LLM_COMPLETE, data, timeout=10)
            assert msg.headers is not None, data
            assert msg.headers["Nats-Service-Error-Code"] == "400", data
            body = json.loads(msg.data)
            assert body["error"]["code"] == code, (data, body)
            if field is not None:
                assert field in (body["error"].get("field") or ""), (data, body)
            assert "Traceback" not in msg.data.decode()
        # None of that reached the model, and the service still answers.
        assert standin.stats().get("messages", 0) == 0
        reply = await bus.request(
            s.LLM_COMPLETE,
            CompleteRequest(**good),
            CompleteReply,
            timeout=10,  # type: ignore[arg-type]
        )
        assert reply.stop_reason == "end_turn"


def _nested_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def test_deeply_nested_requests_are_invalid_not_internal(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    def tool_use(depth: int) -> bytes:
        return (
            b'{"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", '
            b'"name": "b", "input": {"q": ' + _nested_json(depth) + b"}}]}]}"
        )

    schema = (
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", '
        b'"description": "d", "input_schema": {"x": ' + _nested_json(200_000) + b"}}]}"
    )
    cases = [
        (tool_use(5000), None),  # deeper than the decoder's stack
        (tool_use(500), "messages[0].content[0].input"),  # decoded, then refused
        (schema, None),
    ]
    async with llm(settings):
        for data, field in cases:
            msg = await bus.nc.request(s.LLM_COMPLETE, data, timeout=30)
            assert msg.headers is not None
            assert msg.headers["Nats-Service-Error-Code"] == "400"
            error = json.loads(msg.data)["error"]
            assert error["code"] == "invalid_request", error
            assert "nested" in error["message"]
            if field is not None:
                assert error["field"] == field
        assert standin.stats().get("messages", 0) == 0
        reply = await complete(bus, [Message(role="user", content="still there?")])
        assert reply.content


async def test_unknown_fields_inside_a_request_are_refused_by_name(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    """Nested structs reject unknown fields like the command around them: a stray
    cache_control on a block is an error naming it, never silently dropped."""
    text = {"type": "text", "text": "hello"}
    tool = {"name": "browser_navigate", "description": "open", "input_schema": {}}
    thinking = {"type": "thinking", "thinking": "", "signature": "c2ln"}
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"messages": [{"role": "user", "content": [{**text, "cache_control": {}}]}]},
            "messages[0].content[0].cache_control",
        ),
        ({"messages": [{"role": "user", "content": "hi", "nmae": "x"}]}, "messages[0].nmae"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "tools": [{**tool, "strict": True}]},
            "tools[0].strict",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{**thinking, "signatur": "x"}]},
                    {"role": "user", "content": "go on"},
                ]
            },
            "messages[1].content[0].signatur",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_1",
                                "content": [{**text, "citations": []}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0].citations",
        ),
    ]
    async with llm(settings):
        for body, field in cases:
            msg = await bus.nc.request(s.LLM_COMPLETE, json.dumps(body).encode(), timeout=10)
            assert msg.headers is not None, field
            assert msg.headers["Nats-Service-Error-Code"] == "400", field
            name = field.rsplit(".", 1)[1]
            assert f"unknown field `{name}`" in msg.headers["Nats-Service-Error"], field
            error = json.loads(msg.data)["error"]
            assert (error["code"], error["field"]) == ("invalid_request", field)
        # Nothing reached the model, and the service still answers, the same request
        # without the stray field included.
        assert standin.stats().get("messages", 0) == 0
        reply = await complete(bus, [Message(role="user", content=[TextBlock(text="hello")])])
        assert reply.stop_reason == "end_turn"


async def test_a_reply_rote_cannot_carry_is_upstream_but_its_usage_is_counted(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        with pytest.raises(RemoteError) as caught:
            await complete(
                bus,
                [Message(role="user", content="hello [standin:unsupported]")],
                run_id="run-u",
                task_id="task-u",
                purpose="full_llm",
            )
        ((headers, event),) = await usage_events(bus, "run-u", 1)
        # The service goes on answering.
        assert (await complete(bus, [Message(role="user", content="hello")])).content
    error = caught.value
    assert error.code == "upstream" and "server_tool_use" in error.message
    # The API answered (and billed) once: a 200, not a failure to retry.
    assert standin.stats()["messages:200"] == 2
    assert (event.run_id, event.task_id, event.purpose) == ("run-u", "task-u", "full_llm")
    assert event.model == "claude-sonnet-5-5" and event.attempts == 1
    assert event.usage.input_tokens > 0 and event.usage.output_tokens > 0
    assert event.cost_usd == pytest.approx(
        (event.usage.input_tokens * 2 + event.usage.output_tokens * 10) / 1_000_000
    )
    assert headers["Nats-Msg-Id"]
    # The caller learns what the failed call cost, too.
    assert error.info.details == {
        "attempts": 1,
        "model": "claude-sonnet-5-5",
        "cost_usd": event.cost_usd,
        "usage": msgspec.to_builtins(event.usage),
    }


# --- repeated calls ---------------------------------------------------------------------


async def test_a_call_sent_again_under_its_call_id_is_answered_once(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    """A runner re-sends a call whose reply a reconnect may have lost: the repeat, while
    the call runs or after it ended, gets the same reply; the model is called once and
    one usage event counts it."""
    standin.inject(latency_ms=500, latency_count=1)
    fields: dict[str, Any] = {"run_id": "run-rep", "task_id": "task-rep", "call_id": "a1-t1"}
    messages = [Message(role="user", content=PROMPT)]
    async with llm(settings):
        replies: list[CompleteReply] = []

        async def one() -> None:
            replies.append(await complete(bus, messages, **fields))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.2)  # the first is with the model now
            tg.start_soon(one)
        replies.append(await complete(bus, messages, **fields))  # after it ended
        ((_, event),) = await usage_events(bus, "run-rep", 1)

        # The same call_id in another run, or no call_id, is another call.
        other = await complete(bus, messages, **{**fields, "run_id": "run-other"})
        plain = await complete(bus, messages, run_id="run-rep")
        # The same call_id for a different request is refused, not answered wrongly.
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content="hello")], **fields)
    assert standin.stats()["messages"] == 3
    assert len({msgspec.json.encode(r) for r in replies}) == 1 and len(replies) == 3
    assert event.cost_usd == replies[0].cost_usd > 0
    assert other.id != replies[0].id and plain.id != replies[0].id
    assert (caught.value.code, caught.value.info.field) == ("invalid_request", "call_id")


async def test_models_lists_aliases_ids_and_prices(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    async with llm(settings):
        listing = await bus.request(s.LLM_MODELS, b"{}", ModelsReply)
    assert listing.aliases["haiku"] == "claude-haiku-5-5"
    haiku = next(m for m in listing.models if m.id == "claude-haiku-5-5")
    assert [(b.input_per_mtok, b.output_per_mtok) for b in haiku.bands] == [(0.1, 0.5), (0.5, 2.5)]


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
async def test_price_file_changes_aliases_and_costs(
    settings: Settings, bus: Bus, standin: StandinServer, tmp_path: Any
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {
                "aliases": {"sonnet": "claude-sonnet-4-5"},
                "models": [
                    {
                        "id": "claude-sonnet-4-5",
                        "bands": [{"input_per_mtok": 1000, "output_per_mtok": 0}],
                    }
                ],
            }
        )
    )
    async with llm(settings, prices_file=prices):
        reply = await complete(bus, [Message(role="user", content="hi")], model="sonnet")
    assert reply.model == "claude-sonnet-4-5"
    assert reply.cost_usd == pytest.approx(reply.usage.input_tokens * 1000 / 1_000_000)


async def test_a_model_gone_after_its_retirement_says_so(
    settings: Settings,
    bus: Bus,
    standin: StandinServer,
    tmp_path: Any,
) -> None:
    """The API's 404 names the model but not why it is gone; the price table knows, and
    the service warns of the alias as it starts."""
    prices = tmp_path / "prices.json"
    band = {"input_per_mtok": 1.0, "output_per_mtok": 5.0}
    old = {"id": "claude-sonnet-4-1", "retires_on": "2026-01-05", "bands": [band]}
    prices.write_text(json.dumps({"aliases": {"sonnet": "claude-sonnet-4-1"}, "models": [old]}))
    standin.inject(statuses=[404, 404])
    with capture_logs() as logs:
        async with llm(settings, prices_file=prices):
            pass
    assert [(e["alias"], e["notice"]) for e in logs if e["event"] == "model_retiring"] == [
        ("sonnet", "claude-sonnet-4-1 was retired on 2026-01-05")
    ]
    async with llm(settings, prices_file=prices):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content="hi")], model="sonnet")
        assert caught.value.code == "invalid_request"
        assert caught.value.message.endswith(
            "(claude-sonnet-4-1 was retired on 2026-01-05: point the alias at a current model"
            " in ROTE_PRICES_FILE)"
        )
        # Any other model's 404 is the API's word alone.
        with pytest.raises(RemoteError) as other:
            await complete(bus, [Message(role="user", content="hi")], model="haiku")
        assert other.value.code == "invalid_request" and "retired" not in other.value.message


# The smallest call the budget tests make, straight to the caller (no service).
SAY_HI = {
    "model": "claude-haiku-5-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


async def call_failing_within(budget_s: float) -> tuple[CallFailed, list[float]]:
    """SAY_HI through a caller with this total budget (4 attempts allowed): how it
    failed, and the waits it slept before retries."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await anyio.sleep(seconds)

    caller = ModelCaller(
        make_client(), concurrency=1, max_attempts=4, budget_s=budget_s, sleep=sleep
    )
    try:
        with pytest.raises(CallFailed) as caught:
            await caller.call(SAY_HI)
    finally:
        await caller.aclose()
    return caught.value, waits


async def test_a_call_ends_within_its_budget_however_slow_the_api(
    standin: StandinServer,
) -> None:
    standin.inject(latency_ms=10_000)
    failed, _ = await call_failing_within(budget_s=1.0)
    # Cut off by the budget: a call that waited out the API's 10 s would have its answer.
    assert failed.failure.code == "timeout"
    assert "budget of 1s" in failed.failure.message
    assert failed.attempts == 1


async def test_no_retry_is_started_that_the_budget_cannot_wait_for(
    standin: StandinServer,
) -> None:
    # The server asks for a 30 s pause; the budget has 10 s: give up with its answer.
    standin.inject(statuses=[529] * 4, retry_after_ms=30_000)
    failed, waits = await call_failing_within(budget_s=10.0)
    assert waits == []  # not even a wait for the retry it would not make
    assert (failed.failure.code, failed.attempts) == ("overloaded", 1)
    assert standin.stats()["messages"] == 1


# --- concurrency ------------------------------------------------------------------------


async def test_concurrency_limit_per_process(
    settings: Settings, bus: Bus, standin: StandinServer
) -> None:
    standin.inject(latency_ms=150)
    async with llm(settings, llm_concurrency=2):
        replies: list[CompleteReply] = []

        async def one(i: int) -> None:
            replies.append(await complete(bus, [Message(role="user", content=f"hi {i}")]))

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
    assert len(replies) == 6
    assert standin.stats()["max_in_flight"] == 2


# --- secrets ----------------------------------------------------------------------------


async def test_the_api_key_appears_in_no_log_event_or_error(
    settings: Settings,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    written_logs: list[dict[str, Any]],
) -> None:
    with StandinServer(api_key=SECRET) as standin:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", standin.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
        async with llm(settings, llm_max_attempts=2):
            ok = await complete(bus, [Message(role="user", content="hi")], run_id="run-s")
            # The server now wants another key, and (like some proxies) echoes the one
            # it got in its 401.
            standin.api_key = "a-different-key-123"
            raw = await bus.nc.request(
                s.LLM_COMPLETE,
                msgspec.json.encode(
                    CompleteRequest(messages=[Message(role="user", content="hi")], run_id="run-s")
                ),
                timeout=10,
            )
            standin.inject(statuses=[529, 529])
            with pytest.raises(RemoteError):
                await complete(bus, [Message(role="user", content="hi")])
            events = await usage_events(bus, "run-s", 1)
    assert ok.stop_reason == "end_turn"
    error = json.loads(raw.data)["error"]
    assert error["code"] == "auth"
    assert "[redacted]" in error["message"]  # the echoed key was there, and masked
    everything = [
        raw.data.decode(),
        json.dumps(dict(raw.headers or {})),
        *(json.dumps(h) + msgspec.json.encode(e).decode() for h, e in events),
        *(json.dumps(entry, default=str) for entry in written_logs),
    ]
    assert any("llm_call_failed" in line for line in everything)  # logs were captured
    for line in everything:
        assert SECRET not in line


@pytest.mark.parametrize(
    ("key", "telling"),
    [
        ("rote-it-crlf-key-77a1\r\n", "crlf-key"),  # an env file with Windows line ends
        ("k3y!", "k3y!"),  # short keys are keys too
    ],
)
async def test_a_key_with_stray_whitespace_works_and_no_form_of_a_key_leaks(
    settings: Settings,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    written_logs: list[dict[str, Any]],
    key: str,
    telling: str,
) -> None:
    with StandinServer(api_key=key.strip()) as standin:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", standin.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        async with llm(settings, llm_max_attempts=3):
            ok = await complete(bus, [Message(role="user", content="hi")])
            # The server now wants another key and echoes the one it got in its 401.
            standin.api_key = "a-different-key-123"
            raw = await bus.nc.request(
                s.LLM_COMPLETE,
                msgspec.json.encode(CompleteRequest(messages=[Message(role="user", content="hi")])),
                timeout=10,
            )
    assert ok.stop_reason == "end_turn"
    error = json.loads(raw.data)["error"]
    assert (error["code"], error["details"]["attempts"]) == ("auth", 1)
    assert "[redacted]" in error["message"]
    everything = [raw.data.decode(), *(json.dumps(e, default=str) for e in written_logs)]
    assert any("llm_call_failed" in line for line in everything)
    for line in everything:
        assert telling not in line, line


async def test_a_key_no_header_can_carry_is_auth_at_once_without_quoting_it(
    settings: Settings,
    bus: Bus,
    standin: StandinServer,
    monkeypatch: pytest.MonkeyPatch,
    written_logs: list[dict[str, Any]],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "rote-it-split\rkey-88")  # a line break inside
    async with llm(settings, llm_max_attempts=3):
        with pytest.raises(RemoteError) as caught:
            await complete(bus, [Message(role="user", content="hi")])
    assert caught.value.code == "auth"
    assert caught.value.info.details == {"attempts": 1, "model": "claude-sonnet-5-5"}
    assert "ANTHROPIC_API_KEY" in caught.value.info.message
    everything = [caught.value.info.message, *(json.dumps(e, default=str) for e in written_logs)]
    for line in everything:
        assert "split" not in line and "key-88" not in line, line
