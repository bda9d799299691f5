"""The NATS connection every service shares: typed request/reply, and JetStream event
publishing with Nats-Msg-Id de-duplication."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER

from contracts.errors import ErrorInfo, ErrorReply
from contracts.subjects import HEADER_MSG_ID
from services.kernel.codec import decode, encode
from services.kernel.errors import RemoteError
from services.kernel.logs import get_logger
from services.kernel.secrets import redact

T = TypeVar("T")
log = get_logger("rote.bus")


class Bus:
    def __init__(self, nc: Client, url: str) -> None:
        self.nc = nc
        self.url = url
        self.js: JetStreamContext = nc.jetstream()
        self.closing = False

    async def request(
        self,
        subject: str,
        payload: msgspec.Struct | bytes,
        reply_type: type[T],
        *,
        timeout: float = 10.0,
    ) -> T:
        """Call a micro endpoint. An error reply, no responder, a timeout, a request
        over the server's max payload or a connection that cannot send raises
        RemoteError with a stable code; a reply is decoded into `reply_type`."""
        data = payload if isinstance(payload, bytes) else encode(payload)
        try:
            msg = await self.nc.request(subject, data, timeout=timeout)
        except nats.errors.NoRespondersError:
            raise RemoteError(
                subject, ErrorInfo(code="unavailable", message=f"no service answers {subject}")
            ) from None
        except (nats.errors.TimeoutError, TimeoutError):
            raise RemoteError(
                subject,
                ErrorInfo(code="timeout", message=f"no reply from {subject} within {timeout}s"),
            ) from None
        except nats.errors.MaxPayloadError:
            limit = self.nc.max_payload
            raise RemoteError(
                subject,
                ErrorInfo(
                    code="too_large",
                    message=f"the request to {subject} is {len(data)} bytes, over the NATS"
                    f" max payload of {limit} bytes",
                    details={"size": len(data), "max_payload": limit},
                ),
            ) from None
        except nats.errors.Error as exc:
            # Whatever else the client refuses to send (a closed, draining or
            # reconnecting connection, a full reconnect buffer, a malformed subject):
            # callers handle RemoteError, and a raw client error would crash them.
            bad_subject = isinstance(exc, nats.errors.BadSubjectError)
            raise RemoteError(
                subject,
                ErrorInfo(
                    code="invalid_request" if bad_subject else "unavailable",
                    message=f"cannot send to {subject}: {type(exc).__name__}: {exc}",
                ),
            ) from None
        headers = msg.headers or {}
        if ERROR_HEADER in headers:
            raise remote_error(subject, headers, msg.data)
        return decode(msg.data, reply_type)

    async def publish_event(
        self,
        subject: str,
        event: msgspec.Struct,
        *,
        msg_id: str,
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
    ) -> PubAck:
        """Publish to JetStream and wait for the stream's ack. `msg_id` de-duplicates
        republishing within the stream's duplicate window."""
        all_headers = {HEADER_MSG_ID: msg_id, **(headers or {})}
        return await self.js.publish(subject, encode(event), headers=all_headers, timeout=timeout)

    async def publish_event_unacked(
        self,
        subject: str,
        event: msgspec.Struct,
        *,
        msg_id: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish to a stream's subject without asking for an ack: the stream stores it
        (in the order this connection sent it) and no reply travels back. For activity
        that is observed, not relied on; the caller never learns of a lost message."""
        all_headers = {HEADER_MSG_ID: msg_id, **(headers or {})}
        await self.nc.publish(subject, encode(event), headers=all_headers)

    async def close(self) -> None:
        self.closing = True
        if self.nc.is_closed:
            return
        try:
            await self.nc.drain()
        except Exception:  # a connection already going away has nothing left to drain
            try:
                await self.nc.close()
            except Exception as exc:  # the server is gone: stopping must still succeed
                log.info("nats_close_unclean", error=redact(str(exc)))


def remote_error(subject: str, headers: dict[str, str], body: bytes) -> RemoteError:
    status: int | None
    try:
        status = int(headers.get(ERROR_CODE_HEADER, ""))
    except ValueError:
        status = None
    try:
        info = decode(body, ErrorReply).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        info = ErrorInfo(code=str(status or "error"), message=headers.get(ERROR_HEADER, ""))
    return RemoteError(subject, info, status)


async def connect(url: str, *, name: str = "rote", connect_timeout: float = 5.0) -> Bus:
    bus: Bus | None = None

    async def on_error(exc: Exception) -> None:
        log.warning("nats_error", error=redact(str(exc)))

    async def on_disconnect() -> None:
        if bus is None or not bus.closing:  # a disconnect we asked for is not news
            log.warning("nats_disconnected", url=redact(url))

    async def on_reconnect() -> None:
        log.info("nats_reconnected", url=redact(url))

    options: dict[str, Any] = {
        "name": name,
        "connect_timeout": connect_timeout,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
    }
    # A comma-separated list names several seed servers (cluster nodes): any one that
    # answers will do, and the client learns the rest of the cluster from it.
    servers = [u.strip() for u in url.split(",") if u.strip()]
    nc = await nats.connect(servers=servers, **options)
    bus = Bus(nc, url)
    return bus
