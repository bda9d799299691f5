"""browser_scroll and browser_screenshot: moving what the screen shows, and a picture of
it stored by its content."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

from playwright.async_api import FloatRect
from playwright.async_api import TimeoutError as PlaywrightTimeout

from contracts import tools as t
from contracts.tools import ToolMetadata
from services.tools.limits import BrowserLimits, Budget
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import current_page
from services.tools.session import Session


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
