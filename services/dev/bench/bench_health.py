"""Executor health rebuild time against the number of events, with and without snapshots.

One Executor aggregate per case, filled with N events (one compilation, then replay
outcomes) in a SQLite file, the default store. Rebuilding is what every lookup does: a
fresh application loads the aggregate (the latest snapshot and the events after it) and
folds the events into its health. Target: <= 20 ms at 10k events with snapshots.

    python -m services.dev.bench.bench_health [--quick]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec

from contracts.executors import Executor
from contracts.traces import Trace
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler.compile import compile
from services.compiler.store import ExecutorStore
from services.dev.bench.harness import Metric, Section, render_table, to_json
from services.kernel.event_store import application_env
from services.kernel.settings import Settings

# A full run of the demo's "top 3 headlines" task, shipped with the bench so that it runs
# from an installed package (tests/data/traces/news_top3.json links to it).
TRACE = Path(__file__).parent / "trace_news_top3.json"
TARGET_MS = 20.0
SNAPSHOT_EVERY = 50
BATCH = 250


def _executor() -> Executor:
    trace = msgspec.json.decode(TRACE.read_bytes(), type=Trace)
    result = compile(trace.task, trace)
    assert isinstance(result, Executor)
    return result


def _fill(store: ExecutorStore, task_id: str, count: int) -> int:
    """About `count` events, ending SNAPSHOT_EVERY - 1 events after a snapshot (the
    worst case for a rebuild); returns the aggregate's event count."""
    store.record_trace(task_id, "source", _executor())  # created + compiled
    total = count + (SNAPSHOT_EVERY - 1 - count) % SNAPSHOT_EVERY
    count = total - 1
    written = 1
    start = datetime(2025, 1, 1, tzinfo=UTC)
    while written < count:
        n = min(BATCH, count - written)

        def batch(state: h.Health, first: int = written, n: int = n) -> list[ev.HealthEvent]:
            return [
                ev.ReplaySucceeded(
                    at=start + timedelta(minutes=first + i),
                    version=1,
                    run_id=f"run-{first + i}",
                    cost_usd=0.0001,
                    cost_saved_usd=0.04,
                )
                for i in range(n)
            ]

        store.execute(task_id, batch)
        written += n
    return total


def _rebuild_ms(env: dict[str, str], task_id: str, snapshot_every: int, repeat: int) -> list[float]:
    times = []
    # No aggregate cache: every health() is a rebuild from the store.
    store = ExecutorStore(env, snapshot_every=snapshot_every, cache_size=0)
    try:
        store.health(task_id)  # warm the connection and the decoders, not the aggregate
        for _ in range(repeat):
            began = time.perf_counter()
            state = store.health(task_id)
            times.append((time.perf_counter() - began) * 1000)
            assert state is not None
    finally:
        store.close()
    return times


def measure(quick: bool) -> Section:
    counts = [100, 1000, 10_000]
    repeat = 5 if quick else 15
    metrics: list[Metric] = []
    details: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for snapshots in (True, False):
            every = SNAPSHOT_EVERY if snapshots else 0
            settings = Settings(data_dir=Path(tmp) / f"s{every}", event_store="sqlite")
            env = application_env(settings, "compiler")
            writer = ExecutorStore(env, snapshot_every=every)
            try:
                totals = {count: _fill(writer, f"task-{count}", count) for count in counts}
            finally:
                writer.close()
            for count in counts:
                times = _rebuild_ms(env, f"task-{count}", every, repeat)
                median = statistics.median(times)
                label = "with snapshots" if snapshots else "no snapshots"
                key = f"rebuild {count} events, {label}"
                details[key] = {
                    "events": totals[count],
                    "median_ms": median,
                    "min_ms": min(times),
                    "max_ms": max(times),
                }
                target = ok = None
                if snapshots and count == 10_000:
                    target, ok = f"<= {TARGET_MS:g} ms", median <= TARGET_MS
                metrics.append(Metric(key, round(median, 3), "ms", target, ok))
    with_snap = details["rebuild 10000 events, with snapshots"]["median_ms"]
    without = details["rebuild 10000 events, no snapshots"]["median_ms"]
    metrics.append(Metric("speed-up from snapshots at 10k", round(without / with_snap, 1), "x"))
    return Section(
        name="executor_health",
        metrics=metrics,
        notes=(
            f"SQLite file; snapshot every {SNAPSHOT_EVERY} events, each aggregate ending "
            f"{SNAPSHOT_EVERY - 1} events after its last snapshot (the worst case); median "
            f"of {repeat} rebuilds by a fresh application (no aggregate cache)."
        ),
        details=details,
    )


async def run(quick: bool) -> Section:
    return await anyio.to_thread.run_sync(measure, quick)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    began = time.perf_counter()
    section = anyio.run(run, quick)
    print(to_json([section], time.perf_counter() - began, quick))
    print(render_table([section]))
