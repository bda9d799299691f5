"""The navigations of one page's frames, so a tool can wait for the one its action began.

Playwright waits for the navigation an action starts in the main frame of the page it
acts on. A link followed or a form submitted inside an iframe, a link into another
window, a form submitted by script: each loads its page while the call would already
be returning, and the run's next read would see the old document (or the server would
not have the form yet). This keeps each navigation request with the count of its
frame's commits when it was sent: the navigation is over when the frame commits again,
the request fails, or the frame goes away.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import anyio
from playwright.async_api import Frame, Request

# Navigation requests remembered: a page whose ad frames keep reloading must not grow
# this without end, and a call waits only for those its own action sent.
MAX_REMEMBERED = 32


@dataclass(frozen=True)
class _Requested:
    seq: int
    frame: Frame
    request: Request
    commits: int  # the frame's commits when the request was sent


class FrameLoads:
    def __init__(self) -> None:
        self.requested = 0  # navigation requests seen, in any frame
        self._recent: deque[_Requested] = deque(maxlen=MAX_REMEMBERED)
        self._commits: dict[Frame, int] = {}
        self._changed = anyio.Event()

    # --- fed by the page's events (Session.watch) --------------------------------------

    def on_request(self, request: Request) -> None:
        if not request.is_navigation_request():
            return
        self.requested += 1
        frame = request.frame
        self._recent.append(_Requested(self.requested, frame, request, self._commits.get(frame, 0)))
        self._changed_now()

    def on_committed(self, frame: Frame) -> None:
        # Kept until the frame detaches; a closed tab's frames do not, and stay counted
        # (a few bytes each) until the run's session closes.
        self._commits[frame] = self._commits.get(frame, 0) + 1
        self._changed_now()

    def on_failed(self, request: Request) -> None:
        if request.is_navigation_request():
            self._changed_now()

    def on_detached(self, frame: Frame) -> None:
        self._commits.pop(frame, None)
        self._changed_now()

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # --- waited on by tools ------------------------------------------------------------

    async def wait_requested(self, since: int) -> None:
        """Until a navigation request is sent after `since` (a count of `requested`)."""
        while self.requested == since:
            await self._changed.wait()

    async def wait_committed(self, since: int) -> list[Frame]:
        """Until every navigation requested after `since` committed, failed or lost its
        frame; the frames that committed a new document, each once."""
        while True:
            asked = [r for r in self._recent if r.seq > since]
            if all(self._over(r) for r in asked):
                frames = [r.frame for r in asked if self._committed(r)]
                return list(dict.fromkeys(frames))
            await self._changed.wait()

    def leaving(self, frame: Frame) -> list[_Requested]:
        """The navigations of `frame` requested since its latest commit: those taking
        it away from the document it shows."""
        commits = self._commits.get(frame, 0)
        return [r for r in self._recent if r.frame == frame and r.commits == commits]

    async def wait_leaving(self, frame: Frame) -> None:
        """Until `frame` requests a navigation away from the document it shows."""
        while not self.leaving(frame):
            await self._changed.wait()

    async def wait_left(self, frame: Frame) -> None:
        """Until each navigation taking `frame` away from its document committed, failed
        or lost the frame."""
        while not all(self._over(r) for r in self.leaving(frame)):
            await self._changed.wait()

    def _committed(self, requested: _Requested) -> bool:
        return (
            not requested.frame.is_detached()
            and self._commits.get(requested.frame, 0) > requested.commits
        )

    def _over(self, requested: _Requested) -> bool:
        return (
            requested.frame.is_detached()
            or self._committed(requested)
            or requested.request.failure is not None
        )
