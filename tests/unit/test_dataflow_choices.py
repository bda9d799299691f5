"""Golden cases for services.compiler.dataflow.choices: how the prompt offers a value as
one option among others (`alternatives`), and when the page decided which (`choice`)."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.choices import Alternatives, alternatives, choice
from services.compiler.dataflow.sources import Context, Source
from services.executor.toolkinds import Kind
from tests.unit.dataflow_show import extract, read

YES_IF = "Answer yes if every service is operational, otherwise no."
CHEAPEST_OF = "Of Widget, Gadget and Gizmo click the cheapest one."
WHICHEVER = "Click Widget or Gizmo, whichever has stock."
PRODUCTS = extract(
    1,
    [
        {"name": "Widget", "price": "$12.00"},
        {"name": "Gadget", "price": "$8.50"},
        {"name": "Gizmo", "price": "$3.50"},
    ],
)
STATUS = read(1, "Service status\nWater supply: operational\nParking permits: down")


@pytest.mark.parametrize(
    ("value", "prompt", "expected"),
    [
        ("no", YES_IF, Alternatives(conditional=True)),
        (
            "ALERT",
            "Report OK when all services are up, else report ALERT.",
            Alternatives(conditional=True),
        ),
        (
            "operational",
            "Tell me if water supply is operational or down.",
            Alternatives(either=("down",)),
        ),
        ("yes", "Answer yes or no: is anything down?", Alternatives(either=("no",))),
        ("Gizmo", 'Click "Widget" or "Gizmo".', Alternatives(either=("Widget",))),
        (
            "Gadget",
            "What is the cost of Widget / Gadget? Then stop.",
            Alternatives(either=("Widget", "of Widget", "cost of Widget")),
        ),
        ("Gizmo", CHEAPEST_OF, Alternatives(listed=("Gadget",), judgement="cheapest")),
        ("Gizmo", "Click Widget, Gadget and Gizmo in turn.", Alternatives(listed=("Gadget",))),
        (
            "blue widgets",
            "Search for blue widgets and report the first if any, else say none.",
            Alternatives(listed=("report", "report the", "report the first")),
        ),
        ("Gizmo", "Open http://shop.test/Widget/or/Gizmo and click Gizmo.", Alternatives()),
    ],
    ids=[
        "the-else-branch-of-a-condition",
        "the-branch-after-else",
        "joined-by-or",
        "yes-or-no",
        "quoted-options",
        "joined-by-a-slash-phrases-of-one-to-three-words",
        "listed-with-a-judgement-word",
        "listed-without-a-judgement",
        "a-condition-with-branches-further-off-is-no-branch",
        "words-of-a-url-are-no-options",
    ],
)
def test_alternatives(value: str, prompt: str, expected: Alternatives) -> None:
    assert alternatives(value, prompt) == expected


@pytest.mark.parametrize(
    ("value", "kind", "prompt", "sources", "context_step", "expected"),
    [
        (
            "no",
            "data",
            YES_IF,
            [STATUS],
            1,
            "one branch of a condition the task sets, decided by the page",
        ),
        (
            "no",
            "data",
            YES_IF,
            [],
            1,
            "one branch of a condition the task sets, decided by the page",
        ),
        (
            "yes",
            "data",
            "Answer yes or no: is anything down?",
            [STATUS],
            1,
            "one of the alternatives the task names, decided by the page",
        ),
        (
            "Gizmo",
            "label",
            WHICHEVER,
            [PRODUCTS],
            None,
            "one of the alternatives the task names, decided by the page",
        ),
        (
            "Gizmo",
            "label",
            CHEAPEST_OF,
            [PRODUCTS],
            None,
            "the 'cheapest' of the options the task names, decided by the page",
        ),
        (
            "Gizmo",
            "data",
            "Of Widget, Gadget and Gizmo report the cheapest.",
            [PRODUCTS],
            1,
            "the 'cheapest' of the options the task names, decided by the page",
        ),
        ("no", "data", YES_IF, [], None, None),
        ("Gizmo", "label", WHICHEVER, [], None, None),
        ("Gizmo", "label", WHICHEVER, [extract(1, [{"name": "Widget"}])], None, None),
        ("Gizmo", "label", "Of Gizmo and Doohickey click the cheapest.", [PRODUCTS], None, None),
        (
            "Gizmo",
            "data",
            "Of Widget, Gadget and Gizmo report the cheapest.",
            [extract(1, [{"name": "Gizmo"}])],
            1,
            None,
        ),
        ("Gizmo", "label", "Click Gizmo and report its stock.", [PRODUCTS], None, None),
        ("OK", "data", "Open it and, if it loads, say OK.", [STATUS], 1, None),
        ("Gizmo", "url", WHICHEVER, [PRODUCTS], None, None),
    ],
    ids=[
        "a-branch-after-a-read",
        "a-branch-needs-only-an-earlier-read-not-one-naming-it",
        "yes-or-no-after-a-read",
        "a-label-the-page-shows-among-alternatives",
        "a-label-a-judgement-word-chooses",
        "an-answer-a-judgement-word-chooses",
        "nothing-read-to-decide-from",
        "a-label-with-nothing-read",
        "a-label-the-page-does-not-show-though-its-rival-is-shown",
        "a-listed-rival-the-page-does-not-show",
        "no-rival-shown-for-a-judgement",
        "named-alone",
        "a-condition-without-another-branch",
        "a-url-stays-as-written",
    ],
)
def test_choice(
    value: str,
    kind: Kind,
    prompt: str,
    sources: list[Source],
    context_step: int | None,
    expected: str | None,
) -> None:
    assert choice(value, kind, sources, Context(prompt), context_step) == expected
