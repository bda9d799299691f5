"""The browser tools, acting on a run's Session. Each returns an Outcome or raises a
ToolFailure the model sees (a selector that matched nothing, a navigation error)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import FloatRect, Frame, Locator, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from contracts.tools import ToolMetadata
from services.kernel.text import TRUNCATION_MARK, cut_text
from services.tools.bounds import MAX_QUOTED_URL_CHARS
from services.tools.browser import Session
from services.tools.extraction import (
    EXTRACT_JS,
    READ_PAGE_JS,
    parse_field_spec,
    readable_text,
)
from services.tools.outcome import Outcome, ToolFailure

# A name that is a plain form field name (`q`, `user[email]`), not CSS.
_FIELD_NAME = re.compile(r"^[A-Za-z_][\w\-\[\].:]*$")
_TRUE = {"true", "on", "yes", "1", "checked"}
_FALSE = {"false", "off", "no", "0", "unchecked", ""}


@dataclass(frozen=True)
class BrowserLimits:
    max_page_chars: int = 40_000
    max_items: int = 1_000
    max_frames: int = 20  # embedded frames read_page reads after the page itself
    element_timeout_s: float = 5.0  # waiting for an element to click/type/fill
    load_timeout_s: float = 10.0  # waiting for `load` after the DOM is ready
    extract_wait_s: float = 1.0  # a selector that matches nothing yet: wait this long
    # How long an action's navigation may take to be requested (not to load: that gets
    # the call's time), else the page's script handled the action and none comes.
    submit_wait_s: float = 2.0  # a form submitted by script
    popup_wait_s: float = 2.0  # into another window; into a new tab: for the tab to open
    # A link or form in a frame: requested within some 20 ms of the action (measured).
    frame_request_wait_s: float = 0.5
    # A meta refresh this soon after load is a redirect, followed by browser_navigate.
    refresh_follow_s: float = 3.0
    # A full-page screenshot is cut to this height and width: an endless feed would
    # otherwise be a picture of hundreds of megapixels, in Chromium's memory and ours.
    max_screenshot_px: int = 16_384
    screenshot_dir: Path = Path("blobs")


def inner_timeout(seconds: float) -> float:
    """The part of a call's timeout its steps may use: what is left over lets a step's
    own, more specific error (which element was missing, what the command printed) be
    reported before the call's hard deadline cuts everything off. A short call keeps
    at least half of its time for its steps: a fast page must still load in it."""
    return seconds - min(max(0.1 * seconds, 0.75), seconds / 2)


class Budget:
    """The time left for one call, handed to Playwright as per-action timeouts."""

    def __init__(self, seconds: float) -> None:
        self.deadline = anyio.current_time() + inner_timeout(seconds)

    def left(self) -> float:
        return max(0.0, self.deadline - anyio.current_time())

    def ms(self, cap_s: float | None = None) -> float:
        left = self.left()
        if cap_s is not None:
            left = min(left, cap_s)
        return max(1.0, left * 1000)


# The first line of a Playwright error, as a failure quotes it.
MAX_ERROR_LINE_CHARS = 500


def _first_line(exc: PlaywrightError) -> str:
    text = (exc.message or str(exc)).strip()
    # Masked before the cut (cut_text): half a secret no longer looks like one.
    return cut_text(text.splitlines()[0], MAX_ERROR_LINE_CHARS) if text else type(exc).__name__


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


def _quoted(url: str) -> str:
    """A URL as an error message quotes it: the call's input may be up to a megabyte."""
    return cut_text(url, MAX_QUOTED_URL_CHARS)


def _is_selector_syntax(exc: PlaywrightError) -> bool:
    text = exc.message or str(exc)
    return any(
        marker in text
        for marker in ("is not a valid selector", "Unexpected token", "SyntaxError", "parse")
    )


# Tabs a run keeps open, the current one included. Tools act on the current tab only;
# the others are kept for when the page closes itself (window.close()).
MAX_OPEN_PAGES = 5


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
        f"the page ({_quoted(url)}) crashed: its renderer died. A blank page replaces it"
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


# How long stopping a navigation or probing a page may take: CDP answers these from the
# browser process in milliseconds, even when the page's renderer is busy.
_STOP_WITHIN_S = 0.5
_PROBE_WITHIN_S = 1.0


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
    with anyio.move_on_after(_PROBE_WITHIN_S):
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


async def _title(page: Page) -> str:
    try:
        return await page.title()
    except PlaywrightError:
        return ""  # the page is between documents


async def _page_state(session: Session, page: Page, *, navigated: bool) -> Outcome:
    title = await _title(page)
    status = session.last_status if navigated else None
    if navigated and status is None:
        with suppress(PlaywrightError):
            status = await page.evaluate(_STATUS_JS)
    return Outcome(
        {"url": page.url, "title": title},
        ToolMetadata(url=page.url, title=title, http_status=status),
    )


# Where acting on the element loads a page: the target of the link it is in, or when
# it submits its form (`submits`: Enter in a field, or it is a submit button) the
# form's; else the document's <base target> ("" when none names one), and whether the
# element is inside a frame. Null when it neither follows a link nor submits.
_TARGET_JS = """
(el, submits) => {
  const base = () => el.ownerDocument.querySelector('base[target]')?.getAttribute('target');
  const framed = window !== window.top;
  const link = el.closest('a[href], area[href]');
  if (link) return {target: link.getAttribute('target') ?? base() ?? '', framed};
  const button = el.closest(
    'button:not([type=button]):not([type=reset]), input[type=submit], input[type=image]');
  const form = (button ?? el).form ?? el.closest('form');
  if (!form || !(submits || button)) return null;
  const target = button?.getAttribute('formtarget') ?? form.getAttribute('target') ?? base();
  return {target: target ?? '', framed};
}
"""
_SAME_WINDOW = {"", "_self", "_parent", "_top"}

# The HTTP status of the document, for pages whose response we did not see arrive.
_STATUS_JS = """
() => performance.getEntriesByType('navigation')[0]?.responseStatus || null
"""


async def _settle(page: Page, budget: Budget, limits: BrowserLimits) -> None:
    """After an action: Playwright has waited for a navigation it started to commit;
    wait (bounded) for that document to finish loading too."""
    # Slow subresources: the document is there, go on.
    with suppress(PlaywrightTimeout):
        await page.wait_for_load_state("load", timeout=budget.ms(limits.load_timeout_s))


async def _preferring_visible(locator: Locator) -> Locator:
    """The first visible match, else the first match: a page often keeps hidden copies
    (a mobile menu, a template row) ahead of the element a person would see and use."""
    visible = locator.filter(visible=True)
    return visible.first if await visible.count() else locator.first


async def _missing_or_stuck(locator: Locator, what: str, exc: PlaywrightError) -> ToolFailure:
    """`locator` is every match (not just the one acted on), so the counts are right."""
    try:
        count = await locator.count()
        visible = await locator.filter(visible=True).count()
    except PlaywrightError:
        count = visible = 0
    if count == 0:
        return ToolFailure("element_not_found", f"nothing on the page matches {what}")
    return ToolFailure(
        "element_not_actionable",
        f"{what} matches {count} element(s), {visible} visible, but cannot be used:"
        f" {_first_line(exc)}",
    )


# --- tools -----------------------------------------------------------------------------


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
                f"{_quoted(args.url)} did not load in time",
                metadata=ToolMetadata(url=page.url),
            ) from None
        except PlaywrightError as exc:
            # Let whatever loads now (the error page, another navigation) finish, so
            # the next call starts from a page at rest instead of being interrupted.
            await _settle(page, budget, limits)
            if "interrupted by another navigation" in _first_line(exc):
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
                f"cannot open {_quoted(args.url)}: {_first_line(exc)}",
                metadata=ToolMetadata(url=page.url),
            ) from None
    await _settle(page, budget, limits)
    await _follow_refresh(session, page, budget, limits)
    # The latest document's: a page that sent itself on by script (location.replace)
    # is no longer the one goto answered for.
    status = session.last_status
    if status is None and response is not None:
        status = response.status  # the next document not answered yet: still this one
    title = await _title(page)
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
        with anyio.move_on_after(_PROBE_WITHIN_S):
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
        await _settle(page, budget, limits)


async def _shown_frames(main: Frame, want: int) -> list[Frame]:
    """Up to `want` frames embedded in `main` that a person sees, depth first in the
    order the page attached them (hidden and zero-size iframes, like tracking pixels,
    left out). Each look is a round trip: a page of hidden frames gets a few looks."""
    shown: list[Frame] = []
    looks = 4 * want
    stack = list(reversed(main.child_frames))
    while stack and looks > 0 and len(shown) < want:
        frame = stack.pop()
        looks -= 1
        try:
            visible = await (await frame.frame_element()).is_visible()
        except PlaywrightError:  # detached while we looked
            continue
        if visible:
            shown.append(frame)
            stack.extend(reversed(frame.child_frames))
    return shown


# Documents whose text a browser shows: HTML, plain text, XML, JSON.
_TEXTUAL = re.compile(r"^text/|[/+](xml|json)$|^application/(xhtml\+xml|javascript)$")


async def read_page(
    session: Session, args: t.BrowserReadPageInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    # A PDF, an image, a video: the browser shows it (headless, a PDF as nothing or its
    # file name), but it has no text. Said so, rather than read as a near-empty page.
    kind = str(await page.evaluate("() => document.contentType"))
    if not _TEXTUAL.search(kind):
        raise ToolFailure("not_readable", f"the page is {kind}, which the browser shows no text of")
    # innerText stops at an iframe: what embedded frames show follows the page's own
    # text (a widget, an embedded document), up to a cap for pages full of ad frames.
    parts = [str(await page.evaluate(READ_PAGE_JS))]
    for frame in await _shown_frames(page.main_frame, limits.max_frames):
        with suppress(PlaywrightError):  # navigated or removed meanwhile
            parts.append(str(await frame.evaluate(READ_PAGE_JS)))
    raw = "\n\n".join(part for part in parts if part.strip())
    readable = readable_text(raw)
    text = cut_text(readable, limits.max_page_chars + len(TRUNCATION_MARK), mark=TRUNCATION_MARK)
    title = await _title(page)
    return Outcome(text, ToolMetadata(url=page.url, title=title), text != readable)


async def extract(
    session: Session, args: t.BrowserExtractInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    limit = min(args.limit or limits.max_items, limits.max_items)
    fields = (
        {name: parse_field_spec(spec).as_js() for name, spec in args.fields.items()}
        if args.fields is not None
        else None
    )
    js_args = {"limit": limit, "fields": fields, "attribute": args.attribute}
    locator = page.locator(args.selector)

    async def run() -> tuple[int, list[Any]]:
        total, items = await locator.evaluate_all(EXTRACT_JS, js_args)
        return int(total), list(items)

    try:
        total, items = await run()
        if total == 0 and limits.extract_wait_s > 0:
            # A list a script renders after `load`: give it a moment, then take what
            # is there (nothing is a valid answer, not an error).
            try:
                await locator.first.wait_for(
                    state="attached", timeout=budget.ms(limits.extract_wait_s)
                )
                total, items = await run()
            except PlaywrightTimeout:
                pass
    except PlaywrightError as exc:
        if _is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", _first_line(exc)) from None
        raise
    # Cut short by our own cap (not by a limit the caller chose): say so.
    truncated = total > len(items) and (args.limit is None or args.limit > limit)
    return Outcome(items, ToolMetadata(url=page.url, item_count=len(items)), truncated)


async def _by_text(page: Page, text: str, limits: BrowserLimits) -> Locator:
    """Every match of `text` on the page; if it has none, in the first of its shown
    frames that has one (an embedded form, a widget): what a person reading the page
    would click. A locator matching nothing when no frame has it either."""
    main = page.main_frame
    if found := await _text_in(main, text):
        return found
    for frame in await _shown_frames(main, limits.max_frames):
        with suppress(PlaywrightError):  # navigated or removed meanwhile
            if found := await _text_in(frame, text):
                return found
    return main.get_by_text(text)


async def _text_in(frame: Frame, text: str) -> Locator | None:
    """Links or buttons in `frame` whose accessible name is `text`, else is `text` in
    another case, else contains it; else any element showing the text; None if nothing
    shows it."""

    def named(name: str | re.Pattern[str], exact: bool | None = None) -> Locator:
        return frame.get_by_role("link", name=name, exact=exact).or_(
            frame.get_by_role("button", name=name, exact=exact)
        )

    # Whole, in any case: read_page shows "SIGN IN" for a button styled in capitals
    # whose name is "Sign in", and "Sign in with Google" must not win by coming first.
    words = r"\s+".join(re.escape(word) for word in text.split())
    whole = re.compile(rf"^\s*{words}\s*$", re.IGNORECASE)
    for matches in (named(text, exact=True), named(whole), named(text), frame.get_by_text(text)):
        if await matches.count():
            return matches
    return None


async def _window_name(page: Page) -> str | None:
    with anyio.move_on_after(_PROBE_WITHIN_S), suppress(PlaywrightError):
        return str(await page.evaluate("() => window.name"))
    return None  # closed, between documents, or stuck


def _names_frame(page: Page, target: str) -> bool:
    return any(f.name == target for f in page.frames if f is not page.main_frame)


async def _link_window(session: Session, page: Page, target: str | None) -> Page | None:
    """Where a link with `target` loads: `page` itself (no target, _self, a frame of the
    page, the page's own window name), another open window of the run bearing that name,
    or None: a new tab (_blank, a name no window has yet)."""
    if target is None or target.strip().lower() in _SAME_WINDOW:
        return page
    if target.strip().lower() == "_blank":
        return None
    if _names_frame(page, target):
        return page
    for window in [page] + [p for p in session.context.pages if p is not page]:
        if not window.is_closed() and await _window_name(window) == target:
            return window
    return None


async def _act(
    session: Session,
    page: Page,
    element: Locator,
    action: Callable[[], Awaitable[None]],
    budget: Budget,
    limits: BrowserLimits,
    *,
    submits: bool = False,
) -> bool:
    """Run `action` (a click, Enter, a submit) on `element` of `page`, following the page
    into the tab it opens or the open window its target names, as a person would.
    Whether the run is now on another page."""
    where = await element.evaluate(_TARGET_JS, submits, timeout=budget.ms(limits.element_timeout_s))
    target = where["target"] if where else None
    window = await _link_window(session, page, target)
    # Loads in a frame of this page: Playwright waits for main-frame navigations only.
    in_frame = window is page and bool(where) and (where["framed"] or _names_frame(page, target))
    elsewhere = window is not None and window is not page
    if elsewhere:
        assert window is not None
        # Current before the action, so the navigation it starts there is counted.
        session.adopt(window)
    requested = session.frames.requested
    session.acting(page)
    try:
        await action()
    except BaseException:
        if elsewhere:
            session.adopt(page)  # nothing was done: the run stays where it was
        raise
    if window is None:
        # If no tab comes (a frame or window the lookup missed: named by a script, its
        # page busy), the action still happened: the run stays where it is.
        with anyio.move_on_after(min(budget.left(), limits.popup_wait_s)):
            await session.wait_adopted(page)
    elif elsewhere:
        await _navigation_settled(session, requested, budget, limits, limits.popup_wait_s)
    elif in_frame:
        await _navigation_settled(session, requested, budget, limits, limits.frame_request_wait_s)
    return session.page is not page


async def _navigation_settled(
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


async def click(
    session: Session, args: t.BrowserClickInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    if args.selector is not None:
        matches, what = page.locator(args.selector), f"selector {args.selector!r}"
    else:
        assert args.text is not None
        matches, what = await _by_text(page, args.text, limits), f"text {args.text!r}"
    before = session.navigations
    timeout = budget.ms(limits.element_timeout_s)
    try:
        locator = await _preferring_visible(matches)
        moved = await _act(
            session, page, locator, lambda: locator.click(timeout=timeout), budget, limits
        )
    except PlaywrightTimeout as exc:
        raise await _missing_or_stuck(matches, what, exc) from None
    except PlaywrightError as exc:
        if _is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", _first_line(exc)) from None
        raise
    page = await current_page(session)
    await _settle(page, budget, limits)
    return await _page_state(session, page, navigated=moved or session.navigations != before)


async def type_text(
    session: Session, args: t.BrowserTypeInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    matches = page.locator(args.selector)
    before = session.navigations
    moved = False
    try:
        locator = await _preferring_visible(matches)
        await _check_secret_frame(session, args.selector, locator, budget, limits)
        await locator.fill(args.text, timeout=budget.ms(limits.element_timeout_s))
        # Before Enter: a submitted form's field is gone with its page.
        secret = await _is_password_field(locator, budget.ms(limits.element_timeout_s))
        if args.submit:
            timeout = budget.ms(limits.element_timeout_s)
            moved = await _act(
                session,
                page,
                locator,
                lambda: locator.press("Enter", timeout=timeout),
                budget,
                limits,
                submits=True,
            )
    except PlaywrightTimeout as exc:
        raise await _missing_or_stuck(matches, f"selector {args.selector!r}", exc) from None
    except PlaywrightError as exc:
        if _is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", _first_line(exc)) from None
        raise ToolFailure("element_not_actionable", _first_line(exc)) from None
    page = await current_page(session)
    if args.submit:
        await _settle(page, budget, limits)
    state = await _page_state(session, page, navigated=moved or session.navigations != before)
    return _reporting(state, [args.selector] if secret else [])


# The origin of the document an element is in: a frame's own (srcdoc and about:blank
# frames inherit their parent's), "null" for a sandboxed one.
_DOCUMENT_ORIGIN_JS = "el => el.ownerDocument.defaultView?.origin ?? 'null'"


async def _check_secret_frame(
    session: Session, key: str, field: Locator, budget: Budget, limits: BrowserLimits
) -> None:
    """A selector may reach into a frame (`iframe >> internal:control=enter-frame >>
    input`): a secret goes into the field only when the field's own document, not
    just the page around it, is of an origin the secret is for."""
    secret = session.secret_fields.get(key)
    if secret is None:
        return
    origin = await field.evaluate(_DOCUMENT_ORIGIN_JS, timeout=budget.ms(limits.element_timeout_s))
    secret.check(origin, f"the field {key!r} is in a frame of {origin}")


# A field whose value is a secret: a password input, or one the page marks as taking a
# password or a one-time code (a "show password" toggle turns type=password into text).
_PASSWORD_FIELD_JS = """
el => el.type === 'password'
  || /(^|\\s)(current-password|new-password|one-time-code)(\\s|$)/
       .test(el.getAttribute('autocomplete') || '')
"""


async def _is_password_field(locator: Locator, timeout_ms: float) -> bool:
    try:
        return bool(await locator.evaluate(_PASSWORD_FIELD_JS, timeout=timeout_ms))
    except PlaywrightError:
        return True  # filled, then gone or unreadable: assume the worst


def _reporting(state: Outcome, password_fields: list[str]) -> Outcome:
    """The page state, naming the targets that were password fields: the tools service
    masks what was typed into them in its events."""
    if password_fields:
        state.output["password_fields"] = password_fields
    return state


async def _field(page: Page, key: str) -> Locator | None:
    """The form control a fill_form key names: a field name, a label, or CSS."""
    candidates: list[Locator] = []
    if _FIELD_NAME.match(key):
        quoted = key.replace("\\", "\\\\").replace('"', '\\"')
        candidates.append(page.locator(f'[name="{quoted}"]'))
        candidates.append(page.locator(f'[id="{quoted}"]'))
    candidates.append(page.get_by_label(key, exact=True))
    candidates.append(page.get_by_label(key))
    candidates.append(page.get_by_placeholder(key, exact=True))
    for candidate in candidates:
        if await candidate.count():
            return candidate
    try:
        css = page.locator(key)
        if await css.count():
            return css
    except PlaywrightError:
        pass  # not CSS either
    return None


# A select's options as {value, label}.
_OPTIONS_JS = "el => [...el.options].map(o => ({value: o.value, label: o.label.trim()}))"

# The radio group of `el`: the radios of its form (or document) sharing its name.
_RADIO_GROUP = """
el => !el.name ? [el] : [...el.ownerDocument.querySelectorAll("input[type=radio]")]
  .filter(r => r.name === el.name && r.form === el.form)
"""
# Each member as {value, label}, label being the text of its <label>s or its aria-label.
_RADIO_CHOICES_JS = f"""
el => ({_RADIO_GROUP})(el).map(r => ({{
  value: r.value,
  label: ([...(r.labels ?? [])].map(l => l.innerText).join(" ")
    || r.getAttribute("aria-label") || "").replace(/\\s+/g, " ").trim(),
}}))
"""

# Inputs the browser empties when given a value not in its format (value sanitization),
# with the format they take.
_FORMATS = {
    "date": "YYYY-MM-DD",
    "time": "HH:MM or HH:MM:SS",
    "datetime-local": "YYYY-MM-DDTHH:MM",
    "month": "YYYY-MM",
    "week": "YYYY-Www",
}
_MAX_LISTED = 30  # choices quoted in an error


def _choices(options: list[dict[str, str]]) -> str:
    shown = ", ".join(
        repr(o["value"]) if o["label"] in ("", o["value"]) else f"{o['value']!r} ({o['label']!r})"
        for o in options[:_MAX_LISTED]
    )
    more = len(options) - _MAX_LISTED
    return shown + (f", and {more} more" if more > 0 else "") if options else "none"


def _matching(options: list[dict[str, str]], text: str) -> int | None:
    """The option whose value is `text`, else the one whose label is (case and spacing
    aside): a model often quotes what the page shows rather than the value behind it."""
    for i, option in enumerate(options):
        if option["value"] == text:
            return i
    wanted = " ".join(text.split()).casefold()
    for i, option in enumerate(options):
        if " ".join(option["label"].split()).casefold() == wanted:
            return i
    return None


async def _choose(first: Locator, choices_js: str, text: str, key: str, noun: str) -> int:
    """The index of the choice (a select's option, a radio group's member) `text` names,
    or element_not_found listing what there is to choose from."""
    choices = await first.evaluate(choices_js)
    index = _matching(choices, text)
    if index is None:
        raise ToolFailure(
            "element_not_found",
            f"{key!r} has no {noun} {text!r}; its {noun}s are {_choices(choices)}",
        )
    return index


def _checkbox_state(key: str, value: t.FormValue) -> bool:
    """Checked or not, from true/false or a word meaning one of them. Anything else is
    refused: "ham" for a box is not a reason to clear it."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ToolFailure(
        "invalid_value",
        f"{key!r} is a checkbox: give true or false, not {cut_text(str(value), 100)!r}"
        " (to tick one box of a group, name that box by its label or id)",
    )


async def _set_value(
    key: str, locator: Locator, first: Locator, value: t.FormValue, timeout_ms: float
) -> bool:
    """Set the control's value (`first`, the match acted on, among all of `locator`);
    whether it is a password field. Raises ToolFailure for a value the control cannot
    take, rather than setting something else."""
    kind = await first.evaluate(
        "el => [el.tagName.toLowerCase(), (el.getAttribute('type') || '').toLowerCase(),"
        f" ({_PASSWORD_FIELD_JS})(el)]"
    )
    tag, input_type, secret = kind
    text = value if isinstance(value, str) else ("true" if value is True else str(value))
    if tag == "select":
        # Checked first: select_option would wait out its whole timeout for an option
        # that will never appear.
        index = await _choose(first, _OPTIONS_JS, text, key, "option")
        await first.select_option(index=index, timeout=timeout_ms)
    elif input_type == "checkbox":
        await first.set_checked(_checkbox_state(key, value), timeout=timeout_ms)
    elif input_type == "radio":
        if value is True and await locator.count() == 1:
            # The key named one member (by its label or id): choose it.
            await first.check(timeout=timeout_ms)
            return bool(secret)
        if isinstance(value, bool):
            # A group cannot be unchecked, and `true` does not say which member.
            raise ToolFailure(
                "invalid_value", f"{key!r} is a radio group: give the value or label to choose"
            )
        # Never a fallback to the first member: that would choose something not asked for.
        index = await _choose(first, _RADIO_CHOICES_JS, text, key, "choice")
        handle = await first.evaluate_handle(f"(el, i) => ({_RADIO_GROUP})(el)[i]", index)
        try:
            member = handle.as_element()
            assert member is not None
            await member.check(timeout=timeout_ms)
        finally:
            await handle.dispose()
    else:
        await first.fill(text, timeout=timeout_ms)
        # The browser drops a value not in the input's format without an error.
        if input_type in _FORMATS and text and not await first.input_value(timeout=timeout_ms):
            raise ToolFailure(
                "invalid_value",
                f"{key!r} did not take {text!r}: {input_type} inputs take {_FORMATS[input_type]}",
            )
    return bool(secret)


# The submit button of the field's form, "form" when it has none, null outside a form.
_SUBMIT_JS = """
el => {
  const form = el.form ?? el.closest('form');
  if (!form) return null;
  return form.querySelector(
    'button[type=submit], input[type=submit], button:not([type]), input[type=image]'
  ) ?? 'form';
}
"""


async def _submit(session: Session, last: Locator, budget: Budget, limits: BrowserLimits) -> None:
    timeout = budget.ms(limits.element_timeout_s)
    handle = await last.evaluate_handle(_SUBMIT_JS)
    try:
        button = handle.as_element()
        if button is not None:
            # A real click, so the page's own handlers run and Playwright waits for the
            # navigation it starts.
            await button.click(timeout=timeout)
            return
        if await handle.json_value() == "form":
            requested = session.frames.requested
            await last.evaluate("el => (el.form ?? el.closest('form')).requestSubmit()")
            # Script-initiated: Playwright waits for no navigation, so watch for it.
            await _navigation_settled(session, requested, budget, limits, limits.submit_wait_s)
            return
        await last.press("Enter", timeout=timeout)  # not in a form: as a person would
    finally:
        await handle.dispose()


async def fill_form(
    session: Session, args: t.BrowserFillFormInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    before = session.navigations
    last: Locator | None = None
    secret: list[str] = []
    # The fields getting a secret checked before anything is typed, so that a refused
    # form is left as it was; one that appears only as the form is filled is checked
    # when its turn comes.
    for key in session.secret_fields:
        with suppress(PlaywrightError):
            if (locator := await _field(page, key)) is not None:
                first = await _preferring_visible(locator)
                await _check_secret_frame(session, key, first, budget, limits)
    for key, value in args.fields.items():
        locator = await _field(page, key)
        if locator is None:
            raise ToolFailure(
                "element_not_found", f"no form field is named, labelled or selected by {key!r}"
            )
        try:
            # As click and type do: a hidden copy of the form (a template, a mobile
            # layout) ahead of the one a person sees must not be the one filled.
            first = await _preferring_visible(locator)
            await _check_secret_frame(session, key, first, budget, limits)
            if await _set_value(key, locator, first, value, budget.ms(limits.element_timeout_s)):
                secret.append(key)
        except PlaywrightError as exc:
            raise ToolFailure(
                "element_not_actionable", f"cannot set {key!r}: {_first_line(exc)}"
            ) from None
        last = first
    moved = False
    if args.submit and last is not None:
        submitted = last
        try:
            moved = await _act(
                session,
                page,
                submitted,
                lambda: _submit(session, submitted, budget, limits),
                budget,
                limits,
                submits=True,
            )
        except PlaywrightError as exc:
            raise ToolFailure(
                "element_not_actionable", f"cannot submit: {_first_line(exc)}"
            ) from None
        await _settle(await current_page(session), budget, limits)
    page = await current_page(session)
    state = await _page_state(session, page, navigated=moved or session.navigations != before)
    return _reporting(state, secret)


async def scroll(
    session: Session, args: t.BrowserScrollInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    moved = await page.evaluate(_SCROLL_JS, [args.direction, args.amount])
    output: dict[str, Any] = {"scroll_y": int(moved["y"]), "at_end": bool(moved["end"])}
    if moved["box"]:
        output["scrolled"] = "container"
    return Outcome(output, ToolMetadata(url=page.url))


# The page scrolls, unless it does not scroll at all (an app whose feed, chat or
# results pane scrolls inside a fixed page): then the scrollable box that fills most of
# the screen, if one fills a quarter of it. A page at its end stays the target (`end`),
# so a code block or a side menu is not scrolled in its place. Instant, whatever the
# page's CSS scroll-behavior, so the position returned is where it went.
_SCROLL_JS = """
([dir, amount]) => {
  const sign = dir === 'up' ? -1 : 1;
  const page = document.scrollingElement || document.documentElement;
  const movable = el => sign > 0
    ? el.scrollTop + el.clientHeight < el.scrollHeight - 1 : el.scrollTop > 0;
  const shown = el => {
    const r = el.getBoundingClientRect();
    const w = Math.min(r.right, innerWidth) - Math.max(r.left, 0);
    const h = Math.min(r.bottom, innerHeight) - Math.max(r.top, 0);
    return w > 0 && h > 0 ? w * h : 0;
  };
  let target = page;
  if (page.scrollHeight <= page.clientHeight + 1) {
    let area = innerWidth * innerHeight / 4;
    for (const el of document.body ? document.body.querySelectorAll('*') : []) {
      if (el.scrollHeight <= el.clientHeight) continue;
      if (!/(auto|scroll|overlay)/.test(getComputedStyle(el).overflowY)) continue;
      const a = movable(el) ? shown(el) : 0;
      if (a > area) { target = el; area = a; }
    }
  }
  const height = target === page ? innerHeight : target.clientHeight;
  target.scrollBy({top: sign * (amount ?? Math.round(height * 0.9)), behavior: 'instant'});
  return {y: Math.round(target.scrollTop), end: !movable(target), box: target !== page};
}
"""


async def screenshot(
    session: Session, args: t.BrowserScreenshotInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    cap = limits.max_screenshot_px
    cut = False
    clip = None
    if args.full_page:
        width, height = await page.evaluate(_PAGE_SIZE_JS)
        cut = max(width, height) > cap
        # Playwright trims the clip to the page: the top of it, up to the cap.
        clip = FloatRect(x=0, y=0, width=cap, height=cap)
    try:
        data = await page.screenshot(
            type="png",
            full_page=args.full_page,
            clip=clip,
            timeout=budget.ms(),
            animations="disabled",
        )
    except PlaywrightTimeout:
        raise ToolFailure("timeout", "the screenshot did not finish in time") from None
    digest = hashlib.sha256(data).hexdigest()
    path = store_blob(limits.screenshot_dir, digest, data, ".png")
    return Outcome(
        {"sha256": digest, "path": str(path)},
        ToolMetadata(url=page.url, blob=f"sha256:{digest}"),
        truncated=cut,
    )


# The page's size as a full-page screenshot measures it (as Playwright does).
_PAGE_SIZE_JS = """
() => {
  const els = [document.body, document.documentElement].filter(Boolean);
  const most = (keys) => Math.max(0, ...els.flatMap((el) => keys.map((k) => el[k] || 0)));
  return [most(["scrollWidth", "offsetWidth", "clientWidth"]),
          most(["scrollHeight", "offsetHeight", "clientHeight"])];
}
"""


def store_blob(directory: Path, digest: str, data: bytes, suffix: str) -> Path:
    """Content-addressed: the same bytes are stored once. Written to a temporary name
    and renamed, so a reader never sees half a file."""
    path = directory / digest[:2] / f"{digest}{suffix}"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


BROWSER_TOOLS = {
    "browser_navigate": navigate,
    "browser_read_page": read_page,
    "browser_extract": extract,
    "browser_click": click,
    "browser_type": type_text,
    "browser_fill_form": fill_form,
    "browser_scroll": scroll,
    "browser_screenshot": screenshot,
}
