"""How long and how much a browser call may take: the limits of the browser tools, and
the time left of one call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio


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
    # browser_candidates' output: whole candidates are dropped past it (never a selector
    # cut in half), well under a reply's output limit.
    max_candidates_bytes: int = 128 * 1024
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
