"""Golden cases for services.compiler.dataflow.provenance: where one value came from, a
constant, a template over earlier outputs, or a judgement, and why."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.provenance import provenance
from services.compiler.dataflow.sources import Context, Pointer, Source
from services.executor.toolkinds import Kind
from tests.unit.dataflow_show import extract, navigated, read, show


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


# --- the golden table: kind, why, sources and template of each value ------------------


@pytest.mark.parametrize(
    ("value", "kind", "context_step", "expected"),
    [
        ("#search", "structure", None, ("constant", "how, not what", (), None)),
        ("", "data", None, ("constant", "blank", (), None)),
        (
            "http://shop.test/",
            "url",
            None,
            ("constant", "repeats an earlier constant input", (), None),
        ),
        ("red shoes", "data", None, ("constant", "from the task prompt", (), None)),
        ("shoes red", "data", None, ("constant", "made of the task prompt's words", (), None)),
        ("Sign in", "label", None, ("constant", "not found in any earlier output", (), None)),
        ("Blue", "label", None, ("constant", "not found in any earlier output", (), None)),
        (
            "Crimson Sneaker",
            "data",
            None,
            ("template", "the output of step 1", (1,), "{1[0].name}"),
        ),
        (
            "Top pick: Crimson Sneaker",
            "data",
            None,
            ("template", "built from earlier outputs", (1,), "Top pick: {1[0].name}"),
        ),
        (
            "curl http://shop.test/p/crimson-sneaker",
            "generic",
            None,
            ("template", "built from earlier outputs", (1,), "curl http://shop.test{1[0].href}"),
        ),
        (
            "Blue Boots",
            "data",
            None,
            ("judgement", "taken from the text of step 0", (0,), None),
        ),
        (
            "Blue special",
            "data",
            None,
            ("judgement", "derived from the content of step 0", (0,), None),
        ),
        (
            "Top pick: Crimson Sneaker (20 left)",
            "data",
            None,
            ("judgement", "the text has the number 20 from the content of step 0", (0, 1), None),
        ),
        (
            "2025-06-01",
            "data",
            0,
            ("judgement", "appears in no earlier output nor in the task prompt", (0,), None),
        ),
        (
            "2025-06-01",
            "data",
            None,
            ("judgement", "appears in no earlier output nor in the task prompt", (), None),
        ),
    ],
    ids=[
        "a-selector-is-how-not-what",
        "blank",
        "an-earlier-constant-input",
        "named-by-the-prompt",
        "made-of-the-prompt-s-words",
        "a-ui-label",
        "a-label-the-page-also-shows-stays-a-constant",
        "exactly-an-extracted-field",
        "text-around-an-extracted-field",
        "a-command-with-an-extracted-href",
        "part-of-a-page-s-text",
        "page-words-rewritten",
        "page-data-beside-a-reference",
        "from-nowhere-the-small-model-reads-the-last-read",
        "from-nowhere-with-nothing-read",
    ],
)
def test_provenance_golden(
    value: str,
    kind: Kind,
    context_step: int | None,
    expected: tuple[str, str, tuple[int, ...], str | None],
) -> None:
    ctx, sources = _ctx()
    found = provenance(value, kind, sources, ctx, context_step=context_step)
    assert (found.kind, found.why, found.sources, show(found.template)) == expected


LS = read(1, {"stdout": "b-2024-05-31.tar.gz\nb-2024-06-01.tar.gz\n"}, "shell_exec")
STATUS = read(1, STATUS_PAGE)
ITEMS = extract(1, PRODUCTS)
LIST_URL = f"{ORIGIN}/news/list/"


@pytest.mark.parametrize(
    ("prompt", "sources", "value", "kind", "context_step", "expected"),
    [
        (
            "Restore the newest backup",
            [LS],
            "tar -xzf /backups/b-2024-06-01.tar.gz",
            "generic",
            None,
            ("judgement", "'b-2024-06-01.tar.gz' is taken from the text of step 1", (1,), None),
        ),
        (
            f"Open {LIST_URL} and open the first story.",
            [navigated(0, LIST_URL), extract(1, [{"title": "A", "href": "../s/a"}])],
            f"{ORIGIN}/news/s/a",
            "url",
            None,
            ("judgement", "the link [0].href found by step 1", (1,), None),
        ),
        (
            "Answer yes if every service is operational, otherwise no.",
            [STATUS],
            "no",
            "data",
            1,
            (
                "judgement",
                "one branch of a condition the task sets, decided by the page",
                (1,),
                None,
            ),
        ),
        (
            "Answer yes if every service is operational, otherwise no.",
            [STATUS],
            "no",
            "data",
            None,
            ("constant", "from the task prompt", (), None),
        ),
        (
            "Report the prices",
            [ITEMS],
            "Gizmo: $3.50, Widget: $12.00",
            "data",
            None,
            (
                "template",
                "built from earlier outputs",
                (1,),
                "{1[2].name}: {1[2].price}, {1[0].name}: {1[0].price}",
            ),
        ),
    ],
    ids=[
        "a-file-name-a-command-copied-from-a-listing",
        "a-relative-link-resolved-against-the-page",
        "a-branch-the-page-decided",
        "a-branch-with-no-read-to-decide-from-stays-the-prompt-s",
        "fields-of-several-items",
    ],
)
def test_provenance_in_context(
    prompt: str,
    sources: list[Source],
    value: str,
    kind: Kind,
    context_step: int | None,
    expected: tuple[str, str, tuple[int, ...], str | None],
) -> None:
    found = provenance(value, kind, sources, Context(prompt), context_step=context_step)
    assert (found.kind, found.why, found.sources, show(found.template)) == expected
