"""browser_candidates on real Chromium: look-alike controls each offered with a selector
of its own, lists, tables and cards offered as one group each, hidden elements never
offered, the limit; and the element a click or a type acted on (metadata.target)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contracts.tools import Candidate, Candidates, Target
from tests.browser_box import Browser, open_browser
from tests.integration.test_tools_service import _descendants, nothing_left_behind  # noqa: F401
from tests.local_site import QuietHandler, serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

PAGES = {
    # Look-alike controls: two "Submit" buttons in two forms, a hidden copy of a form,
    # a link and a button named alike, and controls a person cannot see.
    "/controls": """<title>Controls</title>
<form id="login" action="/done"><input name="user" aria-label="User name">
  <button type="submit">Submit</button></form>
<form action="/done"><label for="email">Email</label><input id="email" name="email">
  <input type="password" name="pw" value="hunter2" placeholder="Password">
  <label>Country <select name="country"><option>France</option><option>Peru</option>
  </select></label>
  <button type="submit">Submit</button></form>
<div style="display:none"><form><button type="submit">Submit</button></form>
  <a href="/done?hidden">Help</a></div>
<a href="/done?help">Help</a> <button type="button" onclick="this.textContent += '!'">Help</button>
<nav aria-hidden="true"><a href="/done?aria">Aria hidden</a></nav>
<a href="/done?off" style="position:absolute; left:-9999px">Skip to content</a>
<a href="/done?zero" style="display:inline-block; width:0; height:0; overflow:hidden">Zero</a>
<p style="visibility:hidden"><a href="/done?invisible">Invisible</a></p>
<input type="hidden" name="token" value="secret-token">
<div class="card" onclick="location='/done?card'"><a href="/done?inside">Inside</a></div>
<a href="/done?nested"><span>Nested</span> <b>link</b></a>
<input type="checkbox" id="remember"><label for="remember">Remember me</label>
<input id="search.q" type="search" aria-label="Search">""",
    "/stories": """<title>News</title><h1>Today</h1>
<ul class="stories">
  <li class="story"><a class="title" href="/s/1">Alpha wins</a>
    <span class="points">120 points</span></li>
  <li class="story"><a class="title" href="/s/2">Beta falls</a>
    <span class="points">85 points</span></li>
  <li class="story" style="display:none"><a class="title" href="/s/x">Hidden story</a>
    <span class="points">1 points</span></li>
  <li class="story"><a class="title" href="/s/3">Gamma rises</a>
    <span class="points">40 points</span></li>
  <li class="story"><a class="title" href="/s/4">Delta waits</a>
    <span class="points">7 points</span></li>
</ul>
<table><thead><tr><th>Item</th><th>Price</th></tr></thead>
<tbody><tr><td>Tea</td><td>$2.00</td></tr><tr><td>Milk</td><td>$1.50</td></tr>
  <tr><td>Bread</td><td>$3.25</td></tr></tbody></table>
<div class="cards">
  <div class="col"><div class="card"><h3>Basic</h3><p class="price">$5 / month</p></div></div>
  <div class="col"><div class="card"><h3>Pro</h3><p class="price">$15 / month</p></div></div>
  <div class="col"><div class="card"><h3>Team</h3><p class="price">$40 / month</p></div></div>
</div>
<p>In stock: <span id="total">42 items</span></p>""",
    "/done": "<title>Done</title>done",
}


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.send_html(PAGES.get(path, "<title>?</title>"))


@pytest.fixture
def site() -> Iterator[str]:
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    async with open_browser(tmp_path) as browser:
        yield browser


async def _candidates(browser: Browser, purpose: str, **input: Any) -> Candidates:
    result = await browser("browser_candidates", purpose=purpose, **input)
    assert result.ok, result.error
    found = msgspec.convert(result.output, Candidates)
    assert result.metadata.item_count == len(found.candidates)
    return found


async def _matches(browser: Browser, selector: str) -> list[dict[str, Any]]:
    """Every element of the document the selector matches (hidden ones too)."""
    return list(
        await browser.session.page.evaluate(
            """sel => [...document.querySelectorAll(sel)].map((el) => ({
              text: el.textContent.trim(), shown: el.checkVisibility()}))""",
            selector,
        )
    )


def _named(found: Candidates, role: str, name: str) -> list[Candidate]:
    return [c for c in found.candidates if (c.role, c.name) == (role, name)]


async def test_each_look_alike_control_gets_a_selector_of_its_own(
    browser: Browser, site: str
) -> None:
    await browser("browser_navigate", url=f"{site}/controls")
    found = await _candidates(browser, "act")
    assert not found.truncated and found.url == f"{site}/controls" and found.title == "Controls"
    for candidate in found.candidates:
        (match,) = await _matches(browser, candidate.selector)  # exactly one element
        assert match["shown"], candidate
    assert len({c.selector for c in found.candidates}) == len(found.candidates)
    # Page order, each with its role and accessible name.
    assert [(c.role, c.name, c.tag) for c in found.candidates] == [
        ("textbox", "User name", "input"),
        ("button", "Submit", "button"),
        ("textbox", "Email", "input"),
        ("textbox", "Password", "input"),
        ("combobox", "Country", "select"),
        ("button", "Submit", "button"),
        ("link", "Help", "a"),
        ("button", "Help", "button"),
        ("link", "Inside", "a"),
        ("link", "Nested link", "a"),
        ("checkbox", "Remember me", "input"),
        ("searchbox", "Search", "input"),
    ]
    first, second = _named(found, "button", "Submit")
    assert first.selector.startswith("#login")  # within the form that has an id
    assert first.text == second.text == "Submit"
    (select,) = _named(found, "combobox", "Country")
    assert select.text == "France"
    (search,) = _named(found, "searchbox", "Search")
    assert search.selector == "#search\\.q"  # escaped: a bare dot would be a class
    # A field's value is what was typed: never offered.
    assert "hunter2" not in str(found) and "secret-token" not in str(found)


async def test_a_candidate_selector_acts_on_its_control(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/controls")
    found = await _candidates(browser, "act")
    (button,) = _named(found, "button", "Help")
    clicked = await browser("browser_click", selector=button.selector)
    assert clicked.ok, clicked.error
    assert clicked.metadata.target == Target(role="button", name="Help", tag="button")
    assert clicked.metadata.url == f"{site}/controls"  # a button, not the link
    (field,) = _named(found, "textbox", "Email")
    typed = await browser("browser_type", selector=field.selector, text="ada@example.org")
    assert typed.ok, typed.error
    assert typed.metadata.target == Target(role="textbox", name="Email", tag="input")


async def test_the_target_is_the_visible_match_acted_on(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/controls")
    # `a` matches the hidden "Help" link first: the click is on the shown one.
    clicked = await browser("browser_click", selector="a[href*=help], a[href*=hidden]")
    assert clicked.ok, clicked.error
    assert clicked.metadata.target == Target(role="link", name="Help", tag="a")
    assert clicked.metadata.url == f"{site}/done?help"
    await browser("browser_navigate", url=f"{site}/controls")
    typed = await browser("browser_type", selector="[name=pw]", text="x")
    assert typed.metadata.target == Target(role="textbox", name="Password", tag="input")
    by_text = await browser("browser_click", text="Remember me")
    assert by_text.ok, by_text.error
    assert by_text.metadata.target is not None and by_text.metadata.target.name == "Remember me"
    # A click that finds nothing fails as before, with no target.
    missing = await browser("browser_click", selector="#nothing", timeout_s=3)
    assert missing.error is not None and missing.error.code == "element_not_found"
    assert missing.metadata.target is None


async def test_hidden_controls_are_not_offered(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/controls")
    found = await _candidates(browser, "act")
    names = [c.name for c in found.candidates]
    for hidden in ("Aria hidden", "Skip to content", "Zero", "Invisible"):
        assert hidden not in names
    assert names.count("Submit") == 2 and names.count("Help") == 2
    assert not any(c.text == "Nested" or c.name == "Nested" for c in found.candidates)


async def test_the_limit_truncates(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/controls")
    found = await _candidates(browser, "act", limit=3)
    assert found.truncated
    assert [c.name for c in found.candidates] == ["User name", "Submit", "Email"]
    await browser("browser_navigate", url=f"{site}/stories")
    read = await _candidates(browser, "read", limit=1)
    assert read.truncated and len(read.candidates) == 1


async def test_alike_elements_are_offered_as_one_group_each(browser: Browser, site: str) -> None:
    await browser("browser_navigate", url=f"{site}/stories")
    found = await _candidates(browser, "read")
    assert not found.truncated
    stories, prices, cards, total = found.candidates
    assert (stories.tag, stories.role, stories.count) == ("li", "listitem", 4)
    assert stories.samples == [
        "Alpha wins 120 points",
        "Beta falls 85 points",
        "Gamma rises 40 points",
    ]
    assert stories.parts == {"a.title": "Alpha wins", "span.points": "120 points"}
    assert (prices.tag, prices.count, prices.samples) == (
        "tr",
        3,
        ["Tea $2.00", "Milk $1.50", "Bread $3.25"],
    )
    assert list(prices.parts.values()) == ["Tea", "$2.00"]
    assert (cards.tag, cards.count) == ("div", 3)
    assert cards.samples[0] == "Basic $5 / month"
    assert cards.parts == {"h3": "Basic", "p.price": "$5 / month"}
    assert (total.selector, total.count, total.samples) == ("#total", 1, ["42 items"])
    assert "Hidden story" not in str(found)
    # Each selector reads its group: as many shown items, its parts found in them.
    for group in (stories, prices, cards):
        fields = {f"f{i}": part for i, part in enumerate(group.parts)}
        read = await browser("browser_extract", selector=group.selector, fields=fields)
        assert read.ok, read.error
        assert len(read.output) == group.count
        assert list(read.output[0].values()) == list(group.parts.values())
        shown = [m for m in await _matches(browser, group.selector) if m["shown"]]
        assert len(shown) == group.count
