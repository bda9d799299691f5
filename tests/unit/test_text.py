"""Cutting text to fit (services/kernel/text.py): characters or JSON bytes, a mark when
something was cut, and secrets masked before the cut."""

from __future__ import annotations

from services.kernel.secrets import MASK, register_secret
from services.kernel.text import ELLIPSIS, TRUNCATION_MARK, cut_text, json_size


def test_a_text_that_fits_is_returned_as_it_is() -> None:
    assert cut_text("short", 5) == "short"
    assert cut_text("short", 100, mark=TRUNCATION_MARK) == "short"


def test_a_cut_text_fits_its_limit_with_its_mark() -> None:
    assert cut_text("abcdefghij", 5) == "abcd" + ELLIPSIS
    cut = cut_text("x" * 100, 40, mark=TRUNCATION_MARK)
    assert cut == "x" * (40 - len(TRUNCATION_MARK)) + TRUNCATION_MARK
    # No room for the mark: the head alone, still within the limit.
    assert cut_text("x" * 100, 4, mark=TRUNCATION_MARK) == "xxxx"


def test_with_the_mark_after_the_limit_a_text_over_it_keeps_limit_characters() -> None:
    # A tool's output: cut as soon as it is over the limit, `limit` of it kept.
    def cut(n: int) -> str:
        return cut_text("x" * n, 40, mark=TRUNCATION_MARK, mark_after_limit=True)

    assert cut(40) == "x" * 40
    assert cut(41) == "x" * 40 + TRUNCATION_MARK
    assert cut(40 + len(TRUNCATION_MARK)) == "x" * 40 + TRUNCATION_MARK
    assert cut(41 + len(TRUNCATION_MARK)) == "x" * 40 + TRUNCATION_MARK
    # However small the limit, the mark is shown.
    assert cut_text("x" * 10, 4, mark=TRUNCATION_MARK, mark_after_limit=True) == (
        "xxxx" + TRUNCATION_MARK
    )
    # Any measure: the head alone fits it.
    text = "é\n" * 100
    head = cut_text(text, 11, mark=TRUNCATION_MARK, size=json_size, mark_after_limit=True)
    assert head.endswith(TRUNCATION_MARK) and json_size(head.removesuffix(TRUNCATION_MARK)) <= 11
    assert json_size(text[: len(head) - len(TRUNCATION_MARK) + 1]) > 11


def test_an_answers_head_is_the_longest_prefix_that_fits_as_json() -> None:
    # Escapes (a newline takes 2 bytes, a control character 6) and multi-byte
    # characters make a byte budget fewer characters.
    text = "é\n\x01ab" * 1000
    for budget in (2, 3, 7, 100, 4097):
        head = cut_text(text, budget, mark="", size=json_size)
        assert text.startswith(head) and json_size(head) <= budget
        assert json_size(text[: len(head) + 1]) > budget  # one more would not fit
    assert cut_text("short", 100, mark="", size=json_size) == "short"


def test_a_secret_straddling_the_cut_is_masked_whole() -> None:
    secret = "hunter2-" + "q" * 30
    register_secret(secret)
    text = "a" * 20 + secret + "b" * 50
    cut = cut_text(text, 30)
    assert "hunter2" not in cut and cut.startswith("a" * 20 + MASK[:9])
    assert len(cut) <= 30
