"""The stand-in model over real HTTP with the real anthropic SDK: a tool conversation,
the refusals of the current models, fault injection, its honest index page, and
`rote model serve`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import anthropic
import pytest

from services.dev.standin.server import StandinServer

TOOLS = [
    {"name": name, "description": name, "input_schema": {"type": "object"}}
    for name in ("browser_navigate", "browser_extract", "browser_click", "browser_read_page")
]
PROMPT = "Open http://news.test/ and report the top 2 headlines."


@pytest.fixture
def standin() -> Iterator[StandinServer]:
    with StandinServer() as server:
        yield server


@pytest.fixture
def client(standin: StandinServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=standin.url, api_key="test-key", max_retries=0)


def fake_tool(block: dict[str, Any]) -> Any:
    if block["name"] == "browser_navigate":
        return {"url": block["input"]["url"], "status": 200, "title": "News"}
    return ["First story", "Second story"] if block["input"]["selector"] == "h2" else []


def converse(client: anthropic.Anthropic, **extra: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for _ in range(12):
        reply = client.messages.create(
            model="claude-sonnet-5-5", max_tokens=2000, messages=messages, tools=TOOLS, **extra
        )
        content = reply.model_dump(mode="json", exclude_none=True)["content"]
        messages.append({"role": "assistant", "content": content})
        if reply.stop_reason != "tool_use":
            return messages
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": json.dumps(fake_tool(b))}
            for b in content
            if b["type"] == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
    raise AssertionError("no end_turn")


def test_sdk_tool_conversation_to_an_answer(client: anthropic.Anthropic) -> None:
    messages = converse(client, output_config={"effort": "low"}, thinking={"type": "adaptive"})
    assert messages[-1]["content"] == [
        {"type": "text", "text": "Top 2 headlines:\n1. First story\n2. Second story"}
    ]
    turns = [m for m in messages if m["role"] == "assistant"][:-1]
    # navigate, then probes .headline, article .title, li.item, table..., h2
    assert len(turns) == 1 + CANDIDATE_INDEX_OF_H2 + 1
    for turn in turns:
        kinds = [b["type"] for b in turn["content"]]
        assert kinds[0] == "thinking" and kinds[-1] == "tool_use"


CANDIDATE_INDEX_OF_H2 = 4


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"thinking": {"type": "disabled"}}, "disabled"),
        ({"tool_choice": {"type": "any"}}, "forced tool use"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_sdk_gets_400_for_what_the_current_models_refuse(
    client: anthropic.Anthropic, extra: dict[str, Any], needle: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            messages=[{"role": "user", "content": PROMPT}],
            tools=TOOLS,
            extra_body=extra,
        )
    assert caught.value.type == "invalid_request_error"
    assert needle in (caught.value.api_message or "")


def test_sdk_gets_400_for_prefill_and_dropped_thinking(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="prefill"):
        client.messages.create(
            model="claude-haiku-5-5",
            max_tokens=100,
            messages=[
                {"role": "user", "content": PROMPT},
                {"role": "assistant", "content": "Top"},
            ],
        )
    messages = converse(client)
    for message in messages:
        if message["role"] == "assistant":
            message["content"] = [b for b in message["content"] if b["type"] != "thinking"]
    with pytest.raises(anthropic.BadRequestError, match="dropped"):
        client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            messages=messages[:3],
            tools=TOOLS,
        )


def _post(url: str, payload: Any) -> tuple[int, dict[str, Any]]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_fault_injection_over_http(standin: StandinServer, client: anthropic.Anthropic) -> None:
    status, view = _post(standin.url + "/_faults", {"statuses": [529, 429], "retry_after_ms": 20})
    assert status == 200 and view["statuses"] == [529, 429]
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert overloaded.value.response.headers["retry-after-ms"] == "20"
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    ok = client.messages.create(
        model="m", max_tokens=1000, messages=[{"role": "user", "content": "hi"}]
    )
    assert ok.stop_reason == "end_turn" and "stand-in" in ok.content[0].text  # type: ignore[union-attr]
    assert standin.stats()["messages:529"] == 1
    assert standin.stats()["messages:200"] == 1
    bad, error = _post(standin.url + "/_faults", {"statuses": [200]})
    assert bad == 400 and error["type"] == "error"


def test_malformed_requests_get_anthropic_errors_and_it_keeps_serving(
    standin: StandinServer, client: anthropic.Anthropic
) -> None:
    status, error = _post(standin.url + "/v1/messages", b"{not json")
    assert status == 400
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    status, error = _post(standin.url + "/v1/nowhere", {})
    assert status == 404 and error["error"]["type"] == "not_found_error"
    assert client.messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ).content


def test_api_key_is_checked_when_configured() -> None:
    with StandinServer(api_key="right-key-123") as standin:
        wrong = anthropic.Anthropic(base_url=standin.url, api_key="wrong-key-456", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            wrong.messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        right = anthropic.Anthropic(base_url=standin.url, api_key="right-key-123", max_retries=0)
        assert right.messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ).content


def test_index_page_count_tokens_and_models(
    standin: StandinServer, client: anthropic.Anthropic
) -> None:
    with urllib.request.urlopen(standin.url + "/", timeout=5) as response:
        page = response.read().decode()
    assert "not Claude" in page and "stand-in" in page
    assert "report the top &lt;N&gt; &lt;things&gt;" in page
    counted = client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "x" * 400}]
    )
    assert counted.input_tokens >= 100
    assert "claude-sonnet-5-5" in [m.id for m in client.models.list()]


def test_a_model_is_retrieved_by_its_id_and_an_unknown_id_is_not_found(
    client: anthropic.Anthropic,
) -> None:
    model = client.models.retrieve("claude-haiku-5-5")
    assert (model.type, model.id) == ("model", "claude-haiku-5-5")
    with pytest.raises(anthropic.NotFoundError, match="claude-unknown-1"):
        client.models.retrieve("claude-unknown-1")
    # The listing still pages as the API does, query parameters and all.
    assert [m.id for m in client.models.list(limit=20)][:1] == ["claude-sonnet-5-5"]


def test_stop_closes_kept_alive_connections(client: anthropic.Anthropic) -> None:
    with StandinServer() as standin:
        c = anthropic.Anthropic(base_url=standin.url, api_key="k", max_retries=0)
        c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert standin._thread is not None and not standin._thread.is_alive()
    with pytest.raises(anthropic.APIConnectionError):
        c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


def test_rote_model_serve_cli() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "model", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ROTE_LOG_FORMAT": "json"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "NOT Claude" in first
        url = first.split(" on ")[1].strip()
        with urllib.request.urlopen(url + "/", timeout=5) as response:
            assert "stand-in" in response.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_a_client_hanging_up_mid_answer_is_not_an_error(
    standin: StandinServer, client: anthropic.Anthropic, capfd: pytest.CaptureFixture[str]
) -> None:
    """rote stopping while the stand-in answers (the demo's Ctrl-C) leaves no traceback
    behind, and the next caller is served."""
    standin.inject(latency_ms=300, latency_count=1)
    body = json.dumps(
        {
            "model": "claude-haiku-5-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    where = urlsplit(standin.url)
    with socket.create_connection((where.hostname, where.port)) as conn:
        conn.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        # Hung up hard (RST) before the delayed answer is written.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.6)
    reply = client.messages.create(
        model="claude-haiku-5-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content
    assert "Traceback" not in capfd.readouterr().err
