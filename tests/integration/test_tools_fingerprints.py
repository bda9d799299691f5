"""browser_extract's drift fingerprint on real pages, in Chromium: the labels a person
reads each value by (a column header, a <dt>, a parallel list, a grid's head row), the
headers, the short texts around the values, the page's language, struck prices, tag
paths and value shapes; what changes when a page keeps its selectors but moves a column."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from contracts.tools import Fingerprint, ToolResult
from tests.browser_box import Browser, open_browser
from tests.integration.test_tools_service import nothing_left_behind  # noqa: F401
from tests.local_site import QuietHandler, serve

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.browser,
    pytest.mark.usefixtures("nothing_left_behind"),
]

NOTE = "Temperatures in °F."
LONG = "A very long paragraph of small print. " * 8  # over 200 characters: no note


def _forecast(columns: list[str]) -> str:
    """A forecast table with its columns in the given order, notes around it."""
    rows = [
        {"City": "Lisbon", "Sky": "Sunny", "High": "64"},
        {"City": "Porto", "Sky": "Cloudy", "High": "59"},
    ]
    head = "".join(f"<th>{c}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{row[c]}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"""<html lang="en"><title>Weather</title>
<nav><p>Home</p></nav>
<h1>Forecast</h1>
<p class="note">{NOTE}</p>
<p style="display:none">A hidden note.</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<p>* Porto: no data tomorrow.</p>
<a href="/elsewhere"><p>A linked teaser.</p></a>
<p>{LONG}</p>
<footer><small>Updated 2025-03-04 06:00.</small></footer>"""


PAGES = {
    "/table": _forecast(["City", "Sky", "High"]),
    "/reordered": _forecast(["City", "High", "Sky"]),
    "/dl": """<html lang="pt-PT"><title>Specs</title><h1>Grinder</h1>
<dl><dt>Weight (kg)</dt><dd>3,4</dd><dt>Width (cm)</dt><dd>18</dd></dl>""",
    "/pairs": """<title>Specs</title><p>Specifications</p>
<ul class="keys"><li>Weight (kg)</li><li>Width (cm)</li></ul>
<ul class="values"><li>3.4</li><li>18</li></ul>""",
    "/struck": """<title>Shop</title><table>
<thead><tr><th>Product</th><th>Price</th><th>Sale price</th></tr></thead><tbody>
<tr><td>Travel Mug</td><td><s>$40.00</s></td><td>$30.00</td></tr>
<tr><td>Chef Knife</td><td>$89.00</td><td></td></tr>
<tr style="text-decoration: line-through"><td>Cold Brew Jar</td><td>$27.50</td><td></td></tr>
<tr><td>Kettle</td><td><del>$54.50</del> $50.00</td><td></td></tr>
</tbody></table>""",
    "/grid": """<title>Grid</title><p>Prices in USD.</p><div class="grid">
<div class="head"><span>Name</span><span>Price</span></div>
<div class="row"><span>Tea</span><span>$2.00</span></div>
<div class="row"><span>Milk</span><span>$1.00</span></div>
</div>""",
    # Look-alike items (no head row) and cards whose values have a label beside them.
    "/cards": """<title>Cards</title>
<ul class="plain"><li><b class="n">Tea</b><i class="p">$2</i></li>
  <li><b class="n">Milk</b><i class="p">$1</i></li></ul>
<ul class="labelled"><li><b>Price</b><i class="p">$2</i></li>
  <li><b>Price</b><i class="p">$1</i></li></ul>""",
}


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        self.send_html(PAGES.get(urlparse(self.path).path, "<title>?</title>nothing"))


@pytest.fixture
def site() -> Iterator[str]:
    with serve(_Handler) as url:
        yield url


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Browser]:
    # A short wait for an extract that matches nothing: the page is loaded already.
    async with open_browser(tmp_path, extract_wait_s=0.1) as browser:
        yield browser


async def _extract(browser: Browser, site: str, path: str, **args: Any) -> ToolResult:
    assert (await browser("browser_navigate", url=f"{site}{path}")).ok
    result = await browser("browser_extract", **args)
    assert result.ok, result.error
    return result


def _fingerprint(result: ToolResult) -> Fingerprint:
    assert result.metadata.fingerprint is not None
    return result.metadata.fingerprint


CITY_HIGH = {"city": "td:nth-child(1)", "high": "td:nth-child(3)"}


async def test_a_tables_values_are_labelled_by_their_column_and_noted_by_the_page(
    browser: Browser, site: str
) -> None:
    result = await _extract(browser, site, "/table", selector="tbody tr", fields=CITY_HIGH)
    assert result.output == [{"city": "Lisbon", "high": "64"}, {"city": "Porto", "high": "59"}]
    found = _fingerprint(result)
    assert found.lang == "en"
    assert found.labels == {"city": ["City", "City"], "high": ["High", "High"]}
    assert found.headers == ["City", "Sky", "High"]
    # The texts around the table, in page order: not the values, the navigation, a
    # link's text, a hidden note or a long paragraph.
    assert found.notes == [
        "Forecast",
        NOTE,
        "* Porto: no data tomorrow.",
        "Updated 2025-03-04 06:00.",
    ]
    assert found.struck == {"city": [False, False], "high": [False, False]}
    assert found.paths == {"city": "table>tbody>tr>td", "high": "table>tbody>tr>td"}
    assert found.shapes == {"city": ["text"], "high": ["9"]}


async def test_a_column_moved_under_the_same_selector_changes_its_label(
    browser: Browser, site: str
) -> None:
    result = await _extract(browser, site, "/reordered", selector="tbody tr", fields=CITY_HIGH)
    # The same selectors read the sky now: its label says so.
    assert result.output == [
        {"city": "Lisbon", "high": "Sunny"},
        {"city": "Porto", "high": "Cloudy"},
    ]
    found = _fingerprint(result)
    assert found.labels == {"city": ["City", "City"], "high": ["Sky", "Sky"]}
    assert found.headers == ["City", "High", "Sky"]
    assert found.shapes == {"city": ["text"], "high": ["text"]}


async def test_definitions_are_labelled_by_their_terms(browser: Browser, site: str) -> None:
    found = _fingerprint(await _extract(browser, site, "/dl", selector="dd"))
    assert (found.lang, found.notes) == ("pt-PT", ["Grinder"])
    assert found.labels == {"": ["Weight (kg)", "Width (cm)"]}
    assert found.paths == {"": "body>dl>dd"}
    assert found.shapes == {"": ["9"]}
    # A term is a label itself.
    assert _fingerprint(await browser("browser_extract", selector="dt")).labels == {
        "": [None, None]
    }


async def test_values_in_a_list_are_labelled_by_the_parallel_list_before_it(
    browser: Browser, site: str
) -> None:
    found = _fingerprint(await _extract(browser, site, "/pairs", selector="ul.values li"))
    assert found.labels == {"": ["Weight (kg)", "Width (cm)"]}
    assert found.notes == ["Specifications"]
    # The labels' own list has none before it; nor is an item the label of the next.
    keys = _fingerprint(await browser("browser_extract", selector="ul.keys li"))
    assert keys.labels == {"": [None, None]}


async def test_a_struck_price_is_flagged(browser: Browser, site: str) -> None:
    fields = {"product": "td:nth-child(1)", "price": "td:nth-child(2)"}
    result = await _extract(browser, site, "/struck", selector="tbody tr", fields=fields)
    found = _fingerprint(result)
    # Struck inside the cell (<s>), along the whole row (CSS), in part (<del>).
    assert found.struck == {
        "product": [False, False, True, False],
        "price": [True, False, True, True],
    }
    assert found.labels["price"] == ["Price"] * 4
    assert found.headers == ["Product", "Price", "Sale price"]
    assert found.shapes["price"] == ["$9", "$9 $9"]


async def test_a_grid_of_divs_is_labelled_by_its_head_row(browser: Browser, site: str) -> None:
    fields = {"name": "span:nth-child(1)", "price": "span:nth-child(2)"}
    result = await _extract(browser, site, "/grid", selector=".grid .row", fields=fields)
    assert result.output == [{"name": "Tea", "price": "$2.00"}, {"name": "Milk", "price": "$1.00"}]
    found = _fingerprint(result)
    assert found.labels == {"name": ["Name", "Name"], "price": ["Price", "Price"]}
    assert found.headers == ["Name", "Price"]
    assert found.notes == ["Prices in USD."]
    assert found.paths == {"name": "body>div>div>span", "price": "body>div>div>span"}
    # The head's own cells are their labels, as a <th> is.
    head = _fingerprint(await browser("browser_extract", selector=".grid .head span"))
    assert head.labels == {"": ["Name", "Price"]} and head.headers == ["Name", "Price"]


async def test_a_neighbouring_value_is_no_label_but_a_repeated_one_is(
    browser: Browser, site: str
) -> None:
    fields = {"name": ".n", "price": ".p"}
    plain = await _extract(browser, site, "/cards", selector="ul.plain li", fields=fields)
    # A list of look-alike items has no head row; a name beside each price is no label.
    assert _fingerprint(plain).labels == {"name": [None, None], "price": [None, None]}
    assert _fingerprint(plain).headers == []
    labelled = await browser("browser_extract", selector="ul.labelled li", fields={"price": ".p"})
    assert _fingerprint(labelled).labels == {"price": ["Price", "Price"]}


async def test_an_extract_that_matches_nothing_still_fingerprints_the_page(
    browser: Browser, site: str
) -> None:
    result = await _extract(browser, site, "/table", selector="table.none tr", fields=CITY_HIGH)
    assert result.output == []
    found = _fingerprint(result)
    assert found.lang == "en" and NOTE in found.notes
    assert (found.labels, found.headers, found.shapes) == ({}, [], {})
