"""Durable pull consumers: provisioned explicitly, fetched with a timeout, acked
explicitly, with `in_progress` heartbeats for long handlers.

Traps this module exists for (see DESIGN.md): `pull_subscribe` with an existing durable
silently ignores a changed config, so consumers are created-or-updated first; `fetch()`
can stall, so it always has a timeout and a timeout means "no messages"; ack wait
defaults to 30 s, so a handler working longer keeps telling the server it is alive.

A handler gets the decoded payload and the raw message. Returning normally acks. Raise
`Retry` to have the message redelivered later, `Reject` to drop it for good. A message
that cannot be decoded is logged and terminated: a poison message must never block the
ones behind it or crash the service. Any other exception is logged and redelivered,
after a delay that doubles with each delivery (so that a dependency away for a while,
such as an event store restarting, does not use up every delivery in seconds), up to
the consumer's `max_deliver`; the last failure (or `Retry`) is logged as the message
given up.

A consumer (or its stream) deleted while the service runs is logged and repaired: the
consumer is created again with the same config (its stream too, when it is one of
rote's), with a bounded backoff, and fetching goes on. A consumer changed behind rote's
back is put back to its config once its workers have been idle a while. Nothing a fetch
or an acknowledgement raises may end the service. A consumer stopped mid-message
(shutdown) hands that message back at once instead of leaving it for the ack wait, and
so does a message that arrives for a fetch the shutdown cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import anyio
import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError

from services.kernel.codec import decode
from services.kernel.errors import stopping
from services.kernel.logs import get_logger
from services.kernel.secrets import redact
from services.kernel.streams import ensure_stream
from services.kernel.text import cut_text

log = get_logger("rote.consumers")

T = TypeVar("T")

# Backoff between attempts to restore a lost consumer: doubles from the first to the last.
RESTORE_BACKOFF_S = (0.5, 10.0)
# How long a stopping consumer may spend handing back one unsettled message.
HAND_BACK_S = 2.0
# A failed message comes back after 1, 2, 4 ... seconds, at most this long.
MAX_FAILURE_DELAY_S = 60.0
# Deliveries of a message whose handler keeps failing, by default: with the delays
# above, about four minutes of failures before it is given up.
DEFAULT_MAX_DELIVER = 10


def failure_delay_s(delivery: int) -> float:
    """How long before a message whose handler failed on `delivery` (1 = first) comes
    back."""
    return min(MAX_FAILURE_DELAY_S, 2.0 ** min(max(0, delivery - 1), 16))


class Retry(Exception):
    """Redeliver this message after `delay_s`."""

    def __init__(self, reason: str, delay_s: float = 1.0) -> None:
        super().__init__(reason)
        self.delay_s = delay_s


class Reject(Exception):
    """Never deliver this message again."""


class MaxDeliveries(msgspec.Struct):
    """The server's advisory that a message was delivered `max_deliver` times without an
    ack and will not be delivered again (the fields rote reads)."""

    stream: str
    consumer: str
    stream_seq: int
    deliveries: int


def max_deliveries_subject(stream: str, consumer: str) -> str:
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"


def durable_config(
    name: str,
    *,
    filter_subjects: list[str] | None = None,
    ack_wait_s: float = 30.0,
    max_deliver: int = DEFAULT_MAX_DELIVER,
    deliver_all: bool = True,
    max_ack_pending: int = 1000,
) -> ConsumerConfig:
    return ConsumerConfig(
        name=name,
        durable_name=name,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=max_deliver,
        deliver_policy=DeliverPolicy.ALL if deliver_all else DeliverPolicy.NEW,
        filter_subjects=filter_subjects,
        max_ack_pending=max_ack_pending,
    )


async def ensure_consumer(
    js: JetStreamContext, stream: str, config: ConsumerConfig
) -> ConsumerInfo:
    """Create the durable consumer, or update it in place when its config changed."""
    return await js.add_consumer(stream, config)


async def _settle(msg: Msg, action: str, consumer: str, delay: float | None = None) -> None:
    """ack/nak/term; a failure (connection closed, message already settled by the
    handler) is logged: the server redelivers an unsettled message after its ack wait."""
    try:
        if action == "ack":
            await msg.ack()
        elif action == "nak":
            await msg.nak(delay=delay)
        else:
            await msg.term()
    except Exception as exc:
        log.warning(
            "settle_failed",
            consumer=consumer,
            subject=msg.subject,
            action=action,
            error=_described(exc),
        )


def _described(exc: BaseException) -> str:
    """An exception for a log line: masked, then cut (half a secret would pass)."""
    return cut_text(redact(f"{type(exc).__name__}: {exc}"), 500)


async def _heartbeat(msg: Msg, every_s: float) -> None:
    while True:
        await anyio.sleep(every_s)
        try:
            await msg.in_progress()
        except Exception as exc:  # connection blip: the next beat may get through
            log.debug("in_progress_failed", error=str(exc))


def _only(group: BaseExceptionGroup) -> BaseException:
    """The one exception a group (nested or not) holds; the group itself if it holds
    several."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _delivery(msg: Msg) -> int:
    return msg.metadata.num_delivered if msg.metadata else 1


def _is_last(delivery: int, max_deliver: int | None) -> bool:
    return max_deliver is not None and 0 < max_deliver <= delivery


async def handle_one(
    msg: Msg,
    type_: type[T],
    handler: Callable[[T, Msg], Awaitable[Any]],
    *,
    heartbeat_s: float | None,
    consumer: str,
    max_deliver: int | None = None,
) -> str:
    """Decode, handle, settle; returns the outcome ("ack", "nak", "term")."""
    try:
        payload = decode(msg.data, type_)
    except Exception as exc:  # whatever the bytes are, asking again will not change them
        log.error(
            "poison_message",
            consumer=consumer,
            subject=msg.subject,
            error=_described(exc),
        )
        await _settle(msg, "term", consumer)
        return "term"
    outcome = "ack"
    async with anyio.create_task_group() as tg:
        if heartbeat_s:
            tg.start_soon(_heartbeat, msg, heartbeat_s)
        try:
            try:
                await handler(payload, msg)
            except BaseExceptionGroup as group:
                # Raised in the handler's own task group: what it meant is the one inside.
                raise _only(group) from None
        except Retry as retry:
            outcome = "nak"
            delivery = _delivery(msg)
            if _is_last(delivery, max_deliver):
                log.error(
                    "message_given_up",
                    consumer=consumer,
                    subject=msg.subject,
                    delivery=delivery,
                    reason=str(retry),
                )
            else:
                log.info("message_retry", consumer=consumer, subject=msg.subject, reason=str(retry))
            await _settle(msg, "nak", consumer, delay=retry.delay_s)
        except Reject as reject:
            outcome = "term"
            log.warning(
                "message_rejected", consumer=consumer, subject=msg.subject, reason=str(reject)
            )
            await _settle(msg, "term", consumer)
        except BaseException as exc:
            if stopping(exc):
                raise  # a shutdown: consume() hands the message back
            # Any other BaseException (or a CancelledError from a future cancelled
            # elsewhere) is this message's failure: escaping, it would end this worker.
            outcome = "nak"
            delivery = _delivery(msg)
            # The last one is not delivered again: said loudly, since it is lost work.
            event = "message_given_up" if _is_last(delivery, max_deliver) else "handler_failed"
            log.exception(event, consumer=consumer, subject=msg.subject, delivery=delivery)
            await _settle(msg, "nak", consumer, delay=failure_delay_s(delivery))
        tg.cancel_scope.cancel()
    if outcome == "ack":
        await _settle(msg, "ack", consumer)
    return outcome


def describe_fetch_error(exc: Exception) -> str:
    if isinstance(exc, ServiceUnavailableError) and exc.code is None:
        # A pull request nobody answers: nats-py says only "503".
        return "no responders (503): the consumer or its stream is gone, or JetStream is down"
    return _described(exc)


async def _restore(
    js: JetStreamContext, stream: str, config: ConsumerConfig, name: str
) -> JetStreamContext.PullSubscription:
    """The consumer created again with the same config (its stream first, when that is
    gone too and is one of rote's), and a new pull subscription bound to it."""
    try:
        await ensure_consumer(js, stream, config)
    except NotFoundError:  # the stream is gone: creating a consumer needs it
        if await ensure_stream(js, stream) is None:
            raise  # not a stream rote defines: nothing to create it from
        log.warning("stream_recreated", stream=stream)
        await ensure_consumer(js, stream, config)
    return await js.pull_subscribe_bind(durable=name, stream=stream)


async def replace_lost(
    js: JetStreamContext,
    stream: str,
    config: ConsumerConfig,
    old: JetStreamContext.PullSubscription,
    problem: str,
    backoff_s: float,
    lock: anyio.Lock | None = None,
) -> JetStreamContext.PullSubscription | None:
    """After a fetch failed with `problem` (the consumer or its stream gone): wait
    `backoff_s`, create the consumer again and bind a subscription in place of `old`.
    None when it cannot be restored yet: the caller tries again, backing off further.
    `lock`: several fetch loops on one consumer restore it one at a time."""
    name = config.durable_name or config.name or "?"
    log.warning("consumer_lost", consumer=name, stream=stream, error=problem, retry_in_s=backoff_s)
    await anyio.sleep(backoff_s)
    try:
        async with lock or contextlib.nullcontext():
            sub = await _restore(js, stream, config, name)
    except Exception as exc:  # still gone, or NATS unreachable: try again later
        log.warning(
            "consumer_restore_failed", consumer=name, stream=stream, error=describe_fetch_error(exc)
        )
        return None
    try:
        await old.unsubscribe()
    except Exception as exc:  # already gone with the connection
        log.debug("unsubscribe_failed", error=str(exc))
    log.info("consumer_restored", consumer=name, stream=stream)
    return sub


async def consume(
    js: JetStreamContext,
    *,
    stream: str,
    config: ConsumerConfig,
    type_: type[T],
    handler: Callable[[T, Msg], Awaitable[Any]],
    workers: int = 1,
    fetch_timeout_s: float = 2.0,
    heartbeat_s: float | None = None,
    check_every_s: float = 60.0,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run `workers` fetch loops on one durable consumer until cancelled. Each worker
    handles one message at a time, so `workers` is the concurrency. After `check_every_s`
    of nothing but timeouts, the consumer is put back to `config` if it changed."""
    await ensure_consumer(js, stream, config)
    name = config.durable_name or config.name or "?"
    subs = [await js.pull_subscribe_bind(durable=name, stream=stream) for _ in range(workers)]
    restoring = anyio.Lock()  # one worker re-creates; the others find it done
    handling: dict[int, Msg] = {}  # worker -> the message it is handling, until settled
    task_status.started()

    async def worker(i: int) -> None:
        backoff = RESTORE_BACKOFF_S[0]
        checked = anyio.current_time()
        while True:
            try:
                msgs = await subs[i].fetch(1, timeout=fetch_timeout_s)
            except (nats.errors.TimeoutError, TimeoutError):
                # Nothing to do; fetch timeouts are normal, not errors. But nats-py also
                # turns a refused pull request into a timeout (409, such as "Exceeded
                # MaxRequestExpires" from a consumer changed behind rote's back), so the
                # first worker, idle a while, puts the consumer back to its config.
                backoff = RESTORE_BACKOFF_S[0]
                if i > 0 or anyio.current_time() - checked < check_every_s:
                    continue
                checked = anyio.current_time()
                try:
                    await ensure_consumer(js, stream, config)
                    continue
                except Exception as exc:
                    problem = describe_fetch_error(exc)
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError):
                await anyio.sleep(0.5)
                continue
            except Exception as exc:  # 503 no responders: the consumer (or stream) is gone
                problem = describe_fetch_error(exc)
            else:
                backoff = RESTORE_BACKOFF_S[0]
                for msg in msgs:
                    handling[i] = msg  # left there when cancelled: handed back below
                    await handle_one(
                        msg,
                        type_,
                        handler,
                        heartbeat_s=heartbeat_s,
                        consumer=name,
                        max_deliver=config.max_deliver,
                    )
                    del handling[i]
                continue
            restored = await replace_lost(js, stream, config, subs[i], problem, backoff, restoring)
            backoff = min(backoff * 2, RESTORE_BACKOFF_S[1])
            if restored is not None:
                subs[i] = restored

    try:
        async with anyio.create_task_group() as tg:
            for i in range(workers):
                tg.start_soon(worker, i)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(subs, handling.values(), name)


async def _stop(
    subs: list[JetStreamContext.PullSubscription], handling: Iterable[Msg], consumer: str
) -> None:
    """A consumer stopping: its subscriptions ended, and the messages it was handling,
    or that arrived too late for a fetch, handed back."""
    # Unsubscribed first: the server drops the pull requests still waiting on these
    # inboxes, so a message handed back cannot land in one of them.
    for sub in subs:
        try:
            await sub.unsubscribe()
        except Exception as exc:  # already gone with the connection
            log.debug("unsubscribe_failed", error=str(exc))
    late = [msg for sub in subs for msg in stranded(sub)]
    await hand_back([*handling, *late], consumer)


def stranded(sub: JetStreamContext.PullSubscription | Subscription) -> list[Msg]:
    """Messages the server sent for a fetch that was cancelled (a shutdown) before they
    arrived: they wait in the subscription's queue, where no one will ever ack them.
    nats-py only counts them (`pending_msgs`), so this reads its queue directly."""
    inner = getattr(sub, "_sub", sub)
    queue = getattr(inner, "_pending_queue", None)
    found: list[Msg] = []
    while queue is not None and not queue.empty():
        msg = queue.get_nowait()
        # Status messages (pull request expired, heartbeats) are not deliveries.
        if msg.reply and not JetStreamContext.is_status_msg(msg):
            found.append(msg)
    return found


async def hand_back(msgs: Iterable[Msg], consumer: str) -> None:
    """Stopped mid-message (a shutdown): nak it for redelivery now, to another process
    or to this one's successor, rather than after the whole ack wait. The handler was
    cancelled, so it is for handlers to be safe to run again, as for any redelivery."""
    for msg in msgs:
        if msg.is_acked:
            continue  # settled just before the cancellation struck
        with anyio.move_on_after(HAND_BACK_S):
            await _settle(msg, "nak", consumer)
            log.info("message_handed_back", consumer=consumer, subject=msg.subject)
