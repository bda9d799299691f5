"""browser_click, and acting on an element as a person would: the visible match, found by
its text in the page or a frame, and the page followed where the action leads (a new
tab, a named window, a frame)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame, Locator, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from services.tools.accessible import target_of
from services.tools.browser_errors import first_line, is_selector_syntax
from services.tools.limits import BrowserLimits, Budget
from services.tools.navigation import navigation_settled, settle
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import PROBE_WITHIN_S, current_page, page_state
from services.tools.reading import shown_frames
from services.tools.session import Session

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


async def preferring_visible(locator: Locator) -> Locator:
    """The first visible match, else the first match: a page often keeps hidden copies
    (a mobile menu, a template row) ahead of the element a person would see and use."""
    visible = locator.filter(visible=True)
    return visible.first if await visible.count() else locator.first


async def missing_or_stuck(locator: Locator, what: str, exc: PlaywrightError) -> ToolFailure:
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
        f" {first_line(exc)}",
    )


async def _by_text(page: Page, text: str, limits: BrowserLimits, exact: bool) -> Locator:
    """Every match of `text` on the page; if it has none, in the first of its shown
    frames that has one (an embedded form, a widget): what a person reading the page
    would click. A locator matching nothing when no frame has it either."""
    main = page.main_frame
    if found := await _text_in(main, text, exact):
        return found
    for frame in await shown_frames(main, limits.max_frames):
        with suppress(PlaywrightError):  # navigated or removed meanwhile
            if found := await _text_in(frame, text, exact):
                return found
    return _named(main, _whole(text)) if exact else main.get_by_text(text)


def _named(frame: Frame, name: str | re.Pattern[str], exact: bool | None = None) -> Locator:
    return frame.get_by_role("link", name=name, exact=exact).or_(
        frame.get_by_role("button", name=name, exact=exact)
    )


def _whole(text: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(word) for word in text.split())
    return re.compile(rf"^\s*{words}\s*$", re.IGNORECASE)


async def _text_in(frame: Frame, text: str, exact: bool) -> Locator | None:
    """Links or buttons in `frame` whose accessible name is `text`, else is `text` in
    another case; unless `exact`, else contains it, else any element showing the text.
    None if nothing matches."""
    # Whole, in any case: read_page shows "SIGN IN" for a button styled in capitals
    # whose name is "Sign in", and "Sign in with Google" must not win by coming first.
    tries = [_named(frame, text, exact=True), _named(frame, _whole(text))]
    if not exact:
        tries += [_named(frame, text), frame.get_by_text(text)]
    for matches in tries:
        if await matches.count():
            return matches
    return None


async def _window_name(page: Page) -> str | None:
    with anyio.move_on_after(PROBE_WITHIN_S), suppress(PlaywrightError):
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


async def act(
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
    in_frame = (
        window is page
        and bool(where)
        and (where["framed"] or (target is not None and _names_frame(page, target)))
    )
    elsewhere = window is not None and window is not page
    if elsewhere:
        assert window is not None
        # Current before the action, so the navigation it starts there is counted.
        session.adopt(window)
    requested = session.frames.requested
    session.acting(page)
    try:
        await action()
    except PlaywrightTimeout:
        if session.frames.requested == requested:
            if elsewhere:
                session.adopt(page)  # nothing was done: the run stays where it was
            raise
        # The action went through and only the page it asked for is slow to answer (a
        # form's POST to a busy server): not a failure to act, which would be a lie
        # about something that happened. Its navigation gets the call's time instead.
        await navigation_settled(session, requested, budget, limits, 0.0)
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
        await navigation_settled(session, requested, budget, limits, limits.popup_wait_s)
    elif in_frame:
        await navigation_settled(session, requested, budget, limits, limits.frame_request_wait_s)
    return session.page is not page


async def click(
    session: Session, args: t.BrowserClickInput, budget: Budget, limits: BrowserLimits
) -> Outcome:
    page = await current_page(session)
    if args.selector is not None:
        matches, what = page.locator(args.selector), f"selector {args.selector!r}"
    else:
        assert args.text is not None
        found = await _by_text(page, args.text, limits, args.exact)
        matches, what = found, f"text {args.text!r}"
    before = session.navigations
    timeout = budget.ms(limits.element_timeout_s)
    try:
        locator = await preferring_visible(matches)
        # Before the click: after it, the element may be gone with its page.
        target = await target_of(locator, timeout)
        moved = await act(
            session, page, locator, lambda: locator.click(timeout=timeout), budget, limits
        )
    except PlaywrightTimeout as exc:
        raise await missing_or_stuck(matches, what, exc) from None
    except PlaywrightError as exc:
        if is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", first_line(exc)) from None
        raise
    page = await current_page(session)
    await settle(page, budget, limits)
    state = await page_state(session, page, navigated=moved or session.navigations != before)
    state.metadata.target = target
    return state
