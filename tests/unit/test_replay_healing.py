"""Healing a replayed step in place (services/runner/healing.py), against scripted ports: a
page whose layout changed under a recorded read or click, the candidates it offers, and
the small model's pick. What heals, what is refused, what falls back. No NATS."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from contracts.executors import ActiveExecutor, ExecutorHealth, ResultStep, ToolStep
from contracts.runs import HealedStep
from contracts.tools import (
    Candidate,
    Candidates,
    ErrorInfo,
    ExecTool,
    Fingerprint,
    Target,
    ToolMetadata,
    ToolResult,
)
from services.executor.healing import (
    HEAL_HEAD,
    MAX_HEALS_PER_RUN,
    apply_heal,
    named_exactly,
    read_heal,
    same_control,
)
from services.runner.ports import PortError, Ports
from tests.hand_built_replay import hand_built_executor
from tests.scripted_replay import COST, TASK, Services, attempt

pytestmark = pytest.mark.anyio

RECORDED = Fingerprint(labels={"high": ["High"]}, shapes={"high": ["9"]})
SUBMIT = Target(role="button", name="Show forecast", tag="button")
# What the page offers now: the high column moved into cards, and two buttons.
READ = Candidates(
    url="http://weather.test/",
    candidates=[
        Candidate(selector="nav a", tag="a", count=4, samples=["Home", "News"]),
        Candidate(
            selector="div.card",
            tag="div",
            count=3,
            parts={"span.city": "Lisbon", "b.high": "64"},
            samples=["Lisbon 64", "Porto 61"],
        ),
    ],
)
ACT = Candidates(
    url="http://weather.test/",
    candidates=[
        Candidate(selector="#review", role="button", name="Show reviews", tag="button"),
        Candidate(selector="#go", role="button", name="Show forecast!", tag="button"),
    ],
)


def executor(click: bool = False) -> ActiveExecutor:
    steps: list[ToolStep | ResultStep] = []
    if click:
        steps.append(
            ToolStep(index=0, tool="browser_click", input={"selector": "#show"}, target=SUBMIT)
        )
    read = ToolStep(
        index=len(steps),
        tool="browser_extract",
        input={"selector": "tr", "fields": {"high": "td:nth-child(2)"}},
        fingerprint=RECORDED,
        sample=[{"high": "63"}],
    )
    template = f"High: {{{{step_{read.index}[0].high}}}} °F"
    steps += [read, ResultStep(index=read.index + 1, mode="template", template=template)]
    return ActiveExecutor(
        executor=hand_built_executor(TASK, steps, version=2),
        health=ExecutorHealth(
            task_id=TASK, status="active", version=2, full_run_cost_usd=0.05, success_count=10
        ),
    )


def failed(tool: str, code: str) -> ToolResult:
    error = ErrorInfo(code=code, message="nothing on the page matches it")
    return ToolResult(ok=False, duration_ms=1, error=error)


@dataclass
class Changed(Services):
    """The page after a redesign: the recorded selectors find nothing; the candidates
    are READ / ACT; `pick` is the small model's answer to a heal; `values`: what the
    healed read yields."""

    pick: str = '{"candidate": 2, "fields": {"high": "b.high"}}'
    act_pick: str = '{"candidate": 2}'
    values: list[Any] = field(default_factory=lambda: [{"high": "64"}])
    calls: list[ExecTool] = field(default_factory=list)

    def answer(self, prompt: str) -> str | None:
        if HEAL_HEAD in prompt:
            return self.act_pick if "browser_click" in prompt else self.pick
        return super().answer(prompt)

    def tool(self, req: ExecTool) -> ToolResult:
        self.calls.append(req)
        meta = ToolMetadata(url="http://weather.test/")
        if req.tool == "browser_candidates":
            page = ACT if req.input["purpose"] == "act" else READ
            return ToolResult(ok=True, output=_plain(page), duration_ms=1, metadata=meta)
        if req.input.get("selector") in ("tr", "#show"):
            return failed(req.tool, "element_not_found")
        if req.tool == "browser_click":
            meta.target = Target(role="button", name="Show forecast!", tag="button")
            return ToolResult(ok=True, duration_ms=1, metadata=meta)
        meta.fingerprint = Fingerprint(shapes={"high": ["9"]})
        return ToolResult(ok=True, output=self.values, duration_ms=1, metadata=meta)

    def heals(self) -> list[str]:
        return [p for p in self.prompts if HEAL_HEAD in p]

    def loops(self) -> list[str]:
        return [p for p in super().loops() if HEAL_HEAD not in p]

    def tools(self) -> list[tuple[str, Any]]:
        return [(c.tool, c.input.get("selector")) for c in self.calls]


def _plain(page: Candidates) -> Any:
    return msgspec.to_builtins(page)


async def test_a_read_whose_element_moved_heals_in_place_and_is_checked() -> None:
    services = Changed(executor())
    result = await attempt(services)
    assert result.source == "executor" and not result.fell_back
    assert result.outcome.ok and result.outcome.result == "High: 64 °F"
    assert services.loops() == []  # no full run
    assert services.tools() == [
        ("browser_extract", "tr"),
        ("browser_candidates", None),
        ("browser_extract", "div.card"),
    ]
    replay = result.replay
    assert replay is not None and replay.ok
    (healed,) = replay.healed_steps
    assert (healed.step, healed.tool) == (0, "browser_extract")
    assert healed.input == {"selector": "div.card", "fields": {"high": "b.high"}}
    assert healed.was == {"selector": "tr", "fields": {"high": "td:nth-child(2)"}}
    assert healed.reason.startswith("browser_extract: element_not_found:")
    assert healed.cost_usd == pytest.approx(COST)  # the heal's one small-model call
    # A healed answer is always checked; the heal and the check are the replay's cost.
    check = replay.verification
    assert check is not None and (check.status, check.why) == ("verified", "healed")
    assert replay.cost_usd == pytest.approx(2 * COST)


async def test_a_heal_the_check_finds_wrong_falls_back_to_the_full_run() -> None:
    services = Changed(executor(), verdict="FAIL: the page shows 64 for Porto, not Lisbon.")
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    replay = result.replay
    assert replay is not None and not replay.ok
    assert replay.reason is not None and replay.reason.startswith("verification: FAIL")
    assert [h.step for h in replay.healed_steps] == [0]  # shown, never recorded as a version
    assert len(services.loops()) == 1


@pytest.mark.parametrize(
    ("pick", "why"),
    [
        ('{"candidate": null}', "found no candidate"),
        ("I think the second one.", "not a JSON object"),
        ('{"candidate": 7, "fields": {"high": "b.high"}}', "no candidate's number"),
        ('{"candidate": 2, "fields": {"high": "td.x"}}', "no part of the candidate"),
    ],
)
async def test_no_usable_pick_falls_back(pick: str, why: str) -> None:
    services = Changed(executor(), pick=pick)
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    replay = result.replay
    assert replay is not None and replay.reason is not None
    assert replay.reason.startswith("browser_extract: element_not_found:")
    assert "not healed: " in replay.reason and why in replay.reason
    assert replay.healed_steps == []
    assert ("browser_extract", "div.card") not in services.tools()


async def test_a_healed_read_whose_values_look_otherwise_falls_back() -> None:
    # The cards' bold text is a city name now: not the figure the step read.
    services = Changed(executor(), values=[{"high": "Lisbon"}])
    result = await attempt(services)
    assert result.source == "full_llm"
    replay = result.replay
    assert replay is not None and replay.reason is not None
    assert "the healed step failed its checks" in replay.reason
    assert "look like text, not like 9" in replay.reason


async def test_a_click_heals_onto_the_same_control_with_a_journal_key_of_its_own() -> None:
    services = Changed(executor(click=True))
    result = await attempt(services)
    assert result.source == "executor" and result.outcome.result == "High: 64 °F"
    assert services.tools()[:3] == [
        ("browser_click", "#show"),
        ("browser_candidates", None),
        ("browser_click", "#go"),
    ]
    replay = result.replay
    assert replay is not None
    assert [h.input for h in replay.healed_steps] == [
        {"selector": "#go"},
        {"selector": "div.card", "fields": {"high": "b.high"}},
    ]
    assert replay.healed_steps[0].target == Target(
        role="button", name="Show forecast!", tag="button"
    )


async def test_a_click_is_never_healed_onto_a_look_alike_control() -> None:
    # The small model picks "Show reviews": a button, but not the one recorded.
    services = Changed(executor(click=True), act_pick='{"candidate": 1}')
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    assert ("browser_click", "#review") not in services.tools()
    replay = result.replay
    assert replay is not None and replay.reason is not None
    assert "not healed: the candidate is named 'Show reviews'" in replay.reason


async def test_an_outage_is_not_healed() -> None:
    services = Changed(executor())
    original = services.ports

    def down() -> Ports:
        scripted = original()

        async def exec_tool(req: ExecTool) -> ToolResult:
            raise PortError("unavailable", "no tools service answered")

        return Ports(**{**scripted.__dict__, "exec_tool": exec_tool})

    services.ports = down  # type: ignore[method-assign]
    result = await attempt(services)
    assert services.heals() == []
    assert result.replay is not None and result.replay.infrastructure


# --- the pure rules -------------------------------------------------------------------


def step(**fields: Any) -> ToolStep:
    return ToolStep(index=1, **fields)


def test_an_action_heals_only_onto_one_control_of_the_same_role_and_name() -> None:
    click = step(tool="browser_click", input={"selector": "#s"}, target=SUBMIT)
    same = Candidate(selector="#n", role="button", name="  show FORECAST ", tag="button")
    assert same_control(click, same) is None
    link = Candidate(selector="#l", role="link", name="Show forecast", tag="a")
    assert "is a link" in (same_control(click, link) or "")
    many = Candidate(selector=".b", role="button", name="Show forecast", count=2)
    assert "not one element" in (same_control(click, many) or "")
    # Recorded without its element: by text, a link or button named so; by selector, never.
    by_text = step(tool="browser_click", input={"text": "Show forecast"})
    assert same_control(by_text, link) is None
    blind = step(tool="browser_click", input={"selector": "#s"})
    assert "unknown" in (same_control(blind, same) or "")


def test_a_heal_changes_only_the_steps_locators() -> None:
    click = step(tool="browser_click", input={"text": "Go", "confirm": True}, target=SUBMIT)
    healed = HealedStep(step=1, tool="browser_click", input={"selector": "#go"}, reason="x")
    applied = apply_heal(click, healed)
    assert applied is not None and applied.input == {"selector": "#go", "confirm": True}
    typed = step(tool="browser_type", input={"selector": "#q", "text": "rome"})
    for change in ({"text": "paris"}, {}):
        assert (
            apply_heal(typed, HealedStep(step=1, tool="browser_type", input=change, reason="x"))
            is None
        )
    nav = step(tool="browser_navigate", input={"url": "http://a.test/"})
    moved = HealedStep(step=1, tool="browser_navigate", input={"url": "http://b.test/"}, reason="x")
    assert apply_heal(nav, moved) is None


def test_a_read_heal_keeps_the_attribute_a_field_read() -> None:
    read = step(
        tool="browser_extract",
        input={"selector": "li", "fields": {"title": "a", "url": "a@href", "id": "@data-id"}},
    )
    page = Candidates(candidates=[Candidate(selector="div.story", count=5, parts={"h2 a": "T"})])
    repair = read_heal('{"candidate": 1, "fields": {"title": "h2 a", "url": "h2 a"}}', read, page)
    assert not isinstance(repair, str)
    assert repair.input == {
        "selector": "div.story",
        "fields": {"title": "h2 a", "url": "h2 a@href", "id": "@data-id"},
    }


async def test_past_the_bound_a_broken_step_falls_back() -> None:
    reads = [
        ToolStep(
            index=i,
            tool="browser_extract",
            input={"selector": "tr", "fields": {"high": "td:nth-child(2)"}},
            fingerprint=RECORDED,
            sample=[{"high": "63"}],
        )
        for i in range(MAX_HEALS_PER_RUN + 1)
    ]
    result_step = ResultStep(index=len(reads), mode="template", template="{{step_0[0].high}}")
    many = ActiveExecutor(
        executor=hand_built_executor(TASK, [*reads, result_step], version=2),
        health=ExecutorHealth(task_id=TASK, status="active", version=2, success_count=10),
    )
    services = Changed(many)
    result = await attempt(services)
    assert result.source == "full_llm" and result.fell_back
    replay = result.replay
    assert replay is not None and replay.step == MAX_HEALS_PER_RUN
    assert len(replay.healed_steps) == MAX_HEALS_PER_RUN
    assert len(services.heals()) == MAX_HEALS_PER_RUN


def test_a_plain_read_may_heal_onto_one_part_of_a_groups_items() -> None:
    read = step(tool="browser_extract", input={"selector": "h2"})
    page = Candidates(
        candidates=[Candidate(selector="div.card", count=5, parts={"h3 a": "T", ":scope > b": "9"})]
    )
    for part, selector in (("h3 a", "div.card h3 a"), (":scope > b", "div.card > b")):
        repair = read_heal(json.dumps({"candidate": 1, "part": part}), read, page)
        assert not isinstance(repair, str) and repair.input == {"selector": selector}
    assert "no part of the candidate" in str(read_heal('{"candidate": 1, "part": "i"}', read, page))


def test_a_replayed_click_by_text_asks_for_the_recorded_controls_name_exactly() -> None:
    named = Target(role="link", name="Sports", tag="a")
    click = step(tool="browser_click", input={"text": "sports"}, target=named)
    assert named_exactly(click, {"text": "sports"}) == {"text": "sports", "exact": True}
    # Recorded on a control whose name only contained the text, or with no control
    # recorded: as before.
    wider = step(tool="browser_click", input={"text": "Sports"}, target=Target(name="Sports news"))
    assert named_exactly(wider, {"text": "Sports"}) == {"text": "Sports"}
    blind = step(tool="browser_click", input={"text": "Sports"})
    assert named_exactly(blind, {"text": "Sports"}) == {"text": "Sports"}
