"""The browser acquire benchmark times pooled and fresh acquires under the same
conditions: neither while the pool is still refilling in the background (a refill builds
a context in the same Chromium, and a fresh acquire timed beside it measures both)."""

from __future__ import annotations

from types import SimpleNamespace, TracebackType
from typing import Any

import pytest

from tests.bench import bench_browser


class _Session:
    """A session whose page (a Playwright page's stand-in) is open."""

    page = SimpleNamespace(is_closed=lambda: False)


class FakePool:
    """A pool of `pool_size` that starts refilling after every acquire and is full again
    only once someone waits for it; records whether each acquire overlapped a refill."""

    def __init__(self, config: Any) -> None:
        self.size = config.pool_size
        self.warm = 0
        self.executable = "fake-chromium"
        self.acquires: list[tuple[bool, bool]] = []  # (use_pool, refill in flight)

    async def __aenter__(self) -> FakePool:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def wait_warm(self, count: int | None = None, timeout: float = 30.0) -> None:
        self.warm = self.size

    async def acquire(self, run_id: str, *, use_pool: bool = True) -> _Session:
        self.acquires.append((use_pool, self.warm < self.size))
        if use_pool and self.warm:
            self.warm -= 1
        return _Session()

    async def close_session(self, run_id: str) -> bool:
        return True


@pytest.mark.anyio
async def test_no_acquire_is_timed_while_the_pool_refills(monkeypatch: pytest.MonkeyPatch) -> None:
    pools: list[FakePool] = []

    def make(config: Any) -> FakePool:
        pools.append(FakePool(config))
        return pools[-1]

    monkeypatch.setattr(bench_browser, "BrowserPool", make)
    section = await bench_browser.run(quick=True)
    (pool,) = pools
    fresh = [refilling for use_pool, refilling in pool.acquires if not use_pool]
    pooled = [refilling for use_pool, refilling in pool.acquires if use_pool]
    assert len(pooled) == len(section.details["pooled_ms"])
    assert len(fresh) == len(section.details["fresh_ms"]) + 1  # and the unmeasured warm-up
    assert not any(pooled) and not any(fresh)
