"""The page a run's tools act on: the current tab (reopened when the run closed it, a
crashed one replaced, old ones closed), stopping what it loads, and its state as a
call reports it."""

from __future__ import annotations

from contextlib import suppress

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from contracts.tools import ToolMetadata
from services.tools.browser_errors import quoted
from services.tools.outcome import Outcome, ToolFailure
from services.tools.session import Session

# Tabs a run keeps open, the current one included. Tools act on the current tab only;
# the others are kept for when the page closes itself (window.close()).
MAX_OPEN_PAGES = 5

# How long stopping a navigation or probing a page may take: CDP answers these from the
# browser process in milliseconds, even when the page's renderer is busy.
_STOP_WITHIN_S = 0.5
PROBE_WITHIN_S = 1.0


async def current_page(session: Session, *, after_crash: bool = False) -> Page:
    """The page tools act on; reopened if the run closed it (window.close()). A page
    whose renderer crashed is replaced by a fresh one, and the call fails saying so
    (unless `after_crash`: the call, a navigation, does not need what was on it)."""
    crashed_url = await replace_crashed(session)
    if crashed_url is not None and not after_crash:
        raise crash_failure(crashed_url)
    if session.page.is_closed():
        # Back to where the run was before, not to a pop-up it never followed.
        open_pages = [p for p in session.context.pages if not p.is_closed()]
        back = session.last_own() or (open_pages[-1] if open_pages else None)
        session.adopt(back or await session.context.new_page())
    await _close_old_pages(session)
    return session.page


async def replace_crashed(session: Session) -> str | None:
    """If the current page's renderer crashed, a fresh page in the same context (cookies
    and storage kept) replaces it; returns the URL the crashed page was on."""
    if not session.crashed():
        return None
    page = session.page
    url = page.url
    with suppress(PlaywrightError), anyio.move_on_after(_STOP_WITHIN_S, shield=True):
        await page.close(run_before_unload=False)
    session.adopt(await session.context.new_page())
    return url


def crash_failure(url: str) -> ToolFailure:
    return ToolFailure(
        "page_crashed",
        f"the page ({quoted(url)}) crashed: its renderer died. A blank page replaces it"
        " (cookies kept); navigate again to go on",
        metadata=ToolMetadata(url=url),
    )


async def _close_old_pages(session: Session) -> None:
    """A run that keeps opening tabs (target=_blank links, pop-ups) keeps the newest
    few: each holds a renderer's memory until the run ends. Pop-ups the run never
    followed go first, then the oldest of the pages it was on."""
    others = [p for p in session.context.pages if p is not session.page and not p.is_closed()]
    others.sort(key=session.is_own)  # stable: oldest first within each kind
    for page in others[: max(0, len(others) - (MAX_OPEN_PAGES - 1))]:
        # Closed meanwhile, or hung in a script: a close must not hold the call up.
        with suppress(PlaywrightError), anyio.move_on_after(_STOP_WITHIN_S):
            await page.close(run_before_unload=False)


async def stop_loading(page: Page) -> None:
    """Abandon a navigation still in progress (after a timeout), like the stop button.
    Through CDP, not `window.stop()`: an evaluate waits for the pending navigation (and
    a busy renderer) instead of stopping it, and the page would later land on the URL
    that timed out. Shielded and short, so it also runs in a call being cancelled."""
    with suppress(PlaywrightError), anyio.move_on_after(_STOP_WITHIN_S, shield=True):
        cdp = await page.context.new_cdp_session(page)
        try:
            await cdp.send("Page.stopLoading")
        finally:
            with suppress(PlaywrightError):
                await cdp.detach()


async def _responsive(page: Page) -> bool:
    """Whether the page's renderer runs script at all (not stuck in `while (true) {}`)."""
    with anyio.move_on_after(PROBE_WITHIN_S):
        # An error means between documents, or closed: not stuck.
        with suppress(PlaywrightError):
            await page.evaluate("1")
        return True
    return False


async def recover(session: Session) -> None:
    """Before the next call after one that timed out: stop what is still loading, and if
    the page no longer answers (a script that never yields), replace it with a fresh page
    in the same context, so cookies and storage are kept but the run is not stuck."""
    page = await current_page(session)
    await stop_loading(page)
    if await _responsive(page):
        return
    with suppress(PlaywrightError), anyio.move_on_after(_STOP_WITHIN_S, shield=True):
        # No beforeunload: a hung page cannot run it, and a dialog would block the close.
        await page.close(run_before_unload=False)
    session.adopt(await session.context.new_page())


async def page_title(page: Page) -> str:
    try:
        return await page.title()
    except PlaywrightError:
        return ""  # the page is between documents


async def page_state(session: Session, page: Page, *, navigated: bool) -> Outcome:
    title = await page_title(page)
    status = session.last_status if navigated else None
    if navigated and status is None:
        with suppress(PlaywrightError):
            status = await page.evaluate(_STATUS_JS)
    return Outcome(
        {"url": page.url, "title": title},
        ToolMetadata(url=page.url, title=title, http_status=status),
    )


# The HTTP status of the document, for pages whose response we did not see arrive.
_STATUS_JS = """
() => performance.getEntriesByType('navigation')[0]?.responseStatus || null
"""
