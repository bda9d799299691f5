"""Browser tools against pages that misbehave or mislead: a navigation that times out,
a script that never yields, form controls given values they cannot take, hidden
duplicates of what a person would click, and what extraction should (not) return."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import anyio
import pytest

from services.kernel.text import TRUNCATION_MARK
from services.tools.limits import BrowserLimits
from services.tools.pages import MAX_OPEN_PAGES
from services.tools.toolbox import ToolBox
from tests.browser_box import Browser, error_of, open_browser
from tests.integration.test_tools_service import _descendants, nothing_left_behind  # noqa: F401
from tests.local_site import QuietHandler, serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

PAGES = {
    "/a": "<title>A</title><p>page a</p>",
    # The loop starts after load (navigation waits for load): then reads are stuck. Half
    # a second after it: the navigation's own last look at the page (its title) must
    # come first, also on a loaded machine (at 50 ms it sometimes did not, and timed out).
    "/loop": "<title>L</title>busy<script>addEventListener('load', () => setTimeout(() => {"
    " while (true) {} }, 500))</script>",
    "/form": """<title>F</title>
<form action="/a">
  <label><input type="radio" name="size" value="s"> Small</label>
  <label><input type="radio" name="size" value="l"> Large</label>
  <label>When <input type="date" name="when"></label>
  <label>At <input type="time" name="at"></label>
  <select name="country"><option value="us">United States</option>
    <option value="fr">France</option></select>
</form>""",
    "/dupes": """<title>D</title>
<nav style="display:none"><a class="nav" href="/a?hidden">Pricing</a>
  <span onclick="location='/a?hidden'">Details tab</span></nav>
<a class="nav" href="/a?shown">Pricing</a>
<span onclick="location='/a?shown'">Details tab</span>
<button class="ghost" style="display:none">x</button><button class="ghost" hidden>y</button>""",
    "/shadow": """<title>S</title><p>before</p><div id="host">light <i>slotted</i></div>
<p>after</p>
<script>
const root = document.getElementById("host").attachShadow({mode: "open"});
root.innerHTML = `<h2>Inside</h2><p>text <slot></slot></p><span hidden>not shown</span>
  <div id="inner"></div>`;
root.getElementById("inner").attachShadow({mode: "open"}).innerHTML = "<b>nested</b>";
</script>""",
    "/framed": """<title>Framed</title><p>outer</p>
<iframe src="/inner"></iframe>
<iframe src="/secret" style="display:none"></iframe>
<iframe src="/secret" width="0" height="0" style="border:0"></iframe>
<iframe srcdoc="<p>from srcdoc</p>"></iframe>
<p>outer end</p>""",
    "/inner": """<title>I</title><p>inner text</p><iframe src="/deepest"></iframe>""",
    "/deepest": "<title>D</title><p>nested frame</p>",
    "/secret": "<title>X</title><p>tracking</p>",
    "/tabs": '<title>T</title><a href="/a" target="_blank">new tab</a>',
    "/links": """<title>Links</title>
<ul><li><a href="/p/1">One</a></li><li><a href="p/2?x=1#f">Two</a></li>
  <li><a href="https://example.org/x">Three</a></li></ul>
<form action="go"></form><img src="../img/logo.png">""",
    "/based": '<title>B</title><base href="/deep/dir/"><a href="rel">R</a>',
    "/hidden": """<title>H</title>
<meta name="description" content="about this page">
<script type="application/ld+json">{"name": "Widget"}</script>
<p class="t">shown</p><p class="t" style="display:none">secret</p>
<div style="visibility:hidden"><p class="t">invisible</p></div>
<div class="row"><span class="price" style="display:none">$9</span>
  <span class="price">$5</span></div>
<div class="row" hidden><span class="price">$1</span></div>
<select><option>Red</option><option>Green</option></select>
<input type="hidden" name="token" value="abc">""",
    # Rows of a CSS grid as `display: contents` wrappers: no box, but all on show.
    "/grid": """<title>G</title><div style="display:grid; grid-template-columns: 1fr 1fr">
<div class="row" style="display:contents"><span class="n">Tea</span>
  <span class="p" style="display:none">$3</span><span class="p">$2</span></div>
<div class="row" style="display:contents"><span class="n">Milk</span><span class="p">$1</span></div>
</div>
<div hidden><div class="row" style="display:contents"><span class="n">Old</span></div></div>""",
    # A page that moves on by itself, and links into pages that are not there.
    "/moves": "<title>M</title><script>location.replace('/gone')</script>",
    # Pages that send themselves on with a meta refresh: at once (twice over, the last
    # hop to a slow page), and after a minute (a dashboard that reloads itself).
    "/refresh": '<title>R</title><meta http-equiv="refresh" content="0; URL=\'/refresh2\'">',
    "/refresh2": '<title>R2</title><meta http-equiv="Refresh" content="0;url=/slow?s=0.5">',
    "/later": '<title>Later</title><meta http-equiv="refresh" content="60;url=/a"><p>wait</p>',
    "/to-gone": """<title>G</title><a href="/gone">here</a>
<a href="/gone" target="_blank">new tab</a>""",
    # Buttons styled in capitals: read_page shows "SIGN IN", the page's name is "Sign in".
    # An excerpt cut at a fixed length, as many sites make one: here inside an emoji,
    # which leaves half of it (a lone UTF-16 surrogate) in the page's text.
    "/cut": """<title>C</title><p class="deal">x</p>
<script>
const cut = (text) => text.slice(0, 7);
document.title = cut("Deals 🎉🎉");
document.querySelector(".deal").textContent = cut("Sale! 🎉 today");
</script>""",
    # An endless feed as long as a day of scrolling, and a long list of long items.
    "/endless": '<title>E</title><div style="height:200000px">feed</div>',
    "/empty": "<title>Nothing yet</title>",
    # A form whose server takes longer to answer than an element wait.
    "/slowform": '<title>SF</title><form action="/slow"><input name="s" value="2.5">'
    '<button type="submit">Send</button></form>',
    "/tall": '<title>T</title><div style="height:3000px">article</div>',
    "/hundred": "<title>H</title><p>" + "y" * 100 + "</p>",
    "/many": "<title>M</title>" + "".join(f"<p class=x>{'y' * 2000} {i}</p>" for i in range(500)),
    "/signin": """<title>S</title><style>a, button { text-transform: uppercase }</style>
<a href="/a?google">Sign in with Google</a>
<button onclick="location='/a?plain'">Sign in</button>""",
}


class _Handler(QuietHandler):
    # /held is answered once the test sets the first event (or after 30 s); the second
    # is set once it has been. One pair per site (the fixture's).
    held: tuple[threading.Event, threading.Event] = (threading.Event(), threading.Event())

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        headers: dict[str, str] = {}
        if url.path == "/held":
            release, answered = self.held
            release.wait(30)
            self.send_html("<title>Held</title>finally")
            answered.set()
            return
        if url.path == "/slow":
            time.sleep(float(query.get("s", ["3"])[0]))
            body = "<title>Slow</title>finally"
        elif url.path == "/setcookie":
            body, headers = "<title>Set</title>ok", {"Set-Cookie": "who=dora; Path=/"}
        elif url.path == "/gone":
            self.send_html("<title>Gone</title>not here", status=404)
            return
        elif url.path == "/report.pdf":
            data = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
            self.send_response(200)
            self.send_header("Content-Type", "application/pdf")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        elif url.path == "/cookies":
            body = f"<title>Cookies</title>{self.headers.get('Cookie') or 'none'}"
        else:
            body = PAGES.get(url.path, f"<title>{url.path}</title>{url.path}")
        self.send_html(body, headers=headers)


@pytest.fixture
def site() -> Iterator[str]:
    _Handler.held = (threading.Event(), threading.Event())
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    # The default element wait: a click that should work must not fail because a busy
    # machine took a second to make the element actionable.
    async with open_browser(tmp_path) as browser:
        yield browser


# --- timeouts ----------------------------------------------------------------------------


async def test_a_short_timeout_still_leaves_a_fast_page_time_to_load(
    browser: Browser, site: str
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/a")).ok  # warm: no first paint
    result = await browser("browser_navigate", timeout_s=0.7, url=f"{site}/form")
    assert result.ok, result.error
    assert result.metadata.url == f"{site}/form"


async def test_a_navigation_that_timed_out_is_abandoned(browser: Browser, site: str) -> None:
    assert (await browser("browser_navigate", url=f"{site}/a")).ok
    release, answered = _Handler.held
    result = await browser("browser_navigate", timeout_s=2, url=f"{site}/held")
    assert error_of(result)[0] == "timeout"
    assert not answered.is_set()  # stopping it did not wait for the server
    # The next call works at once, on the page the run was on...
    page = await browser("browser_read_page", timeout_s=3)
    assert (page.ok, page.output, page.metadata.url) == (True, "page a", f"{site}/a")
    # ...and stays there once the held server finally answers.
    release.set()
    assert await anyio.to_thread.run_sync(answered.wait, 30)
    await anyio.sleep(0.5)  # room for a late answer to land, were it taken
    page = await browser("browser_read_page", timeout_s=3)
    assert (page.output, page.metadata.url) == ("page a", f"{site}/a")


async def test_a_page_stuck_in_a_script_is_replaced(browser: Browser, site: str) -> None:
    assert (await browser("browser_navigate", url=f"{site}/setcookie")).ok
    assert (await browser("browser_navigate", url=f"{site}/loop")).ok
    # The loop starts just after load: on a slow machine a read may still beat it.
    with anyio.fail_after(20):
        while (stuck := await browser("browser_read_page", timeout_s=2)).ok:
            await anyio.sleep(0.1)
    assert error_of(stuck)[0] == "timeout"
    # A fresh page in the same context: the run goes on, its cookies kept. (Room for a
    # loaded machine: the spinning renderer may hold a core until it is gone.)
    result = await browser("browser_navigate", timeout_s=20, url=f"{site}/cookies")
    assert result.ok, result.error
    assert (await browser("browser_read_page")).output == "who=dora"


# --- forms -------------------------------------------------------------------------------


async def _checked(browser: Browser) -> list[str]:
    result = await browser("browser_extract", selector="[name=size]:checked", attribute="value")
    return list(result.output)


async def test_a_radio_is_chosen_by_value_or_label_never_by_default(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/form")
    code, message = error_of(
        await browser("browser_fill_form", submit=False, fields={"size": "medium"})
    )
    assert code == "element_not_found"
    assert "'s' ('Small')" in message and "'l' ('Large')" in message
    assert await _checked(browser) == []  # nothing chosen in its place
    assert (
        error_of(await browser("browser_fill_form", submit=False, fields={"size": True}))[0]
        == "invalid_value"
    )
    assert (
        error_of(await browser("browser_fill_form", submit=False, fields={"size": False}))[0]
        == "invalid_value"
    )
    assert (await browser("browser_fill_form", submit=False, fields={"size": "large"})).ok
    assert await _checked(browser) == ["l"]
    assert (await browser("browser_fill_form", submit=False, fields={"size": "s"})).ok
    assert await _checked(browser) == ["s"]
    assert (
        await browser("browser_fill_form", submit=False, fields={"Large": True})
    ).ok  # one member
    assert await _checked(browser) == ["l"]


async def test_a_date_in_another_format_is_refused(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/form")
    code, message = error_of(
        await browser("browser_fill_form", submit=False, fields={"when": "03/05/2024"})
    )
    assert code == "invalid_value" and "YYYY-MM-DD" in message
    code, message = error_of(await browser("browser_fill_form", submit=False, fields={"at": "1pm"}))
    assert code == "invalid_value" and "HH:MM" in message
    # The form is submitted with what was filled.
    result = await browser("browser_fill_form", fields={"when": "2024-03-05", "at": "13:00"})
    assert result.ok and "when=2024-03-05&at=13%3A00" in str(result.metadata.url)


async def test_a_select_option_that_does_not_exist_fails_at_once(
    browser: Browser, site: str
) -> None:
    assert (await browser("browser_navigate", url=f"{site}/form")).ok
    result = await browser("browser_fill_form", submit=False, fields={"country": "Germany"})
    code, message = error_of(result)
    # The options listed: found missing up front, not by select_option waiting out its
    # timeout for an option that never comes (its failure lists none).
    assert code == "element_not_found" and "'fr' ('France')" in message
    assert (await browser("browser_fill_form", submit=False, fields={"country": "France"})).ok
    assert (await browser("browser_fill_form", submit=False, fields={"country": "us"})).ok


# --- clicks ------------------------------------------------------------------------------


async def test_a_click_prefers_the_visible_match(browser: Browser, site: str) -> None:
    for target in ({"selector": "a.nav"}, {"text": "Pricing"}, {"text": "Details tab"}):
        await browser("browser_navigate", url=f"{site}/dupes")
        result = await browser("browser_click", **target)
        assert result.ok and result.metadata.url == f"{site}/a?shown", (target, result)
    await browser("browser_navigate", url=f"{site}/dupes")
    # None visible: the error counts every match, not the one it tried.
    code, message = error_of(await browser("browser_click", selector="button.ghost"))
    assert code == "element_not_actionable" and "matches 2 element(s), 0 visible" in message


async def test_click_by_text_prefers_the_whole_name_whatever_its_case(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/signin")
    page = await browser("browser_read_page")
    assert page.output == "SIGN IN WITH GOOGLE SIGN IN", page
    # As the page shows it, or in other case: the button, not the link containing it.
    for text in ("SIGN IN", "sign in"):
        await browser("browser_navigate", url=f"{site}/signin")
        result = await browser("browser_click", text=text)
        assert result.ok and result.metadata.url == f"{site}/a?plain", (text, result)
    await browser("browser_navigate", url=f"{site}/signin")
    result = await browser("browser_click", text="with google")
    assert result.ok and result.metadata.url == f"{site}/a?google", result


# --- status ------------------------------------------------------------------------------


async def test_the_status_is_that_of_the_page_the_call_ends_on(browser: Browser, site: str) -> None:
    # A page that sends itself on by script: the status of where it went.
    result = await browser("browser_navigate", url=f"{site}/moves")
    assert result.ok and result.metadata.url == f"{site}/gone", result
    assert (result.output["status"], result.metadata.http_status) == (404, 404)
    # A link followed into a new tab: that tab's page's status, not the old one's.
    for text in ("here", "new tab"):
        assert (await browser("browser_navigate", url=f"{site}/to-gone")).ok
        result = await browser("browser_click", text=text)
        assert result.ok and result.metadata.url == f"{site}/gone", (text, result)
        assert result.metadata.http_status == 404, (text, result)


async def test_a_meta_refresh_at_once_is_followed_to_where_it_leads(
    browser: Browser, site: str
) -> None:
    for _ in range(3):  # it used to depend on timing
        result = await browser("browser_navigate", url=f"{site}/refresh")
        assert result.ok, result
        assert result.output == {"url": f"{site}/slow?s=0.5", "status": 200, "title": "Slow"}
        assert result.metadata.url == f"{site}/slow?s=0.5"
        page = await browser("browser_read_page")
        assert (page.ok, page.output) == (True, "finally"), page
    # One that waits a minute is a page of its own, not waited on: that shows only in
    # the call's time, as a wait would use up nearly all of its 30 s. Half of them is
    # room for a busy machine.
    result = await browser("browser_navigate", timeout_s=30, url=f"{site}/later")
    assert result.ok and result.output["title"] == "Later", result
    assert result.duration_ms < 15_000


# --- extraction --------------------------------------------------------------------------


async def test_extracted_urls_are_absolute(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/links")
    hrefs = await browser("browser_extract", selector="a", attribute="href")
    assert hrefs.output == [f"{site}/p/1", f"{site}/p/2?x=1#f", "https://example.org/x"]
    rows = await browser(
        "browser_extract",
        selector="body",
        fields={"form": "form@action", "img": "img@src", "missing": "video@src"},
    )
    assert rows.output == [{"form": f"{site}/go", "img": f"{site}/img/logo.png", "missing": None}]
    await browser("browser_navigate", url=f"{site}/based")
    based = await browser("browser_extract", selector="a", attribute="href")
    assert based.output == [f"{site}/deep/dir/rel"]
    # What extract returns, navigate takes.
    assert (await browser("browser_navigate", url=based.output[0])).ok


async def test_extract_leaves_out_text_no_one_sees(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/hidden")
    assert (await browser("browser_extract", selector="p.t")).output == ["shown"]
    rows = await browser("browser_extract", selector=".row", fields={"price": ".price"})
    assert rows.output == [{"price": "$5"}]
    # Never rendered, but data: attributes of <meta>, JSON-LD, a select's options.
    meta = await browser("browser_extract", selector="meta[name=description]", attribute="content")
    assert meta.output == ["about this page"]
    assert (await browser("browser_extract", selector="script[type*=json]")).output == [
        '{"name": "Widget"}'
    ]
    assert (await browser("browser_extract", selector="option")).output == ["Red", "Green"]
    # Texts and attributes of one selector stay aligned.
    classes = await browser("browser_extract", selector="p.t", attribute="class")
    assert classes.output == ["t"]
    token = await browser("browser_extract", selector="[name=token]", attribute="value")
    assert token.output == ["abc"]


async def test_extract_reads_rows_that_have_no_box_of_their_own(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/grid")
    rows = await browser("browser_extract", selector=".row", fields={"name": ".n", "price": ".p"})
    assert rows.output == [{"name": "Tea", "price": "$2"}, {"name": "Milk", "price": "$1"}]
    assert rows.metadata.item_count == 2
    # Their own text: what they show, not the hidden price.
    assert (await browser("browser_extract", selector=".row")).output == ["Tea $2", "Milk $1"]


async def test_item_count_counts_the_items_the_output_still_holds(
    browser: Browser, site: str
) -> None:
    # 500 items of 2 kB: more than a tool's output may carry, so its tail is cut.
    await browser("browser_navigate", url=f"{site}/many")
    rows = await browser("browser_extract", selector="p.x")
    assert rows.ok and rows.truncated and 0 < len(rows.output) < 500
    assert rows.metadata.item_count == len(rows.output)


async def test_text_cut_inside_an_emoji_is_read_with_a_replacement_character(
    browser: Browser, site: str
) -> None:
    # Half an emoji cannot be written as UTF-8 (JSON): it must not fail the call.
    nav = await browser("browser_navigate", url=f"{site}/cut")
    assert nav.ok and nav.metadata.title == "Deals \ufffd"
    assert (await browser("browser_extract", selector=".deal")).output == ["Sale! \ufffd"]
    page = await browser("browser_read_page")
    assert page.ok and "Sale! \ufffd" in page.output


async def test_a_run_that_keeps_opening_tabs_keeps_only_the_newest(
    browser: Browser, site: str
) -> None:
    for _ in range(8):
        await browser("browser_navigate", url=f"{site}/tabs")
        opened = await browser("browser_click", text="new tab")
        assert opened.ok and opened.output["url"] == f"{site}/a", opened
    assert (await browser("browser_read_page")).output == "page a"
    assert browser.box.browsers is not None
    session = browser.box.browsers.sessions["run-a"]
    pages = [p for p in session.context.pages if not p.is_closed()]
    assert len(pages) == MAX_OPEN_PAGES and session.page is pages[-1]


async def test_read_page_includes_the_frames_a_person_sees(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/framed")
    page = await browser("browser_read_page")
    assert page.ok, page
    assert page.output == "outer\n\nouter end\n\ninner text\n\nnested frame\n\nfrom srcdoc"
    # A page full of frames is read up to a cap, in the same order.
    config = browser.box.config
    capped = Browser(
        ToolBox(replace(config, limits=replace(config.limits, max_frames=2)), browser.box.browsers)
    )
    page = await capped("browser_read_page")
    assert page.output == "outer\n\nouter end\n\ninner text\n\nnested frame"
    # Another origin's frame (localhost is another site than 127.0.0.1) is read too.
    other = site.replace("127.0.0.1", "localhost")
    await browser("browser_navigate", url=f"{other}/inner")
    assert (await browser("browser_read_page")).output == "inner text\n\nnested frame"


async def test_read_page_of_a_pdf_says_it_cannot_read_it(browser: Browser, site: str) -> None:
    # Opened (the link is right), but headless Chromium shows nothing of it: an empty
    # text would read as an empty report.
    opened = await browser("browser_navigate", url=f"{site}/report.pdf")
    assert opened.ok and opened.metadata.http_status == 200, opened
    page = await browser("browser_read_page")
    assert error_of(page) == (
        "not_readable",
        "the page is application/pdf, which the browser shows no text of",
    )
    # An empty web page is just that.
    await browser("browser_navigate", url=f"{site}/empty")
    assert (await browser("browser_read_page")).output == ""


async def test_read_page_over_its_limit_shows_the_limit_then_the_mark(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/hundred")
    config = browser.box.config
    # The page's text is 100 characters: at, and 1, 16 and 17 over the limit.
    for extra in (0, 1, len(TRUNCATION_MARK), len(TRUNCATION_MARK) + 1):
        limits = replace(config.limits, max_page_chars=100 - extra)
        reader = Browser(ToolBox(replace(config, limits=limits), browser.box.browsers))
        page = await reader("browser_read_page")
        assert page.ok and page.truncated == (extra > 0), (extra, page)
        kept = "y" * (100 - extra)
        assert page.output == (kept if extra == 0 else kept + TRUNCATION_MARK), extra


async def test_read_page_includes_open_shadow_roots(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/shadow")
    page = await browser("browser_read_page")
    assert page.output == "before\n\nInside\n\ntext light slotted\n\nnested\n\nafter", page
    # A page without shadow roots reads exactly as its innerText.
    await browser("browser_navigate", url=f"{site}/a")
    assert (await browser("browser_read_page")).output == "page a"


# --- screenshots -------------------------------------------------------------------------


async def test_a_full_page_screenshot_of_an_endless_page_is_cut(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/endless")
    shot = await browser("browser_screenshot", full_page=True, timeout_s=30)
    assert shot.ok and shot.truncated, shot
    data = await anyio.Path(shot.output["path"]).read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, BrowserLimits().max_screenshot_px)
    # A page that fits is taken whole, and not said to be cut.
    await browser("browser_navigate", url=f"{site}/tall")
    shot = await browser("browser_screenshot", full_page=True)
    assert shot.ok and not shot.truncated, shot
    data = await anyio.Path(shot.output["path"]).read_bytes()
    assert struct.unpack(">II", data[16:24]) == (1280, 3016)  # the body's margins too


@pytest.mark.parametrize("how", ["browser_fill_form", "browser_click"])
async def test_a_submit_whose_server_is_slow_to_answer_is_not_a_failure_to_act(
    browser: Browser, site: str, how: str
) -> None:
    """The submit went out; only its answer takes longer than an element wait (1 s
    here): reported as failed, it would say something happened that did not, and a run
    would act again or give up on what it did."""
    assert (await browser("browser_navigate", url=f"{site}/slowform")).ok
    if how == "browser_fill_form":
        result = await browser(how, timeout_s=20, fields={"s": "2.5"}, submit=True)
    else:
        result = await browser(how, timeout_s=20, text="Send")
    assert result.ok, result.error
    assert result.metadata.url is not None and "/slow" in result.metadata.url
    assert result.metadata.title == "Slow"


async def test_an_exact_click_by_text_never_takes_a_control_that_only_contains_it(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/signin")
    # "with google" is only part of a link's name: taken by default, never when exact.
    code, message = error_of(
        await browser("browser_click", text="with google", exact=True, timeout_s=3)
    )
    assert code == "element_not_found", message
    result = await browser("browser_click", text="sign in", exact=True)
    assert result.ok and result.metadata.url == f"{site}/a?plain", result
