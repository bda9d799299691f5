"""How the small model's quality-check verdict on a replayed answer is read: the first
word decides, however it is dressed; a reply that says both, or neither, vouches for
nothing and fails the replay (the run falls back to a full run)."""

from __future__ import annotations

import pytest

from services.runner.quality import Verdict, parse_verdict


@pytest.mark.parametrize(
    ("said", "verdict"),
    [
        ("PASSED: same form", Verdict(True, "same form")),
        ("FAILED: the items are placeholders", Verdict(False, "the items are placeholders")),
        ("Verdict: PASS - same form", Verdict(True, "same form")),
        ("verdict: fail — the list is empty", Verdict(False, "the list is empty")),
        ("**Verdict:** **PASS** the same list", Verdict(True, "the same list")),
        ("**PASSED**", Verdict(True, "pass")),
        ("`FAIL`: one line only", Verdict(False, "one line only")),
        ("PASS: no item failed to load", Verdict(True, "no item failed to load")),
    ],
)
def test_a_verdict_word_first_decides_however_it_is_dressed(said: str, verdict: Verdict) -> None:
    assert parse_verdict(said) == verdict


@pytest.mark.parametrize(
    "said",
    [
        "PASS: but it has placeholder values, so FAIL",
        "FAIL — wait, actually PASS",
        "PASS/FAIL: PASS",
    ],
)
def test_a_reply_that_gives_both_verdicts_fails(said: str) -> None:
    verdict = parse_verdict(said)
    assert not verdict.ok and "contradictory verdict" in verdict.reason


@pytest.mark.parametrize(
    "said",
    ["The answer passes. PASS: ok", "PASSING grade", "Verdict pending", "", "PASSABLE"],
)
def test_a_reply_without_a_verdict_first_fails(said: str) -> None:
    verdict = parse_verdict(said)
    assert not verdict.ok and "unreadable verdict" in verdict.reason
