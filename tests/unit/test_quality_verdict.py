"""How the small model's quality-check verdict on a replayed answer is read: the first
word decides, however it is dressed; a reply that says both, or neither, vouches for
nothing and fails the replay (the run falls back to a full run)."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from contracts.executors import ResultStep
from contracts.llm import CompleteReply, CompleteRequest
from contracts.tasks import TaskSpec
from services.executor.quality import Verdict, parse_verdict
from services.runner.replay import Replayer
from tests.hand_built_replay import hand_built_executor, offline_scope, small_model_reply


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
        ("## Verdict\n\nPASS: the same list", Verdict(True, "the same list")),
        ("Verdict - FAIL: empty", Verdict(False, "empty")),
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


@pytest.mark.parametrize(
    ("said", "ok"),
    [
        ("PASS: the same per-check list, each marked PASS or FAIL as before", True),
        ("FAIL: every check now shows PASS with no duration", False),
    ],
)
def test_a_verdict_word_the_answers_hold_is_their_content_not_a_second_verdict(
    said: str, ok: bool
) -> None:
    """An ops check reports PASS/FAIL per check: a reason that describes that form
    names both words, and the first still decides (else every replay fell back)."""
    answers = "db: PASS (12 ms)\nqueue: FAIL (timeout)"
    verdict = parse_verdict(said, content=answers)
    assert verdict.ok is ok and "contradictory" not in verdict.reason
    # Where the answers do not hold the other word, saying both still fails.
    assert "contradictory" in parse_verdict("PASS: but placeholders, so FAIL", content="").reason


def test_the_replay_reads_the_verdict_against_the_answers_it_compared() -> None:
    """Through the replay: a passing verdict on an ops-check answer that quotes its
    PASS/FAIL form keeps the replayed answer."""
    said: list[str] = []

    async def complete(request: CompleteRequest) -> CompleteReply:
        said.append(request.purpose)
        if request.purpose == "quality_check":
            return small_model_reply("PASS: same list of checks, each PASS or FAIL")
        return small_model_reply("db: PASS (9 ms)\nqueue: FAIL (timeout)")

    step = ResultStep(
        index=0, mode="llm", prompt="Write it", example="db: FAIL (timeout)\nqueue: PASS (3 ms)"
    )
    scope = offline_scope()
    scope = dataclasses.replace(
        scope,
        spec=TaskSpec(name="t", prompt="Run the checks", quality_check=True),
        ports=dataclasses.replace(scope.ports, complete=complete),
    )
    result = anyio.run(Replayer(hand_built_executor("t", [step]), scope, backoff_s=0.0).run)
    assert result.ok, result.reason
    assert said == ["replay_step", "quality_check"]
