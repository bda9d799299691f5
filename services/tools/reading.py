"""browser_read_page and browser_extract: a page's text (with that of the frames a
person sees) and items picked out of it, with the drift fingerprint of what they
meant on the page (fingerprints.py)."""

from __future__ import annotations

import re
from contextlib import suppress
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from contracts.tools import ToolMetadata
from services.kernel.text import TRUNCATION_MARK, cut_text
from services.tools.browser_errors import first_line, is_selector_syntax
from services.tools.extraction import EXTRACT_JS, READ_PAGE_JS, parse_field_spec, readable_text
from services.tools.fingerprints import FINGERPRINT_LIMITS, fingerprint_of
from services.tools.limits import BrowserLimits, Budget
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import current_page, page_title
from services.tools.session import Session


async def shown_frames(main: Frame, want: int) -> list[Frame]:
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
    for frame in await shown_frames(page.main_frame, limits.max_frames):
        with suppress(PlaywrightError):  # navigated or removed meanwhile
            parts.append(str(await frame.evaluate(READ_PAGE_JS)))
    raw = "\n\n".join(part for part in parts if part.strip())
    readable = readable_text(raw)
    limit = limits.max_page_chars
    text = cut_text(readable, limit, mark=TRUNCATION_MARK, mark_after_limit=True)
    title = await page_title(page)
    return Outcome(text, ToolMetadata(url=page.url, title=title), len(readable) > limit)


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
    js_args = {
        "limit": limit,
        "fields": fields,
        "attribute": args.attribute,
        "fingerprint": FINGERPRINT_LIMITS,
    }
    locator = page.locator(args.selector)

    async def run() -> tuple[int, list[Any], Any]:
        total, items, found = await locator.evaluate_all(EXTRACT_JS, js_args)
        return int(total), list(items), found

    try:
        total, items, found = await run()
        if total == 0 and limits.extract_wait_s > 0:
            # A list a script renders after `load`: give it a moment, then take what
            # is there (nothing is a valid answer, not an error).
            try:
                await locator.first.wait_for(
                    state="attached", timeout=budget.ms(limits.extract_wait_s)
                )
                total, items, found = await run()
            except PlaywrightTimeout:
                pass
    except PlaywrightError as exc:
        if is_selector_syntax(exc):
            raise ToolFailure("invalid_selector", first_line(exc)) from None
        raise
    # Cut short by our own cap (not by a limit the caller chose): say so.
    truncated = total > len(items) and (args.limit is None or args.limit > limit)
    names = list(args.fields) if args.fields is not None else None
    fingerprint = fingerprint_of(found, items, names)
    metadata = ToolMetadata(url=page.url, item_count=len(items), fingerprint=fingerprint)
    return Outcome(items, metadata, truncated)
