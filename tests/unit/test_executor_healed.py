"""Healed versions (services/compiler/healed.py) as pure rules over events: a replay that
repaired a step in place and verified records the replayed version healed, a candidate;
anything less records no version. No database."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contracts.executors import Executor, ExecutorStep, ToolStep
from contracts.runs import HealedStep, Verification, VerificationStatus
from contracts.tools import Fingerprint, Target
from contracts.traces import Trace
from services.compiler import executor_events as ev
from services.compiler import healed, views
from services.compiler import health as h
from services.compiler.compile import compile
from services.compiler.invalidation import decide_invalidate
from services.compiler.stats import recount
from tests.executor_events import RULES, T0, replay

TRACE = msgspec.json.decode(
    (Path(__file__).parent.parent / "data" / "traces" / "news_top3.json").read_bytes(), type=Trace
)
WHY = "browser_extract: element_not_found: no element matches 'h2.headline'"
HEAL = HealedStep(
    step=1,
    tool="browser_extract",
    input={"selector": "h3.title"},
    was={"selector": "h2.headline"},
    reason=WHY,
    fingerprint=Fingerprint(lang="en", headers=["Headline"]),
    cost_usd=0.0004,
)
REASON = f"healed step 1 (browser_extract): selector 'h2.headline' -> 'h3.title' after: {WHY}"


@cache
def executor() -> Executor:
    """news_top3: navigate (step 0), extract 'h2.headline' (step 1), a result template."""
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return result


def with_steps(*steps: ExecutorStep) -> Executor:
    """The executor with these tool steps before its result (renumbered after them)."""
    result = msgspec.structs.replace(executor().steps[-1], index=len(steps))
    return msgspec.structs.replace(executor(), steps=[*steps, result])


def run(state: h.Health, events: list[ev.HealthEvent]) -> list[ev.HealthEvent]:
    for event in events:
        h.apply(state, event)
    return events


def compiled(state: h.Health, run_id: str, built: Executor | None = None) -> None:
    run(state, h.decide_trace(state, built or executor(), None, run_id, T0))


def healed_replay(
    state: h.Health,
    run_id: str,
    version: int,
    status: VerificationStatus | None = "verified",
    heals: tuple[HealedStep, ...] = (HEAL,),
) -> tuple[list[ev.HealthEvent], str | None]:
    """A replay of `version` that healed `heals` and whose check said `status` (wrong:
    failed, as the runner reports it), decided and applied as the store does; and the
    note saying why no version was recorded."""
    check = None
    if status is not None:
        check = Verification(status=status, why="healed", reasons=[f"{status}: the page"])
    ok = status != "wrong"
    events = h.decide_replay(
        state,
        run_id=run_id,
        version=version,
        ok=ok,
        at=T0,
        rules=RULES,
        reason=None if ok else "verification: wrong",
        cost_saved_usd=0.03 if ok else 0.0,
        verification=check,
        healed_steps=tuple(heal.step for heal in heals),
    )
    healing = healed.decide(state, events, heals, T0)
    return run(state, events + healing.events), healing.note


def statuses(state: h.Health) -> list[tuple[int, str, bool]]:
    return [(v.version, v.status, v.candidate) for v in state.versions]


def trusted_v1() -> h.Health:
    state = h.new("t")
    compiled(state, "r1")
    return state


def test_a_verified_healed_replay_records_the_healed_version_as_a_candidate() -> None:
    state = trusted_v1()
    events, note = healed_replay(state, "x1", 1)
    assert note is None
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Compiled]
    succeeded, made = events
    assert isinstance(succeeded, ev.ReplaySucceeded) and succeeded.healed_steps == [1]
    assert succeeded.cost_saved_usd == 0.03  # it answered: the ledger counts it
    assert isinstance(made, ev.Compiled)
    assert (made.version, made.healed_from, made.healed_steps) == (2, 1, [1])
    assert (made.source_run_id, made.candidate, made.reason) == ("x1", True, REASON)
    # v1 stands by; v2, the candidate, serves the next runs.
    assert statuses(state) == [(1, "active", False), (2, "active", True)]
    assert h.current(state) is state.versions[1]
    new = h.decode_executor(state.versions[1].executor)
    old = executor()
    step = new.steps[1]
    assert isinstance(step, ToolStep)
    assert step.input == {"selector": "h3.title"}
    assert step.fingerprint == HEAL.fingerprint
    assert step.expect == old.steps[1].expect  # type: ignore[union-attr]
    assert new.steps[0] == old.steps[0] and new.steps[2] == old.steps[2]
    assert (new.version, new.healed_from, new.source_run_id) == (2, 1, "x1")
    assert new.task_fingerprint == old.task_fingerprint
    assert new.stats == old.stats  # a heal changes no step's kind, prompt or recording
    # The cost of a full run is still the one v1 stood for.
    assert made.source_cost_usd == old.stats.source_run_cost_usd


def test_what_a_healed_version_shows_in_the_views_and_on_the_wire() -> None:
    state = trusted_v1()
    events, _ = healed_replay(state, "x1", 1)
    v1, v2 = views.version_views(state)
    assert (v1.healed_from, v1.compiled_reason, v1.healed, v1.success_count) == (None, None, 1, 1)
    assert (v2.healed_from, v2.compiled_reason, v2.healed, v2.candidate) == (1, REASON, 0, True)
    summary = views.summary(state)
    assert (summary.version, summary.candidate, summary.healed) == (2, True, 1)
    assert views.savings([state]).healed == 1
    succeeded, made = (views.to_wire("t", e) for e in events)
    assert (succeeded.event, succeeded.healed_steps, succeeded.healed_from) == (
        "replay_succeeded",
        [1],
        None,
    )
    assert (made.event, made.version, made.healed_from, made.healed_steps) == (
        "compiled",
        2,
        1,
        [1],
    )
    assert (made.reason, made.run_id, made.candidate) == (REASON, "x1", True)
    assert made.executor is not None and made.executor.healed_from == 1
    history = views.history("t", state, events, 1, 3)
    assert history.versions == [made.executor]
    assert [(e.event, e.healed_from) for e in history.events] == [
        ("replay_succeeded", None),
        ("compiled", 1),
    ]


def test_a_redelivered_healed_replay_records_nothing_twice() -> None:
    state = trusted_v1()
    healed_replay(state, "x1", 1)
    events, note = healed_replay(state, "x1", 1)
    assert (events, note) == ([], None)
    assert len(state.versions) == 2 and state.replays == 1 and state.trust.healed == 1


@pytest.mark.parametrize("status", ["wrong", "skipped", "unverified", None])
def test_a_healed_replay_that_was_not_verified_records_no_version(
    status: VerificationStatus | None,
) -> None:
    state = trusted_v1()
    events, note = healed_replay(state, "x1", 1, status)
    assert [type(e) for e in events] == [
        ev.ReplaySucceeded if status != "wrong" else ev.ReplayFailed
    ]
    assert events[0].healed_steps == [1]  # type: ignore[union-attr]
    assert statuses(state) == [(1, "active", False)]
    assert state.trust.healed == 1 and state.versions[0].trust.healed == 1
    if status == "wrong":  # a failed replay, as ever: nothing healed is kept
        assert note is None and state.versions[0].failure_count == 1
    else:
        assert note == f"its answer was not verified ({status or 'not checked'})"


@pytest.mark.parametrize(
    ("step", "heal", "why"),
    [
        (
            ToolStep(index=0, tool="browser_navigate", input={"url": "https://a.test/news"}),
            HealedStep(
                step=0, tool="browser_navigate", input={"url": "https://b.test/"}, reason="x"
            ),
            "step 0 (browser_navigate) is not healed: only browser_extract, browser_click,"
            " browser_type steps are",
        ),
        (
            ToolStep(index=0, tool="browser_type", input={"selector": "#q", "text": "shoes"}),
            HealedStep(step=0, tool="browser_type", input={"text": "boots"}, reason="x"),
            "the heal of step 0 (browser_type) changes text: only its locators (selector)"
            " may change",
        ),
        (
            ToolStep(index=0, tool="browser_click", input={"selector": "#buy"}),
            HealedStep(step=0, tool="browser_type", input={"selector": "#b"}, reason="x"),
            "the heal of step 0 (browser_click) calls browser_type: a heal keeps the tool",
        ),
        (
            # The link picked on each run: a fixed locator would click the same one forever.
            ToolStep(index=0, tool="browser_click", input={"text": "{{step_3}}"}, templated=True),
            HealedStep(step=0, tool="browser_click", input={"selector": "a.item"}, reason="x"),
            "step 0 (browser_click)'s text is filled from an earlier step on each run:"
            " a healed locator would freeze it",
        ),
        (
            ToolStep(index=0, tool="browser_extract", input={"selector": "li"}),
            HealedStep(step=5, tool="browser_extract", input={"selector": "p"}, reason="x"),
            "v1 has no tool step 5 to heal",
        ),
        (
            ToolStep(index=0, tool="browser_extract", input={"selector": "li"}),
            HealedStep(step=0, tool="browser_extract", input={"selector": "li"}, reason="x"),
            "the heal of step 0 (browser_extract) changes none of its locators",
        ),
    ],
)
def test_a_heal_the_step_may_not_take_records_no_version(
    step: ToolStep, heal: HealedStep, why: str
) -> None:
    state = h.new("t")
    compiled(state, "r1", with_steps(step))
    events, note = healed_replay(state, "x1", 1, heals=(heal,))
    assert [type(e) for e in events] == [ev.ReplaySucceeded]
    assert note == why
    assert statuses(state) == [(1, "active", False)]


def test_a_click_healed_from_its_text_to_a_selector_drops_the_text() -> None:
    click = ToolStep(
        index=0, tool="browser_click", input={"text": "More news"}, target=Target(role="link")
    )
    heal = HealedStep(
        step=0,
        tool="browser_click",
        input={"selector": "a.more"},
        reason="browser_click: element_not_found: no element has the text 'More news'",
        target=Target(role="link", name="More stories", tag="a"),
    )
    state = h.new("t")
    compiled(state, "r1", with_steps(click))
    events, note = healed_replay(state, "x1", 1, heals=(heal,))
    assert note is None
    new = h.decode_executor(state.versions[1].executor).steps[0]
    assert isinstance(new, ToolStep)
    assert (new.input, new.target) == ({"selector": "a.more"}, heal.target)
    assert events[1].reason == (  # type: ignore[union-attr]
        "healed step 0 (browser_click): selector (none) -> 'a.more', text 'More news' -> (none)"
        f" after: {heal.reason}"
    )


def test_the_next_verified_replay_of_the_healed_version_promotes_it() -> None:
    state = trusted_v1()
    healed_replay(state, "x1", 1)
    check = Verification(status="verified", why="new_version", reasons=["PASS"])
    events = replay(state, "x2", 2, True, verification=check)
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Promoted, ev.Superseded]
    assert events[2] == ev.Superseded(at=T0, version=1, reason="replaced by verified v2")
    assert statuses(state) == [(1, "superseded", False), (2, "active", False)]
    assert views.version_views(state)[1].healed_from == 1  # still says where it came from


def test_a_healed_version_found_wrong_goes_and_the_replayed_one_is_back() -> None:
    state = trusted_v1()
    healed_replay(state, "x1", 1)
    wrong = Verification(status="wrong", why="new_version", reasons=["FAIL: old"])
    events = replay(state, "x2", 2, False, reason="verification: FAIL", verification=wrong)
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded, ev.Restored]
    assert statuses(state) == [(1, "active", True), (2, "superseded", True)]


def test_a_healed_candidate_stands_in_for_its_own_standby() -> None:
    # v2 is a candidate beside v1 (compiled after a fallback); a replay of v2 heals a
    # step and verifies. v2 as recorded did not answer: it is not promoted; v3 is the
    # candidate, v1 still the version to roll back to, and v2 is replaced.
    state = trusted_v1()
    compiled(state, "r2")
    events, note = healed_replay(state, "x1", 2)
    assert note is None
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Compiled, ev.Superseded]
    assert events[2] == ev.Superseded(at=T0, version=2, reason="replaced by v3")
    assert statuses(state) == [(1, "active", False), (2, "superseded", True), (3, "active", True)]
    assert state.versions[2].healed_from == 2


def test_a_pinned_version_heals_on_each_run_and_its_healed_version_is_recorded_once() -> None:
    state = trusted_v1()
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    events, _ = healed_replay(state, "x1", 1)
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Compiled]
    assert h.current(state) is state.versions[0]  # the pin stays current; v2 waits
    # Healed the same way again, though the page around it reads a little otherwise.
    again = msgspec.structs.replace(HEAL, fingerprint=Fingerprint(lang="en", notes=["Today"]))
    events, note = healed_replay(state, "x2", 1, heals=(again,))
    assert [type(e) for e in events] == [ev.ReplaySucceeded]
    assert note == "v2 already replays these steps"


def test_no_version_is_healed_that_is_gone_or_unknown() -> None:
    state = trusted_v1()
    run(state, decide_invalidate(state, reason="bad", by="ops", at=T0))
    events, note = healed_replay(state, "x1", 1)
    assert [type(e) for e in events] == [ev.ReplaySucceeded]
    assert note == "v1, the version healed, is invalidated"
    assert healed_replay(state, "x2", 7) == ([], None)  # an unknown version counts nothing


def test_the_run_that_compiled_a_version_heals_none() -> None:
    # Keyed by the run id, as a compiled trace is: one run, one version.
    state = trusted_v1()
    events, note = healed_replay(state, "r1", 1)
    assert [type(e) for e in events] == [ev.ReplaySucceeded]
    assert note == "run r1 recorded a version already"


def test_a_long_reason_is_cut_to_a_reasons_length() -> None:
    fields: dict[str, Any] = {f"f{n}": f"td:nth-child({n}) span.value" for n in range(60)}
    heal = msgspec.structs.replace(HEAL, input={"fields": fields}, reason="x" * 900)
    state = trusted_v1()
    events, _ = healed_replay(state, "x1", 1, heals=(heal,))
    reason = events[1].reason  # type: ignore[union-attr]
    assert reason is not None and len(reason) == 1000 and reason.endswith("...")
    assert "fields (none) -> {" in reason  # a long value is shown cut short


def test_recounted_stats_count_the_healed_steps_as_compile_does() -> None:
    built = executor()
    assert recount(list(built.steps), built.stats) == built.stats
    assert recount(list(built.steps[1:]), built.stats).total_steps == 2
