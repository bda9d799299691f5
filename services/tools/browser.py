"""One headless Chromium, one BrowserContext per run, a pool of pre-warmed contexts.

- A run's context (cookies, storage, pages) is created for it and never shared: the
  pool hands out fresh contexts, each to exactly one run, and never takes one back.
- Pre-warmed entries hold a context and its page (opening a page costs far more than
  creating a context), so acquiring one is a dictionary pop.
- Sessions idle for `idle_timeout_s` are closed; `close_session` closes one on request.
- If Chromium dies, the calls in flight fail; the next acquire relaunches it and the
  run continues in a fresh context. Likewise when Playwright's driver dies (Chromium goes
  with it), found out when a call fails (`check_connected`): a new driver is started.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass

import anyio
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from services.kernel.logs import get_logger
from services.tools.browser_errors import first_line
from services.tools.chromium import chromium_candidates, launch_args
from services.tools.session import Session

log = get_logger("rote.tools.browser")

# Opening a context and its page takes well under a second; a browser that takes this
# long is treated as unusable.
CREATE_TIMEOUT_S = 10.0
# Runs whose session died with Chromium, remembered until they come back (or end): a
# bound, so runs that never return cannot grow it without end.
MAX_LOST_REMEMBERED = 10_000
# The first line of a failed launch, per Chromium tried, in the error that lists them.
MAX_LAUNCH_ERROR_CHARS = 300


class BrowserUnavailable(Exception):
    """No Chromium could be launched."""


@dataclass(frozen=True)
class BrowserConfig:
    chromium: str | None = None  # ROTE_CHROMIUM: used when Playwright has no Chromium
    pool_size: int = 2
    idle_timeout_s: float = 900.0
    reap_interval_s: float = 30.0
    viewport: tuple[int, int] = (1280, 800)
    locale: str = "en-US"


@dataclass
class _Warm:
    context: BrowserContext
    page: Page
    generation: int


class BrowserPool:
    """Use as `async with BrowserPool(config) as pool:`; everything is closed on exit."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._stack = AsyncExitStack()
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._generation = 0
        self._launch_lock = anyio.Lock()
        self._sessions: dict[str, Session] = {}
        self._creating: dict[str, anyio.Lock] = {}
        # run_id -> the attempt whose session died with Chromium (see Session.lost).
        self._lost: dict[str, int] = {}
        self._warm: deque[_Warm] = deque()
        self._refill = anyio.Event()
        self._warmed = anyio.Event()
        self._closing = False
        self.launches = 0
        self.executable: str | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> BrowserPool:
        # Unwound in reverse: cancel the helpers, wait for them, then close the browser.
        self._stack.push_async_callback(self._shutdown)
        tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(self._keep_warm)
        tg.start_soon(self._reap_idle)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _shutdown(self) -> None:
        self._closing = True
        with anyio.CancelScope(shield=True):
            # Closing the browser closes every context in it.
            self._sessions.clear()
            self._warm.clear()
            if self._browser is not None:
                # Anything may fail here (the driver may be gone): shutdown goes on.
                with suppress(Exception), anyio.move_on_after(10):
                    await self._browser.close()
                self._browser = None
            await self._stop_playwright()

    @property
    def connected(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    async def _ensure_browser(self) -> Browser:
        async with self._launch_lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._closing:
                raise BrowserUnavailable("the tools service is shutting down")
            self._browser = await self._launch()
            return self._browser

    async def _launch(self) -> Browser:
        try:
            return await self._launch_once()
        except BrowserUnavailable:
            if self._playwright is None:
                raise
        # Every candidate failed on a running driver: the driver itself may be what
        # died. Start a new one and try once more.
        log.warning("playwright_restarting")
        await self._stop_playwright()
        return await self._launch_once()

    async def _stop_playwright(self) -> None:
        if self._playwright is not None:
            try:
                with anyio.move_on_after(10, shield=True):
                    await self._playwright.stop()
            except Exception as exc:  # the driver already went away
                log.debug("playwright_stop_failed", error=str(exc))
            self._playwright = None

    async def _driver(self) -> Playwright:
        """Playwright's driver, started when there is none."""
        if self._playwright is None:
            # Shielded: a start cut short would leave a driver process nobody stops.
            with anyio.CancelScope(shield=True):
                self._playwright = await async_playwright().start()
            if self._closing:
                await self._stop_playwright()
                raise BrowserUnavailable("the tools service is shutting down")
        pw = self._playwright
        # A scope without a deadline swallows nothing: the start above returned.
        assert pw is not None
        return pw

    async def _launch_once(self) -> Browser:
        pw = await self._driver()
        try:
            own = pw.chromium.executable_path
        except Exception:  # no browser registry for this Playwright build
            own = None
        errors: list[str] = []
        for executable in chromium_candidates(own, self.config.chromium):
            try:
                # handle_sigint=False: a terminal's Ctrl-C reaches the driver too (it
                # is in rote's process group), and by default it then closes the
                # browser and exits on its own, racing rote's shutdown (and asyncio
                # reports the driver's lost connection as a future never retrieved).
                # Without it the driver ignores SIGINT; Chromium is in a process
                # group of its own; rote's shutdown closes both.
                browser = await pw.chromium.launch(
                    executable_path=executable,
                    headless=True,
                    args=launch_args(),
                    handle_sigint=False,
                )
            except PlaywrightError as exc:
                quoted = first_line(exc, MAX_LAUNCH_ERROR_CHARS)
                errors.append(f"{executable or 'playwright chromium'}: {quoted}")
                continue
            return self._launched(browser, executable or own)
        hint = "install one (playwright install chromium) or set ROTE_CHROMIUM"
        detail = "; ".join(errors) if errors else "no Chromium found"
        raise BrowserUnavailable(f"cannot launch Chromium ({detail}); {hint}")

    def _launched(self, browser: Browser, executable: str | None) -> Browser:
        """`browser`, just launched from `executable`, as the current generation."""
        self._generation += 1
        generation = self._generation
        self._warm.clear()  # entries of a dead browser are gone with it
        browser.on("disconnected", lambda _browser: self._on_disconnected(generation))
        self.launches += 1
        self.executable = executable
        log.info(
            "browser_launched",
            executable=self.executable,
            version=browser.version,
            generation=generation,
        )
        return browser

    def _on_disconnected(self, generation: int) -> None:
        if generation != self._generation or self._closing:
            return
        log.warning("browser_disconnected", generation=generation, sessions=len(self._sessions))
        self._browser = None
        self._warm.clear()
        # Sessions of the dead browser are dropped; their runs get a fresh context on
        # their next call. Calls in flight fail on their own (target closed).
        for run_id, session in list(self._sessions.items()):
            if session.generation == generation:
                del self._sessions[run_id]
                self._remember_lost(session)
        self._refill.set()

    async def check_connected(self) -> None:
        """After a failed call: is the browser still there? When Playwright's driver dies,
        no `disconnected` fires and the browser still says it is connected, but every
        call fails at once (target closed). Then it is handled as Chromium dying (which
        it does, its pipe to the driver closed), and the driver is replaced too."""
        browser, generation = self._browser, self._generation
        if browser is None or not browser.is_connected() or self._closing:
            return
        try:
            # A round trip to Chromium through the driver; one that hangs is no verdict.
            with anyio.move_on_after(5):
                cdp = await browser.new_browser_cdp_session()
                await cdp.detach()
            return
        except PlaywrightError as exc:
            error = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        async with self._launch_lock:
            if generation != self._generation or self._browser is not browser:
                return  # relaunched (or found gone) meanwhile
            log.warning("browser_unreachable", generation=generation, error=error)
            self._on_disconnected(generation)
            # Closes Chromium if only the probe failed; a dead driver has nothing to close.
            with suppress(Exception), anyio.move_on_after(5, shield=True):
                await browser.close()
            log.warning("playwright_restarting")
            await self._stop_playwright()  # the next launch starts a new driver

    # --- contexts ------------------------------------------------------------------------

    async def _new_warm(self) -> _Warm:
        browser = await self._ensure_browser()
        generation = self._generation
        # Shielded: a newContext cut short (a call's deadline) is still carried out by
        # Chromium, and the context it makes would belong to nobody, never closed. So
        # it runs to the end, bounded, and is closed if our caller was cancelled meanwhile.
        warm: _Warm | None = None
        try:
            with anyio.move_on_after(CREATE_TIMEOUT_S, shield=True):
                warm = await self._create(browser, generation)
        except PlaywrightError:
            await self.check_connected()  # the driver may be what is gone
            raise
        if warm is None:
            raise BrowserUnavailable(
                f"Chromium did not open a browser context within {CREATE_TIMEOUT_S:g}s"
            )
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            await self._close_context(warm.context)
            raise
        return warm

    async def _create(self, browser: Browser, generation: int) -> _Warm:
        width, height = self.config.viewport
        context = await browser.new_context(
            viewport={"width": width, "height": height},
            locale=self.config.locale,
            accept_downloads=False,
            service_workers="block",
        )
        try:
            page = await context.new_page()
        except BaseException:
            await self._close_context(context)
            raise
        return _Warm(context, page, generation)

    async def _close_context(self, context: BrowserContext) -> None:
        # Failing means the browser (and the context with it) is gone already.
        with suppress(Exception), anyio.move_on_after(5, shield=True):
            await context.close()

    async def _keep_warm(self) -> None:
        """Refill the pool whenever it is asked to (at start, after each acquire, after a
        relaunch). A launch failure is logged once per request, not retried hot."""
        self._refill.set()
        while True:
            await self._refill.wait()
            self._refill = anyio.Event()
            while len(self._warm) < self.config.pool_size and not self._closing:
                try:
                    warm = await self._new_warm()
                except BrowserUnavailable as exc:
                    log.error("browser_unavailable", error=str(exc))
                    break
                except Exception as exc:  # never let the pool's helper take the service down
                    log.warning("prewarm_failed", error=str(exc).splitlines()[0][:300])
                    break
                if warm.generation == self._generation and not self._closing:
                    self._warm.append(warm)
                    self._warmed.set()
                    self._warmed = anyio.Event()
                else:
                    await self._close_context(warm.context)

    def _pop_warm(self) -> _Warm | None:
        while self._warm:
            warm = self._warm.popleft()
            if warm.generation == self._generation and self.connected:
                return warm
        return None

    async def acquire(self, run_id: str, *, attempt: int = 1, use_pool: bool = True) -> Session:
        """The run's session, creating it (from the pool when it can) on first use.
        A later attempt at the run (its runner died mid-run) gets a fresh one: the dead
        attempt's cookies, page and half-filled forms must not steer it.
        `use_pool=False` always builds a fresh context (to measure what the pool saves)."""
        session = self._live(run_id)
        if session is not None and session.attempt >= attempt:
            return session
        lock = self._creating.setdefault(run_id, anyio.Lock())
        try:
            async with lock:
                session = self._live(run_id)
                if session is not None:
                    if session.attempt >= attempt:
                        return session
                    log.info("session_replaced", run_id=run_id, attempt=attempt)
                    await self.close_session(run_id)
                warm = self._pop_warm() if use_pool else None
                pooled = warm is not None
                if warm is None:
                    warm = await self._new_warm()
                self._refill.set()
                session = Session(run_id, warm.context, warm.page, warm.generation, attempt)
                # A later attempt starts afresh anyway; the same one had a page.
                session.lost = self._lost.pop(run_id, None) == attempt
                session.adopt(warm.page)
                warm.context.on("page", session.opened)
                self._sessions[run_id] = session
                log.debug("session_opened", run_id=run_id, pooled=pooled)
                return session
        finally:
            # A released lock passes straight to its next waiter, which then no longer
            # counts as waiting: forgetting the lock while it is held would let the
            # next caller make a second lock, and a second session for the run.
            idle = not lock.locked() and not lock.statistics().tasks_waiting
            if idle and self._creating.get(run_id) is lock:
                del self._creating[run_id]

    def _live(self, run_id: str) -> Session | None:
        session = self._sessions.get(run_id)
        if session is None:
            return None
        if session.generation != self._generation or not self.connected:
            self._sessions.pop(run_id, None)
            self._remember_lost(session)
            return None
        session.touch()
        return session

    def _remember_lost(self, session: Session) -> None:
        self._lost[session.run_id] = session.attempt
        while len(self._lost) > MAX_LOST_REMEMBERED:
            del self._lost[next(iter(self._lost))]

    async def close_session(self, run_id: str, *, attempt: int | None = None) -> bool:
        """Close the run's session; with `attempt`, only one that delivery or an earlier
        one opened (a later delivery took the run over and browses on)."""
        session = self._sessions.get(run_id)
        if attempt is not None and session is not None and session.attempt > attempt:
            log.info("session_kept", run_id=run_id, attempt=session.attempt, asked=attempt)
            return False
        self._lost.pop(run_id, None)  # the run is done with its page
        session = self._sessions.pop(run_id, None)
        if session is None:
            return False
        await self._close_context(session.context)
        log.debug("session_closed", run_id=run_id)
        return True

    async def _reap_idle(self) -> None:
        while True:
            await anyio.sleep(self.config.reap_interval_s)
            try:
                await self.reap_idle()
            except Exception as exc:
                log.warning("reap_failed", error=str(exc))

    async def reap_idle(self, now: float | None = None) -> list[str]:
        """Close sessions with no call for idle_timeout_s (and none in flight)."""
        now = time.monotonic() if now is None else now

        def idle(session: Session | None) -> bool:
            return (
                session is not None
                and session.in_flight == 0
                and now - session.last_used > self.config.idle_timeout_s
            )

        reaped = []
        for run_id in [run_id for run_id, s in self._sessions.items() if idle(s)]:
            # Asked again: while an earlier one closed, a call may have come for this run.
            if not idle(self._sessions.get(run_id)):
                continue
            log.info("session_reaped", run_id=run_id)
            await self.close_session(run_id)
            reaped.append(run_id)
        return reaped

    # --- introspection (tests, benchmarks, status) ---------------------------------------

    @property
    def sessions(self) -> dict[str, Session]:
        return dict(self._sessions)

    @property
    def warm_count(self) -> int:
        return len(self._warm)

    async def open_contexts(self) -> int:
        """How many browser contexts Chromium holds, as Chromium counts them: Playwright's
        own list misses one whose creation it stopped waiting for."""
        browser = self._browser
        if browser is None or not browser.is_connected():
            return 0
        cdp = await browser.new_browser_cdp_session()
        try:
            reply = await cdp.send("Target.getBrowserContexts")
        finally:
            await cdp.detach()
        return len(reply["browserContextIds"])

    async def wait_warm(self, count: int | None = None, timeout: float = 30.0) -> None:
        """Wait until the pool holds `count` (default: pool_size) warm contexts."""
        want = self.config.pool_size if count is None else count
        self._refill.set()
        with anyio.fail_after(timeout):
            while len(self._warm) < want:
                await self._warmed.wait()
