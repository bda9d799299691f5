"""The stand-in's careful tasks (items 12-16 of its vocabulary): in a full run they read
the page's notes as a careful large model does; rote's replay prompts about them are
answered from the data each prompt gives (notes only when the page's text is there)."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from contracts.executors import Executor, LlmStep, ResultStep, ToolStep
from services.compiler.compile import compile
from services.dev.bench.drift.oracle import ORIGIN, full_run
from services.dev.bench.drift.state import PageState
from services.dev.bench.drift.tasks import TASKS_BY_ID
from services.dev.standin.careful import Extreme, Lookup, Property, Ranked
from services.dev.standin.conversation import Answer, Conversation, ToolCall
from services.dev.standin.meaning import parse_date, parse_number, read_context
from services.dev.standin.policy import decide
from services.dev.standin.replay_prompts import AnswerAgain, PickAgain, PickCheapest
from services.dev.standin.scripts import Cheapest, ReadPage, Title, TopN
from services.dev.standin.vocabulary import parse_task
from services.executor import references
from tests.unit.test_compile import _step, _trace
from tests.unit.test_standin_policy import play

PAGE = (
    "Home | Prices\nToday is 2025-03-11.\nPrices\nPrices in EUR.\nProduct Price (EUR) Stock\n"
    "Travel Mug 16.92 4\nChef Knife* 12.00 9\n* Discontinued: no longer sold.\n"
    "Updated 2025-03-11 06:00."
)
HEADERS = ["Product", "Price (EUR)", "Stock"]
ROWS = [{"product": "Travel Mug", "price": "16.92"}, {"product": "Chef Knife*", "price": "12.00"}]


def _site(page: str = PAGE, headers: list[str] = HEADERS) -> Any:
    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_navigate":
            return True, {"url": call.input["url"], "status": 200, "title": "Market"}
        if call.name == "browser_read_page":
            return True, page
        if call.input.get("selector") == "table thead th":
            return True, headers
        if call.input.get("selector") == "table tbody tr":
            return True, ROWS
        return True, []

    return tools


# --- the vocabulary ----------------------------------------------------------------------------


def test_the_careful_forms_parse_and_the_older_forms_are_unchanged() -> None:
    site = "http://site.test"
    assert parse_task(f"Open {site}/f and report the high for Lisbon") == Lookup(
        f"{site}/f", "high", "Lisbon"
    )
    assert parse_task(f"Open {site}/f and report the city with the highest high") == Extreme(
        f"{site}/f", "city", "highest", "high"
    )
    assert parse_task(f"Open {site}/p and report its weight.") == Property(f"{site}/p", "weight")
    assert parse_task(f"Open {site}/n and report the 3 most read stories") == Ranked(
        f"{site}/n", 3, "most read", "stories"
    )
    assert isinstance(parse_task(f"Open {site}/ and report the top 3 headlines"), TopN)
    assert isinstance(parse_task(f"Open {site}/ and report its title"), Title)
    assert isinstance(parse_task(f"Open {site}/ and report the cheapest product"), Cheapest)
    detail = parse_task(f"Open {site}/, open the cheapest product and report its stock")
    assert isinstance(detail, Cheapest) and detail.detail == "stock"
    assert isinstance(parse_task(f"Open {site}/ and read the page"), ReadPage)


# --- full runs ---------------------------------------------------------------------------------


def test_a_lookup_reads_the_page_first_and_states_its_currency() -> None:
    decisions = play("Open http://site.test/prices and report the price for Travel Mug", _site())
    calls = [(d.name, d.input.get("selector")) for d in decisions if isinstance(d, ToolCall)]
    assert calls == [
        ("browser_navigate", None),
        ("browser_read_page", None),
        ("browser_extract", "table thead th"),
        ("browser_extract", "table tbody tr"),
    ]
    extract = decisions[3]
    assert isinstance(extract, ToolCall)
    assert extract.input["fields"] == {"product": "td:nth-child(1)", "price": "td:nth-child(2)"}
    assert decisions[-1] == Answer("The price for Travel Mug: 16.92 EUR")


def test_an_extreme_leaves_out_what_a_footnote_says_is_discontinued() -> None:
    prompt = "Open http://site.test/prices and report the product with the lowest price"
    assert play(prompt, _site())[-1] == Answer(
        "The product with the lowest price: Travel Mug (16.92 EUR)"
    )


def test_a_stale_page_is_reported_stale_not_read() -> None:
    stale = PAGE.replace("Updated 2025-03-11", "Updated 2025-03-04")
    decisions = play(
        "Open http://site.test/prices and report the price for Travel Mug", _site(stale)
    )
    assert decisions[-1] == Answer(
        "The page is stale: last updated 2025-03-04, today is 2025-03-11."
    )


def test_a_portuguese_page_is_read_by_its_labels_and_decimal_commas() -> None:
    page = "Hoje é 2025-03-11.\nPreços em USD.\nAtualizado 2025-03-11 06:00."
    tools = _site(page, ["Produto", "Preço (USD)", "Stock"])

    def with_commas(call: ToolCall) -> tuple[bool, Any]:
        ok, out = tools(call)
        if call.input.get("selector") == "table tbody tr":
            return True, [{"product": "Travel Mug", "price": "1.016,92"}]
        return ok, out

    prompt = "Open http://site.test/prices and report the price for Travel Mug"
    assert play(prompt, with_commas)[-1] == Answer("The price for Travel Mug: 1,016.92 USD")


def test_a_ranked_list_is_read_from_the_end_its_caption_names() -> None:
    task = TASKS_BY_ID["news-newest"]
    for edition in range(4):
        clean = full_run(task, PageState(edition)).answer
        reversed_page = PageState(edition, drifts=frozenset({"sort_reversed"}))
        assert full_run(task, reversed_page).answer == clean
        assert clean.startswith("The 3 newest headlines:\n1. ")


def test_meaning_reads_numbers_dates_and_notes() -> None:
    assert parse_number("1,234.50") == 1234.5 and parse_number("1.234,50", "pt") == 1234.5
    assert parse_number("19,90") == 19.0  # English: not nineteen point nine
    assert parse_date("03/04/2025", day_first=True) == date(2025, 4, 3)
    assert parse_date("03/04/2025", day_first=False) == date(2025, 3, 4)
    ctx = read_context(
        "Today is 2025-03-11.\nFigures in EUR thousands.\nTimes in CET (UTC+1).\n"
        "Dates are day/month/year.\nOldest first.\nUpdated 2025-03-10 06:00."
    )
    assert (ctx.currency, ctx.scale, ctx.zone, ctx.day_first) == ("EUR", 1000, "UTC+1", True)
    assert ctx.order == ("time", "asc") and not ctx.stale


# --- replay prompts ----------------------------------------------------------------------------


def _trace_of(task_id: str, state: PageState) -> Any:
    task = TASKS_BY_ID[task_id]
    run = full_run(task, state)
    steps = []
    for i, s in enumerate(run.steps):
        meta = (
            {"http_status": 200, "title": s.output["title"]} if s.name == "browser_navigate" else {}
        )
        steps.append(_step(i, s.name, s.input, s.output, **meta))
    return _trace(task.prompt_for(ORIGIN), steps, run.answer)


def _small_model(prompt: str) -> str:
    assert isinstance(parse_task(prompt), PickAgain | AnswerAgain), prompt[:300]
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return decision.text


@pytest.mark.parametrize(
    "task_id",
    ["weather-warmest", "market-knife-stock", "specs-board-width", "market-mug-price",
     "calendar-first", "news-newest"],
)  # fmt: skip
def test_a_compiled_careful_task_replays_its_own_answer(task_id: str) -> None:
    # The compiler's prompts about careful tasks (picks, answers again) are understood,
    # and a replay on the page the run read answers as the run did.
    trace = _trace_of(task_id, PageState(0))
    executor = compile(trace.task, trace)
    assert isinstance(executor, Executor), executor
    outputs: dict[int, Any] = {}
    answer = None
    for step in executor.steps:
        if isinstance(step, ToolStep):
            assert step.trace_step is not None
            outputs[step.index] = trace.steps[step.trace_step].output
        elif isinstance(step, LlmStep):
            outputs[step.index] = _small_model(references.render(step.prompt, outputs))
        elif isinstance(step, ResultStep) and step.mode == "template":
            answer = references.render(step.template or "", outputs)
        elif isinstance(step, ResultStep):
            answer = _small_model(references.render(step.prompt or "", outputs))
    assert answer == trace.answer


def _pick(task: str, ask: str, items: list[Any]) -> str:
    prompt = (
        f"Task (for context; do not perform it): Open <url> and report {task}\n\n{ask}\n\n"
        f"step_1 (browser_extract): {json.dumps(items)}"
    )
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return decision.text


def test_a_pick_is_literal_by_key_by_value_or_by_place() -> None:
    rows = [{"city": "Lisbon", "high": "18"}, {"city": "Faro", "high": "75"}]
    first = (
        "The task needs one item from the list below. Last time it chose item 2 of 2, whose "
        'city was "Faro" (why). Choose again the same way from today\'s list, and answer '
        "with its city only."
    )
    assert _pick("the high for Lisbon", first, rows) == "Lisbon"
    assert _pick("the city with the highest high", first, rows) == "Faro"
    then = (
        "The task chose one item from the list below: the one whose city is Lisbon. Answer "
        "with its high only."
    )
    assert _pick("the high for Lisbon", then, rows) == "18"
    by_place = first.replace("with its city only", "with the item exactly as written only")
    assert _pick("its width", by_place, ["12", "46", "3"]) == "46"
    # A cheapest task's picks are PickCheapest's, as before.
    cheap = parse_task(
        "Task (for context; do not perform it): Open <url> and report the cheapest product\n"
        'pick the cheapest: [{"name": "a", "price": "$2"}]'
    )
    assert isinstance(cheap, PickCheapest)


def _again(task: str, example: str, data: str) -> str:
    prompt = (
        f"Task (for context): Open <url> and report {task}\n\nAnswer the task again from "
        "today's data, in exactly the same form as this earlier answer (same structure, "
        f"wording and formatting; only the data may differ):\n<example>\n{example}\n"
        f"</example>\nReply with only the answer.\n\nToday's data:\n{data}"
    )
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return decision.text


def test_an_answer_again_reads_the_notes_only_when_the_page_text_is_given() -> None:
    rows = '[{"product": "Travel Mug", "price": "16.92"}]'
    example = "The price for Travel Mug: 19.90 USD"
    with_page = f"step_1 (browser_read_page): {json.dumps(PAGE)}\nstep_2 (browser_extract): {rows}"
    assert _again("the price for Travel Mug", example, with_page) == (
        "The price for Travel Mug: 16.92 EUR"
    )
    alone = f"step_1 (browser_extract): {rows}"
    assert _again("the price for Travel Mug", example, alone) == (
        "The price for Travel Mug: 16.92 USD"
    )
