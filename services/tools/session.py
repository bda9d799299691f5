"""A run's browser session: its own context, the page tools act on, the tabs it opened
or followed, and the dialogs its pages showed."""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass, field

import anyio
from playwright.async_api import BrowserContext, Dialog, Frame, Page, Request, Response
from playwright.async_api import Error as PlaywrightError

from services.kernel.text import cut_text
from services.tools.frame_loads import FrameLoads
from services.tools.vault import SecretField

# What a call reports of the dialogs (alert, confirm, prompt) pages showed since the last
# report: a page that raises one after another is not reported dialog by dialog.
MAX_DIALOGS_REPORTED = 5
MAX_DIALOG_MESSAGE_CHARS = 500


@dataclass
class Session:
    """A run's browser state: its own context, the page tools act on, and what the
    last main-frame navigation answered."""

    run_id: str
    context: BrowserContext
    page: Page
    generation: int
    attempt: int = 1  # the delivery of the run that opened it
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    last_status: int | None = None
    navigations: int = 0
    in_flight: int = 0
    # A call was cut off (timeout, cancellation): the page may still be navigating.
    interrupted: bool = False
    # The current page's navigations in every frame, for the actions Playwright does
    # not wait on (a link in an iframe, a form submitted by script).
    frames: FrameLoads = field(default_factory=FrameLoads)
    _watched: list[Page] = field(default_factory=list)
    # Pages the run opened or followed, oldest first: where it goes back to when its
    # page closes, and the last to be closed when it keeps too many open.
    _own: list[Page] = field(default_factory=list)
    _adopted: anyio.Event = field(default_factory=anyio.Event)
    # The page of the run's latest action (a click, a submit) until its next call: the
    # pages it opens meanwhile are the run's own.
    _actor: Page | None = None
    _crashed: set[Page] = field(default_factory=set)
    # The current call's answer to a confirm() or prompt() (the model's `confirm`), and
    # the dialogs not reported yet: shown during a call, or between calls (a timer's
    # "session expires" alert), or during a call whose output could not carry them.
    accept_dialogs: bool = False
    dialogs: list[dict[str, str]] = field(default_factory=list)
    # The current call's fields that get a secret (a selector, a form field's key), for
    # the tool to check the document each one is in (vault.py).
    secret_fields: dict[str, SecretField] = field(default_factory=dict)
    # Opened for a run whose page died with Chromium: until it navigates, a call would
    # read a blank page and "succeed" with nothing.
    lost: bool = False

    def watch(self, page: Page) -> None:
        if page in self._watched:
            return
        self._watched = [p for p in self._watched if not p.is_closed()]
        self._watched.append(page)

        def on_response(response: Response) -> None:
            request = response.request
            if (
                page is self.page
                and request.is_navigation_request()
                and response.frame == page.main_frame
            ):
                self.last_status = response.status

        def on_navigated(frame: Frame) -> None:
            if page is not self.page:
                return
            self.frames.on_committed(frame)
            if frame == page.main_frame:
                self.navigations += 1

        def on_request(request: Request) -> None:
            if page is not self.page:
                return
            self.frames.on_request(request)
            if request.is_navigation_request() and request.frame == page.main_frame:
                self.last_status = None

        def on_request_failed(request: Request) -> None:
            if page is self.page:
                self.frames.on_failed(request)

        def on_crash(_page: Page) -> None:
            # Not closed, and every later call on it fails: replaced on the next call.
            self._crashed.add(page)

        page.on("request", on_request)
        page.on("response", on_response)
        page.on("framenavigated", on_navigated)
        page.on("requestfailed", on_request_failed)
        page.on("framedetached", self.frames.on_detached)
        page.on("crash", on_crash)
        page.on("dialog", self._answer)

    async def _answer(self, dialog: Dialog) -> None:
        """Every dialog is answered at once (an open one blocks the page's scripts, and
        every later call would wait on it), and reported: Playwright would otherwise
        dismiss it silently, and a click whose confirm() said no would look done. An
        alert has only OK; leaving a page (beforeunload) was asked for by the run."""
        accept = dialog.type in ("alert", "beforeunload") or self.accept_dialogs
        if len(self.dialogs) < MAX_DIALOGS_REPORTED:
            self.dialogs.append(
                {
                    "type": dialog.type,
                    "message": cut_text(dialog.message, MAX_DIALOG_MESSAGE_CHARS),
                    "answer": "accepted" if accept else "dismissed",
                }
            )
        with suppress(PlaywrightError):  # the page closed meanwhile
            # A prompt accepted keeps the answer the page proposed (else it gets "").
            await (dialog.accept(dialog.default_value) if accept else dialog.dismiss())

    def adopt(self, page: Page) -> None:
        """A page the run opened (target=_blank, window.open) becomes the current one."""
        if page is not self.page:
            # Another page's: one opened by a link has often been answered before it
            # is adopted, and unknown, the status is read from the page itself.
            self.last_status = None
        self.page = page
        self.watch(page)
        self._own = [p for p in self._own if p is not page and not p.is_closed()]
        self._own.append(page)
        self._crashed = {p for p in self._crashed if not p.is_closed()}
        self._adopted.set()
        self._adopted = anyio.Event()

    async def opened(self, page: Page) -> None:
        """Every page the context opens. Only one the run's own action opened becomes
        current: a pop-up a page opens by itself (an advert on load) stays in the
        background, or the run's next read would be of the advert."""
        actor = self._actor
        self.watch(page)
        if actor is None:
            return
        # Opened by the page acted on (None: a noopener link), not by the page the click
        # led to opening its advert as it loads.
        opener = await page.opener()
        if (opener is None or opener is actor) and not page.is_closed():
            self.adopt(page)

    def acting(self, page: Page) -> None:
        """The run acts on `page` (a click, a submit): a pop-up it opens before the run's
        next call (one reaches Playwright some 100 ms after the click) is followed."""
        self._actor = page

    def begin_call(self, *, accept_dialogs: bool = False) -> None:
        """A new call: pop-ups arriving from now on were not opened by an earlier action,
        and dialogs are this call's to answer. Those not reported yet stay to be."""
        self._actor = None
        self.accept_dialogs = accept_dialogs
        self.secret_fields = {}

    def between_calls(self) -> None:
        """A call ended: a dialog from now until the next is the page's own, and an
        alert has only OK, but a confirm() it asks on its own was not the run's to say
        yes to."""
        self.accept_dialogs = False
        self.secret_fields = {}

    def report_dialogs(self) -> list[dict[str, str]]:
        """The dialogs shown since the last report, now reported."""
        reported, self.dialogs = self.dialogs, []
        return reported

    async def wait_adopted(self, page: Page) -> None:
        """Until the current page is no longer `page` (the run followed a new one)."""
        while self.page is page:
            await self._adopted.wait()

    def is_own(self, page: Page) -> bool:
        return page in self._own

    def last_own(self) -> Page | None:
        """The page the run was on most recently that is still open and usable."""
        for page in reversed(self._own):
            if not page.is_closed() and page not in self._crashed:
                return page
        return None

    def crashed(self) -> bool:
        """Whether the current page's renderer crashed."""
        return self.page in self._crashed

    def touch(self) -> None:
        self.last_used = time.monotonic()
