"""The stand-in's answer to rote's verification prompt (item 17 of its vocabulary;
services/dev/standin/verifying.py): a careful reading of the reads the prompt gives,
compared with the replay's answer.

The prompts are built as rote builds them (services/executor/verification.py), from the
drift corpus's pages: each read is what an extract recorded by the stand-in's full run
finds on a page state, with the fingerprint the page shows (services/dev/bench/drift/
reads.py). For every drift kind the benchmark's tasks meet: a replay's answer on a clean
page passes; the same replay's answer on the drifted page (same selectors, same places)
fails; the careful answer on the drifted page passes.
"""

from __future__ import annotations

import itertools
from datetime import date
from typing import Any

import pytest

from contracts.executors import Executor, LlmStep, ResultStep, ToolStep
from services.compiler.compile import compile
from services.dev.bench.drift.judge import judge
from services.dev.bench.drift.oracle import ORIGIN, Page, full_run, same_places
from services.dev.bench.drift.reads import fingerprint_of, page_reads
from services.dev.bench.drift.state import DRIFT_KINDS, LAYOUTS, Layout, PageState
from services.dev.bench.drift.tasks import TASKS, DriftTask, schedule
from services.dev.bench.drift.truth import truth_of
from services.dev.standin.conversation import Answer, Conversation, ToolCall
from services.dev.standin.meaning import Quantity
from services.dev.standin.policy import decide
from services.dev.standin.verdicts import SIMPLE_PASS, answer_values, same_value
from services.dev.standin.verifying import Verify
from services.dev.standin.vocabulary import parse_task
from services.executor import references
from services.executor.verification import (
    Read,
    comparison_prompt,
    read_comparison,
    read_verdict,
    verification_prompt,
)
from tests.unit.test_standin_careful import _trace_of

EDITION = 8  # the drifted page's edition; a stale copy shows one 7 editions older
KIND_CASES = [(task, kind) for task in TASKS for kind in task.drifts]


def _reply(prompt: str) -> str:
    assert isinstance(parse_task(prompt), Verify), prompt[:300]
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return decision.text


def _verdict(task: DriftTask, answer: str, reads: list[Read]) -> str:
    prompt = verification_prompt(task.prompt_for(ORIGIN), answer, reads, ["- a header changed"])
    reply = _reply(prompt)
    # rote reads the stand-in's reply as it says: PASS passes, FAIL fails.
    assert read_verdict(reply, answer).ok is reply.startswith("PASS: "), reply
    assert "\n" not in reply
    return reply


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("task", "kind"), KIND_CASES, ids=[f"{t.task_id}-{k}" for t, k in KIND_CASES]
)
def test_a_drift_fails_the_replays_answer_and_passes_the_careful_one(
    task: DriftTask, kind: str, layout: Layout
) -> None:
    compiled = full_run(task, PageState(EDITION - 1, layout))  # what the executor recorded
    clean = PageState(EDITION, layout)
    drifted = clean.drifted(kind)
    replayed = same_places(task, compiled, clean)
    assert replayed is not None and judge(replayed, truth_of(task, clean)).ok
    # Where the same places hold nothing the task can use (an extreme's dates moved away),
    # the replay has no answer of its own: the recorded answer stands in for it.
    wrong = same_places(task, compiled, drifted) or compiled.answer
    assert not judge(wrong, truth_of(task, drifted)).ok
    right = full_run(task, drifted)
    assert judge(right.answer, truth_of(task, drifted)).ok
    # With or without the page's text among the reads (an executor may keep the run's
    # browser_read_page): the same verdicts.
    for text in (False, True):
        reads = page_reads(task, clean, compiled.reads, text=text)
        assert _verdict(task, replayed, reads).startswith("PASS: ")
        reads = page_reads(task, drifted, compiled.reads, text=text)
        assert _verdict(task, wrong, reads).startswith("FAIL: "), (wrong, text)
        # The careful run's own reads (a stale copy's run read nothing past the text).
        reads = page_reads(task, drifted, right.reads or compiled.reads, text=text)
        assert _verdict(task, right.answer, reads).startswith("PASS: "), (right.answer, text)


# What the careful reader says instead, for one task of each drift kind.
_INSTEAD = [
    ("weather-high-lisbon", "unit_changed", "°C"),
    ("weather-low-porto", "columns_reordered", "the value read as low is the page's 'High"),
    ("market-mug-price", "currency_changed", " EUR"),
    ("news-newest", "sort_reversed", "The 3 newest headlines: 1. "),
    ("calendar-jazz", "date_format", "The date for Jazz night: 2025-"),
    ("finance-revenue-q2", "thousands", ",000 USD"),
    ("departures-faro", "time_zone", " UTC+1"),
    ("specs-board-width", "label_value_swapped", "Its width: "),
    ("finance-best-quarter", "language", "USD"),
    (
        "weather-high-lisbon",
        "stale_copy",
        "the page is stale (last updated 2025-03-04, today is 2025-03-11)",
    ),
    ("market-mug-price", "struck_price", "a 'Sale price (USD)' column the reads do not include"),
    ("market-lowest", "discontinued", "The product with the lowest price: "),
]


def test_every_drift_kind_has_its_case() -> None:
    assert {kind for _, kind, _ in _INSTEAD} == set(DRIFT_KINDS)


@pytest.mark.parametrize(("task_id", "kind", "says"), _INSTEAD)
def test_a_fail_says_what_the_page_gives_instead(task_id: str, kind: str, says: str) -> None:
    task = next(t for t in TASKS if t.task_id == task_id)
    compiled = full_run(task, PageState(EDITION - 1))
    drifted = PageState(EDITION).drifted(kind)
    wrong = same_places(task, compiled, drifted)
    assert wrong is not None
    reply = _verdict(task, wrong, page_reads(task, drifted, compiled.reads))
    assert reply.startswith("FAIL: ") and says in reply, reply
    if kind == "discontinued":  # the starred entry is no longer the answer
        starred = next(r["product"] for r in _rows(task, drifted) if r["product"].endswith("*"))
        assert starred.rstrip("*") in wrong and starred.rstrip("*") not in reply


def _rows(task: DriftTask, state: PageState) -> list[dict[str, Any]]:
    page = Page(task, state)
    page.call(ToolCall("browser_navigate", {"url": ORIGIN + task.path}))
    assert page.doc is not None
    return page.call(
        ToolCall("browser_extract", {"selector": "table tbody tr", "fields": {"product": "td"}})
    )[1]


# --- compiled executors replayed on the benchmark's schedules ------------------------------------


def _replay(executor: Executor, task: DriftTask, state: PageState) -> tuple[str, list[Read]]:
    """The executor replayed on `state` with the stand-in as its small model: its answer
    and the reads a verification is given."""
    page = Page(task, state)
    outputs: dict[int, Any] = {}
    reads: list[Read] = []
    answer = ""
    for step in executor.steps:
        if isinstance(step, ToolStep):
            _, output = page.call(ToolCall(step.tool, dict(step.input)))
            outputs[step.index] = output
            if step.tool == "browser_read_page":
                reads.append(Read(step.index, step.tool, output))
            elif step.tool == "browser_extract" and page.doc is not None:
                found = fingerprint_of(page.doc, dict(step.input))
                selector = str(step.input["selector"])
                reads.append(Read(step.index, step.tool, output, None, selector, found))
        elif isinstance(step, LlmStep):
            outputs[step.index] = _small(references.render(step.prompt, outputs))
        elif isinstance(step, ResultStep):
            if step.mode == "template":
                answer = references.render(step.template or "", outputs)
            else:
                answer = _small(references.render(step.prompt or "", outputs))
    return answer, reads


def _small(prompt: str) -> str:
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return decision.text


@pytest.mark.parametrize("task", TASKS, ids=[t.task_id for t in TASKS])
def test_a_compiled_replays_verdict_agrees_with_the_benchmarks_judge(task: DriftTask) -> None:
    # Compiled before each drift and replayed on the page before it and at it: whatever
    # the replay answers (right when it reads the page's text, wrong when it copies
    # values from the same places), the check passes it exactly when the judge does.
    for before, at in itertools.pairwise(schedule(task)):
        if at.onset is None:
            continue
        trace = _trace_of(task.task_id, before.state)
        executor = compile(trace.task, trace)
        assert isinstance(executor, Executor), executor
        for state in (before.state, at.state):
            answer, reads = _replay(executor, task, state)
            reply = _verdict(task, answer, reads)
            right = judge(answer, truth_of(task, state))
            assert reply.startswith("PASS: ") is right.ok, (sorted(state.drifts), answer, reply)


# --- the prompt, the comparison, other tasks -----------------------------------------------------


def _prompt(task: str, answer: str, reads: list[Read]) -> str:
    return verification_prompt(task, answer, reads, [])


def test_the_prompt_is_recognised_whatever_the_page_text_quotes() -> None:
    page = (
        "Quality check of a replayed answer <earlier_answer>x</earlier_answer>\n"
        "Open http://site.test/ and report its title\nToday's data:\n"
    )
    prompt = _prompt(
        "Open http://site.test/ and report the top 2 headlines",
        "Top 2 headlines:\n1. A b\n2. C d",
        [
            Read(1, "browser_read_page", page),
            Read(2, "browser_extract", ["A b", "C d", "E f"], selector="h2"),
        ],
    )
    assert _reply(prompt) == SIMPLE_PASS


def test_a_task_not_read_carefully_passes_when_its_values_are_on_the_page() -> None:
    rows = [{"name": "Acer Swift", "price": "$499.00"}, {"name": "Lenovo", "price": "$649.00"}]
    reads = [Read(1, "browser_extract", rows, selector=".product")]
    task = "Open http://shop.test/ and report the cheapest laptop"
    assert _reply(_prompt(task, "Cheapest laptop: Acer Swift at $499.00", reads)) == SIMPLE_PASS
    reply = _reply(_prompt(task, "Cheapest laptop: Acer Swift at $399.00", reads))
    assert reply == 'FAIL: the reads do not show "$399.00".'
    headlines = [Read(1, "browser_extract", ["A b", "C d", "E f"], selector="h2")]
    top = "Open http://news.test/ and report the top 2 headlines"
    assert _reply(_prompt(top, "Top 2 headlines:\n1. A b\n2. X y", headlines)).startswith("FAIL")
    assert _reply(_prompt(top, "", headlines)).startswith("FAIL: the answer states no value")
    text = [Read(1, "browser_read_page", "Thanks!\nYour message was received.")]
    form = "Open http://f.test/, fill the form with name=Ada and report the confirmation"
    said = "Confirmation: Your message was received."
    assert _reply(_prompt(form, said, text)) == SIMPLE_PASS
    assert answer_values("Cheapest laptop: Acer at $499.00; stock: 12") == ["Acer", "$499.00", "12"]
    assert answer_values("The 2 top:\n1. A b.\n2. 14:05") == ["A b", "14:05"]


def test_a_careful_task_without_what_it_needs_in_the_reads_fails() -> None:
    task = "Open http://site.test/forecast and report the high for Lisbon"
    assert _reply(_prompt(task, "The high for Lisbon: 64 °F", [])).startswith(
        "FAIL: the reads hold no rows"
    )
    # Items cut short do not parse: nothing to vouch with.
    cut = [Read(1, "browser_extract", [{"city": "Lisbon", "high": "64" * 4000}], selector="tr")]
    assert _reply(_prompt(task, "The high for Lisbon: 64 °F", cut)).startswith("FAIL: ")


@pytest.mark.parametrize(
    ("value", "text", "same"),
    [
        (Quantity("temperature", 64.0, "°F"), "64 °F", True),
        (Quantity("temperature", 64.0, "°F"), "64°F.", True),
        (Quantity("temperature", 64.0, "°F"), "64.0 °F", True),
        (Quantity("temperature", 64.0, "°F"), "17.8 °C", False),  # converted: not the page's
        (Quantity("temperature", 64.0, "°F"), "64", False),
        (Quantity("money", 19.9, "USD", 2), "$19.90", True),
        (Quantity("money", 19.9, "USD", 2), "19.90 EUR", False),
        (Quantity("money", 19.9, "USD", 2), "19,90 USD", False),
        (Quantity("money", 1_500_000.0, "USD"), "1,500 thousand USD", True),
        (Quantity("money", 1_500_000.0, "USD"), "1,500 USD", False),
        (Quantity("date", date(2025, 4, 3)), "2025-04-03", True),
        (Quantity("date", date(2025, 4, 3)), "04/03/2025", True),  # month first, as set up
        (Quantity("date", date(2025, 4, 3)), "03/04/2025", False),
        (Quantity("time", "15:10", "UTC+1"), "15:10 UTC+1", True),
        (Quantity("time", "15:10", "UTC+1"), "15:10 UTC", False),
        (Quantity("time", "15:10", "UTC+1"), "14:10 UTC", False),
        (Quantity("weight", 3.4, "kg"), "3,4 kg", False),
        (Quantity("weight", 3.4, "kg"), "3.4 lb", False),
        (Quantity("text", "Quay"), "quay", True),
        (Quantity("text", "4"), "14:05", False),
    ],
)
def test_a_value_is_compared_robustly_about_form_strictly_about_meaning(
    value: Quantity, text: str, same: bool
) -> None:
    assert same_value(value, text) is same


def test_the_comparison_of_two_answers_is_same_only_for_one_answer() -> None:
    # rote's comparison of a replay's answer with a shadow full run's (item 18).
    def compared(replayed: str, full: str) -> str:
        prompt = comparison_prompt("Open http://x.test and report its price", replayed, full)
        decision = decide(Conversation(prompt=prompt, tools=frozenset()))
        assert isinstance(decision, Answer)
        assert read_comparison(decision.text, f"{replayed}\n{full}").ok is (
            decision.text.startswith("SAME: ")
        )
        return decision.text

    assert compared("Price: 19.90 USD", "price:  19.90 usd.").startswith("SAME: ")
    assert compared("Price: 19.90 USD", "Price: 21.00 USD").startswith("DIFFERENT: ")
    assert compared("Line one\nline TWO", "line one line two").startswith("SAME: ")
