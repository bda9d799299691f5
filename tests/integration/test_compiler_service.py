"""rote-compiler over real NATS: traces in, executors out and published; replay outcomes
move health; operators invalidate and pin; bad requests get structured errors; a restart
publishes what was stored but not yet published, once."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import pytest
from eventsourcing.sqlite import SQLiteApplicationRecorder
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import (
    ActiveExecutor,
    ExecutorEvent,
    ExecutorHealth,
    ExecutorHistory,
    ExecutorList,
    SavingsStats,
)
from contracts.runs import HealedStep, ModelTokens, ReplayOutcome, RunEvent, Verification
from contracts.traces import Trace, TraceCaptured
from services.compiler.service import RELAY_LEASE, serve
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode
from services.kernel.errors import RemoteError
from services.kernel.runtime import ServiceContext
from services.kernel.settings import Settings
from services.kernel.streams import ensure_streams
from services.runner.adapters import ExecutorCache
from tests.e2e.helpers import stored

pytestmark = pytest.mark.anyio
T = TypeVar("T")
ROOT = Path(__file__).parent.parent.parent
DATA = ROOT / "tests" / "data" / "traces"
READY = "rote serve: NATS "  # what `rote serve` prints once its services have started
T0 = datetime(2025, 6, 1, tzinfo=UTC)


def trace(name: str, task_id: str, run_id: str) -> Trace:
    loaded = msgspec.json.decode((DATA / f"{name}.json").read_bytes(), type=Trace)
    return msgspec.structs.replace(loaded, task_id=task_id, run_id=run_id)


@asynccontextmanager
async def compiler(
    settings: Settings, bus: Bus, clock: Callable[[], datetime] | None = None
) -> AsyncIterator[None]:
    await ensure_streams(bus.js)
    async with anyio.create_task_group() as tg:
        ctx = ServiceContext(
            settings=settings,
            bus=bus,
            task_group=tg,
            services=("compiler",),
            nats_url=bus.url,
            embedded_nats=False,
        )
        kwargs: dict[str, Any] = {"clock": clock} if clock else {}
        await tg.start(partial(serve, ctx, **kwargs))
        yield
        tg.cancel_scope.cancel()


async def publish_trace(bus: Bus, t: Trace) -> None:
    await bus.publish_event(
        s.trace_captured(t.task_id, t.run_id), TraceCaptured(trace=t), msg_id=f"trace:{t.run_id}"
    )


async def publish_run(
    bus: Bus,
    task_id: str,
    run_id: str,
    event: str,
    *,
    replay: ReplayOutcome | None = None,
    source: str = "executor",
    cost_usd: float = 0.0,
    cost_saved_usd: float = 0.0,
    attempt: int = 1,
    msg_id: str | None = None,
) -> None:
    run = RunEvent(
        task_id=task_id,
        run_id=run_id,
        event=event,  # type: ignore[arg-type]
        at=T0,
        status="failed"
        if event == "failed"
        else "completed"
        if event == "completed"
        else "running",
        source=source,  # type: ignore[arg-type]
        replay=replay,
        cost_usd=cost_usd,
        cost_saved_usd=cost_saved_usd,
        attempt=attempt,
    )
    await bus.publish_event(
        s.run_event(task_id, run_id, event),  # type: ignore[arg-type]
        run,
        msg_id=msg_id or f"{run_id}:{event}",
    )


async def call(bus: Bus, subject: str, body: dict[str, Any] | bytes, reply: type[T]) -> T:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await bus.request(subject, data, reply, timeout=5)


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = await check()
            if value:
                return value
            await anyio.sleep(0.05)


async def executor_events(bus: Bus, task_id: str, event: str = "*") -> list[ExecutorEvent]:
    """Everything the executors stream holds for the task, oldest first."""
    return await stored(bus, s.STREAM_EXECUTORS, s.executor_event(task_id, event), ExecutorEvent)


async def consumer_settled(bus: Bus, stream: str, consumer: str) -> bool:
    """Every message the compiler's durable consumer has been given is handled (acked)."""
    info = await bus.js.consumer_info(stream, consumer)
    return info.num_pending == 0 and info.num_ack_pending == 0


async def health(bus: Bus, task_id: str) -> ExecutorHealth:
    return await call(bus, s.EXECUTORS_GET, {"task_id": task_id}, ExecutorHealth)


async def health_when(
    bus: Bus, task_id: str, check: Callable[[ExecutorHealth], bool]
) -> ExecutorHealth:
    async def probe() -> ExecutorHealth | None:
        try:
            found = await health(bus, task_id)
        except RemoteError:
            return None
        return found if check(found) else None

    return await until(probe)  # type: ignore[no-any-return]


def replay(version: int, ok: bool, **kw: Any) -> ReplayOutcome:
    return ReplayOutcome(version=version, ok=ok, **kw)


async def test_a_captured_trace_becomes_an_active_executor(settings: Settings, bus: Bus) -> None:
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        events = await until(lambda: executor_events(bus, "news", "compiled"))
        assert len(events) == 1
        compiled = events[0]
        assert (compiled.version, compiled.run_id) == (1, "run-1")
        assert compiled.executor is not None and compiled.executor.version == 1

        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor == compiled.executor
        assert active.health.status == "active" and active.health.version == 1

        got = await health(bus, "news")
        assert (got.total_steps, got.deterministic_steps, got.templated_steps) == (3, 2, 1)
        assert got.llm_steps == 0 and got.source_run_id == "run-1"
        assert got.full_run_cost_usd == pytest.approx(0.0412)

        # The same trace delivered again (past the stream's de-duplication) compiles nothing.
        t = trace("news_top3", "news", "run-1")
        await bus.publish_event(
            s.trace_captured("news", "run-1"), TraceCaptured(trace=t), msg_id="again"
        )
        # Traces are handled one at a time, in order, and what they store is published in
        # order: once a later trace's executor is out, so is anything the copy led to.
        await publish_trace(bus, trace("news_top3", "later", "run-2"))
        await until(lambda: executor_events(bus, "later", "compiled"))
        assert len(await executor_events(bus, "news", "compiled")) == 1
        assert (await health(bus, "news")).versions == 1


async def test_replay_outcomes_move_health(settings: Settings, bus: Bus) -> None:
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        # Full runs teach the compiler what a run costs; replays save against that.
        await publish_run(bus, "news", "full-1", "completed", source="full_llm", cost_usd=0.10)
        await publish_run(bus, "news", "full-2", "completed", source="full_llm", cost_usd=0.20)
        fresh = await health_when(bus, "news", lambda h: h.full_run_cost_usd == pytest.approx(0.15))
        assert fresh.last_used_at is None  # compiled, never replayed

        before = utc_now()
        tokens = {"haiku": ModelTokens(input_tokens=300, output_tokens=20, cost_usd=0.002)}
        # The runner's figure (0.15 - 0.002) is the one health records.
        ok = replay(1, True, tokens=tokens, cost_usd=0.002)
        await publish_run(bus, "news", "rep-1", "completed", replay=ok, cost_saved_usd=0.148)
        # Delivered again with another message id: counted once.
        await publish_run(
            bus, "news", "rep-1", "completed", replay=ok, cost_saved_usd=0.148, msg_id="dup"
        )
        got = await health_when(bus, "news", lambda h: h.success_count == 1)
        assert got.total_cost_saved_usd == pytest.approx(0.148)
        assert got.last_used_at is not None and before <= got.last_used_at <= utc_now()
        succeeded = await until(lambda: executor_events(bus, "news", "replay_succeeded"))
        assert succeeded[0].tokens == 320 and succeeded[0].cost_saved_usd == pytest.approx(0.148)

        for i in range(3):
            await publish_run(
                bus,
                "news",
                f"bad-{i}",
                "replay_failed",
                replay=replay(1, False, step=1, reason="min_items: expected at least 2, got 0"),
            )
        got = await health_when(bus, "news", lambda h: h.status == "superseded")
        assert (got.failure_count, got.consecutive_failures) == (3, 3)
        assert got.status_reason == "3 consecutive replay failures"
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is None and active.health.status == "superseded"
        superseded = await until(lambda: executor_events(bus, "news", "superseded"))
        assert superseded[0].version == 1
        failed = await executor_events(bus, "news", "replay_failed")
        assert [e.step for e in failed] == [1, 1, 1]

        # The fallback's full run compiles v2, and replays go on.
        await publish_trace(bus, trace("news_top3_probe", "news", "full-3"))
        got = await health_when(bus, "news", lambda h: h.version == 2)
        assert got.status == "active" and got.consecutive_failures == 0

        stats = await call(bus, s.EXECUTORS_STATS, {}, SavingsStats)
        assert (stats.executors, stats.active, stats.replays, stats.replay_failures) == (1, 1, 4, 3)
        assert stats.by_task == {"news": pytest.approx(0.148)}
        listed = await call(bus, s.EXECUTORS_LIST, {"status": "active"}, ExecutorList)
        assert [e.task_id for e in listed.executors] == ["news"]
        history = await call(bus, s.EXECUTORS_HISTORY, {"task_id": "news"}, ExecutorHistory)
        assert [v.version for v in history.versions] == [1, 2]
        assert [e.event for e in history.events] == [
            "compiled",
            "full_run_recorded",
            "full_run_recorded",
            "replay_succeeded",
            "replay_failed",
            "replay_failed",
            "replay_failed",
            "superseded",
            "compiled",
        ]
        assert [v.status for v in history.summaries] == ["superseded", "active"]


async def test_a_redelivered_runs_successful_replay_counts(settings: Settings, bus: Bus) -> None:
    """Attempt 1 of a run published replay_failed; its redelivery (attempt 2) replayed
    successfully. Health hears both, each once, and saves what the run event says."""
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        broken = replay(1, False, step=1, reason="selector vanished")
        await publish_run(
            bus, "news", "r", "replay_failed", replay=broken, msg_id="r:replay_failed:1"
        )
        await health_when(bus, "news", lambda h: h.failure_count == 1)
        ok = replay(1, True, cost_usd=0.001)
        for msg_id in ("r:finished", "r:finished:again"):  # the second one a redelivery
            await publish_run(
                bus,
                "news",
                "r",
                "completed",
                replay=ok,
                cost_usd=0.001,
                cost_saved_usd=0.0402,
                attempt=2,
                msg_id=msg_id,
            )
        got = await health_when(bus, "news", lambda h: h.success_count == 1)
        assert (got.failure_count, got.consecutive_failures) == (1, 0)
        assert got.total_cost_saved_usd == pytest.approx(0.0402)
        succeeded = await until(lambda: executor_events(bus, "news", "replay_succeeded"))
        assert [(e.run_id, e.attempt, e.cost_saved_usd) for e in succeeded] == [("r", 2, 0.0402)]
        # The redelivery handled too (acked), not merely not yet seen.
        await until(lambda: consumer_settled(bus, s.STREAM_RUNS, s.CONSUMER_COMPILER_RUNS))
        assert (await health(bus, "news")).success_count == 1


async def test_a_replays_check_shows_in_the_rates_and_the_history(
    settings: Settings, bus: Bus
) -> None:
    """The runner checks replayed answers: one found wrong failed and fell back to a full
    run. The checks are counted, the rates published, and the history shows the
    verdict with its evidence."""
    drift = "step 1: the column headed 'price' now reads 'was'"
    fail = "FAIL: the answer gives the old price"
    wrong = Verification(
        status="wrong",
        flagged=True,
        why="flagged",
        method="small_model",
        reasons=[drift, fail],
        cost_usd=0.0003,
    )
    first = Verification(status="verified", why="new_version", method="small_model")
    sample = Verification(status="verified", why="sampled", method="small_model", reasons=["PASS"])
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await publish_run(bus, "news", "full-1", "completed", source="full_llm", cost_usd=0.10)
        ok = replay(1, True, cost_usd=0.001, verification=first)
        await publish_run(bus, "news", "rep-1", "completed", replay=ok, cost_saved_usd=0.099)
        broken = replay(1, False, step=3, reason=f"verification: {fail}", verification=wrong)
        await publish_run(
            bus, "news", "rep-2", "completed", source="full_llm", cost_usd=0.101, replay=broken
        )
        ok = replay(1, True, cost_usd=0.001, verification=sample)
        await publish_run(bus, "news", "rep-3", "completed", replay=ok, cost_saved_usd=0.099)

        got = await health_when(bus, "news", lambda h: h.checked == 3 and h.full_runs == 2)
        assert (got.replays, got.replay_failures, got.wrong, got.unverified) == (3, 1, 1, 0)
        assert (got.drift_alarms, got.drift_confirmed) == (1, 1)
        assert (got.unflagged_checked, got.unflagged_wrong) == (2, 0)
        assert got.hit_rate == 0.5  # 2 runs answered by a replay, 2 in full
        assert got.false_success_rate == 0.0
        assert got.false_success_upper == pytest.approx(1.96**2 / (2 + 1.96**2), abs=1e-6)

        history = await call(bus, s.EXECUTORS_HISTORY, {"task_id": "news"}, ExecutorHistory)
        (failed,) = [e for e in history.events if e.event == "replay_failed"]
        assert failed.reason == f"verification: {fail}"
        assert failed.verification == msgspec.structs.replace(wrong, cost_usd=0.0)
        assert [e.verification.why for e in history.events if e.verification] == [
            "new_version",
            "flagged",
            "sampled",
        ]
        (version,) = history.summaries
        assert (version.checked, version.drift_confirmed, version.hit_rate) == (3, 1, 0.666667)
        published = await until(lambda: executor_events(bus, "news", "replay_failed"))
        assert published[0].verification is not None
        assert published[0].verification.reasons == [drift, fail]

        stats = await call(bus, s.EXECUTORS_STATS, {}, SavingsStats)
        assert (stats.checked, stats.drift_confirmed, stats.full_runs) == (3, 1, 2)
        assert (stats.hit_rate, stats.false_success_rate) == (0.5, 0.0)

        # What an operator reads: `rote executors`, a line per task and the totals.
        command = [sys.executable, "-m", "services.cli", "executors", "--nats-url", bus.url]
        done = await anyio.to_thread.run_sync(
            partial(subprocess.run, command, capture_output=True, text=True, timeout=60)
        )
        assert done.returncode == 0, done.stderr
        header, news, total = done.stdout.splitlines()
        assert header.split()[:4] == ["task", "exec", "replays", "hit"]
        assert news.split()[:9] == ["news", "v1", "3", "50%", "0", "3", "1", "1/1", "0%"]
        assert total.startswith("1 executors, 3 replays (50% of runs); 3 answers checked, 1")
        assert "1 drift alarms, 1 real; false-success rate 0% (95% bound 66%)" in total


async def test_a_candidate_is_promoted_once_verified_and_rolled_back_when_wrong(
    settings: Settings, bus: Bus
) -> None:
    """v1's answer is found wrong; the fallback's trace compiles v2, a candidate beside
    v1. v2's first replay is wrong too: v2 goes and v1 comes back, on trial, until a
    replay verifies it. The next fallback's v3 is verified at once: promoted, and v1
    retired. get, active and history say so at each step."""
    fail = "FAIL: the headlines are yesterday's"
    wrong = Verification(status="wrong", why="new_version", reasons=[fail])
    good = Verification(status="verified", why="new_version", reasons=["PASS: they are"])

    def checked(version: int, verification: Verification) -> ReplayOutcome:
        ok = verification.status == "verified"
        reason = None if ok else f"verification: {fail}"
        return replay(version, ok, reason=reason, verification=verification)

    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await publish_run(bus, "news", "rep-1", "replay_failed", replay=checked(1, wrong))
        await health_when(bus, "news", lambda h: h.failure_count == 1)
        await publish_trace(bus, trace("news_top3_probe", "news", "rep-1"))
        got = await health_when(bus, "news", lambda h: h.version == 2)
        assert (got.candidate, got.status, got.versions) == (True, "active", 2)
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is not None and active.executor.version == 2
        assert active.health.candidate  # the runner checks each of its replays

        # v2 found wrong: superseded at once, v1 restored, a candidate again.
        await publish_run(bus, "news", "rep-2", "replay_failed", replay=checked(2, wrong))
        got = await health_when(bus, "news", lambda h: h.version == 1)
        assert (got.candidate, got.status, got.versions) == (True, "active", 2)
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is not None and active.executor.version == 1
        restored = await until(lambda: executor_events(bus, "news", "restored"))
        assert [(e.version, e.reason) for e in restored] == [(1, "v2 failed verification")]
        # Verified on the page as it is now: trusted again.
        await publish_run(bus, "news", "rep-3", "completed", replay=checked(1, good))
        await health_when(bus, "news", lambda h: not h.candidate and h.success_count == 1)

        # The next fallback's v3 verifies at once: promoted, and v1 retired for it.
        await publish_trace(bus, trace("news_top3_probe", "news", "full-4"))
        await health_when(bus, "news", lambda h: h.version == 3 and h.candidate)
        await publish_run(bus, "news", "rep-4", "completed", replay=checked(3, good))
        got = await health_when(bus, "news", lambda h: h.version == 3 and not h.candidate)
        assert (got.status, got.success_count) == ("active", 1)

        async def both_promoted() -> list[ExecutorEvent] | None:
            found = await executor_events(bus, "news", "promoted")
            return found if len(found) == 2 else None  # the relay publishes after storing

        promoted = await until(both_promoted)
        assert [(e.version, e.run_id) for e in promoted] == [(1, "rep-3"), (3, "rep-4")]

        history = await call(bus, s.EXECUTORS_HISTORY, {"task_id": "news"}, ExecutorHistory)
        assert [(e.event, e.version) for e in history.events] == [
            ("compiled", 1),
            ("replay_failed", 1),
            ("compiled", 2),
            ("replay_failed", 2),
            ("superseded", 2),
            ("restored", 1),
            ("replay_succeeded", 1),
            ("promoted", 1),
            ("compiled", 3),
            ("replay_succeeded", 3),
            ("promoted", 3),
            ("superseded", 1),
        ]
        compiled = [e.candidate for e in history.events if e.event == "compiled"]
        assert compiled == [False, True, True]
        reasons = {(e.event, e.version): e.reason for e in history.events}
        assert reasons[("superseded", 2)] == f"failed verification: {fail}"
        assert reasons[("superseded", 1)] == "replaced by verified v3"
        assert [(v.version, v.status, v.candidate) for v in history.summaries] == [
            (1, "superseded", False),
            (2, "superseded", False),
            (3, "active", False),
        ]


async def test_a_verified_healed_replay_records_a_healed_candidate(
    settings: Settings, bus: Bus
) -> None:
    """A replay of v1 found its extract's element gone, healed the step in place, and
    answered. Unchecked, it records no version; verified, it records v2 (v1 healed), a
    candidate beside v1, once however often the run event comes. v2's next verified
    replay promotes it; get, history and the bus say where it came from."""
    heal = HealedStep(
        step=1,
        tool="browser_extract",
        input={"selector": "h3.title"},
        was={"selector": "h2.headline"},
        reason="browser_extract: element_not_found: no element matches 'h2.headline'",
        cost_usd=0.0004,
    )
    skipped = Verification(status="skipped", why="healed")
    verified = Verification(status="verified", why="healed", reasons=["PASS: they are"])
    good = Verification(status="verified", why="new_version", reasons=["PASS: they are"])
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        unchecked = replay(1, True, verification=skipped, healed_steps=[heal])
        await publish_run(bus, "news", "heal-0", "completed", replay=unchecked)
        got = await health_when(bus, "news", lambda h: h.success_count == 1)
        assert (got.version, got.versions, got.healed) == (1, 1, 1)

        checked = replay(1, True, verification=verified, healed_steps=[heal])
        for msg_id in ("heal-1:completed", "heal-1:again"):  # the second a redelivery
            await publish_run(
                bus,
                "news",
                "heal-1",
                "completed",
                replay=checked,
                cost_saved_usd=0.04,
                msg_id=msg_id,
            )
        got = await health_when(bus, "news", lambda h: h.version == 2)
        assert (got.candidate, got.versions, got.source_run_id) == (True, 2, "heal-1")
        await until(lambda: consumer_settled(bus, s.STREAM_RUNS, s.CONSUMER_COMPILER_RUNS))
        got = await health(bus, "news")
        assert (got.versions, got.healed, got.replays) == (2, 2, 2)
        assert got.total_cost_saved_usd == pytest.approx(0.04)  # it answered: it saved
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is not None and active.executor.version == 2
        assert active.executor.healed_from == 1 and active.health.candidate
        assert active.executor.steps[1].input == {"selector": "h3.title"}  # type: ignore[union-attr]

        await publish_run(
            bus, "news", "rep-2", "completed", replay=replay(2, True, verification=good)
        )
        got = await health_when(bus, "news", lambda h: not h.candidate)
        assert (got.version, got.status) == (2, "active")

        locators = "selector 'h2.headline' -> 'h3.title'"
        reason = f"healed step 1 (browser_extract): {locators} after: {heal.reason}"
        history = await call(bus, s.EXECUTORS_HISTORY, {"task_id": "news"}, ExecutorHistory)
        assert [(e.event, e.version, e.healed_from, e.healed_steps) for e in history.events] == [
            ("compiled", 1, None, []),
            ("replay_succeeded", 1, None, [1]),
            ("replay_succeeded", 1, None, [1]),
            ("compiled", 2, 1, [1]),
            ("replay_succeeded", 2, None, []),
            ("promoted", 2, None, []),
            ("superseded", 1, None, []),
        ]
        assert history.events[3].reason == reason and history.events[3].run_id == "heal-1"
        assert [v.healed_from for v in history.versions] == [None, 1]
        assert [
            (v.version, v.status, v.healed_from, v.compiled_reason, v.healed)
            for v in history.summaries
        ] == [
            (1, "superseded", None, None, 2),
            (2, "active", 1, reason, 0),
        ]

        async def published() -> list[ExecutorEvent] | None:
            found = await executor_events(bus, "news", "compiled")
            return found if len(found) == 2 else None

        compiled = (await until(published))[1]
        assert (compiled.healed_from, compiled.healed_steps, compiled.reason) == (1, [1], reason)
        stats = await call(bus, s.EXECUTORS_STATS, {}, SavingsStats)
        assert stats.healed == 2


async def test_a_recorded_full_run_refreshes_the_runners_cached_lookup(
    settings: Settings, bus: Bus
) -> None:
    """The runner caches each task's lookup (30 s) until an executor event of the task;
    a full run moves full_run_cost_usd, so its record is published and the runner's next
    lookup sees the new mean long before the cache would expire."""
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        cache = ExecutorCache(bus)
        await cache.start()
        first = await cache.get("news")
        assert first is not None and first.health.full_run_cost_usd == pytest.approx(0.0412)

        await publish_run(bus, "news", "full-1", "completed", source="full_llm", cost_usd=0.10)
        recorded = await until(lambda: executor_events(bus, "news", "full_run_recorded"))
        assert [(e.run_id, e.cost_usd) for e in recorded] == [("full-1", 0.10)]

        async def fresh() -> bool:
            got = await cache.get("news")
            return got is not None and got.health.full_run_cost_usd == pytest.approx(0.10)

        assert await until(fresh, timeout=5.0)


async def test_skips_are_published(settings: Settings, bus: Bus) -> None:
    async with compiler(settings, bus):
        await publish_trace(bus, trace("once_news", "oneoff", "run-1"))
        skipped = await until(lambda: executor_events(bus, "oneoff", "skipped"))
        assert skipped[0].reason == "one-time task: it will not run again"
        got = await health(bus, "oneoff")
        assert (
            got.status == "none"
            and got.status_reason == "skipped: one-time task: it will not run again"
        )
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "oneoff"}, ActiveExecutor)
        assert active.executor is None


async def test_a_trace_using_tools_its_task_does_not_allow_makes_no_executor(
    settings: Settings, bus: Bus
) -> None:
    # Whoever may publish on rote.evt.trace.* could otherwise hand the runners a script.
    forged = trace("news_top3", "forged", "run-1")
    forged.task = msgspec.structs.replace(forged.task, allowed_tools=["browser_navigate"])
    async with compiler(settings, bus):
        await publish_trace(bus, forged)
        skipped = await until(lambda: executor_events(bus, "forged", "skipped"))
        assert skipped[0].reason == (
            "the trace uses tools the task does not allow (browser_extract); "
            "its replay would be refused them"
        )
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "forged"}, ActiveExecutor)
        assert active.executor is None


async def test_operators_invalidate_and_pin(settings: Settings, bus: Bus) -> None:
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await publish_trace(bus, trace("news_top3_probe", "news", "run-2"))
        await health_when(bus, "news", lambda h: h.version == 2)

        pinned = await call(
            bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 1, "by": "bob"}, ExecutorHealth
        )
        assert (pinned.version, pinned.pinned_version, pinned.status) == (1, 1, "active")
        pin_events = await until(lambda: executor_events(bus, "news", "pinned"))
        assert (pin_events[0].version, pin_events[0].by) == (1, "bob")
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is not None and active.executor.version == 1

        got = await call(
            bus,
            s.EXECUTORS_INVALIDATE,
            {"task_id": "news", "reason": "answers look wrong", "by": "alice"},
            ExecutorHealth,
        )
        # v1 goes; v2, compiled while v1 was pinned, takes over.
        assert (got.pinned_version, got.version, got.status) == (None, 2, "active")
        invalidated = await until(lambda: executor_events(bus, "news", "invalidated"))
        assert (invalidated[0].version, invalidated[0].by) == (1, "alice")
        assert await until(lambda: executor_events(bus, "news", "unpinned"))

        with pytest.raises(RemoteError) as caught:
            await call(bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 1}, ExecutorHealth)
        assert caught.value.code == "conflict" and caught.value.status == 409
        with pytest.raises(RemoteError) as caught:
            await call(bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 9}, ExecutorHealth)
        assert caught.value.code == "not_found"


async def test_an_invalidation_of_a_replaced_version_is_refused(
    settings: Settings, bus: Bus
) -> None:
    """An operator's "site redesign" meant for v1 arrives after a fallback run compiled
    v2 and a replay verified it: refused (409, field version, naming v2); v2 stays
    current until named itself."""
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await publish_trace(bus, trace("news_top3_probe", "news", "run-2"))
        await health_when(bus, "news", lambda h: h.version == 2)
        ok = replay(2, True, verification=Verification(status="verified", why="new_version"))
        await publish_run(bus, "news", "rep-1", "completed", replay=ok)
        await health_when(bus, "news", lambda h: not h.candidate and h.success_count == 1)

        command = {"task_id": "news", "version": 1, "reason": "site redesign", "by": "alice"}
        with pytest.raises(RemoteError) as caught:
            await call(bus, s.EXECUTORS_INVALIDATE, command, ExecutorHealth)
        error = caught.value
        assert (error.code, error.status, error.info.field) == ("conflict", 409, "version")
        assert "the current version is v2" in error.message
        assert error.info.details == {"current_version": 2}
        with pytest.raises(RemoteError) as caught:
            await call(bus, s.EXECUTORS_INVALIDATE, {**command, "version": 9}, ExecutorHealth)
        assert (caught.value.code, caught.value.info.field) == ("not_found", "version")
        got = await health(bus, "news")
        assert (got.version, got.status) == (2, "active")

        got = await call(bus, s.EXECUTORS_INVALIDATE, {**command, "version": 2}, ExecutorHealth)
        assert (got.version, got.status) == (2, "invalidated")
        invalidated = await until(lambda: executor_events(bus, "news", "invalidated"))
        assert [(e.version, e.by) for e in invalidated] == [(2, "alice")]


async def test_a_version_compiled_before_the_task_was_edited_cannot_be_pinned(
    settings: Settings, bus: Bus
) -> None:
    """The runner never replays it for the edited task: the pin is refused, not taken
    and then dropped by the next full run."""
    async with compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        edited = trace("news_top3_probe", "news", "run-2")
        edited.task = msgspec.structs.replace(edited.task, prompt=edited.task.prompt + " Briefly.")
        await publish_trace(bus, edited)
        await health_when(bus, "news", lambda h: h.version == 2)

        with pytest.raises(RemoteError) as caught:
            await call(bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 1}, ExecutorHealth)
        assert caught.value.code == "conflict" and caught.value.status == 409
        assert "v1 was compiled for the task before it was edited" in caught.value.message
        assert caught.value.info.field == "version"  # the field a caller got wrong
        got = await health(bus, "news")
        assert (got.version, got.pinned_version, got.status) == (2, None, "active")


async def test_pin_and_invalidate_replies_agree_with_get(settings: Settings, bus: Bus) -> None:
    """The replies apply the lookup-time rules, as get does: they never call active a
    version the next lookup supersedes."""
    now = [T0]
    async with compiler(settings, bus, clock=lambda: now[0]):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await call(bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 1}, ExecutorHealth)
        await publish_trace(bus, trace("news_top3_probe", "news", "run-2"))
        await health_when(bus, "news", lambda h: h.versions == 2)
        now[0] = T0 + timedelta(days=40)
        # Unpinned, v2 (compiled 40 days ago, never used) is stale.
        unpinned = await call(
            bus, s.EXECUTORS_PIN, {"task_id": "news", "version": None}, ExecutorHealth
        )
        assert (unpinned.status, unpinned.version) == ("superseded", 2)
        assert (unpinned.status_reason or "").startswith("stale")
        assert unpinned == await health(bus, "news")
        # Pinning vouches for it: active from now on, in the reply and in get.
        pinned = await call(bus, s.EXECUTORS_PIN, {"task_id": "news", "version": 2}, ExecutorHealth)
        assert (pinned.status, pinned.version, pinned.pinned_version) == ("active", 2, 2)
        assert pinned == await health(bus, "news")
        invalidated = await call(
            bus, s.EXECUTORS_INVALIDATE, {"task_id": "news", "reason": "wrong"}, ExecutorHealth
        )
        assert invalidated == await health(bus, "news")


async def test_bad_requests_get_structured_errors(settings: Settings, bus: Bus) -> None:
    async with compiler(settings, bus):
        cases: list[tuple[str, bytes, str, str | None]] = [
            (s.EXECUTORS_GET, b"{not json", "malformed", None),
            (s.EXECUTORS_GET, b'{"task_id": "a.b"}', "invalid_request", "task_id"),
            (s.EXECUTORS_GET, b'{"task_id": "x", "colour": 1}', "invalid_request", "colour"),
            (s.EXECUTORS_GET, b'{"task_id": "nobody"}', "not_found", None),
            (s.EXECUTORS_HISTORY, b'{"task_id": "nobody"}', "not_found", None),
            (s.EXECUTORS_INVALIDATE, b'{"task_id": "x"}', "invalid_request", "reason"),
            (s.EXECUTORS_HISTORY, b'{"task_id": "x", "before": 0}', "invalid_request", "before"),
            (s.EXECUTORS_LIST, b'{"after": "a b"}', "invalid_request", "after"),
            (s.EXECUTORS_INVALIDATE, b'{"task_id": "x", "reason": "r"}', "not_found", None),
            (
                s.EXECUTORS_INVALIDATE,
                b'{"task_id": "x", "reason": "r", "version": 0}',
                "invalid_request",
                "version",
            ),
            (s.EXECUTORS_PIN, b'{"task_id": "x", "version": 0}', "invalid_request", "version"),
            (s.EXECUTORS_LIST, b'{"limit": 0}', "invalid_request", "limit"),
            # Not an empty last page: the listing did not end, the cursor names no executor.
            (s.EXECUTORS_LIST, b'{"after": "nobody"}', "not_found", "after"),
        ]
        for subject, body, code, field in cases:
            msg = await bus.nc.request(subject, body, timeout=5)
            assert msg.headers is not None, (subject, body)
            assert msg.headers["Nats-Service-Error-Code"] in ("400", "404")
            error = json.loads(msg.data)["error"]
            assert error["code"] == code, (subject, body, error)
            assert error.get("field") == field, (subject, body, error)

        # Garbage on the trace stream is dropped; the next good trace still compiles.
        await bus.js.publish(s.trace_captured("news", "junk"), b"{garbage")
        await bus.js.publish(s.trace_captured("news", "junk2"), b'{"trace": {"run_id": 5}}')
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        assert await until(lambda: executor_events(bus, "news", "compiled"))
        # An unknown task asked for its executor: none, not an error.
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "nobody"}, ActiveExecutor)
        assert active.executor is None and active.health.status == "none"


async def test_stale_executor_is_superseded_at_lookup(settings: Settings, bus: Bus) -> None:
    now = [T0]
    async with compiler(settings, bus, clock=lambda: now[0]):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        now[0] = T0 + timedelta(days=31)
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is None
        assert (active.health.status_reason or "").startswith("stale: unused for 31 days")
        superseded = await until(lambda: executor_events(bus, "news", "superseded"))
        assert superseded[0].reason is not None and "stale" in superseded[0].reason


async def test_queries_agree_with_a_lookup_about_a_stale_executor(
    settings: Settings, bus: Bus
) -> None:
    """Before anything asks for the executor to replay (a paused task never does), get,
    list and stats already show what that lookup would decide."""
    now = [T0]
    async with compiler(settings, bus, clock=lambda: now[0]):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        now[0] = T0 + timedelta(days=31)
        got = await health(bus, "news")
        assert got.status == "superseded"
        assert (got.status_reason or "").startswith("stale: unused for 31 days")
        listed = await call(bus, s.EXECUTORS_LIST, {"status": "active"}, ExecutorList)
        assert listed.executors == []
        stats = await call(bus, s.EXECUTORS_STATS, {}, SavingsStats)
        assert (stats.executors, stats.active) == (1, 0)
        assert await executor_events(bus, "news", "superseded") == []  # nothing recorded
        active = await call(bus, s.EXECUTORS_ACTIVE, {"task_id": "news"}, ActiveExecutor)
        assert active.executor is None and active.health == got


async def test_a_long_history_and_many_executors_come_a_page_at_a_time(
    settings: Settings, bus: Bus
) -> None:
    async with compiler(settings, bus):
        for task in ("a", "b", "c"):
            await publish_trace(bus, trace("news_top3", task, f"run-{task}"))
        await health_when(bus, "c", lambda h: h.version == 1)
        for i in range(7):
            await publish_run(bus, "a", f"r{i}", "completed", replay=replay(1, True))
        await health_when(bus, "a", lambda h: h.replays == 7)  # in order: another stream
        await publish_trace(bus, trace("news_top3", "a", "run-a2"))
        await health_when(bus, "a", lambda h: h.version == 2 and h.replays == 7)

        # 1 compiled, 7 replays, compiled v2 (a candidate; v1 stands by): 9 events, newest
        # page first.
        pages: list[ExecutorHistory] = []
        query: dict[str, Any] = {"task_id": "a", "limit": 4}
        while True:
            page = await call(bus, s.EXECUTORS_HISTORY, query, ExecutorHistory)
            pages.append(page)
            if page.next_before is None:
                break
            query["before"] = page.next_before
        assert [(p.first_event, len(p.events), p.total_events) for p in pages] == [
            (6, 4, 9),
            (2, 4, 9),
            (1, 1, 9),
        ]
        events = [e for p in reversed(pages) for e in p.events]
        assert [e.event for e in events] == ["compiled"] + ["replay_succeeded"] * 7 + ["compiled"]
        # Each executor travels once, with the page that compiled it.
        assert [[v.version for v in p.versions] for p in pages] == [[2], [], [1]]
        assert all(e.executor is None for e in events)
        assert [v.version for v in pages[0].summaries] == [1, 2]

        first = await call(bus, s.EXECUTORS_LIST, {"limit": 2}, ExecutorList)
        assert [e.task_id for e in first.executors] == ["a", "b"] and first.next_after == "b"
        rest = await call(bus, s.EXECUTORS_LIST, {"limit": 2, "after": "b"}, ExecutorList)
        assert [e.task_id for e in rest.executors] == ["c"] and rest.next_after is None


async def test_two_compiler_processes_publish_each_event_once(settings: Settings, bus: Bus) -> None:
    """Two compilers on one store: one relay publishes (the other stands by), so a plain
    subscriber sees every event once; when the publisher stops, the other takes over."""
    settings = dataclasses.replace(settings, event_store="sqlite")  # one file, two apps
    published: list[str] = []

    async def count(msg: Msg) -> None:
        published.append(decode(msg.data, ExecutorEvent).event)

    async def seen(n: int) -> bool:
        return len(published) >= n

    await bus.nc.subscribe(s.EXECUTOR_EVENTS_ALL, cb=count)
    async with compiler(settings, bus):
        async with compiler(settings, bus):
            await publish_trace(bus, trace("news_top3", "news", "run-1"))
            await health_when(bus, "news", lambda h: h.version == 1)  # before its outcome
            await publish_run(bus, "news", "r1", "completed", replay=replay(1, True))
            await health_when(bus, "news", lambda h: h.success_count == 1)
            await until(lambda: seen(2))
            await anyio.sleep(2.5)  # more than two relay polls
            assert published == ["compiled", "replay_succeeded"]
        # The inner one stopped (and released the lease if it held it).
        await publish_run(bus, "news", "r2", "completed", replay=replay(1, True))
        await until(lambda: seen(3))
        await anyio.sleep(1.5)
        assert published == ["compiled", "replay_succeeded", "replay_succeeded"]


async def test_a_database_error_while_taking_over_the_relay_is_survived(
    settings: Settings, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay's takeover meets a brief database error: the compiler (and whatever
    else shares its process) keeps running, and the relay goes on publishing, once."""
    settings = dataclasses.replace(settings, event_store="sqlite")
    failing = [False]
    real = SQLiteApplicationRecorder.max_notification_id

    def flaky(recorder: SQLiteApplicationRecorder) -> int | None:
        if failing[0]:
            failing[0] = False
            raise sqlite3.OperationalError("simulated: the database is briefly away")
        return real(recorder)

    monkeypatch.setattr(SQLiteApplicationRecorder, "max_notification_id", flaky)
    published: list[str] = []

    async def count(msg: Msg) -> None:
        published.append(decode(msg.data, ExecutorEvent).event)

    async def holds(check: Callable[[], bool]) -> bool:
        return check()

    await bus.nc.subscribe(s.EXECUTOR_EVENTS_ALL, cb=count)
    async with compiler(settings, bus), compiler(settings, bus):
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)
        await until(lambda: holds(lambda: len(published) == 1))
        failing[0] = True  # the next relay to load its position fails once
        await expire_relay_lease(bus)  # as the TTL does when the holder stalls
        await until(lambda: holds(lambda: not failing[0]))
        await publish_run(bus, "news", "r1", "completed", replay=replay(1, True))
        assert (await health_when(bus, "news", lambda h: h.success_count == 1)).version == 1
        await until(lambda: holds(lambda: len(published) == 2))
        await anyio.sleep(1.5)  # more than a relay poll: no second publish
        assert published == ["compiled", "replay_succeeded"]


class CompilerProcess:
    """`rote serve compiler` as its own OS process, on the test's NATS and a SQLite
    file in the data dir, so a test can SIGKILL it where it stands."""

    def __init__(self, settings: Settings, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
        env.update(
            ROTE_NATS_URL=str(settings.nats_url),
            ROTE_DATA_DIR=str(settings.data_dir),
            ROTE_EVENT_STORE="sqlite",
            ROTE_LOG_FORMAT="json",
            ROTE_LOG_LEVEL="info",
        )
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "serve", "compiler"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_for(self, text: str, timeout: float = 30.0) -> None:
        with anyio.fail_after(timeout):
            while text not in self.output():
                assert self.proc.poll() is None, f"the compiler exited:\n{self.output()}"
                await anyio.sleep(0.05)

    async def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)  # no shutdown path runs, nothing flushes
        with anyio.fail_after(10):
            while self.proc.poll() is None:
                await anyio.sleep(0.05)
        assert self.proc.returncode == -signal.SIGKILL


async def relay_position(bus: Bus) -> int:
    kv = await bus.js.key_value(s.BUCKET_RELAY)
    try:
        entry = await kv.get("compiler")
    except KeyNotFoundError:
        return 0
    return int(entry.value or b"0")


async def expire_relay_lease(bus: Bus) -> None:
    """What the leases bucket's TTL does to a killed holder's key, 15 s later."""
    kv = await bus.js.key_value(s.BUCKET_LEASES)
    await kv.delete(RELAY_LEASE)


async def test_an_event_stored_but_unpublished_when_killed_is_published_once_after_restart(
    settings: Settings, bus: Bus, tmp_path: Path
) -> None:
    """A real compiler process stores an executor while the stream that takes executor
    events is gone (its relay publishes, fails and retries) and is SIGKILLed there.
    Restarted on the same SQLite file, it publishes the event exactly once, and a
    second hard restart publishes nothing. Publishes are counted by a core NATS
    subscription, which sees every publish, even those the stream de-duplicates."""
    processes: list[CompilerProcess] = []
    try:
        first = CompilerProcess(settings, tmp_path / "compiler-1.log")
        processes.append(first)
        await first.wait_for(READY)
        await bus.js.delete_stream(s.STREAM_EXECUTORS)
        await publish_trace(bus, trace("news_top3", "news", "run-1"))
        await health_when(bus, "news", lambda h: h.version == 1)  # stored
        await first.wait_for("relay_publish_failed")  # tried to publish, and failed
        position = await relay_position(bus)
        await first.kill()
        await expire_relay_lease(bus)

        published: list[Msg] = []

        async def count(msg: Msg) -> None:
            published.append(msg)

        await bus.nc.subscribe(s.EXECUTOR_EVENTS_ALL, cb=count)
        await routed(bus.nc)

        second = CompilerProcess(settings, tmp_path / "compiler-2.log")  # restores the stream
        processes.append(second)
        await second.wait_for(READY)
        with anyio.fail_after(20):
            while not published:
                await anyio.sleep(0.05)
        await anyio.sleep(2.5)  # more than two relay polls: no second publish
        assert [m.subject for m in published] == [s.executor_event("news", "compiled")]
        event = decode(published[0].data, ExecutorEvent)
        assert (event.version, event.run_id) == (1, "run-1")
        # It is the event the first process stored past the position it had published.
        headers = published[0].headers or {}
        assert int(headers[s.HEADER_NOTIFICATION_ID]) > position
        await second.kill()
        await expire_relay_lease(bus)

        third = CompilerProcess(settings, tmp_path / "compiler-3.log")
        processes.append(third)
        await third.wait_for(READY)
        await third.wait_for("lease_acquired")  # its relay runs
        assert (await health(bus, "news")).version == 1  # it is up, on the same store
        await anyio.sleep(2.5)
        assert len(published) == 1
    finally:
        for process in processes:
            if process.proc.poll() is None:
                process.proc.kill()
                process.proc.wait()
