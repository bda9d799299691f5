"""Browser context acquire time: from the pre-warmed pool vs built fresh, in one run.

Acquiring is what a run's first browser tool call waits for before it can act: a
BrowserContext of its own plus the page the tools use. Both kinds are measured on the
same Chromium, interleaved, so drift affects them alike; before each acquire the pool is
refilled (the steady state between runs), so neither is timed beside a context the pool
is building in the background. Target: pooled p50 <= 50 ms.

    python -m services.dev.bench.bench_browser [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio

from services.dev.bench.harness import Metric, Section, percentile, render_table, to_json
from services.kernel.logs import configure_logging
from services.tools.browser import BrowserConfig, BrowserPool

TARGET_P50_MS = 50.0


async def _acquire_ms(pool: BrowserPool, run_id: str, *, use_pool: bool) -> float:
    began = time.perf_counter()
    session = await pool.acquire(run_id, use_pool=use_pool)
    elapsed = (time.perf_counter() - began) * 1000
    assert not session.page.is_closed()
    await pool.close_session(run_id)
    return elapsed


async def run(quick: bool) -> Section:
    rounds = 15 if quick else 60
    pooled: list[float] = []
    fresh: list[float] = []
    async with BrowserPool(BrowserConfig(pool_size=2, reap_interval_s=3600)) as pool:
        await pool.wait_warm(timeout=60)
        # One of each first, unmeasured: the first page of a browser costs extra.
        await _acquire_ms(pool, "warmup-fresh", use_pool=False)
        for i in range(rounds):
            await pool.wait_warm(timeout=60)
            pooled.append(await _acquire_ms(pool, f"pooled-{i}", use_pool=True))
            await pool.wait_warm(timeout=60)  # the refill the pooled acquire started
            fresh.append(await _acquire_ms(pool, f"fresh-{i}", use_pool=False))
        executable = pool.executable
    p50 = statistics.median(pooled)
    fresh_p50 = statistics.median(fresh)
    metrics = [
        Metric("pooled acquire p50", round(p50, 3), "ms", f"<= {TARGET_P50_MS:g} ms",
               p50 <= TARGET_P50_MS),
        Metric("pooled acquire p95", round(percentile(pooled, 95), 3), "ms"),
        Metric("fresh acquire p50", round(fresh_p50, 1), "ms"),
        Metric("fresh acquire p95", round(percentile(fresh, 95), 1), "ms"),
        Metric("fresh / pooled at p50", round(fresh_p50 / max(p50, 1e-6), 1), "x"),
    ]  # fmt: skip
    return Section(
        name="browser_acquire",
        metrics=metrics,
        notes=(
            f"{rounds} acquires of each kind, interleaved, on one headless Chromium "
            f"({executable}); an acquire is a new BrowserContext and its page, ready to use."
        ),
        details={
            "pooled_ms": [round(x, 3) for x in pooled],
            "fresh_ms": [round(x, 1) for x in fresh],
        },
    )


if __name__ == "__main__":
    configure_logging("json", "warning")
    quick = "--quick" in sys.argv
    began = time.perf_counter()
    section = anyio.run(run, quick, backend="asyncio")
    print(to_json([section], time.perf_counter() - began, quick))
    print(render_table([section]))
