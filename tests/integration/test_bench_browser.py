"""The browser acquire benchmark times pooled and fresh acquires under the same
conditions: neither while the pool is still refilling in the background (a refill builds
a context in the same Chromium, and a fresh acquire timed beside it measures both)."""

from __future__ import annotations

import pytest

from services.dev.bench import bench_browser
from services.tools.browser import BrowserConfig, BrowserPool
from services.tools.session import Session

pytestmark = [pytest.mark.anyio, pytest.mark.browser]


class RecordingPool(BrowserPool):
    """The real pool, noting for each acquire whether a refill was still due then."""

    made: list[RecordingPool] = []

    def __init__(self, config: BrowserConfig) -> None:
        super().__init__(config)
        self.acquires: list[tuple[bool, bool]] = []  # (use_pool, refill in flight)
        RecordingPool.made.append(self)

    async def acquire(self, run_id: str, *, attempt: int = 1, use_pool: bool = True) -> Session:
        refilling = self.warm_count < self.config.pool_size
        self.acquires.append((use_pool, refilling))
        return await super().acquire(run_id, attempt=attempt, use_pool=use_pool)


async def test_no_acquire_is_timed_while_the_pool_refills(monkeypatch: pytest.MonkeyPatch) -> None:
    RecordingPool.made.clear()
    monkeypatch.setattr(bench_browser, "BrowserPool", RecordingPool)
    section = await bench_browser.run(quick=True)
    (pool,) = RecordingPool.made
    fresh = [refilling for use_pool, refilling in pool.acquires if not use_pool]
    pooled = [refilling for use_pool, refilling in pool.acquires if use_pool]
    assert len(pooled) == len(section.details["pooled_ms"])
    assert len(fresh) == len(section.details["fresh_ms"]) + 1  # and the unmeasured warm-up
    assert not any(pooled) and not any(fresh)
