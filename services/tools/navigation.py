"""browser_navigate, and waiting for what loads: the document after an action, a meta
refresh, the navigation an action began where Playwright does not wait for it."""

from __future__ import annotations

from contextlib import suppress
from urllib.parse import urlsplit

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from contracts.tools import ToolMetadata
from services.tools.browser_errors import first_line, quoted
from services.tools.limits import BrowserLimits, Budget
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import PROBE_WITHIN_S, current_page, page_title, stop_loading
from services.tools.session import Session


def _same_url(shown: str, asked: str) -> bool:
    """Whether the page shows the URL a navigation asked for, however Chromium spells
    it (host lowercased, an empty path as "/"); the fragment does not count."""

    def parts(url: str) -> tuple[object, ...]:
        u = urlsplit(url)
        return (
            u.scheme,
            u.username,
            u.password,
            u.hostname,
            u.port,
            u.path or "/",
            u.query,
        )

    try:
        return parts(shown) == parts(asked)
    except ValueError:  # a port out of range: not a page anyone is on
        return False


async def navigate(
    session: Session, args: t.BrowserNavigateInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session, after_crash=True)
    response = None
    for attempt in range(2):
        try:
            response = await page.goto(args.url, wait_until="domcontentloaded", timeout=budget.ms())
            break
        except PlaywrightTimeout:
            await stop_loading(page)  # or it would interrupt the run's next call
            raise ToolFailure(
                "timeout",
                f"{quoted(args.url)} did not load in time",
                metadata=ToolMetadata(url=page.url),
            ) from None
        except PlaywrightError as exc:
            # Let whatever loads now (the error page, another navigation) finish, so
            # the next call starts from a page at rest instead of being interrupted.
            await settle(page, budget, limits)
            if "interrupted by another navigation" in first_line(exc):
                # By one to this same URL (a request from before that Chromium let go
                # on): the page is where it was asked to be.
                if _same_url(page.url, args.url):
                    break
                # By one the page started itself (a redirect by script, the error page
                # of a previous failure): once more.
                if attempt == 0:
                    continue
            raise ToolFailure(
                "navigation_failed",
                f"cannot open {quoted(args.url)}: {first_line(exc)}",
                metadata=ToolMetadata(url=page.url),
            ) from None
    await settle(page, budget, limits)
    await _follow_refresh(session, page, budget, limits)
    # The latest document's: a page that sent itself on by script (location.replace)
    # is no longer the one goto answered for.
    status = session.last_status
    if status is None and response is not None:
        status = response.status  # the next document not answered yet: still this one
    title = await page_title(page)
    return Outcome(
        {"url": page.url, "status": status, "title": title},
        ToolMetadata(url=page.url, http_status=status, title=title),
    )


# Meta refreshes followed one after another by one navigation, as redirects are.
MAX_REFRESHES = 5

# The delay of the document's meta refresh when it leads to a URL (its first one, the
# one the browser obeys), else null: a refresh to the page itself is a reload.
_REFRESH_JS = r"""
() => {
  const meta = document.querySelector('meta[http-equiv="refresh" i]');
  const found = /^\s*(\d+)[\d.]*\s*[;,\s]\s*\S/.exec(meta?.content ?? "");
  return found ? Number(found[1]) : null;
}
"""


async def _follow_refresh(
    session: Session, page: Page, budget: Budget, limits: BrowserLimits
) -> None:
    """A page that sends itself on at once (a meta refresh: the redirect of sites that
    have no server-side one) starts doing so only after its `load`. Followed, so the
    call reports where it leads and the next call does not read a page being replaced.
    One that waits longer (a dashboard reloading every minute) stays as it is."""
    frame = page.main_frame
    for _ in range(MAX_REFRESHES):
        delay = None
        with anyio.move_on_after(PROBE_WITHIN_S):
            try:
                delay = await page.evaluate(_REFRESH_JS)
            except PlaywrightError:  # its document is already being replaced
                delay = 0 if session.frames.leaving(frame) else None
        if delay is None or delay > limits.refresh_follow_s:
            return
        with anyio.move_on_after(min(budget.left(), delay + limits.popup_wait_s)):
            await session.frames.wait_leaving(frame)
        if not session.frames.leaving(frame):
            return  # not sent after all (a script cancelled it)
        with anyio.move_on_after(budget.left()):
            await session.frames.wait_left(frame)
        await settle(page, budget, limits)


async def settle(page: Page, budget: Budget, limits: BrowserLimits) -> None:
    """After an action: Playwright has waited for a navigation it started to commit;
    wait (bounded) for that document to finish loading too."""
    # Slow subresources: the document is there, go on.
    with suppress(PlaywrightTimeout):
        await page.wait_for_load_state("load", timeout=budget.ms(limits.load_timeout_s))


async def navigation_settled(
    session: Session, requested: int, budget: Budget, limits: BrowserLimits, within_s: float
) -> None:
    """After an action Playwright does not wait on (a link or form inside a frame or
    into another window, a form submitted by script): the navigation it began, if one
    is requested within `within_s`, committed and loaded, within the call's time. None
    may come: the page's script handled the action itself."""
    with anyio.move_on_after(min(budget.left(), within_s)):
        await session.frames.wait_requested(requested)
    if session.frames.requested == requested:
        return  # nothing was sent: a page that handles the click or form itself
    frames: list[Frame] = []
    with anyio.move_on_after(budget.left()):
        frames = await session.frames.wait_committed(requested)
    for frame in frames:
        with suppress(PlaywrightError):  # slow subresources, or the frame gone meanwhile
            await frame.wait_for_load_state("load", timeout=budget.ms(limits.load_timeout_s))
