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


# --- overlapping matches and links: the extracted href wins over the page URL ---------

ORIGIN = "http://127.0.0.1:8765"


def test_an_extracted_href_wins_over_the_page_url_it_overlaps() -> None:
    # The prompt names the origin without a slash; the browser reports it with one. The
    # page URL "origin/" is the longer match in "origin/s/a", but taking it would leave
    # "s/a" a constant: every replay would open story "a".
    ctx = Context(f"Open the first story on {ORIGIN} and give its title.")
    ctx.add_constant(ORIGIN)
    sources = [
        Source.of(0, "browser_navigate", {"url": f"{ORIGIN}/", "title": "News"}, reads=False),
        Source.of(1, "browser_extract", [{"title": "A", "href": "/s/a"}], reads=True),
    ]
    found = provenance(f"{ORIGIN}/s/a", "url", sources, ctx)
    assert found.kind == "template", found.why
    assert found.template is not None
    assert found.template.parts == (ORIGIN, Pointer(1, (0, "href")))


def test_a_link_no_text_can_rebuild_is_still_the_link_not_a_constant() -> None:
    # "../s/a" resolved against the page is the URL opened, but no text around a
    # reference writes it: the small model picks the link again from the extract.
    ctx = Context(f"Open {ORIGIN}/news/list/ and open the first story.")
    ctx.add_constant(f"{ORIGIN}/news/list/")
    sources = [
        Source.of(0, "browser_navigate", {"url": f"{ORIGIN}/news/list/"}, reads=False),
        Source.of(1, "browser_extract", [{"title": "A", "href": "../s/a"}], reads=True),
    ]
    found = provenance(f"{ORIGIN}/news/s/a", "url", sources, ctx)
    assert (found.kind, found.sources) == ("judgement", (1,)), found.why


# --- values the prompt names: fixed, or one of the options the page decides between ----

STATUS_PAGE = "Service status\nWater supply: operational\nParking permits: down"
PRODUCTS = [
    {"name": "Widget", "price": "$12.00"},
    {"name": "Gadget", "price": "$8.50"},
    {"name": "Gizmo", "price": "$3.50"},
]


@pytest.mark.parametrize(
    ("prompt", "value", "expected"),
    [
        # a verdict between branches or named alternatives: the page decides it
        ("Answer yes if every service is operational, otherwise no.", "no", "judgement"),
        ("Tell me if water supply is operational or down.", "operational", "judgement"),
        ("Report OK when all services are up, else report ALERT.", "ALERT", "judgement"),
        ("Answer yes or no: is anything down?", "yes", "judgement"),
        # a value the prompt fixes, even in a prompt with a condition or a list
        ("Open it and say OK.", "OK", "constant"),
        ("Open it and, if it loads, say OK.", "OK", "constant"),  # no other branch
        # a condition with branches elsewhere in the sentence: the search term is fixed
        ("Search for blue widgets and report the first if any, else say none.", "blue widgets",
         "constant"),
        ("Fill name=Ada Lovelace, email=ada@x.test and report it.", "Ada Lovelace", "constant"),
        ("Report the cheapest of Widget and Gadget; say done.", "done", "constant"),
    ],
)  # fmt: skip
def test_an_answer_the_prompt_names(prompt: str, value: str, expected: str) -> None:
    ctx = Context(prompt)
    sources = [Source.of(1, "browser_read_page", STATUS_PAGE, reads=True)]
    found = provenance(value, "data", sources, ctx, context_step=1)
    assert found.kind == expected, found.why
    if expected == "judgement":
        assert found.sources == (1,)


def test_a_verdict_with_nothing_read_stays_the_prompt_s() -> None:
    # Nothing was read to decide from: the recorded branch is all there is.
    ctx = Context("Answer yes if every service is operational, otherwise no.")
    assert provenance("no", "data", [], ctx).kind == "constant"


@pytest.mark.parametrize(
    ("prompt", "expected", "choice"),
    [
        ("Of Widget, Gadget and Gizmo click the cheapest one.", "template", True),
        ("Click Widget or Gizmo, whichever has stock.", "template", True),
        ("Click Gizmo and report its stock.", "constant", False),  # named alone
        ("Click Widget, Gadget and Gizmo in turn.", "constant", False),  # no judgement
        ("Of Gizmo and Doohickey click the cheapest.", "constant", False),  # rival not shown
        ("Open http://shop.test/Widget/ and click Gizmo.", "constant", False),  # a URL
    ],
)
def test_a_label_the_prompt_names_among_options(prompt: str, expected: str, choice: bool) -> None:
    ctx = Context(prompt)
    sources = [Source.of(1, "browser_extract", PRODUCTS, reads=True)]
    found = provenance("Gizmo", "label", sources, ctx)
    assert (found.kind, found.choice) == (expected, choice), found.why
    if choice:
        assert found.template is not None
        assert found.template.parts == (Pointer(1, (2, "name")),)


def test_a_list_chosen_from_by_named_options_is_a_pick_without_a_judgement_word() -> None:
    uses = [Pointer(1, (2, "name"))]
    plain = judge_lists(uses, {1: PRODUCTS}, "click Widget or Gizmo", {})[(1, ())]
    assert plain.ok  # the last item, by position
    chosen = judge_lists(uses, {1: PRODUCTS}, "click Widget or Gizmo", {}, {(1, ())})[(1, ())]
    assert (chosen.ok, chosen.pick) == (False, 2)
