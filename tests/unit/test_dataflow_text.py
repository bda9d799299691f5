"""Golden cases for services.compiler.dataflow.text: the words content is made of, whole
word matching in any script, and the marks that number an answer's lines."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.text import (
    bounded,
    marks,
    mentions,
    named,
    short_word,
    tokens,
    words,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The price of a TV is 42 USD", {"the", "price", "42", "usd"}),
        ("order_id 7", {"order", "7"}),
        ("x1 ab 3", {"3"}),
        ("Straße 12", {"strasse", "12"}),
        ("東京の天気", {"東京の天気"}),
        ("東", {"東"}),
        ("서울의 날씨", {"서울의", "날씨"}),
        # Today a Thai vowel sign is no word character: the word splits, its head dropped.
        ("กรุงเทพ", {"งเทพ"}),
    ],
    ids=[
        "short-words-dropped-numbers-kept",
        "snake-case-splits-into-words",
        "a-letter-and-digit-pair-is-too-short",
        "casefolded",
        "chinese-japanese-run-is-one-token",
        "one-cjk-character-is-a-word",
        "korean-words-of-any-length",
        "thai-vowel-sign-splits-a-word",
    ],
)
def test_tokens(text: str, expected: set[str]) -> None:
    assert tokens(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("No, it's up", {"no", "it", "s", "up"}),
        ("Status: OK", {"status", "ok"}),
        ("東京の天気 ok", {"東京の天気", "ok"}),
    ],
    ids=["short-verdict-words-kept", "casefolded", "any-script"],
)
def test_words(text: str, expected: set[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("OK", True), ("No", True), ("a", True), ("42", False), ("ABC", False), ("", False)],
    ids=["ok", "no", "one-letter", "digits-are-not", "three-letters-are-not", "empty"],
)
def test_short_word(text: str, expected: bool) -> None:
    assert short_word(text) is expected


@pytest.mark.parametrize(
    ("text", "span", "expected"),
    [
        ("Tom Smith", (0, 3), True),
        ("a Tom,", (2, 5), True),
        ("x:Tom", (2, 5), True),
        ("bottom", (3, 6), False),
        ("Tommy", (0, 3), False),
    ],
    ids=[
        "word-at-start",
        "word-before-comma",
        "after-punctuation",
        "end-of-a-longer-word",
        "start-of-a-longer-word",
    ],
)
def test_bounded(text: str, span: tuple[int, int], expected: bool) -> None:
    assert bounded(text, *span) is expected


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("Search for Tom", "Tom", True),
        ("Ask Tom.", "Tom", True),
        ("tom", "Tom", True),
        ("Gizmo, Widget", "Gizmo", True),
        ("price $12", "$12", True),
        ("port :8080", "8080", True),
        ("で東京の天気", "東京", True),
        ("ค้นหาสภาพอากาศกรุงเทพที่", "กรุงเทพ", True),
        ("bottom line", "Tom", False),
        ("Tom_Smith", "Tom", False),
        ("ip 127.0.0.1", "1", False),
        ("version 1.2", "1", False),
        ("Jean-Luc Picard", "Jean", False),
        ("email ada@x.test", "ada", False),
        ("price $120", "$12", False),
        ("a", "abc", False),
        ("x", "", False),
    ],
    ids=[
        "whole-word",
        "before-a-full-stop",
        "any-case",
        "before-a-comma",
        "value-starting-with-a-symbol",
        "after-a-colon",
        "japanese-neighbours-bound-nothing",
        "thai-neighbours-bound-nothing",
        "inside-a-longer-word",
        "snake-case-joins",
        "a-dotted-address-is-one-token",
        "a-version-is-one-token",
        "a-dashed-name-is-one-token",
        "an-email-is-one-token",
        "a-longer-number",
        "longer-than-the-text",
        "empty-value",
    ],
)
def test_named(text: str, value: str, expected: bool) -> None:
    assert named(text, value) is expected


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("Parking: down", "down", True),
        ("DOWN!", "down", True),
        ("re-run", "run", True),
        ("Jean-Luc", "Jean", True),
        ("downtown", "down", False),
        ("東京の", "東京", False),
    ],
    ids=[
        "after-a-label",
        "any-case",
        "a-dash-bounds-it",
        "unlike-named-a-dashed-head-counts",
        "inside-a-longer-word",
        "unlike-named-a-japanese-neighbour-bounds-nothing",
    ],
)
def test_mentions(text: str, value: str, expected: bool) -> None:
    assert mentions(text, value) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1. Alpha\n2. Beta", [("1.", 1, True), ("2.", 2, True)]),
        ("#1 Alpha\n#2 Beta", [("#1", 1, True), ("#2", 2, True)]),
        (
            "1. A\n  1. a\n  2. b\n2. B",
            [("1.", 1, True), ("1.", 1, True), ("2.", 2, True), ("2.", 2, True)],
        ),
        ("Deals: 1) Alpha, 2) Beta", [("1)", 1, False), ("2)", 2, False)]),
        ("Top 3:\n1. Alpha", [("1.", 1, False)]),
        ("1. A\n1. B", [("1.", 1, False), ("1.", 1, False)]),
        ("Score: 1. Team", [("1.", 1, False)]),
        ("1) Alpha 2) Beta", [("1)", 1, False)]),
        ("issues: 3.", []),
        ("2. Beta", []),
        ("1.5 million", []),
        ("Step 1. Mix", []),
    ],
    ids=[
        "numbered-lines",
        "hash-numbered-lines",
        "nested-lists-count-per-indentation",
        "items-of-one-line-after-a-colon-and-comma",
        "a-one-line-list",
        "two-lists-of-one",
        "after-a-label-colon",
        "an-item-mark-needs-a-comma-before-it",
        "a-number-ending-the-line-is-a-value",
        "a-list-starts-at-one",
        "a-decimal-is-no-mark",
        "a-mark-inside-a-sentence-is-no-mark",
    ],
)
def test_marks(text: str, expected: list[tuple[str, int, bool]]) -> None:
    assert [(text[m.start : m.end], m.number, m.listed) for m in marks(text)] == expected
