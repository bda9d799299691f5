"""Browser tools on pages that open windows on their own, name frames and windows as
link targets, load a form's answer in a frame, crash, hide copies of a form, get a
checkbox a word it cannot take, or open dialogs (alert, confirm, prompt), scroll inside
a pane, or lose the whole browser under a run."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
import pytest
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from contracts.tools import ToolResult
from services.tools.pages import MAX_OPEN_PAGES
from services.tools.session import Session
from tests.browser_box import Browser, error_of, open_browser
from tests.integration.test_tools_service import (  # noqa: F401
    _browser_pids,
    _descendants,
    nothing_left_behind,
)
from tests.local_site import QuietHandler, serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

PAGES = {
    "/a": "<title>A</title><p>page a</p>",
    "/b": "<title>B</title><p>page b</p>",
    "/pop": "<title>Main</title><p>main content</p><script>window.open('/advert')</script>",
    "/advert": "<title>Ad</title><p>advert</p>",
    "/tabs": '<title>T</title><a href="/pop" target="_blank">new tab</a>',
    "/pane": '<title>P</title><iframe name="pane" src="/a"></iframe>'
    '<a href="/b" target="pane">load in pane</a>',
    "/named": '<title>N</title><a href="/a" target="results">A results</a>'
    ' <a href="/b" target="results">B results</a>',
    # A window named "results" the page opened itself, then a link into it.
    "/hub": "<title>Hub</title><script>window.open('/a', 'results')</script>"
    '<a href="/b" target="results">B in results</a>',
    "/dupform": """<title>DF</title>
<div style="display:none"><form action="/a"><input name="email"></form></div>
<form action="/echo"><input name="email"><button>Send</button></form>""",
    "/echo": "<title>E</title><p id=q></p><script>q.textContent = location.search</script>",
    "/boxes": """<title>CB</title><form action="/echo">
<label><input type="checkbox" name="agree"> I agree</label>
<label><input type="checkbox" name="top" value="cheese"> Cheese</label>
<label><input type="checkbox" name="top" value="ham" checked> Ham</label></form>""",
    "/delete": """<title>D</title><p id=r>listed</p>
<button onclick="r.textContent = confirm('Delete order 42?') ? 'deleted' : 'kept'">Delete</button>
<form action="/echo" onsubmit="return confirm('Send it?')">
<input name=q><button>Go</button></form>""",
    "/ask": """<title>Q</title><p id=r>-</p>
<button onclick="r.textContent = prompt('Your name?', 'Ann') ?? 'no answer'">Name</button>""",
    # An app page: fixed to the screen, its feed scrolls inside a pane (smoothly, by CSS).
    "/app": """<title>App</title><body style="margin:0;height:100vh;overflow:hidden">
<nav style="height:40px">menu</nav>
<div id=side style="position:fixed;right:0;top:40px;width:50px;height:100px;overflow:auto">
<div style="height:400px">side</div></div>
<main id=feed style="height:calc(100vh - 40px);overflow-y:auto;scroll-behavior:smooth">
<div style="height:3000px">posts</div></main></body>""",
    "/article": """<title>Art</title><div style="height:3000px">text</div>
<pre style="height:80vh;overflow:auto"><div style="height:2000px">code</div></pre>""",
    "/welcome": "<title>W</title><script>alert('Welcome back')</script><p>inside</p>",
    # A form and a link inside frames, answered slowly (SLOW_S), and a frame whose form
    # the page's own script handles.
    "/framed": '<title>F</title><iframe src="/order"></iframe>',
    "/order": '<form method=post action="/orders"><input name=item><button>Order</button></form>'
    '<a href="/slow-b">more</a>',
    # The frame's link text on the page itself too: the page's own link is the one meant.
    "/framed-too": '<title>FT</title><iframe src="/order"></iframe><a href="/a">more</a>',
    "/into-pane": '<title>IP</title><iframe name="pane" src="/a"></iframe>'
    '<a href="/slow-b" target="pane">load slowly in pane</a>',
    "/buttonless": '<title>BL</title><form method=post action="/orders"><input name=item></form>',
    "/hub-slow": "<title>SH</title><script>window.open('/a', 'results')</script>"
    '<a href="/slow-b" target="results">B slowly in results</a>',
    "/framed-app": '<title>FA</title><iframe src="/app-form"></iframe>',
    # A frame whose form is answered "204 No Content" and whose link is a download:
    # neither loads a document, so nothing commits.
    "/framed-quiet": '<title>FQ</title><iframe src="/quiet"></iframe>',
    "/quiet": '<form method=post action="/no-content"><input name=item><button>Log</button>'
    '</form><a href="/report.csv">report</a>',
    "/app-form": "<form onsubmit=\"document.body.append('saved'); return false\">"
    "<input name=item><button>Save</button></form>",
}
SLOW_S = 1.0


class _Handler(QuietHandler):
    orders: list[dict[str, str]] = []  # one site per test: the fixture empties it
    answered: list[str] = []  # slow pages, as their answer goes out (emptied likewise)

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path.startswith("/slow-"):
            time.sleep(SLOW_S)
            self.answered.append(path)  # before the answer: a caller that has it sees it
            path = "/" + path.removeprefix("/slow-")
        if path == "/report.csv":
            self.send_html("a,b", headers={"Content-Disposition": "attachment; filename=r.csv"})
            return
        self.send_html(PAGES.get(path, "<title>404</title>missing"))

    def do_POST(self) -> None:
        time.sleep(SLOW_S)
        order = self.posted_form()
        self.orders.append(order)
        if self.path == "/no-content":
            self.send_response(204)
            self.end_headers()
            return
        self.send_html(f"<p>ordered {order.get('item')}</p>")


@pytest.fixture
def site() -> Iterator[str]:
    _Handler.orders = []
    _Handler.answered = []
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with open_browser(tmp_path) as browser:
        yield browser


@pytest.fixture
async def hasty(tmp_path: Path) -> AsyncIterator[Browser]:
    """A browser that waits little for an action's navigation to be requested: the
    wait bounds when the request is sent, never how long its answer takes."""
    async with open_browser(tmp_path, submit_wait_s=0.3, popup_wait_s=0.3) as browser:
        yield browser


@pytest.fixture
async def patient(tmp_path: Path) -> AsyncIterator[Browser]:
    """A browser that would wait long for a navigation or a tab an action might start:
    a call that wrongly waits takes seconds more than one that rightly does not, so
    the difference shows on a loaded machine too."""
    async with open_browser(tmp_path, submit_wait_s=20.0, popup_wait_s=20.0) as browser:
        yield browser


# Whether a call waited for something that never comes shows only in how long it took:
# the calls that check it get CALL_S, and a wrong wait runs to the patient waits (20 s)
# or to the end of the call. Half of that is room for a busy machine.
CALL_S = 30.0
UNWAITED_MS = 10_000


async def _pages_open(session: Session, count: int) -> None:
    with anyio.fail_after(5):
        while len([p for p in session.context.pages if not p.is_closed()]) < count:
            await anyio.sleep(0.05)


# --- 1. pop-ups a page opens on its own --------------------------------------------------


async def test_a_pop_up_the_page_opens_itself_stays_in_the_background(
    browser: Browser, site: str
) -> None:
    opened = await browser("browser_navigate", url=f"{site}/pop")
    assert opened.ok and opened.output["title"] == "Main"
    await _pages_open(browser.session, 2)  # the advert is open...
    await anyio.sleep(0.3)
    page = await browser("browser_read_page")  # ...but the run reads its own page
    assert (page.output, page.metadata.url) == ("main content", f"{site}/pop")


async def test_unfollowed_pop_ups_are_closed_before_the_runs_own_pages(
    browser: Browser, site: str
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/tabs")).ok
    tabs = browser.session.page
    # A tab the run opened itself is followed (its own advert is not).
    followed = await browser("browser_click", text="new tab")
    assert followed.ok and followed.output["url"] == f"{site}/pop", followed
    for _ in range(5):
        assert (await browser("browser_navigate", url=f"{site}/pop")).ok
    # Each call keeps MAX_OPEN_PAGES, and each navigation opens an advert more.
    await _pages_open(browser.session, MAX_OPEN_PAGES + 1)
    page = await browser("browser_read_page")
    assert (page.output, page.metadata.url) == ("main content", f"{site}/pop")
    pages = [p for p in browser.session.context.pages if not p.is_closed()]
    assert len(pages) == MAX_OPEN_PAGES
    assert not tabs.is_closed()  # adverts went first


# --- 2. links whose target names a frame or a window -------------------------------------


async def test_a_link_into_a_named_frame_is_a_click_not_a_missing_tab(
    patient: Browser, site: str
) -> None:
    assert (await patient("browser_navigate", url=f"{site}/pane")).ok
    clicked = await patient("browser_click", text="load in pane", timeout_s=CALL_S)
    assert clicked.ok, clicked.error
    assert clicked.output["url"] == f"{site}/pane"
    assert clicked.duration_ms < UNWAITED_MS  # no tab waited for
    assert "page b" in (await patient("browser_read_page")).output


async def test_a_link_into_a_window_already_named_so(patient: Browser, site: str) -> None:
    assert (await patient("browser_navigate", url=f"{site}/named")).ok
    first = await patient("browser_click", text="A results")  # opens the "results" tab
    assert first.ok and first.output["url"] == f"{site}/a", first
    # In that tab: its own window is "results", so the link loads right there.
    assert (await patient("browser_navigate", url=f"{site}/named")).ok
    second = await patient("browser_click", text="B results", timeout_s=CALL_S)
    assert second.ok, second.error
    assert second.output["url"] == f"{site}/b" and second.duration_ms < UNWAITED_MS


@pytest.mark.parametrize(
    ("hub", "link", "lands_on"),
    [("/hub", "B in results", "/b"), ("/hub-slow", "B slowly in results", "/slow-b")],
)
async def test_a_link_into_another_open_window_follows_it_there(
    hasty: Browser, site: str, hub: str, link: str, lands_on: str
) -> None:
    assert (await hasty("browser_navigate", url=f"{site}{hub}")).ok
    await _pages_open(hasty.session, 2)  # "results", opened by the page itself
    clicked = await hasty("browser_click", text=link)
    assert clicked.ok, clicked.error
    # Followed there (no tab waited for), and loaded however slowly it answers.
    assert clicked.output == {"url": f"{site}{lands_on}", "title": "B"}
    assert (await hasty("browser_read_page")).output == "page b"


IN_FRAME = "iframe >> internal:control=enter-frame >> "


async def _order_in_frame(browser: Browser, url: str) -> ToolResult:
    """Open `url`, type "tea" into its frame's form and press Enter; the call, which
    returns once the server has the order."""
    assert (await browser("browser_navigate", url=url)).ok
    typed = await browser(
        "browser_type", selector=IN_FRAME + "[name=item]", text="tea", submit=True, timeout_s=CALL_S
    )
    assert typed.ok, typed.error
    assert _Handler.orders == [{"item": "tea"}]
    return typed


async def test_a_form_in_a_frame_is_answered_before_the_call_returns(
    browser: Browser, site: str
) -> None:
    typed = await _order_in_frame(browser, f"{site}/framed")
    assert typed.output["url"] == f"{site}/framed"  # the page around the frame stays
    assert "ordered tea" in (await browser("browser_read_page")).output
    # Clicking the submit button is waited for the same way.
    assert (await browser("browser_navigate", url=f"{site}/framed")).ok
    assert (await browser("browser_type", selector=IN_FRAME + "[name=item]", text="jam")).ok
    assert (await browser("browser_click", selector=IN_FRAME + "button")).ok
    assert _Handler.orders[-1] == {"item": "jam"}
    assert "ordered jam" in (await browser("browser_read_page")).output


async def _click_on(browser: Browser, url: str, **click: str) -> tuple[int, list[str], str]:
    """Open `url`, click; how long the click took, the slow pages answered from the
    click until it returned, and what the page then shows."""
    assert (await browser("browser_navigate", url=url)).ok
    _Handler.answered.clear()
    clicked = await browser("browser_click", **click, timeout_s=CALL_S)
    assert clicked.ok, clicked.error
    answered = list(_Handler.answered)
    return clicked.duration_ms, answered, (await browser("browser_read_page")).output


async def test_a_link_in_a_frame_or_into_one_has_loaded_when_the_call_returns(
    browser: Browser, site: str
) -> None:
    _, answered, shown = await _click_on(browser, f"{site}/framed", selector=IN_FRAME + "a")
    assert "/slow-b" in answered and "page b" in shown
    _, answered, shown = await _click_on(browser, f"{site}/into-pane", text="load slowly in pane")
    assert "/slow-b" in answered and "page b" in shown


async def test_text_shown_only_in_a_frame_is_clicked_there(browser: Browser, site: str) -> None:
    _, answered, shown = await _click_on(browser, f"{site}/framed", text="more")
    assert "/slow-b" in answered and "page b" in shown
    # Typed into and ordered through the frame's form by the button's text alone.
    assert (await browser("browser_navigate", url=f"{site}/framed")).ok
    assert (await browser("browser_type", selector=IN_FRAME + "[name=item]", text="jam")).ok
    ordered = await browser("browser_click", text="Order")
    assert ordered.ok and _Handler.orders == [{"item": "jam"}], ordered
    # The page's own match comes before a frame's; text nowhere is still not found.
    assert (await browser("browser_navigate", url=f"{site}/framed-too")).ok
    clicked = await browser("browser_click", text="more")
    assert clicked.ok and clicked.output["url"] == f"{site}/a", clicked
    missing = await browser("browser_click", text="nowhere at all")
    assert error_of(missing)[0] == "element_not_found"


async def test_a_form_submitted_by_script_is_answered_before_the_call_returns(
    hasty: Browser, site: str
) -> None:
    assert (await hasty("browser_navigate", url=f"{site}/buttonless")).ok
    sent = await hasty("browser_fill_form", fields={"item": "tea"}, submit=True)  # no button
    assert sent.ok, sent.error
    assert _Handler.orders == [{"item": "tea"}] and sent.output["url"] == f"{site}/orders"
    assert (await hasty("browser_read_page")).output == "ordered tea"


async def test_a_form_in_a_frame_its_script_handles_is_not_waited_for(
    patient: Browser, site: str
) -> None:
    took, _, shown = await _click_on(patient, f"{site}/framed-app", selector=IN_FRAME + "button")
    assert took < UNWAITED_MS and "saved" in shown  # no navigation to wait for: none came


async def test_a_frame_answered_without_a_document_is_not_waited_on_past_its_answer(
    browser: Browser, site: str
) -> None:
    # Chromium reports both as failed navigations: the wait ends with the answer.
    # The order was answered before the call returned (_order_in_frame), and the call
    # did not run to its end.
    logged = await _order_in_frame(browser, f"{site}/framed-quiet")
    assert logged.duration_ms < SLOW_S * 1000 + UNWAITED_MS
    took, _, shown = await _click_on(browser, f"{site}/framed-quiet", selector=IN_FRAME + "a")
    assert took < UNWAITED_MS and "report" in shown  # the frame still shows its page


# --- 3. a crashed renderer ---------------------------------------------------------------


async def _crash(session: Session) -> None:
    cdp = await session.context.new_cdp_session(session.page)
    # Chromium never answers Page.crash: the page is gone before it could.
    with suppress(PlaywrightError), anyio.move_on_after(0.5):
        await cdp.send("Page.crash")


async def test_a_crashed_page_is_reported_then_replaced(browser: Browser, site: str) -> None:
    assert (await browser("browser_navigate", url=f"{site}/a")).ok
    await _crash(browser.session)
    hit = await browser("browser_read_page", timeout_s=CALL_S)
    code, message = error_of(hit)
    assert code == "page_crashed" and "crashed" in message
    assert hit.metadata.url == f"{site}/a" and hit.duration_ms < UNWAITED_MS
    # A fresh page in the same context: the run goes on.
    assert (await browser("browser_navigate", url=f"{site}/b")).ok
    assert (await browser("browser_read_page")).output == "page b"
    # A navigation right after a crash needs nothing of the dead page: it just works.
    await _crash(browser.session)
    again = await browser("browser_navigate", url=f"{site}/a")
    assert again.ok, again.error
    assert (await browser("browser_read_page")).output == "page a"


def _racing(page: Page, interrupters: list[str | None]) -> Callable[..., Awaitable[None]]:
    """`page.goto` as Chromium sometimes answers it after a failed navigation: each try
    is reported interrupted by a navigation to the next of `interrupters` (None: to the
    URL asked for, which is then really loaded: an earlier request for it went on and
    committed over the call's own). A race no page sets up on purpose, hence injected."""
    goto = page.goto

    async def racing_goto(url: str, **options: Any) -> None:
        to = interrupters.pop(0)
        if to is None:
            await goto(url, **options)
        raise PlaywrightError(
            f'Page.goto: Navigation to "{url}" is interrupted by another navigation'
            f' to "{to or url}"'
        )

    return racing_goto


async def test_a_navigation_interrupted_by_one_to_the_same_url_has_arrived(
    browser: Browser, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/b")).ok
    page = browser.session.page
    # The stale error page of a previous failure first, then the URL itself.
    monkeypatch.setattr(page, "goto", _racing(page, ["chrome-error://chromewebdata/", None]))
    result = await browser("browser_navigate", url=f"{site}/a")
    assert result.ok, result.error
    assert result.output == {"url": f"{site}/a", "status": 200, "title": "A"}
    assert (await browser("browser_read_page")).output == "page a"


async def test_a_navigation_interrupted_twice_elsewhere_fails(
    browser: Browser, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/b")).ok
    page = browser.session.page
    monkeypatch.setattr(page, "goto", _racing(page, ["chrome-error://chromewebdata/"] * 2))
    code, message = error_of(await browser("browser_navigate", url=f"{site}/a"))
    assert code == "navigation_failed"
    assert "interrupted by another navigation" in message
    assert (await browser("browser_read_page")).output == "page b"  # still where it was


# --- 4, 5. forms -------------------------------------------------------------------------


async def test_fill_form_prefers_the_visible_field(browser: Browser, site: str) -> None:
    assert (await browser("browser_navigate", url=f"{site}/dupform")).ok
    result = await browser("browser_fill_form", fields={"email": "a@b.c"})
    assert result.ok, result.error
    assert result.metadata.url == f"{site}/echo?email=a%40b.c"


async def _checked(browser: Browser) -> list[str]:
    result = await browser("browser_extract", selector="input:checked", attribute="name")
    return list(result.output)


async def test_a_checkbox_takes_true_or_false_and_refuses_other_words(
    browser: Browser, site: str
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/boxes")).ok
    for word in ("maybe", "ham"):
        refused = await browser("browser_fill_form", submit=False, fields={"agree": word})
        code, message = error_of(refused)
        assert code == "invalid_value" and "true or false" in message
        assert await _checked(browser) == ["top"]  # nothing unchecked in its place
    code, _ = error_of(await browser("browser_fill_form", submit=False, fields={"top": "cheese"}))
    assert code == "invalid_value"
    assert await _checked(browser) == ["top"]  # ham is still ticked
    for value, want in (("yes", ["agree", "top"]), ("off", ["top"]), (True, ["agree", "top"])):
        assert (await browser("browser_fill_form", submit=False, fields={"agree": value})).ok
        assert await _checked(browser) == want
    # One box of a group, named by its label.
    assert (await browser("browser_fill_form", submit=False, fields={"Cheese": True})).ok
    assert await _checked(browser) == ["agree", "top", "top"]


# --- dialogs -------------------------------------------------------------------------------


async def test_a_confirm_an_action_opens_is_dismissed_and_reported(
    browser: Browser, site: str
) -> None:
    """Left to Playwright, the dialog is dismissed silently: the click looks done, the
    order is not deleted, and the model cannot tell why."""
    await browser("browser_navigate", url=f"{site}/delete")
    clicked = await browser("browser_click", text="Delete")
    assert clicked.ok, clicked.error
    assert clicked.output["dialogs"] == [
        {"type": "confirm", "message": "Delete order 42?", "answer": "dismissed"}
    ]
    assert (await browser("browser_extract", selector="#r")).output == ["kept"]


async def test_confirm_true_accepts_it(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/delete")
    clicked = await browser("browser_click", text="Delete", confirm=True)
    assert clicked.output["dialogs"][0]["answer"] == "accepted"
    assert (await browser("browser_extract", selector="#r")).output == ["deleted"]
    # The next call without it is back to dismissing.
    again = await browser("browser_click", text="Delete")
    assert again.output["dialogs"][0]["answer"] == "dismissed"


async def test_a_form_whose_submit_asks_first_is_sent_only_when_confirmed(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/delete")
    held = await browser("browser_fill_form", fields={"q": "x"})
    assert held.ok and urlparse(held.output["url"]).path == "/delete"
    assert held.output["dialogs"] == [
        {"type": "confirm", "message": "Send it?", "answer": "dismissed"}
    ]
    sent = await browser("browser_type", selector="input[name=q]", text="y", submit=True,
                         confirm=True)  # fmt: skip
    assert sent.ok and urlparse(sent.output["url"]).path == "/echo"
    assert sent.output["dialogs"][0]["answer"] == "accepted"


async def test_a_prompt_is_answered_with_its_default_when_confirmed(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/ask")
    await browser("browser_click", text="Name", confirm=True)
    assert (await browser("browser_extract", selector="#r")).output == ["Ann"]
    refused = await browser("browser_click", text="Name")
    assert refused.output["dialogs"] == [
        {"type": "prompt", "message": "Your name?", "answer": "dismissed"}
    ]
    assert (await browser("browser_extract", selector="#r")).output == ["no answer"]


async def test_an_alert_on_load_is_accepted_and_the_page_goes_on(
    browser: Browser, site: str
) -> None:
    opened = await browser("browser_navigate", url=f"{site}/welcome")
    assert opened.ok and opened.output["title"] == "W"
    assert opened.output["dialogs"] == [
        {"type": "alert", "message": "Welcome back", "answer": "accepted"}
    ]
    # Its script ran on past the alert, and the next call neither waits nor repeats it.
    page = await browser("browser_read_page")
    assert "inside" in page.output
    quiet = await browser("browser_navigate", url=f"{site}/a")
    assert "dialogs" not in quiet.output


async def _dialog_between_calls(session: Session, script: str) -> None:
    """The page shows a dialog on its own, after a call ended (a timer's)."""
    await session.page.evaluate(f"setTimeout(() => {{ {script} }}, 0)")
    with anyio.fail_after(5):
        while not session.dialogs:
            await anyio.sleep(0.02)


async def test_a_dialog_between_calls_is_reported_by_the_next_call_that_can(
    browser: Browser, site: str
) -> None:
    """Answered at once, as ever, and not lost: the next output that is a dict carries
    it. The last call's `confirm` was for its own action, not for the page's timer."""
    await browser("browser_navigate", url=f"{site}/delete")
    assert (await browser("browser_click", text="Delete", confirm=True)).ok
    await _dialog_between_calls(browser.session, "confirm('Stay signed in?')")
    page = await browser("browser_read_page")  # text: no place for them
    assert page.ok and "dialogs" not in page.output
    moved = await browser("browser_navigate", url=f"{site}/a")
    assert moved.output["dialogs"] == [
        {"type": "confirm", "message": "Stay signed in?", "answer": "dismissed"}
    ]
    # Reported once.
    assert "dialogs" not in (await browser("browser_navigate", url=f"{site}/b")).output


# --- Chromium dies under a run -------------------------------------------------------------


async def test_a_run_whose_page_died_with_chromium_is_told_so_until_it_navigates(
    browser: Browser, site: str
) -> None:
    """Killed between the run's calls: its next read would "succeed" on the blank page
    of a fresh context (an empty extract, a page with no text) and the run would answer
    from nothing."""
    await browser("browser_navigate", url=f"{site}/a")
    pool = browser.box.browsers
    assert pool is not None
    pids = _browser_pids()
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    with anyio.fail_after(10):
        while pool.connected:
            await anyio.sleep(0.05)

    for tool, args in [("browser_read_page", {}), ("browser_extract", {"selector": "p"})]:
        code, message = error_of(await browser(tool, **args))
        assert code == "session_lost" and "navigate again" in message
    again = await browser("browser_navigate", url=f"{site}/b")
    assert again.ok, again.error
    assert (await browser("browser_read_page")).output == "page b"


async def test_a_page_that_does_not_scroll_scrolls_its_main_pane(
    browser: Browser, site: str
) -> None:
    """window.scrollBy does nothing on an app page whose feed scrolls in a pane: the
    model would scroll forever and read the same posts."""
    await browser("browser_navigate", url=f"{site}/app")
    down = await browser("browser_scroll", direction="down", amount=700)
    assert down.ok, down.error
    assert down.output == {"scroll_y": 700, "at_end": False, "scrolled": "container"}
    # The feed moved (at once, despite its smooth scrolling), not the small side pane.
    feed, side = "document.getElementById('feed')", "document.getElementById('side')"
    page = browser.session.page
    assert await page.evaluate(f"[{feed}.scrollTop, {side}.scrollTop]") == [700, 0]
    end = await browser("browser_scroll", direction="down", amount=100_000)
    assert end.output["at_end"] and end.output["scrolled"] == "container"
    back = await browser("browser_scroll", direction="up", amount=100_000)
    assert back.output == {"scroll_y": 0, "at_end": True, "scrolled": "container"}


async def test_a_page_at_its_end_says_so_rather_than_scroll_a_box_in_it(
    browser: Browser, site: str
) -> None:
    """A long article with a code block that scrolls: at the article's end the model
    must read at_end, not see the code block move and scroll on for ever."""
    await browser("browser_navigate", url=f"{site}/article")
    end = await browser("browser_scroll", direction="down", amount=100_000)
    assert end.output["at_end"] and "scrolled" not in end.output
    again = await browser("browser_scroll", direction="down")
    assert again.output == {"scroll_y": end.output["scroll_y"], "at_end": True}
