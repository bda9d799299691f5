"""Micro services (ADR-32) with typed endpoints.

Each endpoint is decode -> handler -> encode. Whatever goes wrong becomes an ADR-32
error reply (Nats-Service-Error, numeric Nats-Service-Error-Code, JSON body
{"error": {...}}) and the service keeps serving: a malformed message never crashes it
and never gets a traceback back. A request cut short by a shutdown is answered at once
with the `timeout` its caller would otherwise have waited for.

nats-py runs a subscription's callback for one message at a time, so an endpoint whose
handler may be slow (a tool call, a model call) sets `concurrent=True`: its requests
are handled by a pool of `max_in_flight` workers in the service's task group.

`nats micro stats` reads each endpoint's own tally: nats-py counts an error only when
its callback raises, and times a concurrent endpoint's hand-off rather than its work,
so both would read as zero here.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Token
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import nats.errors
import structlog
from anyio.abc import TaskGroup
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import EndpointStats, Service

from contracts.errors import ErrorReply
from services.kernel.bus import Bus, check_fits, routed
from services.kernel.codec import decoder, encode
from services.kernel.errors import ServiceError, stopping, validation_error
from services.kernel.logs import get_logger
from services.kernel.secrets import redact

log = get_logger("rote.endpoints")

# How long a request cancelled by a shutdown may take to tell its caller so.
STOP_REPLY_S = 1.0

Handler = Callable[[Any], Awaitable[msgspec.Struct]]


@dataclass(frozen=True)
class Endpoint:
    name: str
    subject: str
    request: type[msgspec.Struct]
    handler: Handler
    concurrent: bool = False
    description: str = ""


# Control characters (NUL, CR, LF, ...) have no place in a header line: a message that
# echoes user input (an invalidation reason, a field value) must not break the header.
_HEADER_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def error_reply(error: ServiceError) -> tuple[bytes, dict[str, str]]:
    body = encode(ErrorReply(error=error.info()))
    headers = {
        "Nats-Service-Error": _HEADER_UNSAFE.sub(" ", redact(error.message))[:512],
        "Nats-Service-Error-Code": str(error.status),
    }
    return body, headers


async def _respond(
    request: Request, data: bytes, nc: Client, headers: dict[str, str] | None = None
) -> ServiceError | None:
    """Send the reply; an error replied in its place (too large) is returned."""
    try:
        if headers:  # an error reply: its headers count too (bus.check_fits)
            check_fits(nc, data, headers)
        await request.respond(data, headers=headers)
    except nats.errors.MaxPayloadError:
        # Too big for one message: the caller gets a structured error, not a timeout.
        error = ServiceError(
            "too_large",
            f"the reply is {len(data)} bytes, over the NATS max payload; ask for less"
            " (a lower limit, one item at a time)",
        )
        body, error_headers = error_reply(error)
        await _respond(request, body, nc, error_headers)
        return error
    except Exception as exc:  # the caller went away, or the connection is closing
        log.warning("reply_failed", subject=request.subject, error=redact(str(exc)))
    return None


def _internal(endpoint: Endpoint, exc: BaseException) -> ServiceError:
    ref = uuid.uuid4().hex[:12]
    log.error("handler_failed", endpoint=endpoint.subject, ref=ref, exc_info=exc)
    return ServiceError(
        "internal",
        f"{endpoint.subject} failed ({type(exc).__name__}); see the service log, ref {ref}",
    )


def _log_ids(payload: object) -> dict[str, str]:
    """The run_id/task_id a request carries (ExecTool, CompleteRequest, ...)."""
    ids: dict[str, str] = {}
    for name in ("run_id", "task_id"):
        value = getattr(payload, name, None)
        if isinstance(value, str):
            ids[name] = value
    return ids


async def answer(endpoint: Endpoint, request: Request, nc: Client) -> ServiceError | None:
    """Decode, handle, encode; every failure becomes a structured error reply, and is
    returned so the endpoint's stats can count it."""
    bound: Mapping[str, Token[Any]] = {}
    try:
        try:
            payload = decoder(endpoint.request).decode(request.data or b"{}")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise validation_error(exc) from None
        # Bound here, not only in the handler: a handler's own binding is gone by the
        # time its exception reaches handler_failed below, the line that matters most.
        bound = structlog.contextvars.bind_contextvars(**_log_ids(payload))
        reply = await endpoint.handler(payload)
        data = encode(reply)
    except ServiceError as exc:
        error = exc
    except Exception as exc:
        error = _internal(endpoint, exc)
    except BaseException as exc:
        if stopping(exc):
            # Cancelled mid-request (the service stopping) or the process exiting: say
            # so now, or the caller waits out its whole timeout; then go on stopping.
            # `timeout`, what the caller would have heard anyway: callers take
            # `unavailable` for "surely never delivered" and send it again, and this
            # request may have been partly carried out (a command run, an order sent).
            body, headers = error_reply(
                ServiceError(
                    "timeout",
                    f"{endpoint.subject} stopped before it answered (the service is"
                    " stopping); the request may have been partly carried out",
                )
            )
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + STOP_REPLY_S):
                await _respond(request, body, nc, headers)
            raise
        # A BaseException the handler raised, or a CancelledError from something it
        # awaited that was cancelled elsewhere: not this task's cancellation. Left to
        # escape, it would end the subscription (or the task group) and every later
        # request would go unanswered.
        error = _internal(endpoint, exc)
    else:
        return await _respond(request, data, nc)
    finally:
        structlog.contextvars.reset_contextvars(**bound)
    body, headers = error_reply(error)
    await _respond(request, body, nc, headers)
    return error


@dataclass
class _Tally:
    """One endpoint's answers, errors and time spent, as `nats micro stats` shows them."""

    answered: int = 0
    errors: int = 0
    last_error: str = ""
    busy_ns: int = 0

    async def answer(self, endpoint: Endpoint, request: Request, nc: Client) -> None:
        started = time.perf_counter_ns()
        error = await answer(endpoint, request, nc)
        self.busy_ns += time.perf_counter_ns() - started
        self.answered += 1
        if error is not None:
            self.errors += 1
            self.last_error = f"{error.code}: {redact(error.message)}"[:512]

    def fill(self, stats: EndpointStats) -> None:
        stats.num_errors = self.errors
        stats.last_error = self.last_error
        stats.processing_time = self.busy_ns
        stats.average_processing_time = self.busy_ns // self.answered if self.answered else 0


async def start_service(
    bus: Bus,
    *,
    name: str,
    version: str,
    description: str,
    endpoints: list[Endpoint],
    task_group: TaskGroup,
    max_in_flight: int = 64,
    metadata: dict[str, str] | None = None,
) -> Service:
    """Register a micro service and its endpoints; `nats micro ls` will list it."""
    tallies = {endpoint.name: _Tally() for endpoint in endpoints}

    def fill_stats(stats: EndpointStats) -> None:
        """nats-py's stats hook, which may edit the stats it is handed."""
        if (tally := tallies.get(stats.name)) is not None:
            tally.fill(stats)

    service = await add_service(
        bus.nc,
        name=name,
        version=version,
        description=description,
        metadata=metadata or {},
        stats_handler=fill_stats,
    )
    # Concurrent endpoints hand requests to a pool of workers: a queue hand-off costs
    # far less than a task per request, and the pool size bounds the work in flight.
    queue: asyncio.Queue[tuple[Endpoint, Request]] = asyncio.Queue()
    idle = 0

    async def worker() -> None:
        nonlocal idle
        while True:
            idle += 1
            try:
                endpoint, request = await queue.get()
            finally:
                idle -= 1
            await tallies[endpoint.name].answer(endpoint, request, bus.nc)

    if any(e.concurrent for e in endpoints):
        for _ in range(max_in_flight):
            task_group.start_soon(worker)

    for endpoint in endpoints:

        async def handle(request: Request, endpoint: Endpoint = endpoint) -> None:
            # With every worker busy, answer inline: the subscription then waits, which
            # is the backpressure.
            if not endpoint.concurrent or idle <= queue.qsize():
                await tallies[endpoint.name].answer(endpoint, request, bus.nc)
                return
            queue.put_nowait((endpoint, request))

        await service.add_endpoint(
            name=endpoint.name,
            subject=endpoint.subject,
            handler=handle,
            metadata={"description": endpoint.description} if endpoint.description else None,
        )
    await routed(bus.nc)  # return only once requests reach us
    return service


async def stop_service(service: Service) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await service.stop()
        except Exception as exc:  # already disconnected: nothing to unsubscribe
            log.debug("service_stop_failed", error=str(exc))
