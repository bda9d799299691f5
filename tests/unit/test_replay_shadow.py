"""The second tier of trusting a replayed answer (services/runner/shadow.py): a shadow
full run for sampled, and unverified flagged, replays of read-only executors, against
scripted ports. Which replays are shadowed, what the comparison decides, and what the
run then delivers. No NATS."""

from __future__ import annotations

import pytest

from contracts.tools import Fingerprint
from services.executor.verification import (
    COMPARISON_HEAD,
    comparison_prompt,
    read_comparison,
    sampled,
)
from services.runner.shadow import read_only, shadow_due
from tests.scripted_replay import COST, Services, active, attempt

pytestmark = pytest.mark.anyio


async def test_a_sampled_read_only_replay_is_verified_by_a_shadow_that_agrees() -> None:
    services = Services(active())
    result = await attempt(services, shadow_rate=1.0)
    # The replay's answer is delivered; the shadow's loop is paid for by the run.
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert result.source == "executor" and not result.fell_back
    assert len(services.loops()) == 1
    assert result.ledger.cost_usd == pytest.approx(COST)
    assert result.loop_cost_usd is None
    check = result.replay.verification if result.replay else None
    assert check is not None
    assert (check.status, check.why, check.method) == ("verified", "shadow", "shadow")
    assert check.reasons[-1] == "shadow: the full run gave the same answer"
    assert check.cost_usd == pytest.approx(COST)
    assert result.replay is not None and result.replay.cost_usd == pytest.approx(COST)
    # In a fresh session, offered no tool that acts; nothing said the replay failed.
    assert services.closed == 1
    assert services.offered == [["browser_navigate", "browser_extract"]]
    assert services.published == []


async def test_answers_the_small_model_calls_the_same_verify_the_replay() -> None:
    services = Services(active(), full="Lisbon's high today is 64 °F.", compared="SAME: 64 °F.")
    result = await attempt(services, shadow_rate=1.0)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.method) == ("verified", "shadow")
    assert result.ledger.cost_usd == pytest.approx(2 * COST)  # the loop and the comparison


async def test_a_shadow_that_answers_otherwise_overrules_the_replay() -> None:
    services = Services(active(), full="The high for Lisbon: 18 °C")
    result = await attempt(services, shadow_rate=1.0)
    # The full run is the authority: its answer is the run's, as after a fallback.
    assert result.outcome.ok and result.outcome.result == "The high for Lisbon: 18 °C"
    assert result.source == "full_llm" and result.fell_back
    assert result.loop_cost_usd is not None and result.loop_cost_usd > 0
    replay = result.replay
    assert replay is not None and not replay.ok and replay.step == 1
    assert replay.reason == "verification: the full run answered otherwise: 18 °C is not 64 °F."
    assert replay.verification is not None
    assert (replay.verification.status, replay.verification.method) == ("wrong", "shadow")
    # Said once, as a fallback says it: the executor's health and a redelivery hear it.
    assert [e.event for e in services.published] == ["replay_failed"]
    assert services.published[0].replay == replay
    assert services.closed == 1


async def test_an_unclear_comparison_is_a_different_answer() -> None:
    services = Services(active(), full="18 °C", compared="Hard to say.")
    result = await attempt(services, shadow_rate=1.0)
    assert result.source == "full_llm" and result.outcome.result == "18 °C"


async def test_an_executor_that_acts_is_never_shadowed() -> None:
    services = Services(active(click=True))
    assert not read_only(services.executor.executor)  # type: ignore[arg-type]
    result = await attempt(services, shadow_rate=1.0)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    assert services.loops() == [] and services.closed == 0
    check = result.replay.verification if result.replay else None
    assert check is not None and check.status == "skipped" and check.method is None


async def test_a_shadow_whose_loop_fails_leaves_the_replays_answer() -> None:
    services = Services(active(), full=None)
    result = await attempt(services, shadow_rate=1.0)
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert result.source == "executor" and not result.fell_back
    check = result.replay.verification if result.replay else None
    assert check is not None and check.status == "skipped" and check.method is None
    assert check.reasons[-1].startswith("shadow: the full run failed: ")
    assert services.published == []


async def test_a_flag_the_small_model_could_not_clear_is_shadowed() -> None:
    page = Fingerprint(lang="en", notes=["Temperatures in °C."], labels={"high": ["High"]})
    services = Services(active(), page=page, verdict=None)
    result = await attempt(services, shadow_rate=0.0)  # not in the sample: flagged
    assert len(services.loops()) == 1
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    check = result.replay.verification if result.replay else None
    assert check is not None
    assert (check.status, check.flagged, check.why, check.method) == (
        "verified", True, "flagged", "shadow"
    )  # fmt: skip
    assert check.reasons[-2].startswith("the check could not be made")


async def test_the_shadow_sample_is_its_own() -> None:
    # Decided by run id, apart from the small model's sample.
    executor = active().executor
    assert executor is not None
    runs = [f"run-{n}" for n in range(4000)]
    shadowed = {run for run in runs if shadow_due(executor, None, run, 0.05)}
    checked = {run for run in runs if sampled(run, 0.05)}
    assert 0.03 < len(shadowed) / 4000 < 0.07
    assert len(shadowed & checked) < 40  # about 0.25% of runs fall in both
    assert not shadow_due(executor, None, "run-1", 0.0)


def test_the_comparison_is_read_strictly() -> None:
    prompt = comparison_prompt("Report the high", "High: 64 °F", "64 °F")
    assert prompt.startswith(COMPARISON_HEAD) and "<full_answer>\n64 °F\n" in prompt
    assert read_comparison("SAME: both say 64 °F.", "").ok
    assert read_comparison("**Verdict:** SAME - both 64 °F", "").ok
    assert not read_comparison("DIFFERENT: °C against °F.", "").ok
    assert not read_comparison("They look alike.", "").ok
    assert not read_comparison("SAME: or DIFFERENT, hard to tell.", "").ok
    # A verdict word in the answers is their content, not a second verdict.
    assert read_comparison("SAME: both say DIFFERENT colours.", "DIFFERENT colours").ok


async def test_no_shadow_runs_when_the_days_budget_has_less_left_than_a_full_run() -> None:
    # A full run of the task costs $0.05 (its health says): $0.04 left is not enough.
    services = Services(active())
    result = await attempt(services, shadow_rate=1.0, budget_left_usd=0.04)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    assert services.loops() == [] and services.closed == 0
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.method) == ("skipped", None)
    assert check.reasons == [
        "no shadow run: daily budget nearly spent: $0.0400 was left when the run went out,"
        " a full run costs $0.0500"
    ]
    # With room for one, the sample is shadowed as ever.
    services = Services(active())
    result = await attempt(services, shadow_rate=1.0, budget_left_usd=0.06)
    assert len(services.loops()) == 1


async def test_a_flag_is_still_checked_by_the_small_model_when_the_budget_is_short() -> None:
    # The check the risk calls for costs one small-model call: it is made; the shadow
    # that would clear an unclear one is not.
    page = Fingerprint(lang="en", notes=["Temperatures in °C."], labels={"high": ["High"]})
    services = Services(active(), page=page, verdict=None)
    result = await attempt(services, shadow_rate=0.0, budget_left_usd=0.01)
    assert services.loops() == []
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.flagged) == ("unverified", True)
    assert check.reasons[-2].startswith("the check could not be made")
    assert check.reasons[-1].startswith("no shadow run: daily budget nearly spent")
