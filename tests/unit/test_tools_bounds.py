"""Output bounding and the pure parts of extraction."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.tools import ToolMetadata
from services.kernel.secrets import MASK, register_secret
from services.kernel.text import TRUNCATION_MARK, cut_text
from services.tools.bounds import (
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    _cut,
    _cut_key,
    bound_metadata,
    bound_value,
    encoded_size,
)
from services.tools.extraction import FieldSpec, parse_field_spec, readable_text
from services.tools.outcome import ToolFailure
from services.tools.toolbox import ToolBox, ToolsConfig, event_input
from tests.strategies import json_values


def test_short_values_are_untouched() -> None:
    value = {"a": ["x", 1, None], "b": "y"}
    assert bound_value(value, 1000) == (value, False)
    assert cut_text("abc", 3, mark=TRUNCATION_MARK, mark_after_limit=True) == "abc"


def test_long_text_is_cut_and_says_so() -> None:
    text = cut_text("é" * 100, 10, mark=TRUNCATION_MARK, mark_after_limit=True)
    assert text == "é" * 10 + "\n[... truncated]"


@pytest.mark.parametrize("extra", [0, 1, len(TRUNCATION_MARK), len(TRUNCATION_MARK) + 1])
def test_a_string_or_key_over_the_limit_keeps_the_limit_then_the_mark(extra: int) -> None:
    text = "x" * (100 + extra)
    want = (text, False) if extra == 0 else ("x" * 100 + TRUNCATION_MARK, True)
    assert _cut(text, 100, 10) == want
    assert _cut_key(text, 100, {}) == want


def test_long_lists_and_strings_fit_the_budget() -> None:
    big = {"items": [f"item {i} " + "x" * 500 for i in range(5000)], "title": "t"}
    bounded, cut = bound_value(big, 64 * 1024)
    assert cut
    assert encoded_size(bounded) <= 64 * 1024
    assert bounded["title"] == "t"
    assert bounded["items"][0].startswith("item 0 ")


def test_long_keys_are_cut_too() -> None:
    fields = {"K" * 300_000: "a", "L" * 300_000: "b"}
    bounded, cut = bound_value({"fields": fields, "selector": "li"}, 64 * 1024)
    assert cut and encoded_size(bounded) <= 64 * 1024
    assert bounded["selector"] == "li"
    assert [k[:1] for k in bounded["fields"]] == ["K", "L"]
    assert all(k.endswith("[... truncated]") for k in bounded["fields"])
    # The tools service's event input (services/tools/toolbox.py) relies on this.
    recorded, recorded_cut = event_input({"fields": fields}, 64 * 1024)
    assert recorded_cut and encoded_size(recorded) <= 64 * 1024


def test_keys_cut_to_the_same_prefix_stay_distinct() -> None:
    value = {"x" * 1000 + str(i): i for i in range(3)}
    bounded, cut = bound_value(value, 600)
    assert cut and encoded_size(bounded) <= 600
    assert len(bounded) == 3 and sorted(bounded.values()) == [0, 1, 2]


def test_many_keys_lose_their_tail_like_a_list() -> None:
    value = {f"k{i}": i for i in range(100_000)}
    bounded, cut = bound_value(value, 4096)
    assert cut and encoded_size(bounded) <= 4096
    assert list(bounded)[:2] == ["k0", "k1"]


def test_what_cannot_be_cut_down_becomes_a_placeholder() -> None:
    deep: object = "x"
    for _ in range(500):
        deep = {"k": deep}
    bounded, cut = bound_value(deep, 1000)
    assert cut and bounded == {"truncated": True, "bytes": encoded_size(deep)}
    assert bound_value(deep, 10) == (None, True)  # not even the marker fits


# Values with long strings and keys, where the bound has to cut keys as well.
_long_text = st.text(max_size=3000)
_wide_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _long_text,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_long_text, inner, max_size=6),
    max_leaves=20,
)


@given(json_values | _wide_json, st.integers(min_value=4, max_value=5000))
def test_bounded_values_fit_and_stay_json(value: object, limit: int) -> None:
    bounded, cut = bound_value(value, limit)
    assert msgspec.json.decode(msgspec.json.encode(bounded)) == bounded
    # The bound always holds, whatever the value: strings, keys, items, depth.
    assert encoded_size(bounded) <= limit
    if not cut:
        assert bounded == value


def test_page_chosen_metadata_is_cut_to_a_readable_size() -> None:
    small = ToolMetadata(url="http://x.test/", title="Shop", http_status=200)
    assert bound_metadata(small) is small
    huge = ToolMetadata(url="http://x.test/?" + "q" * 2_000_000, title="T" * 1_100_000)
    bounded = bound_metadata(huge)
    assert bounded.url is not None and bounded.title is not None
    assert len(bounded.url) == MAX_URL_CHARS and bounded.url.startswith("http://x.test/?qq")
    assert len(bounded.title) == MAX_TITLE_CHARS and bounded.title.endswith("\u2026")


def test_lone_surrogates_from_a_page_become_replacement_characters() -> None:
    # A script that cuts an emoji in half (`text.slice(0, n)`) leaves a lone UTF-16
    # surrogate in the page's text; Playwright hands it over as is, and UTF-8 (JSON,
    # NATS) cannot carry it.
    value = {"items": ["price \ud83d", {"k\udc00": "v"}], "n": 1}
    assert bound_value(value, 1000) == (
        {"items": ["price \ufffd", {"k\ufffd": "v"}], "n": 1},
        False,
    )
    bounded, cut = bound_value({"text": "\ud83d" * 10_000}, 1000)
    assert cut and encoded_size(bounded) <= 1000 and bounded["text"].startswith("\ufffd")
    metadata = bound_metadata(ToolMetadata(url="http://x.test/", title="Deals \ud83d"))
    assert metadata.title == "Deals \ufffd"


def test_a_password_is_masked_before_a_cut_could_split_it() -> None:
    # Cut inside its userinfo, the password would no longer look like one to redact().
    url = "http://user:" + "p" * 50 + "@x.test/"
    cut = cut_text(url, 30)
    assert "ppp" not in cut and cut.startswith(f"http://user:{MASK}")
    assert len(cut) <= 30


def test_a_secret_in_an_output_is_masked_before_the_output_is_cut() -> None:
    secret = "s3cr3t-" + "k" * 40
    register_secret(secret)
    page = "x" * 90 + secret + "y" * 100
    # The cut falls inside the secret.
    text = cut_text(page, 100, mark=TRUNCATION_MARK, mark_after_limit=True)
    assert text.endswith(TRUNCATION_MARK)
    assert "s3cr3t" not in text and text.startswith("x" * 90 + MASK)
    bounded, cut = bound_value({"text": page}, 160)
    assert cut and "s3cr3t" not in bounded["text"]


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


def test_a_failure_message_quoting_page_text_can_be_sent(tmp_path: Path) -> None:
    # Playwright's messages may quote the page (an element's markup), lone surrogates
    # included: the failed call's reply must still encode.
    box = ToolBox(ToolsConfig(data_dir=tmp_path), None)
    failed = box._failed(ToolFailure("element_not_actionable", "<b>Deals \ud83d</b>"), 0.0)
    assert failed.error is not None and failed.error.message == "<b>Deals \ufffd</b>"
    msgspec.json.encode(failed)
