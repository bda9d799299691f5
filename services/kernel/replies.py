"""Each call once: the answer to a call, kept for a while by its caller's key so that
the same request sent again (its reply was lost to a NATS reconnect, a `nats req` sent
twice) gets that answer instead of a second run: a second, billed model call (llm) or
an action done twice (tools). A repeat of a call still in flight waits for it.

Bounded: finished calls are kept `keep_s`, and the oldest are dropped first beyond
`max_entries` or `max_bytes`. Calls in flight are never dropped; the service's
concurrency bounds them.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import msgspec

from services.kernel.codec import encode
from services.kernel.errors import ServiceError

T = TypeVar("T")

KEEP_S = 600.0
MAX_ENTRIES = 2000
MAX_BYTES = 32 * 1024 * 1024


class KeyReused(Exception):
    """The key was used before for a different request: its answer is not this one's."""


@dataclass
class _Call(Generic[T]):
    fingerprint: bytes
    done: anyio.Event = field(default_factory=anyio.Event)
    finished: bool = False
    reply: T | None = None
    error: Exception | None = None
    size: int = 0
    finished_at: float = 0.0


class Replies(Generic[T]):
    def __init__(
        self,
        *,
        weigh: Callable[[T | Exception], int],
        remember: tuple[type[Exception], ...],
        keep_s: float = KEEP_S,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.weigh = weigh
        # Failures that are an answer (the same request would get it again); any other
        # exception, cancellation included, leaves no record and a repeat calls afresh.
        self.remember = remember
        self.keep_s = keep_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.clock = clock
        self._running: dict[Hashable, _Call[T]] = {}
        self._finished: OrderedDict[Hashable, _Call[T]] = OrderedDict()  # oldest first
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._running) + len(self._finished)

    async def once(
        self,
        key: Hashable,
        fingerprint: bytes,
        call: Callable[[], Awaitable[T]],
        *,
        on_repeat: Callable[[], None] | None = None,
    ) -> T:
        """`call()`'s answer, or the answer a call with this key already had or will
        have. `fingerprint` tells the same request from another sent under its key."""
        while True:
            self._expire()
            earlier = self._running.get(key) or self._finished.get(key)
            if earlier is None:
                break
            if earlier.fingerprint != fingerprint:
                raise KeyReused(key)
            if not earlier.finished:
                await earlier.done.wait()
                if not earlier.finished:  # it ended without an answer: call afresh
                    continue
            if on_repeat is not None:
                on_repeat()
            if earlier.error is not None:
                raise earlier.error
            return earlier.reply  # type: ignore[return-value]
        return await self._first(key, _Call(fingerprint), call)

    async def by_call_id(
        self,
        run_id: str | None,
        call_id: str | None,
        request: msgspec.Struct,
        call: Callable[[], Awaitable[T]],
        *,
        on_repeat: Callable[[], None] | None = None,
    ) -> T:
        """`once` for an endpoint's request named by its run's `call_id` (None: no
        record, it runs), told apart by its encoding; a call_id used before for another
        request is an invalid request naming the field."""
        if call_id is None:
            return await call()
        fingerprint = hashlib.blake2b(encode(request), digest_size=16).digest()
        try:
            return await self.once((run_id, call_id), fingerprint, call, on_repeat=on_repeat)
        except KeyReused:
            raise ServiceError(
                "invalid_request",
                f"call_id {call_id!r} was already used for a different request",
                field="call_id",
            ) from None

    async def _first(self, key: Hashable, entry: _Call[T], call: Callable[[], Awaitable[T]]) -> T:
        self._running[key] = entry
        try:
            reply = entry.reply = await call()
        except self.remember as exc:
            entry.error = exc
            raise
        finally:
            del self._running[key]
            if entry.reply is not None or entry.error is not None:
                self._keep(key, entry)
            entry.done.set()
        return reply

    def _keep(self, key: Hashable, entry: _Call[T]) -> None:
        entry.finished = True
        entry.finished_at = self.clock()
        outcome = entry.error if entry.error is not None else entry.reply
        entry.size = self.weigh(outcome)  # type: ignore[arg-type]
        self._finished[key] = entry
        self._bytes += entry.size
        while self._finished and (
            len(self._finished) > self.max_entries or self._bytes > self.max_bytes
        ):
            self._drop_oldest()

    def _expire(self) -> None:
        horizon = self.clock() - self.keep_s
        while self._finished and next(iter(self._finished.values())).finished_at <= horizon:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, entry = self._finished.popitem(last=False)
        self._bytes -= entry.size
