"""Output bounding and the pure parts of extraction."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from services.tools.bounds import bound_text, bound_value, encoded_size
from services.tools.extraction import FieldSpec, parse_field_spec, readable_text
from tests.strategies import json_values


def test_short_values_are_untouched() -> None:
    value = {"a": ["x", 1, None], "b": "y"}
    assert bound_value(value, 1000) == (value, False)
    assert bound_text("abc", 3) == ("abc", False)


def test_long_text_is_cut_and_says_so() -> None:
    text, cut = bound_text("é" * 100, 10)
    assert cut and text.startswith("é" * 10) and text.endswith("[... truncated]")


def test_long_lists_and_strings_fit_the_budget() -> None:
    big = {"items": [f"item {i} " + "x" * 500 for i in range(5000)], "title": "t"}
    bounded, cut = bound_value(big, 64 * 1024)
    assert cut
    assert encoded_size(bounded) <= 64 * 1024
    assert bounded["title"] == "t"
    assert bounded["items"][0].startswith("item 0 ")


@given(json_values, st.integers(min_value=200, max_value=5000))
def test_bounded_values_fit_and_stay_json(value: object, limit: int) -> None:
    bounded, cut = bound_value(value, limit)
    assert msgspec.json.decode(msgspec.json.encode(bounded)) == bounded
    if not cut:
        assert bounded == value
    else:
        assert encoded_size(bounded) <= limit or encoded_size(value) > limit


def test_field_specs() -> None:
    assert parse_field_spec(".name") == FieldSpec(css=".name", attr=None)
    assert parse_field_spec("@href") == FieldSpec(css=None, attr="href")
    assert parse_field_spec("a.link@href") == FieldSpec(css="a.link", attr="href")
    assert parse_field_spec("img @data-src") == FieldSpec(css="img", attr="data-src")
    # An "@" inside an attribute selector's value is CSS, not an attribute spec.
    assert parse_field_spec('a[href*="@"]') == FieldSpec(css='a[href*="@"]', attr=None)
    assert parse_field_spec('a[href^="mailto:x@y"]@href') == FieldSpec(
        css='a[href^="mailto:x@y"]', attr="href"
    )


def test_readable_text_collapses_whitespace() -> None:
    raw = "  Title \n\n\n\n  a\t\t b\u00a0 c  \n\n\nend  "
    assert readable_text(raw) == "Title\n\na b c\n\nend"
