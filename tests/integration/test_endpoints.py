"""ADR-32 error replies: malformed JSON, unknown fields, wrong types and handlers that
raise all answer with the headers and JSON body, and the service keeps answering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import structlog

from contracts.base import Command, Reply
from services.kernel.bus import Bus, routed
from services.kernel.endpoints import Endpoint, error_reply, start_service, stop_service
from services.kernel.errors import RemoteError, ServiceError

pytestmark = pytest.mark.anyio


class Echo(Command, kw_only=True):
    text: str
    times: int = 1


class Echoed(Reply, kw_only=True):
    text: str


async def echo(req: Echo) -> Echoed:
    return Echoed(text=req.text * req.times)


async def explode(req: Echo) -> Echoed:
    raise RuntimeError("secret internals sk-ant-api03-abcdefghijklmnop")


async def refuse(req: Echo) -> Echoed:
    raise ServiceError("not_found", f"no such thing: {req.text}", field="text")


class RunJob(Command, kw_only=True):
    run_id: str | None = None
    task_id: str | None = None


async def fail_in_run(req: RunJob) -> Echoed:
    # Bound for the work and unbound on the way out, as the llm and tools handlers do.
    with structlog.contextvars.bound_contextvars(run_id=req.run_id, task_id=req.task_id):
        raise RuntimeError("the handler broke")


async def slow(req: Echo) -> Echoed:
    await anyio.sleep(0.3)
    return Echoed(text=req.text)


@asynccontextmanager
async def serving(
    bus: Bus, name: str, endpoints: list[Endpoint], **options: Any
) -> AsyncIterator[None]:
    """A test service with these endpoints, for as long as the block runs."""
    async with anyio.create_task_group() as tg:
        service = await start_service(
            bus,
            name=name,
            version="0.0.1",
            description="test",
            task_group=tg,
            endpoints=endpoints,
            **options,
        )
        try:
            yield
        finally:
            await stop_service(service)
            tg.cancel_scope.cancel()


async def _raw(bus: Bus, subject: str, data: bytes) -> tuple[dict[str, str], dict]:
    msg = await bus.nc.request(subject, data, timeout=2)
    return dict(msg.headers or {}), json.loads(msg.data)


async def test_errors_are_adr32_and_the_service_keeps_serving(bus: Bus) -> None:
    async with serving(
        bus,
        "rote-test",
        endpoints=[
            Endpoint("echo", "t.echo", Echo, echo),
            Endpoint("explode", "t.explode", Echo, explode),
            Endpoint("refuse", "t.refuse", Echo, refuse),
        ],
    ):
        cases = [
            ("t.echo", b"{not json", "400", "malformed", None),
            ("t.echo", b'{"text":"\xff"}', "400", "malformed", None),  # not UTF-8
            # An answer too big for one NATS message: an error instead of silence.
            ("t.echo", b'{"text":"x","times":2000000}', "413", "too_large", None),
            ("t.echo", b'{"text":"a","colour":1}', "400", "invalid_request", "colour"),
            ("t.echo", b'{"text":5}', "400", "invalid_request", "text"),
            ("t.echo", b"", "400", "invalid_request", "text"),  # missing required field
            ("t.explode", b'{"text":"a"}', "500", "internal", None),
            ("t.refuse", b'{"text":"zz"}', "404", "not_found", "text"),
        ]
        for subject, data, status, code, field in cases:
            headers, body = await _raw(bus, subject, data)
            assert headers["Nats-Service-Error-Code"] == status, (subject, data)
            assert headers["Nats-Service-Error"]
            assert body["error"]["code"] == code
            assert body["error"].get("field") == field
            assert "Traceback" not in json.dumps(body)
            # Still serving after every bad request.
            assert await bus.request("t.echo", Echo(text="ok", times=2), Echoed) == Echoed(
                text="okok"
            )
        # An internal error says where to look, not what the exception held.
        _, body = await _raw(bus, "t.explode", b'{"text":"a"}')
        assert "sk-ant" not in body["error"]["message"]
        assert "ref" in body["error"]["message"]

        # Input echoed in the message stays on the header's line: no control characters.
        headers, body = await _raw(bus, "t.refuse", b'{"text":"a\\u0000b\\r\\nX-Evil: 1"}')
        assert headers["Nats-Service-Error"] == "no such thing: a b  X-Evil: 1"
        assert "X-Evil" not in headers
        assert body["error"]["message"] == "no such thing: a\x00b\r\nX-Evil: 1"  # body: as is

        # The typed client raises RemoteError with the same stable code.
        with pytest.raises(RemoteError) as caught:
            await bus.request("t.refuse", Echo(text="q"), Echoed)
        assert (caught.value.code, caught.value.status) == ("not_found", 404)


async def test_no_responder_and_timeout_are_structured(bus: Bus) -> None:
    with pytest.raises(RemoteError) as caught:
        await bus.request("t.nobody", Echo(text="x"), Echoed, timeout=0.5)
    assert caught.value.code == "unavailable"

    # A responder that never answers: a timeout, not a hang and not a raw exception.
    async def ignore(msg: object) -> None:
        return None

    silent = await bus.nc.subscribe("t.silent", cb=ignore)
    await routed(bus.nc)
    with pytest.raises(RemoteError) as caught:
        await bus.request("t.silent", Echo(text="x"), Echoed, timeout=0.3)
    assert caught.value.code == "timeout" and "t.silent" in caught.value.message
    await silent.unsubscribe()


async def test_concurrent_endpoint_does_not_serialise_callers(bus: Bus) -> None:
    # Each call is answered only once all ten are in the handler together: calls handled
    # one after another never would be (the first would wait out its caller's timeout).
    arrived: list[str] = []
    all_in = anyio.Event()

    async def together(req: Echo) -> Echoed:
        arrived.append(req.text)
        if len(arrived) == 10:
            all_in.set()
        await all_in.wait()
        return Echoed(text=req.text)

    async with serving(
        bus,
        "rote-test-slow",
        endpoints=[Endpoint("slow", "t.slow", Echo, together, concurrent=True)],
    ):
        results: list[str] = []

        async def call(i: int) -> None:
            reply = await bus.request("t.slow", Echo(text=str(i)), Echoed, timeout=10)
            results.append(reply.text)

        async with anyio.create_task_group() as callers:
            for i in range(10):
                callers.start_soon(call, i)
        assert sorted(results) == [str(i) for i in range(10)]


@pytest.mark.parametrize("concurrent", [False, True])
async def test_a_failing_handler_logs_with_its_run_and_task_ids(
    bus: Bus, written_logs: list[dict[str, Any]], concurrent: bool
) -> None:
    async with serving(
        bus,
        "rote-test-ids",
        # One worker: both requests go through the same task, so a binding left
        # behind by the first would show on the second.
        max_in_flight=1,
        endpoints=[Endpoint("fail", "t.fail", RunJob, fail_in_run, concurrent=concurrent)],
    ):
        _, with_ids = await _raw(bus, "t.fail", b'{"run_id": "run-42", "task_id": "task-7"}')
        _, without = await _raw(bus, "t.fail", b"{}")
    assert with_ids["error"]["code"] == without["error"]["code"] == "internal"
    failed = [e for e in written_logs if e.get("event") == "handler_failed"]
    assert [(e.get("run_id"), e.get("task_id")) for e in failed] == [
        ("run-42", "task-7"),
        (None, None),
    ]
    assert failed[0]["ref"] in with_ids["error"]["message"]


async def _stats(bus: Bus, service: str) -> dict[str, dict[str, Any]]:
    """What `nats micro stats SERVICE` prints, by endpoint name."""
    msg = await bus.nc.request(f"$SRV.STATS.{service}", b"", timeout=2)
    return {e["name"]: e for e in json.loads(msg.data)["endpoints"]}


@pytest.mark.parametrize("concurrent", [False, True])
async def test_micro_stats_count_error_replies_and_the_time_spent(
    bus: Bus, concurrent: bool
) -> None:
    async with serving(
        bus,
        "rote-test-stats",
        endpoints=[
            Endpoint("refuse", "t.refuse", Echo, refuse, concurrent=concurrent),
            Endpoint("slow", "t.slow", Echo, slow, concurrent=concurrent),
        ],
    ):
        await _raw(bus, "t.refuse", b"{not json")
        await _raw(bus, "t.refuse", b'{"text":"zz"}')
        await bus.request("t.slow", Echo(text="a"), Echoed, timeout=5)
        await _raw(bus, "t.slow", b'{"text":"a","colour":1}')
        stats = await _stats(bus, "rote-test-stats")

    refuse_stats, slow_stats = stats["refuse"], stats["slow"]
    assert (refuse_stats["num_requests"], refuse_stats["num_errors"]) == (2, 2)
    assert refuse_stats["last_error"] == "not_found: no such thing: zz"
    assert (slow_stats["num_requests"], slow_stats["num_errors"]) == (2, 1)
    assert slow_stats["last_error"].startswith("invalid_request: ")
    # The handler's 0.3 s, not the hand-off to a worker.
    assert slow_stats["processing_time"] >= 300_000_000
    assert slow_stats["average_processing_time"] >= 150_000_000


async def test_an_error_echoing_a_huge_request_is_bounded_and_the_service_lives_on(
    bus: Bus,
) -> None:
    """An unknown field half a megabyte long: its name, echoed twice (message and
    field), would make an error over the max payload once the ADR-32 headers are
    counted, and the server would close the service's connection for good."""
    name = "x" * ((bus.nc.max_payload - 300) // 2)
    async with serving(bus, "rote-test", endpoints=[Endpoint("echo", "t.echo", Echo, echo)]):
        headers, body = await _raw(bus, "t.echo", b'{"text":"a","%s":1}' % name.encode())
        assert headers["Nats-Service-Error-Code"] == "400"
        assert body["error"]["code"] == "invalid_request"
        assert len(body["error"]["message"]) <= 2000 and body["error"]["message"].endswith("…")
        assert body["error"]["field"].startswith("xxx") and len(body["error"]["field"]) <= 200
        assert await bus.request("t.echo", Echo(text="ok"), Echoed) == Echoed(text="ok")


async def test_an_error_reply_that_fits_only_without_its_headers_is_too_large(bus: Bus) -> None:
    """nats-py checks the payload alone, the server payload and headers: an error body
    just under the limit must become a too_large error, not a closed connection."""
    limit = bus.nc.max_payload

    def refusal(pad: int) -> ServiceError:
        return ServiceError("conflict", "no", details={"pad": "p" * pad})

    overhead = len(error_reply(refusal(0))[0])
    pad = limit - overhead - 10  # the body alone fits, by 10 bytes

    async def refuse_at_length(req: Echo) -> Echoed:
        raise refusal(pad)

    async with serving(
        bus,
        "rote-test",
        endpoints=[
            Endpoint("big", "t.big", Echo, refuse_at_length),
            Endpoint("echo", "t.echo", Echo, echo),
        ],
    ):
        headers, body = await _raw(bus, "t.big", b'{"text":"a"}')
        assert (headers["Nats-Service-Error-Code"], body["error"]["code"]) == ("413", "too_large")
        assert await bus.request("t.echo", Echo(text="ok"), Echoed) == Echoed(text="ok")


class Stray(BaseException):
    """A BaseException that is not a cancellation (some libraries define their own)."""


async def break_oddly(req: Echo) -> Echoed:
    if req.text == "base":
        raise Stray("not an Exception")
    if req.text == "cancelled":
        # A future cancelled elsewhere (a connection closing under a request): its
        # CancelledError is not this handler's own cancellation.
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future
    return Echoed(text=req.text)


@pytest.mark.parametrize("concurrent", [False, True])
async def test_a_handler_raising_a_base_exception_gets_an_error_and_the_endpoint_lives_on(
    bus: Bus, concurrent: bool
) -> None:
    """Before: no reply (the caller timed out), and the endpoint's subscription (or the
    whole service's task group) was gone, so every later request timed out too."""
    async with serving(
        bus,
        "rote-test",
        endpoints=[Endpoint("odd", "t.odd", Echo, break_oddly, concurrent=concurrent)],
    ):
        for text, kind in [("base", "Stray"), ("cancelled", "CancelledError")]:
            headers, body = await _raw(bus, "t.odd", json.dumps({"text": text}).encode())
            assert (headers["Nats-Service-Error-Code"], body["error"]["code"]) == (
                "500",
                "internal",
            )
            assert kind in body["error"]["message"]
            assert await bus.request("t.odd", Echo(text="ok"), Echoed) == Echoed(text="ok")


async def test_a_request_cut_short_by_a_shutdown_is_answered_at_once(bus: Bus) -> None:
    """A concurrent handler cancelled when its service stops: the caller hears it at
    once, not after its own timeout. Not `unavailable`, which callers resend as never
    delivered: the request may have been partly carried out."""
    started = anyio.Event()

    async def hang(req: Echo) -> Echoed:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    caught: list[RemoteError] = []

    async def call() -> None:
        with pytest.raises(RemoteError) as error:
            await bus.request("t.hang", Echo(text="x"), Echoed, timeout=10)
        caught.append(error.value)

    async with (
        anyio.create_task_group() as callers,
        serving(
            bus, "rote-test", endpoints=[Endpoint("hang", "t.hang", Echo, hang, concurrent=True)]
        ),
    ):
        callers.start_soon(call)
        await started.wait()
    # The service's own answer: the caller's timeout would say "no reply ... within 10s".
    assert caught[0].code == "timeout" and caught[0].status == 504
    assert "stopping" in caught[0].message
