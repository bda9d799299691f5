"""The record of answered calls (llm, tools): a repeat of a call (same key) gets the
first one's answer, waits for it while it runs, and the record stays bounded."""

from __future__ import annotations

import anyio
import pytest

from services.kernel.replies import KeyReused, Replies

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """A failure that is an answer (like a ServiceError)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Model:
    """Counts calls; answers "reply-<n>", or raises what it is told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = anyio.Event()
        self.slow = False
        self.fail: Exception | None = None

    async def __call__(self) -> str:
        self.calls += 1
        if self.slow:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return f"reply-{self.calls}"


def replies(clock: Clock | None = None, **limits: int) -> Replies[str]:
    return Replies(
        weigh=lambda outcome: len(str(outcome)),
        remember=(Boom,),
        clock=clock or Clock(),
        **limits,  # type: ignore[arg-type]
    )


async def test_a_repeat_gets_the_first_answer_without_a_second_call() -> None:
    record, model = replies(), Model()
    repeats: list[str] = []
    assert await record.once(("run", "c1"), b"f", model) == "reply-1"
    got = await record.once(("run", "c1"), b"f", model, on_repeat=lambda: repeats.append("c1"))
    assert got == "reply-1" and model.calls == 1 and repeats == ["c1"]
    # Another call is another call.
    assert await record.once(("run", "c2"), b"g", model) == "reply-2"


async def test_a_repeat_of_a_call_in_flight_waits_for_its_answer() -> None:
    record, model = replies(), Model()
    model.slow = True
    got: list[str] = []

    async def ask() -> None:
        got.append(await record.once(("run", "c1"), b"f", model))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.sleep(0.01)
        tg.start_soon(ask)
        await anyio.sleep(0.01)
        model.release.set()
    assert got == ["reply-1", "reply-1"] and model.calls == 1


async def test_a_failure_that_is_an_answer_is_answered_again() -> None:
    record, model = replies(), Model()
    model.fail = Boom("overloaded")
    for _ in range(2):
        with pytest.raises(Boom, match="overloaded"):
            await record.once(("run", "c1"), b"f", model)
    assert model.calls == 1


async def test_an_unexpected_failure_or_cancellation_leaves_no_record() -> None:
    record, model = replies(), Model()
    model.fail = RuntimeError("bug")
    with pytest.raises(RuntimeError):
        await record.once(("run", "c1"), b"f", model)
    model.fail = None
    assert await record.once(("run", "c1"), b"f", model) == "reply-2"

    # A first call cancelled mid-way (its service stopping): a repeat waiting on it
    # makes the call itself.
    model.slow = True
    got: list[str] = []

    async def ask() -> None:
        got.append(await record.once(("run", "c2"), b"g", model))

    first = anyio.CancelScope()

    async def cancelled() -> None:
        with first:
            await record.once(("run", "c2"), b"g", model)

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancelled)
        await anyio.sleep(0.01)
        tg.start_soon(ask)  # waits on the first
        await anyio.sleep(0.01)
        first.cancel()
        await anyio.sleep(0.01)
        model.release.set()
    assert got == ["reply-4"] and model.calls == 4 and len(record) == 2


async def test_a_key_reused_for_another_request_is_refused() -> None:
    record, model = replies(), Model()
    await record.once(("run", "c1"), b"f", model)
    with pytest.raises(KeyReused):
        await record.once(("run", "c1"), b"other", model)
    assert model.calls == 1


async def test_answers_are_kept_for_a_while_then_forgotten() -> None:
    clock, model = Clock(), Model()
    record = replies(clock, keep_s=600)
    await record.once(("run", "c1"), b"f", model)
    clock.now = 599
    assert await record.once(("run", "c1"), b"f", model) == "reply-1"
    clock.now = 601
    assert await record.once(("run", "c1"), b"f", model) == "reply-2"
    assert len(record) == 1


async def test_the_record_is_bounded_oldest_first() -> None:
    model = Model()
    record = replies(max_entries=2)
    for key in ("a", "b", "c"):
        await record.once(key, b"f", model)
    assert len(record) == 2
    assert await record.once("c", b"f", model) == "reply-3"  # kept
    assert await record.once("a", b"f", model) == "reply-4"  # dropped: called again

    # By size too: "reply-N" weighs 7, so 20 bytes hold two answers.
    record, model = replies(max_bytes=20), Model()
    for key in ("a", "b", "c"):
        await record.once(key, b"f", model)
    assert len(record) == 2
    assert await record.once("a", b"f", model) == "reply-4"
