"""The drift benchmark's corpus (services/dev/bench/drift/), checked without a browser.

Every task parses in the stand-in's careful vocabulary and goes through clean editions,
silent drifts of at least ten kinds and a breaking redesign; the stand-in's full run
answers as the ground truth says on every page state; every silent drift keeps what a
compiled executor of the task reads matching (checked with the oracle's DOM matcher) and
makes what it finds at the same places wrong; every breaking redesign leaves a recorded
read with nothing to find. Then the judge, and how the section reads run events.
"""

from __future__ import annotations

import itertools
import math
from datetime import date

import pytest

from services.compiler.step_checks import MIN_ITEMS_FRACTION
from services.dev.bench.corpus_oracle import parse
from services.dev.bench.drift.judge import judge
from services.dev.bench.drift.oracle import (
    ORIGIN,
    Page,
    full_run,
    replayed_reads,
    same_places,
)
from services.dev.bench.drift.sites import SITES
from services.dev.bench.drift.state import DRIFT_KINDS, PageState
from services.dev.bench.drift.tasks import (
    QUICK_TASKS,
    TASKS,
    TASKS_BY_ID,
    TRANSIENT,
    DriftTask,
    Scheduled,
    schedule,
)
from services.dev.bench.drift.truth import Truth, Value, truth_of
from services.dev.bench.drift_runs import DriftRecord, Verification, verification_of
from services.dev.bench.drift_summary import outcome, windows
from services.dev.standin.careful import Extreme, Lookup, Property, Ranked
from services.dev.standin.conversation import ToolCall
from services.dev.standin.vocabulary import parse_task

_IDS = [t.task_id for t in TASKS]


def _onsets(task: DriftTask) -> list[tuple[Scheduled, Scheduled]]:
    """Each silent drift's first run, and the run before it."""
    runs = schedule(task)
    return [(before, at) for before, at in itertools.pairwise(runs) if at.onset]


# --- the corpus --------------------------------------------------------------------------------


def test_twenty_tasks_meet_ten_kinds_of_silent_drift_clean_runs_and_breaks() -> None:
    assert len(TASKS) >= 20 and len(set(_IDS)) == len(_IDS)
    assert len(DRIFT_KINDS) >= 10
    met = {kind for t in TASKS for kind in t.drifts}
    assert met == set(DRIFT_KINDS)
    for task in TASKS:
        runs = schedule(task)
        assert [r.onset for r in runs if r.onset] == list(task.drifts)
        assert sum(r.broke for r in runs) == 1
        clean = [r for r in runs[1:] if r.onset is None and not r.broke]
        assert clean, task.task_id
    assert set(QUICK_TASKS) <= set(TASKS_BY_ID)
    assert len({TASKS_BY_ID[t].drifts[0] for t in QUICK_TASKS}) == len(QUICK_TASKS)


def test_a_drift_stays_once_it_came_but_a_stale_copy_lasts_one_run() -> None:
    task = TASKS_BY_ID["weather-high-lisbon"]
    runs = schedule(task)
    assert [sorted(r.state.drifts) for r in runs] == [
        [], [], ["unit_changed"], ["unit_changed"], ["unit_changed"], ["unit_changed"],
        ["columns_reordered", "unit_changed"], ["columns_reordered", "unit_changed"],
        ["columns_reordered", "stale_copy", "unit_changed"], ["columns_reordered", "unit_changed"],
    ]  # fmt: skip
    assert [r.state.layout for r in runs] == ["v1"] * 4 + ["v2"] * 6
    assert [r.state.edition for r in runs] == list(range(10))
    quick = schedule(task, quick=True)
    assert [sorted(r.state.drifts) for r in quick] == [[], [], ["unit_changed"], ["unit_changed"]]
    assert all(kind not in TRANSIENT for kind in DRIFT_KINDS if kind != "stale_copy")


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_every_prompt_parses_as_its_careful_form(task: DriftTask) -> None:
    parsed = parse_task(task.prompt_for(ORIGIN))
    form = {"lookup": Lookup, "extreme": Extreme, "property": Property, "ranked": Ranked}
    assert isinstance(parsed, form[task.form]), parsed


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_every_state_renders_under_one_title(task: DriftTask) -> None:
    titles = set()
    for planned in schedule(task):
        page = Page(task, planned.state)
        ok, output = page.call(
            ToolCall("browser_navigate", {"url": task.prompt_for(ORIGIN).split()[1]})
        )
        assert ok and output["status"] == 200, (task.task_id, planned.run)
        titles.add(output["title"])
    # A compiled executor checks the title: no drift may change it.
    assert len(titles) == 1
    site = SITES[task.site]
    assert site.render("/no/such/page", PageState(0))[0] == 404


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_the_standins_full_run_answers_as_the_truth_says_on_every_state(task: DriftTask) -> None:
    for planned in schedule(task) + schedule(task, quick=True):
        run = full_run(task, planned.state)
        verdict = judge(run.answer, truth_of(task, planned.state))
        assert verdict.ok, (planned.run, sorted(planned.state.drifts), run.answer, verdict.why)


def _needed(count: int) -> int:
    return max(1, math.floor(count * MIN_ITEMS_FRACTION))  # the replay's MinItems


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_every_silent_drift_keeps_the_recorded_reads_matching(task: DriftTask) -> None:
    for before, at in _onsets(task):
        earlier = full_run(task, before.state)
        before_found = replayed_reads(task, before.state, earlier.reads)
        now_found = replayed_reads(task, at.state, earlier.reads)
        for read, old, new in zip(earlier.reads, before_found, now_found, strict=True):
            assert len(new) >= _needed(len(old)), (at.onset, read, len(new))
            if "fields" in read:
                assert all(v is not None for row in new for v in row.values()), (at.onset, read)


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_every_silent_drift_changes_what_the_recorded_reads_mean(task: DriftTask) -> None:
    for before, at in _onsets(task):
        earlier = full_run(task, before.state)
        truth = truth_of(task, at.state)
        replayed = same_places(task, earlier, at.state)
        assert not judge(replayed, truth).ok, (at.onset, replayed, truth.describe())
        if not before.state.drifts:
            # ... while on a clean page the same places read right on a fresh edition.
            fresh = PageState(at.state.edition, before.state.layout)
            assert judge(same_places(task, earlier, fresh), truth_of(task, fresh)).ok


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_the_breaking_redesign_leaves_a_recorded_read_with_nothing(task: DriftTask) -> None:
    runs = schedule(task)
    at = next(i for i, r in enumerate(runs) if r.broke)
    earlier = full_run(task, runs[at - 1].state)
    found = replayed_reads(task, runs[at].state, earlier.reads)
    assert any(len(items) == 0 for items in found), [len(items) for items in found]


@pytest.mark.parametrize("task", TASKS, ids=_IDS)
def test_the_truth_changes_with_every_clean_edition(task: DriftTask) -> None:
    truths = [truth_of(task, PageState(edition)).describe() for edition in range(8)]
    assert all(a != b for a, b in itertools.pairwise(truths)), truths


def test_a_stale_copy_shows_older_data_and_an_old_updated_date() -> None:
    task = TASKS_BY_ID["departures-faro"]
    state = PageState(5, drifts=frozenset({"stale_copy"}))
    truth = truth_of(task, state)
    assert truth.stale == (date(2025, 3, 1), date(2025, 3, 8))
    _, body = SITES[task.site].render(task.path, state)
    text = "\n".join(parse(body).lines())
    assert "Today is 2025-03-08." in text and "Updated 2025-03-01 06:00." in text


# --- the judge ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "value", "ok"),
    [
        ("The high for Lisbon: 64 °F", Value("temperature", 64), True),
        ("The high for Lisbon: 17.8 °C", Value("temperature", 64), True),
        ("The high for Lisbon: 18 °F", Value("temperature", 64), False),
        ("The high for Lisbon: 64", Value("temperature", 64), True),  # the task's unit
        ("The price for Travel Mug: 19.90 USD", Value("money", 19.9), True),
        ("The price for Travel Mug: $19.90", Value("money", 19.9), True),
        ("The price for Travel Mug: 16.92 EUR", Value("money", 19.9), True),
        ("The price for Travel Mug: 16.92 USD", Value("money", 19.9), False),
        ("The price for Travel Mug: 19,90 USD", Value("money", 19.9), False),
        ("The revenue for Q2: 1.5 million USD", Value("money", 1_500_000), True),
        ("The revenue for Q2: 1,500 USD", Value("money", 1_500_000), False),
        ("The date for Jazz night: 2025-04-03", Value("date", date(2025, 4, 3)), True),
        ("The date for Jazz night: 3 April 2025", Value("date", date(2025, 4, 3)), True),
        ("The date for Jazz night: 04/03/2025", Value("date", date(2025, 4, 3)), True),
        ("The date for Jazz night: 03/04/2025", Value("date", date(2025, 4, 3)), False),
        ("The departure for Faro: 14:10 UTC", Value("time", 14 * 60 + 10), True),
        ("The departure for Faro: 15:10 UTC+1", Value("time", 14 * 60 + 10), True),
        ("The departure for Faro: 15:10 CET", Value("time", 14 * 60 + 10), True),
        ("The departure for Faro: 15:10 UTC", Value("time", 14 * 60 + 10), False),
        ("The departure for Faro: 4", Value("time", 14 * 60 + 10), False),
        ("Its weight: 7.5 lb", Value("weight", 3.4), True),
        ("Its weight: 7.5 kg", Value("weight", 3.4), False),
        ("Its capacity: 50.7 fl oz", Value("volume", 1.5), True),
        ("The platform for Porto: 4", Value("text", "4"), True),
        ("The platform for Porto: 14:05", Value("text", "4"), False),
    ],
)
def test_the_judge_tolerates_form_not_meaning(answer: str, value: Value, ok: bool) -> None:
    key = "Q2" if "Q2" in answer else None
    assert judge(answer, Truth("lookup", value, key)).ok is ok, judge(
        answer, Truth("lookup", value)
    )


def test_the_judge_wants_the_right_entry_order_and_staleness() -> None:
    keys = ("Faro", "Porto", "Lisbon")
    best = Truth("extreme", Value("temperature", 70), "Faro", keys=keys)
    assert judge("The city with the highest high: Faro (70 °F)", best).ok
    assert not judge("The city with the highest high: Porto (70 °F)", best).ok
    assert not judge("Faro or Porto, both near 70 °F", best).ok
    ranked = Truth("ranked", names=("A b", "C d"), keys=("A b", "C d", "E f"))
    assert judge("The 2 newest headlines:\n1. A b\n2. C d", ranked).ok
    assert not judge("The 2 newest headlines:\n1. C d\n2. A b", ranked).ok
    assert not judge("The 2 newest headlines:\n1. E f\n2. C d", ranked).ok
    stale = Truth("lookup", stale=(date(2025, 3, 1), date(2025, 3, 8)))
    assert judge("The page is stale: last updated 2025-03-01.", stale).ok
    assert not judge("The high for Lisbon: 64 °F", stale).ok
    assert not judge("The page is stale.", Truth("lookup", Value("temperature", 64))).ok
    assert not judge(None, best).ok


# --- reading run events ------------------------------------------------------------------------


def test_a_run_event_without_verification_reads_as_unflagged() -> None:
    assert verification_of(None) == Verification()
    assert verification_of({"replay": {"version": 1, "ok": True}}).status == "none"
    assert not verification_of({"replay": {"version": 1, "ok": True}}).flagged


def test_the_proposed_verification_fields_are_read() -> None:
    event = {
        "replay": {
            "version": 2,
            "ok": True,
            "verification": {
                "status": "unverified",
                "method": "fingerprint",
                "reasons": ["header 3 was 'High (°F)', now 'Low (°F)'"],
                "cost_usd": 0.0004,
            },
        }
    }
    read = verification_of(event)
    assert read.flagged and read.method == "fingerprint" and read.cost_usd == 0.0004
    cleared = {"replay": {"ok": True, "verification": {"flagged": True, "status": "verified"}}}
    assert verification_of(cleared).flagged  # a false alarm on a clean page, all the same
    sampled = {"replay": {"ok": True, "verification": {"status": "verified", "cost_usd": 0.001}}}
    assert not verification_of(sampled).flagged and verification_of(sampled).cost_usd == 0.001
    judged = {"replay": {"version": 2, "ok": False, "reason": "verification: the page says EUR"}}
    assert verification_of(judged).status == "wrong" and verification_of(judged).flagged
    broke = {"replay": {"version": 2, "ok": False, "reason": "expected at least 4 items"}}
    assert not verification_of(broke).flagged


def _record(run: int, drifts: list[str], *, onset: str | None = None, **kw: object) -> DriftRecord:
    base: dict[str, object] = dict(
        task_id="t", form="lookup", run=run, layout="v1", drifts=drifts, onset=onset,
        broke=False, source="executor", status="completed", fell_back=False, replay_version=1,
        replay_ok=True, replay_failure=None, cost_usd=0.0, result="x", right=True, why="",
        truth="", baseline_cost_usd=0.01, baseline_result="x", baseline_right=True,
        baseline_kind="run", compiled_under=[],
    )  # fmt: skip
    base.update(kw)
    return DriftRecord(**base)  # type: ignore[arg-type]


def test_a_drift_is_caught_when_its_window_delivers_no_wrong_answer() -> None:
    records = [
        _record(1, [], source="full_llm", replay_version=None, compiled_under=None),
        _record(2, []),
        _record(3, ["thousands"], onset="thousands", right=False),  # missed
        _record(4, ["thousands"], right=False),
        _record(
            5,
            ["language", "thousands"],
            onset="language",
            replay_ok=False,
            source="full_llm",
            fell_back=True,
        ),  # broke, then a full run: caught
        _record(6, ["language", "thousands"], compiled_under=["language", "thousands"]),
        _record(
            7,
            ["language", "thousands", "unit_changed"],
            onset="unit_changed",
            verification=Verification("unverified"),
        ),
    ]
    found = windows(records)
    assert [[r.run for r in w] for w in found] == [[3, 4], [5, 6], [7]]
    assert [outcome(w[0]) for w in found] == ["wrong", "broke", "flagged"]
    assert [any(r.delivered_wrong for r in w) for w in found] == [True, False, False]
    assert records[5].clean and not records[2].clean
