"""The browser pool on real Chromium: fresh contexts per run, pre-warming, idle reaping,
closing, and nothing left running after shutdown."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from services.tools.browser import BrowserConfig, BrowserPool, BrowserUnavailable
from tests.integration.test_tools_service import _descendants, nothing_left_behind  # noqa: F401

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]


def _chromium_descendants() -> list[int]:
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"chrom" in raw.split(b"\0", 1)[0] or b"headless_shell" in raw:
            pids.append(pid)
    return pids


async def test_each_run_gets_its_own_fresh_context() -> None:
    async with BrowserPool(BrowserConfig(pool_size=2)) as pool:
        await pool.wait_warm()
        a = await pool.acquire("run-a")
        b = await pool.acquire("run-b")
        assert a.context is not b.context
        assert await pool.acquire("run-a") is a  # the same run keeps its session
        # Fresh: nothing was ever loaded in a pooled context.
        for session in (a, b):
            assert session.page.url == "about:blank"
            assert await session.context.cookies() == []
            assert len(session.context.pages) == 1

        await a.context.add_cookies([{"name": "who", "value": "a", "url": "http://x.test/"}])
        await a.page.set_content("<script>localStorage.setItem('k', 'a')</script>")
        assert [c["value"] for c in await a.context.cookies()] == ["a"]
        assert await b.context.cookies() == []

        # A refilled pool never hands out a context a run used.
        await pool.wait_warm()
        c = await pool.acquire("run-c")
        assert c.context not in (a.context, b.context)
        assert await c.context.cookies() == []


async def test_a_later_attempt_at_a_run_starts_from_a_fresh_context() -> None:
    async with BrowserPool(BrowserConfig(pool_size=1)) as pool:
        first = await pool.acquire("run-a", attempt=1)
        await first.context.add_cookies([{"name": "cart", "value": "1", "url": "http://x.test/"}])
        # The runner running attempt 1 died; the run's redelivery is attempt 2.
        second = await pool.acquire("run-a", attempt=2)
        assert second.context is not first.context
        assert await second.context.cookies() == []
        assert first.page.is_closed()  # closed, not leaked
        # Attempt 2 keeps its session; a straggling call of attempt 1 does not undo it.
        assert await pool.acquire("run-a", attempt=2) is second
        assert await pool.acquire("run-a", attempt=1) is second


async def test_acquire_is_served_from_the_pool_when_warm() -> None:
    async with BrowserPool(BrowserConfig(pool_size=2)) as pool:
        await pool.wait_warm()
        assert pool.warm_count == 2
        await pool.acquire("run-a")
        assert pool.warm_count == 1  # taken from the pool...
        await pool.wait_warm()
        assert pool.warm_count == 2  # ...and refilled in the background


async def test_concurrent_first_calls_of_one_run_share_one_context() -> None:
    async with BrowserPool(BrowserConfig(pool_size=0)) as pool:
        sessions = []

        async def grab() -> None:
            sessions.append(await pool.acquire("run-x"))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(grab)
        assert len({id(s) for s in sessions}) == 1
        assert list(pool.sessions) == ["run-x"]


async def test_calls_cut_short_while_acquiring_leave_no_context_behind() -> None:
    async with BrowserPool(BrowserConfig(pool_size=0)) as pool:
        await pool.acquire("run-warm-up")  # launches Chromium
        await pool.close_session("run-warm-up")
        cut = 0
        for i in range(30):
            # A call's deadline expiring while its run's context is being opened.
            with anyio.move_on_after(0.002 + 0.003 * (i % 10)) as scope:
                await pool.acquire(f"run-{i}")
            cut += scope.cancelled_caught
            await pool.close_session(f"run-{i}")  # what the runner does at the run's end
        assert cut >= 10
        assert pool.sessions == {}
        assert await pool.open_contexts() == 0
        assert pool._browser is not None and pool._browser.contexts == []


async def test_a_caller_cut_short_does_not_let_its_run_get_two_contexts() -> None:
    async with BrowserPool(BrowserConfig(pool_size=0)) as pool:
        await pool.acquire("run-warm-up")
        await pool.close_session("run-warm-up")
        sessions = []
        gave_up = anyio.Event()

        async def grab() -> None:
            sessions.append(await pool.acquire("run-x"))

        async def cut_short() -> None:
            with anyio.move_on_after(0.005):
                await pool.acquire("run-x")
            gave_up.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(cut_short)
            await anyio.lowlevel.checkpoint()  # it opens the run's context...
            tg.start_soon(grab)  # ...while this one waits for it
            await gave_up.wait()
            # The waiter is opening the context now; a third call arrives meanwhile.
            tg.start_soon(grab)
        assert len(sessions) == 2 and sessions[0] is sessions[1]
        assert list(pool.sessions) == ["run-x"]
        assert await pool.open_contexts() == 1


async def test_idle_sessions_are_reaped_but_busy_ones_are_not() -> None:
    async with BrowserPool(BrowserConfig(pool_size=0, idle_timeout_s=60)) as pool:
        idle = await pool.acquire("run-idle")
        busy = await pool.acquire("run-busy")
        fresh = await pool.acquire("run-fresh")
        later = time.monotonic() + 120
        busy.in_flight = 1
        fresh.last_used = later - 1
        assert await pool.reap_idle(now=later) == ["run-idle"]
        assert set(pool.sessions) == {"run-busy", "run-fresh"}
        assert idle.page.is_closed()
        busy.in_flight = 0


async def test_a_call_arriving_while_the_reaper_closes_another_run_keeps_its_session() -> None:
    """Runs a and b went idle together; while the reaper closes a's context, a call
    for b arrives. b's context must not be closed under that call."""
    async with BrowserPool(BrowserConfig(pool_size=0, idle_timeout_s=60)) as pool:
        await pool.acquire("run-a")
        b = await pool.acquire("run-b")
        close_context = pool._close_context
        arrived: list[object] = []

        async def closing(context: Any) -> None:
            if not arrived:  # the first close is under way: b's call comes in
                arrived.append(await pool.acquire("run-b"))
                b.in_flight += 1  # as the toolbox counts a call it runs
            await close_context(context)

        pool._close_context = closing  # type: ignore[method-assign]
        assert await pool.reap_idle(now=time.monotonic() + 120) == ["run-a"]
        assert arrived == [b] and not b.page.is_closed()
        assert list(pool.sessions) == ["run-b"]
        b.in_flight -= 1


async def test_close_session() -> None:
    async with BrowserPool(BrowserConfig(pool_size=0)) as pool:
        session = await pool.acquire("run-a")
        assert await pool.close_session("run-a") is True
        assert await pool.close_session("run-a") is False
        assert session.page.is_closed()
        again = await pool.acquire("run-a")
        assert again is not session and not again.page.is_closed()


async def test_nothing_is_left_running_after_shutdown() -> None:
    async with BrowserPool(BrowserConfig(pool_size=1)) as pool:
        await pool.wait_warm()
        await pool.acquire("run-a")
        assert _chromium_descendants()
    with anyio.fail_after(10):
        while _chromium_descendants():
            await anyio.sleep(0.1)


async def test_no_chromium_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", "/nonexistent")
    async with BrowserPool(BrowserConfig(chromium="/no/such/chromium", pool_size=0)) as pool:
        with pytest.raises(BrowserUnavailable) as caught:
            await pool.acquire("run-a")
        assert "ROTE_CHROMIUM" in str(caught.value)
        assert "/no/such/chromium" in str(caught.value)
