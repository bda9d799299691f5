"""Golden cases for services.compiler.dataflow.leaks: page content left in the text
around an answer's references (`leaked_content`), and names a URL or command copied out
of a read's text (`taken_from_text`). Each answer's template is what `find_template`
makes of it, as the compiler does."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.leaks import leaked_content, taken_from_text
from services.compiler.dataflow.sources import Context, Source
from services.compiler.dataflow.templates import find_template
from tests.unit.dataflow_show import extract, navigated, read

CHEAPEST = "Open http://shop.test/products, open the cheapest product; report its stock"
DETAIL = [
    extract(
        1, [{"name": "Tamper", "price": "$25.02"}, {"name": "Paper Filters", "price": "$4.93"}]
    ),
    navigated(2, "http://shop.test/p/paper-filters"),
    read(3, "Paper Filters\nPrice: $4.93\nMaterial: oak\nStock: 31 left"),
]
HEADLINES = [extract(1, ["Alpha", "Beta", "Gamma"])]
STORIES = ["Markets rally", "Storm hits coast", "Museum opens", "Team wins"]
# Story links, then the pager's links "2" and "3": numbers an output holds.
PAGED = [
    extract(
        1,
        [{"title": t, "href": f"/s/{n}"} for n, t in enumerate(STORIES)]
        + [{"title": "2", "href": "?page=2"}, {"title": "3", "href": "?page=3"}],
    )
]
NAMES = extract(1, [{"name": "API"}, {"name": "DB"}])


@pytest.mark.parametrize(
    ("prompt", "answer", "sources", "expected"),
    [
        (
            CHEAPEST,
            "Cheapest: Paper Filters at $4.93; stock: 31 left",
            DETAIL,
            ("the text has the number 31 from the content of step 3", (3,)),
        ),
        (
            CHEAPEST,
            "Cheapest: Paper Filters at $4.93; material: oak",
            DETAIL,
            ("the text has 'material' from the content of step 3", (3,)),
        ),
        (
            "Report the top 2 headlines",
            "Top 2 of 3 headlines:\n1. Alpha\n2. Beta",
            HEADLINES,
            ("the text has the number 3 from no reference", ()),
        ),
        (
            "Report the deals",
            "Deals 2026: Alpha, Beta",
            HEADLINES,
            ("the text has the number 2026 from no reference", ()),
        ),
        (
            "Give me the top 3 headlines",
            "Markets rally (page 3)",
            PAGED,
            ("the text has the number 3 from the content of step 1", (1,)),
        ),
        (
            "Report the top 3 products",
            "Widget (3 left)",
            [extract(1, [{"name": "Widget", "stock": "3"}, {"name": "Gadget", "stock": "9"}])],
            ("the text has the number 3 from the content of step 1", (1,)),
        ),
        (
            "Report the components",
            "API and DB: OK",
            [NAMES, read(2, "Status: OK")],
            ("the text has 'ok' from the content of step 2", (2,)),
        ),
        (
            "Report the components",
            "API is fine",
            [NAMES, read(2, "Status: fine")],
            ("the text has 'fine' from the content of step 2", (2,)),
        ),
        ("Report the top 2 headlines", "Top 2 headlines:\n1. Alpha\n2. Beta", HEADLINES, None),
        (
            "Give me the top 3 headlines",
            "Top 3 headlines:\n1. Markets rally\n2. Storm hits coast\n3. Museum opens",
            PAGED,
            None,
        ),
        ("Report the headlines", "2 headlines: Alpha, Beta", HEADLINES, None),
        ("Report the deals", "Deals: 1) Alpha, 2) Beta", HEADLINES, None),
        (
            "Report the headlines",
            "1. Beta\n2. Alpha",
            [extract(1, [{"rank": "1", "title": "Alpha"}, {"rank": "2", "title": "Beta"}])],
            None,
        ),
        (
            "Report the headlines",
            "Here are the headlines you asked for: Alpha, Beta",
            HEADLINES,
            None,
        ),
        ("Report the components", "API is up", [NAMES, read(2, "Status: fine")], None),
    ],
    ids=[
        "a-number-the-page-holds",
        "a-word-only-the-page-has",
        "a-number-from-nowhere",
        "a-year-from-nowhere",
        "a-number-an-output-holds-beside-a-reference",
        "an-item-s-own-number-even-when-the-task-counts-the-same",
        "a-short-state-the-page-says",
        "a-state-word-the-page-says",
        "the-task-s-count-and-the-lines-numbering",
        "the-task-s-count-in-own-words-though-a-pager-holds-it",
        "the-count-of-the-references",
        "marks-numbering-the-items-of-a-line",
        "a-numbered-list-numbers-lines-whatever-ranks-the-items-hold",
        "the-model-s-own-phrasing",
        "a-short-word-no-output-says",
    ],
)
def test_leaked_content(
    prompt: str,
    answer: str,
    sources: list[Source],
    expected: tuple[str, tuple[int, ...]] | None,
) -> None:
    ctx = Context(prompt)
    template = find_template(answer, sources, ctx)
    assert template is not None
    assert leaked_content(template, sources, ctx) == expected


LS = read(1, {"stdout": "b-2024-05-31.tar.gz\nb-2024-06-01.tar.gz\n"}, "shell_exec")


@pytest.mark.parametrize(
    ("prompt", "value", "sources", "expected"),
    [
        (
            "Restore the newest backup",
            "tar -xzf /backups/b-2024-06-01.tar.gz",
            [LS],
            ("b-2024-06-01.tar.gz", (1,)),
        ),
        (
            "Install the latest release",
            "pip install acme==2.4.1",
            [read(1, "Latest release: 2.4.1 (June)")],
            ("2.4.1", (1,)),
        ),
        (
            "Track the order",
            "http://x.test/orders/123456",
            [read(1, "Order 123456 shipped")],
            ("123456", (1,)),
        ),
        ("Restore b-2024-06-01.tar.gz", "tar -xzf /backups/b-2024-06-01.tar.gz", [LS], None),
        (
            "Install the latest release",
            "pip install acme==2.4.1",
            [read(1, "Latest release: 2.4.10 (June)")],
            None,
        ),
        ("Open the archive", "http://x.test/archive/2024/", [read(1, "Archive 2024")], None),
        (
            "Track the order",
            "http://x.test/orders/123456",
            [navigated(1, "http://x.test/orders/123456?x")],
            None,
        ),
        ("Open the about page", "http://x.test/about", [read(1, "about us")], None),
    ],
    ids=[
        "a-file-name-a-listing-printed",
        "a-version-a-page-shows",
        "an-id-of-five-digits-or-more",
        "a-name-the-task-gives",
        "a-longer-version-is-another-name",
        "a-year-is-no-name",
        "a-navigation-is-no-read",
        "a-plain-word-stays",
    ],
)
def test_taken_from_text(
    prompt: str,
    value: str,
    sources: list[Source],
    expected: tuple[str, tuple[int, ...]] | None,
) -> None:
    assert taken_from_text(value, sources, Context(prompt)) == expected
