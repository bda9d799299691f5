"""Golden cases for services.compiler.dataflow.prompt: what the task prompt asks."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.prompt import asks_verdict, judgement_word, numbers, ordinals


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Alert me if any service is down", "alert"),
        ("Is the shop open today?", "?"),
        ("Check the status page", "check"),
        ("Run `df -h /` and tell me whether the disk is full", "whether"),
        ("Make sure the backup ran", "make sure"),
        ("Let me know when the parcel ships", "when"),
        ("Report the top 3 headlines from http://news.test/", None),
        ("Open http://x.test/?q=1 and report the first result", None),
        ('Type "Is the pool open on Sunday?" into the chat and send it', None),
        ("Run `test -f x && echo if` and report", None),
        ("Search for \u201cwhen\u201d and report", None),
    ],
    ids=[
        "a-condition-to-alert-on",
        "a-question",
        "a-check",
        "whether-after-a-quoted-command",
        "make-sure",
        "when",
        "a-report-asks-no-verdict",
        "a-question-mark-in-a-url",
        "a-quoted-message-to-type",
        "an-if-inside-a-quoted-command",
        "a-word-in-curly-quotes",
    ],
)
def test_asks_verdict(prompt: str, expected: str | None) -> None:
    assert asks_verdict(prompt) == expected


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Open the cheapest product", "cheapest"),
        ("Find the most relevant article", "most relevant"),
        ("Show the top-rated restaurant", "top-rated"),
        ("Pick one of the offers", "pick"),
        ("Recommended reading", "recommended"),
        ("Compare the two plans", "compare"),
        ("Open the best-selling book", "best"),
        ("Report the top 3 headlines", None),
    ],
    ids=[
        "cheapest",
        "most-relevant",
        "top-rated",
        "pick",
        "recommend-any-ending",
        "compare",
        "best-inside-a-compound-still-counts",
        "top-k-is-a-position-not-a-judgement",
    ],
)
def test_judgement_word(prompt: str, expected: str | None) -> None:
    assert judgement_word(prompt) == expected


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Open the third story", {3}),
        ("Open the 2nd and the #4", {2, 4}),
        ("Open item 5", {5}),
        ("Result 3 please", {3}),
        ("Open the first and the last", {1}),
        ("22nd street", {22}),
        ("Install version 2", set()),
    ],
    ids=[
        "an-ordinal-word",
        "a-suffix-and-a-hash",
        "item-n",
        "result-n",
        "last-is-no-ordinal",
        "an-ordinal-in-an-address-counts-too",
        "a-version-is-no-position",
    ],
)
def test_ordinals(prompt: str, expected: set[int]) -> None:
    assert ordinals(prompt) == expected


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Top 3 headlines", {3}),
        ("the three latest posts", {3}),
        ("top ten of 2024", {10, 2024}),
        ("Open http://x.test:8080/", {8080}),
        ("order 1234567", set()),
        ("someone said so", set()),
    ],
    ids=[
        "digits",
        "a-number-word",
        "words-and-digits",
        "a-port-in-a-url-counts",
        "seven-digits-is-an-id-not-a-count",
        "a-number-word-inside-a-word",
    ],
)
def test_numbers(prompt: str, expected: set[int]) -> None:
    assert numbers(prompt) == expected
