"""Golden cases for services.compiler.dataflow.picks: whether items picked out of a list
follow a rule (`judge_lists`), and what that does to the values that use them
(`apply_verdicts`, `pick_container`)."""

from __future__ import annotations

from typing import Any

import pytest

from services.compiler.dataflow.picks import (
    Container,
    ListVerdict,
    apply_verdicts,
    judge_lists,
    list_position,
    needs_pick,
    pick_container,
)
from services.compiler.dataflow.sources import Pointer, Provenance, Template
from services.executor.references import Path
from tests.unit.dataflow_show import show

PRODUCTS = [
    {"name": "Widget", "price": "$12.00"},
    {"name": "Gadget", "price": "$8.50"},
    {"name": "Gizmo", "price": "$3.50"},
]

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


def test_a_list_chosen_from_by_named_options_is_a_pick_without_a_judgement_word() -> None:
    uses = [Pointer(1, (2, "name"))]
    plain = judge_lists(uses, {1: PRODUCTS}, "click the last product", {})[(1, ())]
    assert plain.ok and plain.last  # the last item, by position
    chosen = judge_lists(uses, {1: PRODUCTS}, "click Widget or Gizmo", {}, {(1, ())})[(1, ())]
    assert (chosen.ok, chosen.pick) == (False, 2)


def test_an_item_the_prompt_names_is_a_pick_wherever_it_stands() -> None:
    # "The price of the Gizmo": last today, elsewhere tomorrow. Not by position.
    uses = [Pointer(1, (2, "price"))]
    named = judge_lists(uses, {1: PRODUCTS}, "report the price of the Gizmo", {})[(1, ())]
    assert (named.ok, named.pick) == (False, 2) and "'Gizmo'" in named.why
    # First or last alike; several named items are written by the small model.
    first = judge_lists([Pointer(1, (0, "price"))], {1: PRODUCTS}, "price of Widget?", {})
    assert first[(1, ())].pick == 0 and not first[(1, ())].ok
    both = [Pointer(1, (0, "price")), Pointer(1, (1, "price"))]
    pair = judge_lists(both, {1: PRODUCTS}, "prices of Widget and Gadget", {})[(1, ())]
    assert (pair.ok, pair.pick) == (False, None)


def _uses(*paths: Path) -> list[Pointer]:
    return [Pointer(1, path) for path in paths]


@pytest.mark.parametrize(
    ("uses", "output", "prompt", "limit", "chosen", "expected"),
    [
        (
            _uses((0,)),
            ITEMS,
            "open the top story",
            None,
            False,
            ListVerdict(True, "the first item"),
        ),
        (
            _uses((4,)),
            ITEMS,
            "open the last story",
            None,
            False,
            ListVerdict(True, "the last item", last=True, size=5),
        ),
        (
            _uses((2,)),
            ITEMS,
            "open the third story",
            None,
            False,
            ListVerdict(True, "item 3, named by the task"),
        ),
        (
            _uses((0,), (1,), (2,)),
            ITEMS,
            "report the top 3",
            None,
            False,
            ListVerdict(True, "the first 3 items"),
        ),
        (
            _uses((0,), (1,), (2,)),
            ITEMS[:3],
            "report the three stories",
            None,
            False,
            ListVerdict(True, "the first 3 items"),
        ),
        (
            _uses(*((i,) for i in range(5))),
            ITEMS,
            "report them",
            5,
            False,
            ListVerdict(True, "the first 5 items"),
        ),
        (
            _uses((0, "name")),
            [{"name": "x"}],
            "pick the cheapest",
            None,
            False,
            ListVerdict(True),
        ),
        (
            _uses((2,)),
            ITEMS,
            "open a story",
            None,
            False,
            ListVerdict(False, "item 3 of 5, a position no rule explains", pick=2, size=5),
        ),
        (
            _uses((1, "name"), (1, "price")),
            PRODUCTS,
            "open a product",
            None,
            False,
            ListVerdict(False, "item 2 of 3, a position no rule explains", pick=1, size=3),
        ),
        (
            _uses((1, "name")),
            [{"name": n, "shop": "Acme"} for n in ("Widget", "Gadget", "Gizmo")],
            "report the name of an Acme product",
            None,
            False,
            ListVerdict(False, "item 2 of 3, a position no rule explains", pick=1, size=3),
        ),
        (
            _uses((0,)),
            ITEMS,
            "open the cheapest product",
            None,
            False,
            ListVerdict(
                False,
                "picked from a list for a task that asks for a judgement ('cheapest')",
                pick=0,
                size=5,
            ),
        ),
        (
            _uses((2, "name")),
            PRODUCTS,
            "click Widget or Gizmo",
            None,
            True,
            ListVerdict(False, "picked from a list among options the task names", pick=2, size=3),
        ),
        (
            _uses((2, "price")),
            PRODUCTS,
            "report the price of the Gizmo",
            None,
            False,
            ListVerdict(
                False,
                "the item the task names ('Gizmo'), wherever it stands",
                pick=2,
                size=3,
                named="Gizmo",
            ),
        ),
        (
            _uses(*((i,) for i in range(5))),
            ITEMS,
            "report all stories",
            None,
            False,
            ListVerdict(False, "uses all 5 items of a list whose length may change"),
        ),
        (
            _uses((2,), (0,), (1,)),
            ITEMS,
            "report the top 3",
            None,
            False,
            ListVerdict(False, "picks items [3, 1, 2] in an order no rule explains"),
        ),
        (
            _uses((4,), (3,), (2,)),
            ITEMS,
            "report the 3 newest",
            None,
            False,
            ListVerdict(True, "the last 3 items, from the end", last=True, size=5),
        ),
    ],
    ids=[
        "the-first",
        "the-last-is-read-as-minus-one",
        "an-ordinal-the-task-names",
        "top-k-in-order",
        "all-items-the-task-counts-in-words",
        "all-items-of-a-list-whose-length-the-extract-limits",
        "a-one-item-list-whatever-the-task-asks",
        "a-middle-item-is-a-pick",
        "two-fields-of-one-middle-item-are-one-pick",
        "a-text-every-item-holds-names-no-item",
        "a-judgement-even-at-the-top",
        "among-options-the-task-names",
        "the-item-the-task-names",
        "every-item-of-a-list-that-may-grow",
        "reordered-items",
        "the-top-k-of-a-list-shown-the-other-way-round",
    ],
)
def test_judge_lists(
    uses: list[Pointer],
    output: Any,
    prompt: str,
    limit: int | None,
    chosen: bool,
    expected: ListVerdict,
) -> None:
    found = judge_lists(uses, {1: output}, prompt, {1: limit}, {(1, ())} if chosen else ())
    assert found == {(1, ()): expected}


def test_lists_are_judged_where_they_stand_in_the_output() -> None:
    found = judge_lists(_uses(("items", 1, "name")), {1: {"items": PRODUCTS}}, "open one", {})
    assert list(found) == [(1, ("items",))]
    assert judge_lists(_uses(("title",)), {1: {"title": "x"}}, "open it", {}) == {}
    missing = judge_lists(_uses((0,)), {}, "open it", {})
    assert missing == {(1, ()): ListVerdict(False, "the list is not in the output")}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ((0, "name"), ((), 0)),
        (("items", 2, "href"), (("items",), 2)),
        (("a", 1, "b", 2), (("a",), 1)),
        (("title",), None),
        ((), None),
    ],
    ids=["an-item-s-field", "a-list-inside-an-object", "the-outer-list", "no-list", "empty"],
)
def test_list_position(path: Path, expected: tuple[Path, int] | None) -> None:
    assert list_position(path) == expected


VERDICTS: dict[Container, ListVerdict] = {
    (1, ()): ListVerdict(True, "the last item", last=True, size=5),
    (4, ()): ListVerdict(True, "the last 2 items, from the end", last=True, size=5),
    (2, ()): ListVerdict(False, "item 2 of 3, a position no rule explains", pick=1, size=3),
    (3, ()): ListVerdict(False, "picks items [3, 1] in an order no rule explains"),
}


@pytest.mark.parametrize(
    ("template", "expected", "pick"),
    [
        (
            Template(("Last: ", Pointer(1, (4, "name")), " at ", Pointer(1, (4, "price")))),
            ("template", "Last: {1[-1].name} at {1[-1].price}"),
            False,
        ),
        (Template((Pointer(2, (1, "href")),)), ("template", "{2[1].href}"), True),
        (
            Template(("A: ", Pointer(3, (2,)), ", B: ", Pointer(3, (0,)))),
            ("judgement", "picks items [3, 1] in an order no rule explains"),
            False,
        ),
        (Template(("T: ", Pointer(4, ("title",)))), ("template", "T: {4.title}"), False),
        (
            Template(("1. ", Pointer(4, (4,)), " 2. ", Pointer(4, (3,)))),
            ("template", "1. {4[-1]} 2. {4[-2]}"),
            False,
        ),
    ],
    ids=[
        "the-last-item-is-rewritten-to-minus-one",
        "a-pick-stays-a-template-through-its-pick-step",
        "picks-no-rule-explains-make-a-judgement",
        "a-field-of-no-list-is-untouched",
        "the-last-k-are-counted-from-the-end",
    ],
)
def test_apply_verdicts(template: Template, expected: tuple[str, str], pick: bool) -> None:
    steps = tuple(sorted({p.step for p in template.pointers}))
    prov = apply_verdicts(Provenance("template", "built", template, steps), VERDICTS)
    assert (prov.kind, show(prov.template) or prov.why) == expected
    assert prov.sources == steps
    assert needs_pick(Provenance("template", "built", template, steps), VERDICTS) is pick


def test_a_pick_s_container_and_the_field_inside_the_item() -> None:
    assert pick_container(Pointer(2, (1, "href")), VERDICTS) == ((2, ()), ("href",))
    assert pick_container(Pointer(2, (1,)), VERDICTS) == ((2, ()), ())
    assert pick_container(Pointer(1, (4, "name")), VERDICTS) is None  # a rule
    assert pick_container(Pointer(5, (0,)), VERDICTS) is None  # no verdict on that list
