"""The NATS connection every service shares: typed request/reply, and JetStream event
publishing with Nats-Msg-Id de-duplication.

A request in flight is lost when the server of either end dies: the caller's (its
connection comes back, and `request` knows), or the one the service it asked is
connected to (the caller's own connection never blinked, and would wait out its whole
timeout, 300 s for a model call). So every process, its connection back, says so on
rote.evt.bus.reconnected, naming what it is subscribed to; a caller waiting on a request
to one of those subjects treats that as its own reconnect (see `request`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import msgspec
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER

from contracts.errors import ErrorInfo, ErrorReply
from contracts.subjects import BUS_RECONNECTED, HEADER_MSG_ID
from contracts.system import BusReconnected
from services.kernel.codec import decode, encode
from services.kernel.errors import RemoteError
from services.kernel.logs import get_logger
from services.kernel.secrets import redact
from services.kernel.settings import seed_urls

T = TypeVar("T")
log = get_logger("rote.bus")

# With `retry_undelivered` (or `resend`), a request no service answers this soon after a
# reconnect is sent again, after a pause doubling up to a second: the services reconnect
# too, within a second or two of each other. Later, no responder means none is running.
RECONNECT_GRACE_S = 5.0
RETRY_PAUSE_S = 0.25
MAX_RETRY_PAUSE_S = 1.0


def headers_size(headers: dict[str, str]) -> int:
    """The bytes of the header block nats-py sends for `headers` (NATS/1.0, one line per
    header, a blank line)."""
    lines = sum(len(k.strip().encode()) + len(v.strip().encode()) + 4 for k, v in headers.items())
    return len(b"NATS/1.0\r\n") + lines + 2


def check_fits(nc: Client, payload: bytes, headers: dict[str, str]) -> None:
    """The server counts headers and payload against max_payload, nats-py the payload
    alone: a message between the two passes the client, and the server then closes the
    connection for good (a protocol violation nats-py does not reconnect from). Raises
    MaxPayloadError, as the client would, for what the server would refuse."""
    if len(payload) + headers_size(headers) > nc.max_payload:
        raise nats.errors.MaxPayloadError


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a subscription to `pattern` (NATS wildcards * and >) gets `subject`."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or token not in ("*", have[i]):
            return False
    return len(want) == len(have)


class ConnectionLost(Exception):
    """The connection closed for good without rote closing it (a fatal protocol error:
    nats-py does not reconnect from those)."""


def _server_id(nc: Client) -> str:
    """The id of the server the connection is on (nats-py keeps the server's INFO)."""
    info = getattr(nc, "_server_info", None) or {}
    return str(info.get("server_id") or "")


class Bus:
    def __init__(self, nc: Client, url: str) -> None:
        self.nc = nc
        self.url = url
        self.js: JetStreamContext = nc.jetstream()
        self.closing = False
        # Set when the connection closed for good on its own (see ConnectionLost): a
        # process whose every service is then deaf must stop, so a supervisor restarts it.
        self.lost = anyio.Event()
        self.lost_reason = ""
        # How many times the connection came back after a disconnect (reconnected_cb),
        # and the waits to interrupt when it next does.
        self.reconnects = 0
        self.reconnected_at: float | None = None  # time.monotonic() of the last one
        # The server the connection is on, and the one it was on before its last reconnect.
        self.server_id = _server_id(nc)
        self.lost_server = ""
        self._until_reconnect: set[anyio.CancelScope] = set()
        # Another process's connection came back (rote.evt.bus.reconnected): when
        # last, and the waits for replies to interrupt when one serving their subject
        # does (scope -> the request's subject, and when it was sent).
        self.sender = uuid.uuid4().hex
        self.peer_reconnected_at: float | None = None
        self._awaiting: dict[anyio.CancelScope, tuple[str, float]] = {}

    def reconnected(self) -> None:
        """The connection is back: a reply sent to it meanwhile may have been lost."""
        self.reconnects += 1
        self.reconnected_at = time.monotonic()
        self.lost_server, self.server_id = self.server_id, _server_id(self.nc)
        for scope in self._until_reconnect:
            scope.cancel()
        self._until_reconnect.clear()

    def peer_reconnected(self, notice: BusReconnected) -> None:
        """Another process's connection is back: a request to it sent meanwhile may
        have died with its old server (this connection saw nothing of it)."""
        if notice.sender == self.sender:
            return
        now = self.peer_reconnected_at = time.monotonic()
        # Both ends lost the same server: what this connection sent since it came back
        # went to the servers left (the service's new one, or none and then no
        # responders), not to the one that died. Known by the server's id; a peer that
        # does not say which it lost is taken to have lost this one if it came back at
        # about the same time.
        back = self.reconnected_at
        if notice.lost_server:
            both = back is not None and notice.lost_server == self.lost_server
        else:
            both = back is not None and now - back < RECONNECT_GRACE_S
        for scope, (subject, sent_at) in list(self._awaiting.items()):
            if both and back is not None and sent_at >= back:
                continue
            if any(subject_matches(pattern, subject) for pattern in notice.subjects):
                scope.cancel()
                self._awaiting.pop(scope, None)

    async def announce_reconnect(self) -> None:
        """Say that this connection is back, and what it serves (see the module)."""
        subjects = sorted(
            {
                sub.subject
                for sub in list(self.nc._subs.values())
                if not sub.subject.startswith("_INBOX.") and sub.subject != BUS_RECONNECTED
            }
        )
        if not subjects:
            return  # it serves nothing (an operator's command): nobody waits on it
        notice = BusReconnected(sender=self.sender, subjects=subjects, lost_server=self.lost_server)
        try:
            await self.nc.publish(BUS_RECONNECTED, encode(notice))
        except Exception as exc:  # away again: its next reconnect says it
            log.info("reconnect_unannounced", error=redact(str(exc)))

    @contextmanager
    def _until_reply_maybe_lost(self, subject: str) -> Iterator[anyio.CancelScope]:
        """A wait for a reply to a request to `subject`, cancelled when this connection
        comes back or a process subscribed to `subject` says its connection did."""
        with self.until_reconnect() as scope:
            self._awaiting[scope] = (subject, time.monotonic())
            try:
                yield scope
            finally:
                self._awaiting.pop(scope, None)

    @contextmanager
    def until_reconnect(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled when the connection next comes back (see its
        `cancelled_caught`): for waits a reconnect may have made pointless."""
        with anyio.CancelScope() as scope:
            self._until_reconnect.add(scope)
            try:
                yield scope
            finally:
                self._until_reconnect.discard(scope)

    async def request(
        self,
        subject: str,
        payload: msgspec.Struct | bytes,
        reply_type: type[T],
        *,
        timeout: float = 10.0,
        resend: int = 0,
        retry_undelivered: bool = False,
    ) -> T:
        """Call a micro endpoint. An error reply, no responder, a timeout, a request
        over the server's max payload or a connection that cannot send raises
        RemoteError with a stable code; a reply is decoded into `reply_type`.

        `retry_undelivered`: a request no service answers just after a reconnect is
        tried again (the services are coming back); it was not delivered, so this is
        safe for any endpoint. `resend` > 0 (which implies it) is for endpoints that
        answer a repeated request from their record of the first (the llm service, by
        call_id): when the connection comes back while waiting, the reply may have been
        sent while it was away and lost, so the request is sent again, up to `resend`
        times; and so it is when a process subscribed to `subject` says its connection
        came back (the request may have died with that process's old server).
        `timeout` bounds all of it."""
        data = payload if isinstance(payload, bytes) else encode(payload)
        if resend <= 0 and not retry_undelivered:
            return await self._request(subject, data, reply_type, timeout)
        deadline = anyio.current_time() + timeout
        timed_out = RemoteError(
            subject, ErrorInfo(code="timeout", message=f"no reply from {subject} within {timeout}s")
        )
        resent = 0
        pause = RETRY_PAUSE_S
        while (remaining := deadline - anyio.current_time()) > 0:
            if not self.nc.is_connected and not self.nc.is_closed:
                # Sent now, it would wait in the client's buffer and go out on reconnect,
                # racing the re-send: send it once the connection is back instead.
                with self.until_reconnect():
                    await anyio.sleep(min(remaining, 1.0))
                continue
            try:
                if resent >= resend:  # no re-send left: wait it out
                    return await self._request(subject, data, reply_type, remaining)
                with self._until_reply_maybe_lost(subject):
                    return await self._request(subject, data, reply_type, remaining)
            except RemoteError as exc:
                if exc.code == "timeout":
                    raise timed_out from None
                if exc.code != "unavailable" or not self.coming_back():
                    raise
                # Surely not delivered (no responder, or not sent): the service is
                # reconnecting too, or this connection is away again. Try again shortly.
                log.info("request_retried", subject=subject, error=exc.message)
                await anyio.sleep(min(pause, remaining))
                pause = min(pause * 2, MAX_RETRY_PAUSE_S)
                continue
            # Only a reconnect (this connection's, or a responder's) ends the watched
            # wait with neither a reply nor an error.
            resent += 1
            log.warning("request_resent", subject=subject, resent=resent)
        raise timed_out

    def coming_back(self) -> bool:
        """Whether this connection (or another process's) is away or came back only just
        now, so that a service missing from it may well be back shortly."""
        if self.closing or self.nc.is_closed:
            return False
        if not self.nc.is_connected:
            return True
        now = time.monotonic()
        return any(
            at is not None and now - at < RECONNECT_GRACE_S
            for at in (self.reconnected_at, self.peer_reconnected_at)
        )

    async def _request(self, subject: str, data: bytes, reply_type: type[T], timeout: float) -> T:
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
        data = encode(event)
        check_fits(self.nc, data, all_headers)
        return await self.js.publish(subject, data, headers=all_headers, timeout=timeout)

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
        data = encode(event)
        check_fits(self.nc, data, all_headers)
        await self.nc.publish(subject, data, headers=all_headers)

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


async def routed(nc: Client, timeout: float = 10.0) -> None:
    """Return once the server has applied every SUB and UNSUB this connection sent, so
    a request from another connection finds them. nats-py's flush() writes its PING
    ahead of commands still queued, so it proves nothing; a message to ourselves
    travels behind them all and comes back only after them."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    await nc.publish(inbox, b"")
    try:
        await sub.next_msg(timeout)
    except (nats.errors.TimeoutError, TimeoutError):
        # Not answered (the connection is down): do not leave the inbox subscribed.
        await sub.unsubscribe()
        raise


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


async def connect(
    url: str,
    *,
    name: str = "rote",
    connect_timeout: float = 5.0,
    on_attempt_failed: Callable[[str], None] | None = None,
) -> Bus:
    """`on_attempt_failed`: given each connection error (masked) instead of the log; a
    one-shot command that gives up says the last one in its own words, not a warning
    line per attempt."""
    bus: Bus | None = None

    async def on_error(exc: Exception) -> None:
        # Some say nothing (a peer that is not NATS hangs up): their kind is the news.
        error = redact(str(exc)) or type(exc).__name__
        if on_attempt_failed is not None:
            on_attempt_failed(error)
            return
        # With the URL: "Name or service not known" alone does not say which name.
        log.warning("nats_error", url=redact(url), error=error)

    async def on_disconnect() -> None:
        if bus is None or not bus.closing:  # a disconnect we asked for is not news
            log.warning("nats_disconnected", url=redact(url))

    async def on_reconnect() -> None:
        log.info("nats_reconnected", url=redact(url))
        if bus is not None:
            bus.reconnected()
            await bus.announce_reconnect()

    async def on_closed() -> None:
        if bus is None or bus.closing:
            return
        error = bus.nc.last_error
        bus.lost_reason = redact(f"{type(error).__name__}: {error}" if error else "closed")
        log.error("nats_connection_lost", url=redact(url), error=bus.lost_reason)
        bus.lost.set()

    options: dict[str, Any] = {
        "name": name,
        "connect_timeout": connect_timeout,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        # Closing drains: a subscription callback stuck in a handler must not hold up a
        # shutdown for nats-py's default of 30 s.
        "drain_timeout": 5,
        "reconnect_time_wait": 1,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "closed_cb": on_closed,
    }
    # A comma-separated list names several seed servers (cluster nodes): any one that
    # answers will do, and the client learns the rest of the cluster from it.
    servers = seed_urls(url)
    nc = await nats.connect(servers=servers, **options)
    bus = Bus(nc, url)

    async def on_peer_reconnected(msg: Msg) -> None:
        try:
            notice = decode(msg.data, BusReconnected)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if bus is not None:
            bus.peer_reconnected(notice)

    await nc.subscribe(BUS_RECONNECTED, cb=on_peer_reconnected)
    return bus
