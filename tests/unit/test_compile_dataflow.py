"""Where values come from (services.compiler.dataflow), compiled and replayed: each value
read again from where the run took it. The heuristics one by one: tests/unit/test_dataflow_*.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contracts.executors import Executor, LlmStep, ResultStep, ToolStep
from contracts.traces import Trace, TraceStep
from services.compiler.compile import compile
from services.executor import references
from tests.unit.test_compile import SITE, _navigated, _step, _trace, simulate

# --- replayed on another day: each value read from where the run took it ----------------


def _executor(trace: Trace) -> Executor:
    result = compile(trace.task, trace)
    assert isinstance(result, Executor), result
    return result


def _on(trace: Trace, **outputs: Any) -> Trace:
    """The trace as a replay sees it on a day when trace step N answers outputs["step_N"]."""
    today = copy.deepcopy(trace)
    for name, output in outputs.items():
        today.steps[int(name.removeprefix("step_"))].output = output
    return today


def _result(executor: Executor) -> ResultStep:
    result = executor.steps[-1]
    assert isinstance(result, ResultStep)
    return result


COMPONENTS = [
    {"name": "API", "state": "Operational"},
    {"name": "Web app", "state": "Operational"},
    {"name": "Database", "state": "Degraded"},
    {"name": "Queue", "state": "Operational"},
]


def _status_trace(prompt: str, answer: str, *more: TraceStep) -> Trace:
    steps = [
        _navigated(0, f"{SITE}/status", "Status"),
        _step(1, "browser_extract", {"selector": ".component"}, COMPONENTS),
        *more,
    ]
    return _trace(prompt, steps, answer)


def test_a_value_several_items_hold_is_read_from_the_item_its_line_names() -> None:
    # "Operational" is the state of items 0, 1 and 3: each line reads the state of the
    # component that line names, not of the first component.
    trace = _status_trace(
        f"Open {SITE}/status and list the first 3 components with their state.",
        "API: Operational\nWeb app: Operational\nDatabase: Degraded",
    )
    executor = _executor(trace)
    assert simulate(executor, trace) == trace.answer
    today = [dict(c) for c in COMPONENTS]
    today[1]["state"], today[2]["state"] = "Major outage", "Operational"
    assert simulate(executor, _on(trace, step_1=today)) == (
        "API: Operational\nWeb app: Major outage\nDatabase: Operational"
    )


def test_a_value_several_items_hold_follows_the_other_fields_of_the_same_input() -> None:
    trace = _status_trace(
        f"Open {SITE}/status and report the second component's state in the form.",
        "Sent",
        _step(
            2,
            "browser_fill_form",
            {"fields": {"#component": "Web app", "#state": "Operational"}},
            {"url": f"{SITE}/form", "title": "Form"},
        ),
    )
    executor = _executor(trace)
    form = next(s for s in executor.steps if isinstance(s, ToolStep) and s.trace_step == 2)
    assert form.input["fields"] == {
        "#component": "{{step_1[1].name}}",
        "#state": "{{step_1[1].state}}",
    }


def test_a_value_several_items_hold_with_nothing_to_say_which_is_a_judgement() -> None:
    # Which "Operational" the run reported, the Queue's or another's, no reference
    # says: the small model answers again rather than read the first component.
    trace = _status_trace(f"Open {SITE}/status and report the state of the Queue.", "Operational")
    result = _result(_executor(trace))
    assert result.mode == "llm" and result.variables == ["step_1"]


DEALS_TODAY = [{"name": n, "left": "0"} for n in ("Omega", "Psi", "Chi", "Phi")]


def _deals(
    stock: list[str], answer: str, first: str = "the first 3 deals with how many are left"
) -> Trace:
    names = ["Alpha Widget", "Beta Gadget", "Gamma Gizmo", "Delta Doohickey"]
    deals = [{"name": n, "left": left} for n, left in zip(names, stock, strict=True)]
    return _trace(
        f"Open {SITE}/deals and list {first} in stock.",
        [_navigated(0, f"{SITE}/deals", "Deals"), _step(1, "browser_extract", {}, deals)],
        answer,
    )


@pytest.mark.parametrize(
    ("stock", "answer"),
    [
        (["2", "1", "3", "9"], "1. Alpha Widget (2 left)\n2. Beta Gadget (1 left)\n3. Gamma Gizmo"),
        # 1 and 3 are in the prompt too ("127.0.0.1", "first 3"), but here they are stock
        (["1", "3", "5", "9"], "1. Alpha Widget (1 left)\n2. Beta Gadget (3 left)"),
    ],
)  # fmt: skip
def test_small_numbers_beside_references_are_data(stock: list[str], answer: str) -> None:
    result = _result(_executor(_deals(stock, answer)))
    assert result.mode == "llm" and result.variables == ["step_1"], result.template


@pytest.mark.parametrize(
    "answer",
    [
        "1. Alpha Widget\n2) Beta Gadget\n#3 Gamma Gizmo",
        "Picks: 1) Alpha Widget, 2) Beta Gadget; 3) Gamma Gizmo",
        "Top 3:\n1. Alpha Widget\n2. Beta Gadget\n3. Gamma Gizmo",  # the count listed
    ],
)
def test_numbers_that_number_the_lines_are_the_answer_s_form(answer: str) -> None:
    result = _result(_executor(_deals(["7", "8", "9", "9"], answer, "the top three deals")))
    assert result.mode == "template"
    assert references.render(result.template or "", {1: DEALS_TODAY}) == (
        answer.replace("Alpha Widget", "Omega")
        .replace("Beta Gadget", "Psi")
        .replace("Gamma Gizmo", "Chi")
    )
    # When the items' stock is those numbers, only where a number stands tells: "Top 3"
    # may be Gamma's stock, a line's "3." is not.
    held = _result(_executor(_deals(["2", "1", "3", "9"], answer, "the top three deals")))
    assert held.mode == ("llm" if answer.startswith("Top 3") else "template")


def test_an_answer_in_cyrillic_is_written_again_from_today_s_page() -> None:
    page = "Новости дня\nКурс рубля вырос на фоне нефти\nПогода: дождь"  # noqa: RUF001
    trace = _trace(
        f"Открой {SITE}/news и перескажи главную новость одной фразой.",
        [_navigated(0, f"{SITE}/news", "Новости"), _step(1, "browser_read_page", {}, page)],
        "Главная новость: рубль укрепился благодаря росту нефти.",
    )
    result = _result(_executor(trace))
    assert result.mode == "llm" and result.variables == ["step_1"]


def _typed_from_page(prompt: str, name: str) -> Executor:
    trace = _trace(
        prompt,
        [
            _navigated(0, f"{SITE}/oncall", "On call"),
            _step(1, "browser_read_page", {}, f"Rota\nOn call today: {name}"),
            _step(2, "browser_type", {"selector": "#q", "text": name}, {"url": f"{SITE}/dir"}),
            _step(3, "browser_read_page", {}, "Phone: 555-0101"),
        ],
        "Phone: 555-0101",
    )
    return _executor(trace)


def _typed(executor: Executor) -> Any:
    return next(s for s in executor.steps if isinstance(s, ToolStep) and s.trace_step == 2).input


@pytest.mark.parametrize("name", ["Казань", "東京都"])
def test_a_non_latin_name_read_off_the_page_is_not_a_constant(name: str) -> None:
    executor = _typed_from_page(
        f"Open {SITE}/oncall, find today's city and search the directory for it.", name
    )
    assert _typed(executor)["text"] != name


def test_a_name_inside_a_longer_word_of_the_prompt_is_not_named_by_it() -> None:
    # "Tom" is in "bottom", not in the prompt: who is on call is read off the page.
    prompt = (
        f"Open {SITE}/oncall, read who is on call today (listed at the bottom of the page) "
        "and look them up in the directory; report their phone number."
    )
    assert _typed(_typed_from_page(prompt, "Tom"))["text"] != "Tom"
    assert _typed(_typed_from_page(prompt.replace("bottom", "Tom"), "Tom"))["text"] == "Tom"


def test_a_short_value_is_not_bound_to_an_unrelated_field_holding_it() -> None:
    # The quantity 1 is the task's; that the cart holds 1 bag today is a coincidence.
    def order(prompt: str) -> Any:
        shop = "http://shop.example"
        cart = [{"item": "Coffee beans", "qty": "1"}, {"item": "Filter papers", "qty": "4"}]
        form = {"fields": {"#product": "Coffee beans", "#qty": "1"}, "submit": "#order"}
        trace = _trace(
            prompt,
            [
                _navigated(0, f"{shop}/cart", "Cart"),
                _step(1, "browser_extract", {"selector": ".line"}, cart),
                _step(2, "browser_fill_form", form, {"url": f"{shop}/ok"}),
                _step(3, "browser_read_page", {}, "Order confirmed: ORD-7781"),
            ],
            "Order confirmed: ORD-7781",
        )
        return _typed(_executor(trace))["fields"]["#qty"]

    shop = "http://shop.example"  # no "1" in the origin
    assert "step_1" not in order(f"Open {shop}/cart, then order a single bag of Coffee beans.")
    assert order(f"Open {shop}/cart, then order 1 bag of Coffee beans.") == "1"


# --- a number after a colon is a value, not a list's numbering --------------------------


def _repos(form: str, issues: tuple[str, ...]) -> tuple[Trace, list[dict[str, str]]]:
    """A trace whose answer writes the repos' issue counts in `form`, and the repos on a
    day when every count is different."""
    names = ["acme/rocket", "acme/boots", "acme/cargo", "acme/dingo"]
    repos = [{"name": n, "issues": i} for n, i in zip(names, issues, strict=True)]
    trace = _trace(
        f"Open {SITE}/repos and report the open issue counts.",
        [_navigated(0, f"{SITE}/repos", "Repos"), _step(1, "browser_extract", {}, repos)],
        form.format(*(v for r in repos for v in (r["name"], r["issues"]))),
    )
    return trace, [{"name": n, "issues": str(40 + k)} for k, n in enumerate(names)]


@pytest.mark.parametrize(
    ("issues", "form"),
    [
        (("3", "2", "12", "5"), "{0} open issues: {1}."),
        (("1", "2", "12", "5"), "{0} rank: #{1}"),
        (("1", "2", "12", "5"), "{0}: {1}. {2}: {3}. {4}: {5}."),
        (("1", "2", "12", "5"), "{0}, {1}) {2}, {3}) {4}, {5})"),
    ],
)
def test_a_count_written_like_a_list_number_is_read_again(
    issues: tuple[str, ...], form: str
) -> None:
    # "3." ends the value it belongs to; "1. acme/boots" would number acme/boots as the
    # first item, but it is the second. The counts change: yesterday's must not stay.
    trace, today = _repos(form, issues)
    executor = _executor(trace)
    result = _result(executor)
    if result.mode == "template":
        expected = form.format(*(v for r in today for v in (r["name"], r["issues"])))
        assert simulate(executor, _on(trace, step_1=today)) == expected
    else:
        assert result.variables == ["step_1"]


# --- short words: "OK" is an item's state too --------------------------------------------


HEALTH = [
    {"name": "API", "state": "OK"},
    {"name": "Database", "state": "OK"},
    {"name": "Queue", "state": "Down"},
]


def _health(answer: str) -> Trace:
    return _trace(
        f"Open {SITE}/health and list the first 2 components with their state.",
        [_navigated(0, f"{SITE}/health", "Health"), _step(1, "browser_extract", {}, HEALTH)],
        answer,
    )


def test_a_short_state_is_read_from_the_item_its_line_names() -> None:
    trace = _health("API: OK\nDatabase: OK")
    executor = _executor(trace)
    assert simulate(executor, trace) == trace.answer
    today = [dict(c) for c in HEALTH]
    today[1]["state"] = "Down"
    assert simulate(executor, _on(trace, step_1=today)) == "API: OK\nDatabase: Down"


@pytest.mark.parametrize("answer", ["API: ok\nDatabase: ok", "Both are OK: API, Database"])
def test_a_short_state_no_reference_pins_down_is_written_again(answer: str) -> None:
    result = _result(_executor(_health(answer)))
    assert result.mode == "llm" and result.variables == ["step_1"], result.template


# --- lists inside list items: each item is its own ------------------------------------


def test_a_value_items_of_a_nested_list_hold_is_read_from_its_own_item() -> None:
    def groups(*states: str) -> dict[str, Any]:
        names = ("API", "Web app")
        items = [{"name": n, "state": s} for n, s in zip(names, states, strict=True)]
        return {"groups": [{"title": "Core", "items": items}]}

    trace = _trace(
        f"Open {SITE}/status and report the state of the first 2 core components.",
        [
            _navigated(0, f"{SITE}/status", "Status"),
            _step(1, "browser_extract", {}, groups("Operational", "Operational")),
        ],
        "API: Operational\nWeb app: Operational",
    )
    executor = _executor(trace)
    for states in (("Major outage", "Operational"), ("Operational", "Major outage")):
        today = simulate(executor, _on(trace, step_1=groups(*states)))
        assert today == f"API: {states[0]}\nWeb app: {states[1]}"


# --- the prompt names a city in a script written without spaces ------------------------


@pytest.mark.parametrize(
    ("prompt", "city"),
    [
        (f"{SITE}/weather で東京の天気を調べてください", "東京"),
        (f"{SITE}/weather 에서 서울의 날씨를 확인하세요", "서울"),
        (f"ค้นหาสภาพอากาศกรุงเทพที่ {SITE}/weather", "กรุงเทพ"),
    ],
)
def test_a_city_the_prompt_names_without_spaces_is_typed_as_written(prompt: str, city: str) -> None:
    trace = _trace(
        prompt,
        [
            _navigated(0, f"{SITE}/weather", "Weather"),
            _step(1, "browser_type", {"selector": "#q", "text": city}, {"ok": True}),
            _step(2, "browser_read_page", {}, f"{city}: 22°C\nWind 3 m/s"),
        ],
        "22°C",
    )
    executor = _executor(trace)
    typed = next(s for s in executor.steps if isinstance(s, ToolStep) and s.trace_step == 1)
    assert typed.input == {"selector": "#q", "text": city}
    assert not any(isinstance(s, LlmStep) for s in executor.steps)


# --- "Top 3": the task's count, not a value some output happens to hold ----------------


def test_the_task_s_count_in_the_answer_s_words_is_not_data() -> None:
    headlines = ["Markets rally", "Storm hits coast", "Museum opens", "Team wins"]
    links = [{"title": t, "href": f"/s/{n}"} for n, t in enumerate(headlines)]
    pages = [{"title": "2", "href": "?page=2"}, {"title": "3", "href": "?page=3"}]
    trace = _trace(
        f"Open {SITE}/news and give me the top 3 headlines.",
        [_navigated(0, f"{SITE}/news", "News"), _step(1, "browser_extract", {}, links + pages)],
        "Top 3 headlines:\n1. Markets rally\n2. Storm hits coast\n3. Museum opens",
    )
    executor = _executor(trace)
    today = [{"title": t, "href": "/x"} for t in ("Rates cut", "Snow", "Zoo", "Cup")] + pages
    assert simulate(executor, _on(trace, step_1=today)) == (
        "Top 3 headlines:\n1. Rates cut\n2. Snow\n3. Zoo"
    )


# --- several items on one line, one item per block -------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "{0} ({1}), {2} ({3}), {4} ({5})",
        "Name: {0}\nState: {1}\n\nName: {2}\nState: {3}\n\nName: {4}\nState: {5}",
        "- {0}\n  state: {1}\n- {2}\n  state: {3}\n- {4}\n  state: {5}",
    ],
)
def test_a_value_several_items_hold_is_read_from_the_item_of_its_clause_or_block(
    form: str,
) -> None:
    def answer(components: list[dict[str, str]]) -> str:
        return form.format(*(v for c in components[:3] for v in (c["name"], c["state"])))

    trace = _status_trace(
        f"Open {SITE}/status and list the first 3 components with their state.",
        answer(COMPONENTS),
    )
    executor = _executor(trace)
    assert _result(executor).mode == "template"
    today = [dict(c) for c in COMPONENTS]
    today[1]["state"], today[2]["state"] = "Major outage", "Operational"
    assert simulate(executor, _on(trace, step_1=today)) == answer(today)


@pytest.mark.parametrize(
    "form",
    [
        "- {0}\n  - {1}\n- {2}\n  - {3}\n- {4}\n  - {5}\n- {6}\n  - {7}",
        "{0} ({1}), {2} ({3}), {4} ({5}), {6} ({7})",
        "{1} - {0}, {3} - {2}, {5} - {4}, {7} - {6}",
        "{0},{1}\n{2},{3}\n{4},{5}\n{6},{7}",
    ],
)
def test_an_item_whose_every_text_other_items_hold_too_is_written_again(form: str) -> None:
    # The fourth item is named "No" and is "Degraded" like Omega, and Beta's state is
    # "No" too: no reference reads the fourth item, so its texts would be read from
    # Beta and Omega, and tomorrow's answer would name neither it nor its state.
    items = [
        {"name": "Alpha", "state": "Up"},
        {"name": "Beta", "state": "No"},
        {"name": "Omega", "state": "Degraded"},
        {"name": "No", "state": "Degraded"},
        {"name": "Zeta", "state": "Up"},
    ]
    trace = _trace(
        f"Open {SITE}/status and list the first 4 items with their state.",
        [_navigated(0, f"{SITE}/status", "Status"), _step(1, "browser_extract", {}, items)],
        form.format(*(v for i in items[:4] for v in (i["name"], i["state"]))),
    )
    result = _result(_executor(trace))
    assert result.mode == "llm" and result.variables == ["step_1"], result.template


# --- a number typed as a JSON number ------------------------------------------------------


def test_a_number_typed_as_a_json_number_is_read_again_like_its_text() -> None:
    """browser_fill_form takes numbers as well as strings: today's rate typed as 1.0834
    came from the page as surely as "1.0834" would have, and must not replay as a
    constant (yesterday's rate, sent every day with no expectation to catch it)."""
    rates = f"{SITE}/rates"
    trace = _trace(
        f"Open {rates}, read today's EUR rate and enter it into the converter at "
        f"{SITE}/convert with the amount 100; report the converted amount.",
        [
            _navigated(0, rates, "Rates"),
            _step(1, "browser_extract", {"selector": ".eur"}, ["1.0834"]),
            _navigated(2, f"{SITE}/convert", "Converter"),
            _step(
                3,
                "browser_fill_form",
                {"fields": {"#rate": 1.0834, "#amount": 100}, "submit": True},
                {"url": f"{SITE}/convert/result"},
            ),
            _step(4, "browser_extract", {"selector": ".result"}, ["108.34 USD"]),
        ],
        "108.34 USD",
    )
    executor = _executor(trace)
    form = next(s for s in executor.steps if isinstance(s, ToolStep) and s.trace_step == 3)
    fields = form.input["fields"]
    # The rate reads today's page; the amount the prompt fixes stays the number it was.
    assert fields == {"#rate": "{{step_1[0]}}", "#amount": 100}
    today = references.render(fields, {1: ["1.0901"]})
    assert today == {"#rate": "1.0901", "#amount": 100}
