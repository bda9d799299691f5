"""Where values come from (services.compiler.dataflow): list picks and provenance."""

from __future__ import annotations

import pytest

from services.compiler.dataflow import (
    Context,
    ListVerdict,
    Pointer,
    Source,
    judge_lists,
    provenance,
)

ITEMS = ["a1", "b2", "c3", "d4", "e5"]


def verdict(
    indexes: list[int], prompt: str = "report them", limit: int | None = None
) -> ListVerdict:
    uses = [Pointer(1, (i,)) for i in indexes]
    return judge_lists(uses, {1: ITEMS}, prompt, {1: limit})[(1, ())]


@pytest.mark.parametrize(
    ("indexes", "prompt", "limit", "ok", "pick"),
    [
        ([0], "open the top story", None, True, None),
        ([4], "open the last story", None, True, None),
        ([2], "open the third story", None, True, None),
        ([2], "open item 3", None, True, None),
        ([2], "open a story", None, False, 2),  # a position no rule explains
        ([0, 1, 2], "report the top 3", None, True, None),
        ([0, 1, 2, 3, 4], "report all stories", None, False, None),  # the length may change
        ([0, 1, 2, 3, 4], "report the top 5", None, True, None),
        ([0, 1, 2, 3, 4], "report them", 5, True, None),  # the extract's limit fixes it
        ([0], "open the cheapest product", None, False, 0),  # judgement, even at the top
        ([0, 1, 2], "report the 3 cheapest", None, False, None),
        ([2, 0, 1], "report the top 3", None, False, None),  # reordered: sorted by something
    ],
)
def test_list_picks(
    indexes: list[int], prompt: str, limit: int | None, ok: bool, pick: int | None
) -> None:
    found = verdict(indexes, prompt, limit)
    assert (found.ok, found.pick) == (ok, pick), found.why
    assert found.last == (indexes == [4] and ok)


def test_a_one_item_list_is_always_a_rule() -> None:
    uses = [Pointer(1, (0, "name"))]
    found = judge_lists(uses, {1: [{"name": "x"}]}, "pick the cheapest", {})
    assert found[(1, ())].ok


def _ctx() -> tuple[Context, list[Source]]:
    ctx = Context("Open http://shop.test/ and search for red shoes; report the first result.")
    ctx.add_constant("http://shop.test/")
    sources = [
        Source.of(0, "browser_read_page", "Deal of the day: Blue Boots, only 20 left", reads=True),
        Source.of(
            1,
            "browser_extract",
            [{"name": "Crimson Sneaker", "href": "/p/crimson-sneaker"}],
            reads=True,
        ),
    ]
    return ctx, sources


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("#search", "structure", "constant"),
        ("red shoes", "data", "constant"),  # from the prompt
        ("shoes red", "data", "constant"),  # the prompt's words
        ("Blue Boots", "data", "judgement"),  # read off the page
        ("Blue special", "data", "judgement"),  # derived from page words
        ("2025-06-01", "data", "judgement"),  # from nowhere: a date, a sum...
        ("Crimson Sneaker", "data", "template"),  # exactly an extracted field
        ("Crimson Sneaker", "label", "template"),
        ("Sign in", "label", "constant"),  # a UI label
        ("http://shop.test/p/crimson-sneaker", "url", "template"),  # origin + extracted href
        ("http://shop.test/about", "url", "constant"),
        ("http://shop.test/", "url", "constant"),
    ],
)
def test_provenance(value: str, kind: str, expected: str) -> None:
    ctx, sources = _ctx()
    found = provenance(value, kind, sources, ctx)  # type: ignore[arg-type]
    assert found.kind == expected, found.why


def test_embedded_reference_keeps_the_constant_around_it() -> None:
    ctx, sources = _ctx()
    found = provenance("http://shop.test/p/crimson-sneaker", "url", sources, ctx)
    assert found.template is not None
    assert found.template.parts == ("http://shop.test", Pointer(1, (0, "href")))


def _detail_sources() -> list[Source]:
    return [
        Source.of(
            1,
            "browser_extract",
            [{"name": "Tamper", "price": "$25.02"}, {"name": "Paper Filters", "price": "$4.93"}],
            reads=True,
        ),
        Source.of(2, "browser_click", {"url": "http://shop.test/p/paper-filters"}, reads=False),
        Source.of(
            3,
            "browser_read_page",
            "Paper Filters\nPrice: $4.93\nMaterial: oak\nStock: 31 left",
            reads=True,
        ),
    ]


@pytest.mark.parametrize("detail", ["31 left", "many left"])
def test_leftover_page_data_points_at_the_page_it_came_from(detail: str) -> None:
    # The answer's text around its references holds data from the page read: a number
    # ("31") as much as a word ("many") must make that read a source of the answer.
    ctx = Context("Open http://shop.test/products, open the cheapest product; report its stock")
    sources = _detail_sources()
    if detail == "many left":
        sources[2] = Source.of(
            3, "browser_read_page", "Paper Filters\nStock: many left", reads=True
        )
    found = provenance(f"Cheapest: Paper Filters at $4.93; stock: {detail}", "data", sources, ctx)
    assert found.kind == "judgement", found.why
    assert 3 in found.sources and 1 in found.sources


def test_a_number_from_nowhere_is_still_a_judgement_over_the_references() -> None:
    ctx = Context("Open http://news.test/ and report the top 2 headlines")
    sources = [Source.of(1, "browser_extract", ["Alpha", "Beta", "Gamma"], reads=True)]
    found = provenance("Top 2 of 3 headlines:\n1. Alpha\n2. Beta", "data", sources, ctx)
    assert (found.kind, found.sources) == ("judgement", (1,))
    assert "number 3" in found.why
