"""A replay's answer checked before it is trusted (services/runner/verification.py and
replay.py) against scripted ports: which replays the small model checks, what a verdict
does to the run, and what the replay outcome says. No NATS."""

from __future__ import annotations

import pytest

from contracts.tools import Fingerprint
from services.executor.verification import sampled
from tests.scripted_replay import Services, active, attempt

pytestmark = pytest.mark.anyio


async def test_a_clean_replay_of_a_seasoned_version_is_delivered_unchecked() -> None:
    services = Services(active(replays=10))
    result = await attempt(services)
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert services.checks() == []
    assert result.replay is not None and result.replay.verification is not None
    assert result.replay.verification.status == "skipped"
    assert not result.replay.verification.flagged


async def test_the_first_replays_of_a_version_are_checked_and_the_check_is_paid_for() -> None:
    services = Services(active(replays=0))
    result = await attempt(services)
    assert result.outcome.ok and result.source == "executor"
    assert len(services.checks()) == 1
    check = result.replay.verification if result.replay else None
    assert check is not None
    assert (check.status, check.why, check.method, check.flagged) == (
        "verified", "new_version", "small_model", False
    )  # fmt: skip
    assert check.cost_usd == pytest.approx(0.0002)
    assert result.replay is not None and result.replay.cost_usd == pytest.approx(0.0002)


async def test_a_seasoned_version_restored_as_a_candidate_is_checked() -> None:
    # The version compiled after it failed verification; it is current again, on
    # trial: its replays are checked however many it has had, until one is verified.
    services = Services(active(replays=10, candidate=True))
    result = await attempt(services)
    assert result.outcome.ok and result.source == "executor"
    assert len(services.checks()) == 1
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.why) == ("verified", "new_version")
    # Found wrong, the answer is not delivered: the full loop answers.
    services = Services(active(replays=10, candidate=True), verdict="FAIL: last week's page.")
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    assert result.replay is not None and result.replay.verification is not None
    assert result.replay.verification.status == "wrong"


async def test_a_drifted_page_is_checked_and_a_wrong_answer_is_not_delivered() -> None:
    page = Fingerprint(lang="en", notes=["Temperatures in °C."], labels={"high": ["High"]})
    services = Services(
        active(replays=10),
        page=page,
        verdict="FAIL: the page is in °C.",
        full="The high for Lisbon: 18 °C",
    )
    result = await attempt(services)

    prompt = services.checks()[0]
    assert "Temperatures in °C." in prompt and "High: 64 °F" in prompt
    assert "a note now reads 'Temperatures in °C.'" in prompt  # the change, told
    # The full loop answered instead, after the replay was failed by its check.
    assert result.outcome.ok and result.outcome.result == "The high for Lisbon: 18 °C"
    assert result.source == "full_llm" and result.fell_back
    replay = result.replay
    assert replay is not None and not replay.ok and replay.step == 1
    assert replay.reason == "verification: FAIL: the page is in °C."
    assert replay.verification is not None and replay.verification.status == "wrong"
    assert replay.verification.flagged and replay.verification.why == "flagged"
    assert replay.verification.reasons[0] == "step 0: a note now reads 'Temperatures in °C.'"


async def test_a_flag_nothing_could_clear_is_delivered_as_unverified() -> None:
    page = Fingerprint(lang="en", notes=["Temperatures in °C."], labels={"high": ["High"]})
    services = Services(active(replays=10), page=page, verdict=None, full=None)
    result = await attempt(services)
    assert result.outcome.ok and result.source == "executor"
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.flagged) == ("unverified", True)
    assert check.reasons[-2].startswith("the check could not be made")
    # A read-only replay is then shadowed (test_replay_shadow.py); its full run needs the
    # model too, and could not clear it either.
    assert check.reasons[-1].startswith("shadow: the full run failed: ")


async def test_an_unreadable_verdict_vouches_for_nothing() -> None:
    services = Services(active(replays=0), verdict="Looks fine to me")
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    assert result.replay is not None and result.replay.verification is not None
    assert result.replay.verification.status == "wrong"


async def test_a_sample_of_clean_replays_is_checked_by_the_tasks_rate() -> None:
    services = Services(active(replays=10))
    result = await attempt(services, verify_rate=1.0)
    assert result.replay is not None and result.replay.verification is not None
    assert result.replay.verification.why == "sampled"
    assert len(services.checks()) == 1
    # The sample is decided by run id: a redelivery decides the same, and about the
    # rate's share of runs fall in it.
    share = sum(sampled(f"run-{n}", 0.05) for n in range(4000)) / 4000
    assert 0.03 < share < 0.07
    assert sampled("run-9", 0.05) == sampled("run-9", 0.05)
    assert not sampled("run-9", 0.0)


async def test_the_sample_is_left_out_when_the_days_budget_is_nearly_spent() -> None:
    # Less left than a full run of the task ($0.05) costs: no sampled check.
    services = Services(active(replays=10))
    result = await attempt(services, verify_rate=1.0, budget_left_usd=0.02)
    assert services.checks() == []
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.why) == ("skipped", "sampled")
    assert check.reasons[0].startswith("not checked: daily budget nearly spent: $0.0200")
    # A new version's first replays are checked whatever is left.
    services = Services(active(replays=0))
    result = await attempt(services, budget_left_usd=0.0)
    assert len(services.checks()) == 1
    check = result.replay.verification if result.replay else None
    assert check is not None and (check.status, check.why) == ("verified", "new_version")
