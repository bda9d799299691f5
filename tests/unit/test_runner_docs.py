"""The runner README's account of trusting a replayed answer, checked against the code
it describes: the numbers it quotes and the fields of the run event it names."""

from __future__ import annotations

import re
from pathlib import Path

from contracts.runs import HealedStep, RunRequest, Verification
from services.executor.healing import HEALABLE_KEYS, MAX_HEALS_PER_RUN, PAGE_CHANGED_CODES
from services.executor.verification import DEFAULT_VERIFY_RATE, FIRST_REPLAYS_CHECKED
from services.kernel.settings import Settings
from services.runner.shadow import DEFAULT_SHADOW_RATE

README = Path(__file__).parents[2] / "services" / "runner" / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_the_numbers_quoted_are_the_codes() -> None:
    text = " ".join(section("Trusting a replayed answer").split())
    assert f"the first {FIRST_REPLAYS_CHECKED} replays of its version" in text
    assert f"`ROTE_VERIFY_RATE` (default {DEFAULT_VERIFY_RATE:g})" in text
    assert Settings.from_env({}).verify_rate == DEFAULT_VERIFY_RATE
    assert f"`ROTE_SHADOW_RATE` (default {DEFAULT_SHADOW_RATE:g})" in text
    assert Settings.from_env({}).shadow_rate == DEFAULT_SHADOW_RATE
    assert (
        "`RunRequest.budget_left_usd`" in text and "budget_left_usd" in RunRequest.__struct_fields__
    )


def test_every_field_of_the_verification_is_described() -> None:
    text = section("Trusting a replayed answer")
    named = set(re.findall(r"`(\w+)`", text))
    assert set(Verification.__struct_fields__) <= named
    for status in ("verified", "wrong", "unverified", "skipped"):
        assert status in text


def test_the_healing_section_says_what_the_code_does() -> None:
    text = " ".join(section("Healing a broken step").split())
    assert f"At most {MAX_HEALS_PER_RUN} steps heal in a run" in text
    for code in PAGE_CHANGED_CODES:
        assert f"`{code}`" in text
    for tool in HEALABLE_KEYS:
        assert f"`{tool}`" in text
    assert set(HealedStep.__struct_fields__) <= set(re.findall(r"`(\w+)`", text))
