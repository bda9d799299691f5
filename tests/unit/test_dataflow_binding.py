"""Golden cases for services.compiler.dataflow.binding: where each part of a value
stands (clause, line, block), and which item an open part reads (`bind`)."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.binding import bind, places
from services.compiler.dataflow.provenance import provenance
from services.compiler.dataflow.sources import Context, Pointer, Provenance, Source, Template
from tests.unit.dataflow_show import extract, show


def _template(form: str) -> Template:
    """A template with a pointer at each "{}" of `form` (into item 0, 1, 2... in turn)."""
    pieces = form.split("{}")
    parts: list[str | Pointer] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if i < len(pieces) - 1:
            parts.append(Pointer(1, (i,)))
    return Template(tuple(parts))


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ("{} ({}), {} ({})", [(0, 0, 0), (0, 0, 0), (1, 0, 0), (1, 0, 0)]),
        ("{} | {} | {}", [(0, 0, 0), (1, 0, 0), (2, 0, 0)]),
        ("{}, {}; {}\n\n\n{}", [(0, 0, 0), (1, 0, 0), (2, 0, 0), (5, 3, 1)]),
        ("Hi. {} is {}!{}", [(1, 0, 0), (1, 0, 0), (1, 0, 0)]),
        ("{}: {}\n{}: {}", [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)]),
        (
            "Name: {}\nState: {}\n\nName: {}\nState: {}",
            [(0, 0, 0), (1, 1, 0), (3, 3, 1), (4, 4, 1)],
        ),
        ("- {}\n  state: {}\n- {}\n  state: {}", [(0, 0, 0), (1, 1, 0), (2, 2, 1), (3, 3, 1)]),
        ("1. {}\n2. {}", [(1, 0, 0), (3, 1, 1)]),
    ],
    ids=[
        "a-comma-ends-a-clause",
        "a-table-bar-ends-a-clause",
        "a-semicolon-and-a-blank-line",
        "a-sentence-ends-only-before-a-space",
        "a-line-is-a-clause",
        "a-blank-line-ends-a-block",
        "a-bullet-starts-a-block",
        "a-number-starts-a-block",
    ],
)
def test_places(form: str, expected: list[tuple[int, int, int]]) -> None:
    template = _template(form)
    found = places(template)
    assert [
        at for part, at in zip(template.parts, found, strict=True) if isinstance(part, Pointer)
    ] == (expected)


COMPONENTS = extract(
    1,
    [
        {"name": "API", "state": "Operational"},
        {"name": "Web app", "state": "Operational"},
        {"name": "Database", "state": "Degraded"},
        {"name": "Queue", "state": "Operational"},
    ],
)
HEALTH = extract(1, [{"name": "API", "state": "OK"}, {"name": "Database", "state": "OK"}])
UPS = extract(1, [{"n": "Alpha", "s": "Up"}, {"n": "Beta", "s": "Up"}, {"n": "Gamma", "s": "Up"}])
NO_REFERENCE_SAYS = (
    "{} in the output of step 1 hold the text, and no reference beside it says which one"
    " it is the one read"
)


@pytest.mark.parametrize(
    ("answer", "sources", "expected"),
    [
        (
            "API: Operational\nWeb app: Operational",
            [COMPONENTS],
            "{1[0].name}: {1[0].state}\n{1[1].name}: {1[1].state}",
        ),
        (
            "API (Operational), Web app (Operational), Database (Degraded)",
            [COMPONENTS],
            "{1[0].name} ({1[0].state}), {1[1].name} ({1[1].state}), {1[2].name} ({1[2].state})",
        ),
        (
            "Name: API\nState: Operational\n\nName: Web app\nState: Operational",
            [COMPONENTS],
            "Name: {1[0].name}\nState: {1[0].state}\n\nName: {1[1].name}\nState: {1[1].state}",
        ),
        (
            "- API\n  state: Operational\n- Web app\n  state: Operational",
            [COMPONENTS],
            "- {1[0].name}\n  state: {1[0].state}\n- {1[1].name}\n  state: {1[1].state}",
        ),
        (
            "API and Web app: Operational",
            [COMPONENTS],
            "{1[0].name} and {1[1].name}: {1[1].state}",
        ),
        (
            "API: OK\nDatabase: OK",
            [HEALTH],
            "{1[0].name}: {1[0].state}\n{1[1].name}: {1[1].state}",
        ),
        ("Operational: API, Web app", [COMPONENTS], NO_REFERENCE_SAYS.format("[0], [1], [3]")),
        ("Operational", [COMPONENTS], NO_REFERENCE_SAYS.format("[0], [1], [3]")),
        ("Both are OK: API, Database", [HEALTH], NO_REFERENCE_SAYS.format("[0], [1]")),
        ("Up - Gamma, Up - Up", [UPS], NO_REFERENCE_SAYS.format("[0], [1], [2]")),
    ],
    ids=[
        "the-name-before-it-on-its-line",
        "the-name-before-it-in-its-clause",
        "the-name-in-its-block",
        "the-name-of-its-bullet",
        "the-nearest-reference-before-it-in-its-clause",
        "a-short-state-on-each-line",
        "before-every-name-no-reference-says",
        "alone-no-reference-says",
        "a-short-state-before-the-names",
        "more-open-parts-on-the-line-than-its-references-account-for",
    ],
)
def test_bind_an_answer(answer: str, sources: list[Source], expected: str) -> None:
    ctx = Context("Open the status page and list the first components with their state")
    prov = provenance(answer, "data", sources, ctx)
    assert prov.template is not None and prov.template.open
    bound = bind({(): prov})[()]
    assert (show(bound.template) if bound.kind == "template" else bound.why) == expected
    if bound.kind == "template":
        assert bound.template is not None and not bound.template.open


def test_an_open_part_follows_another_field_of_the_same_input() -> None:
    ctx = Context("Open the status page and fill in the form")
    values = {
        ("name",): provenance("Web app", "data", [COMPONENTS], ctx),
        ("state",): provenance("Operational", "data", [COMPONENTS], ctx),
    }
    bound = bind(values)
    assert show(bound[("state",)].template) == "{1[1].state}"
    assert bound[("name",)] == values[("name",)]


def test_a_bound_part_keeps_how_its_place_in_a_url_encodes_it() -> None:
    ctx = Context("Check the status of the EU web app")
    ctx.add_constant("http://shop.test")
    sources = [
        extract(
            1,
            [
                {"name": "api-east", "state": "Operational"},
                {"name": "webapp-eu", "state": "Operational"},
            ],
        )
    ]
    url = "http://shop.test/status/webapp-eu?state=Operational"
    prov = provenance(url, "url", sources, ctx)
    assert show(prov.template) == (
        "http://shop.test/status/{1[1].name|url}?state={1[0].state / 1[1].state|url}"
    )
    bound = bind({("url",): prov})[("url",)]
    assert show(bound.template) == "http://shop.test/status/{1[1].name|url}?state={1[1].state|url}"


def test_values_without_an_open_part_are_left_as_they_are() -> None:
    constant = Provenance("constant", "from the task prompt")
    closed = Provenance("template", "the output of step 1", Template((Pointer(1, (0,)),)), (1,))
    assert bind({1: constant, 2: closed}) == {1: constant, 2: closed}
