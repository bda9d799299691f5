"""The checks a replay makes after each step (services.executor.expectations)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.executors import (
    ConditionStep,
    ContainsText,
    ExitCode,
    Expectation,
    HttpStatus,
    InList,
    MinItems,
    ValueLike,
)
from contracts.tools import ToolMetadata
from services.executor.expectations import check, check_all, condition_holds, shape_of

PRODUCTS = [{"name": "Widget", "price": "$12"}, {"name": "Gizmo", "price": "$3"}]


@pytest.mark.parametrize(
    ("expectation", "output", "meta", "failure"),
    [
        (MinItems(count=2), ["a", "b", "c"], None, None),
        (MinItems(count=2), ["a"], None, "expected at least 2 items, got 1"),
        (MinItems(count=1), {"a": 1}, None, "expected a list of at least 1 items, got dict"),
        # A page read: its non-blank lines are its items.
        (MinItems(count=2), "Status\n\nWater: up\n", None, None),
        (MinItems(count=2), "Loading...\n  \n", None, "at least 2 non-blank lines, got 1"),
        (MinItems(count=1), "", None, "at least 1 non-blank lines, got 0"),
        (ContainsText(text="Gazette"), {"title": "Daily Gazette"}, None, None),
        (ContainsText(text="Gazette"), "Daily Gazette\nHome", None, None),
        (ContainsText(text="Gazette"), {"url": "x"}, ToolMetadata(title="The Gazette"), None),
        (ContainsText(text="Gazette"), "Nothing here", None, "expected the text 'Gazette'"),
        (HttpStatus(status=200), {"status": 200}, None, None),
        (HttpStatus(status=200), {"status": 200}, ToolMetadata(http_status=503), "got 503"),
        (HttpStatus(status=200), {"url": "x"}, None, "expected HTTP status 200, got None"),
        (ExitCode(code=0), {"exit_code": 0, "stdout": ""}, None, None),
        (ExitCode(code=0), {"exit_code": 2}, None, "expected exit code 0, got 2"),
    ],
)
def test_expectations(
    expectation: Expectation, output: Any, meta: ToolMetadata | None, failure: str | None
) -> None:
    reason = check(expectation, output, meta)
    if failure is None:
        assert reason is None
    else:
        assert reason is not None and failure in reason


def test_a_pick_must_be_one_of_the_items() -> None:
    outputs = {1: PRODUCTS}
    expect = [InList(ref="{{step_1}}", path=["name"])]
    assert check_all(expect, "Gizmo", None, outputs) is None
    assert check_all(expect, " Gizmo\n", None, outputs) is None  # a model's stray whitespace
    assert "not one of the 2 items" in (check_all(expect, "Gadget", None, outputs) or "")
    assert "no output from step 1" in (check_all(expect, "Gizmo", None, {}) or "")


@pytest.mark.parametrize(
    ("recorded", "shape"),
    [
        (42, "number"),
        ("1,299.00", "number"),
        ("-3.5", "number"),
        (True, "line"),  # a flag, not a number
        ("2025-06-01", "line"),
        ("https://shop.test/p/1?x=2", "url"),
        ("/p/1", "line"),  # a relative link is written as it was, not as a URL
        ("Ultra Widget 3000", "line"),
        ("Dear team,\nthe report is late.", "text"),
    ],
)
def test_a_fresh_value_is_shaped_like_the_recorded_one(recorded: Any, shape: str) -> None:
    assert shape_of(recorded).shape == shape
    assert check(shape_of(recorded), str(recorded).lower()) is None  # today's value


@pytest.mark.parametrize(
    ("expectation", "written", "failure"),
    [
        (ValueLike(shape="number", max_chars=100), " 17\n", None),
        (ValueLike(shape="number", max_chars=100), "17 items", "expected a number"),
        (ValueLike(shape="url", max_chars=100), "http://a.test/x", None),
        (ValueLike(shape="url", max_chars=100), "Open http://a.test/x", "expected an http(s) URL"),
        (ValueLike(shape="line", max_chars=100), "Blue Boots", None),
        (ValueLike(shape="line", max_chars=100), "Here it is:\nBlue Boots", "expected one line"),
        (ValueLike(shape="line", max_chars=10), "Blue Boots and more", "more than 10"),
        (ValueLike(shape="text", max_chars=100), "Two\nlines", None),
        (ValueLike(shape="text", max_chars=100), "  ", "wrote no value"),
    ],
)
def test_a_small_model_value_that_explains_instead_fails(
    expectation: ValueLike, written: str, failure: str | None
) -> None:
    reason = check(expectation, written)
    if failure is None:
        assert reason is None
    else:
        assert reason is not None and failure in reason


def test_conditions() -> None:
    gate = ConditionStep(index=2, ref="{{step_1}}")
    assert condition_holds(gate, {1: ["a"]})
    assert not condition_holds(gate, {1: []})
    assert not condition_holds(gate, {})  # the data the gate needs is not there
    contains = ConditionStep(index=2, ref="{{step_1[0]}}", check="contains", value="bridge")
    assert condition_holds(contains, {1: ["New bridge opens"]})
    equals = ConditionStep(index=2, ref="{{step_0.status}}", check="equals", value=200)
    assert condition_holds(equals, {0: {"status": 200}})
    assert not condition_holds(equals, {0: {"status": 404}})
