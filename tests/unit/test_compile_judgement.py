"""Golden compile tests for values the page decides although the prompt names them
(a verdict, one of named options), for links that overlap the page URL, and for page
titles that state a condition. Each trace is compiled both with and without the
model's chatty sentences: what it said before a call never changes the executor.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contracts.executors import (
    ContainsText,
    Executor,
    HttpStatus,
    InList,
    LlmStep,
    ResultStep,
    ToolStep,
)
from contracts.traces import Trace
from services.compiler.compile import compile
from tests.unit.test_compile import SITE, _navigated, _step, _trace, kinds, simulate


def compiled(trace: Trace) -> Executor:
    """Compile `trace` and check the model's sentences change nothing."""
    chatty, silent = copy.deepcopy(trace), copy.deepcopy(trace)
    for step in chatty.steps:
        step.model_text = "Let me open the page and look. I'll pick carefully."
        step.thinking_blocks = 2
    for step in silent.steps:
        step.model_text, step.thinking_blocks = "", 0
    result = compile(silent.task, silent)
    assert isinstance(result, Executor), result
    assert compile(chatty.task, chatty) == result
    return result


# --- a link picked from an extract, behind a page URL that overlaps it ----------------

STORIES = [{"title": "A story", "href": "/s/a"}, {"title": "B story", "href": "/s/b"}]


def _story_trace(prompt_url: str, landed: str) -> Trace:
    return _trace(
        f"Open the first story on {prompt_url} and give its title and first paragraph.",
        [
            _navigated(0, prompt_url, "News", landed=landed),
            _step(1, "browser_extract", {"selector": ".story", "fields": {}}, STORIES),
            _step(
                2,
                "browser_navigate",
                {"url": f"{SITE}/s/a"},
                {"url": f"{SITE}/s/a", "status": 200, "title": "A story"},
                http_status=200,
            ),
            _step(3, "browser_extract", {"selector": "p"}, ["First para."]),
        ],
        "A story: First para.",
    )


@pytest.mark.parametrize(
    ("prompt_url", "landed"),
    [
        (SITE, f"{SITE}/"),  # the browser adds a slash: the page URL overlaps the href
        (SITE, SITE),
        (f"{SITE}/news", f"{SITE}/news"),
        (f"{SITE}/news", f"{SITE}/news/"),
    ],
)
def test_the_opened_story_follows_the_extract_whatever_the_page_url(
    prompt_url: str, landed: str
) -> None:
    trace = _story_trace(prompt_url, landed)
    executor = compiled(trace)
    assert kinds(executor) == [
        "tool:browser_navigate",
        "tool:browser_extract",
        "condition",
        "templated:browser_navigate",
        "tool:browser_extract",
        "result:template",
    ]
    story = executor.steps[3]
    assert isinstance(story, ToolStep) and story.input == {"url": f"{SITE}{{{{step_1[0].href}}}}"}
    assert simulate(executor, trace) == trace.answer
    # Another day the first story is another one: the replay opens that one.
    fresh = copy.deepcopy(trace)
    fresh.steps[1].output = [{"title": "C story", "href": "/s/c"}, *STORIES]
    fresh.steps[2].input = {"url": f"{SITE}/s/c"}
    fresh.steps[2].output = {"url": f"{SITE}/s/c", "status": 200, "title": "C story"}
    simulate(executor, fresh)  # renders the new URL, or the assertion inside fails


# --- a verdict the prompt names: the page decides it ----------------------------------

STATUS = "Service status\nWater supply: operational\nParking permits: down"


def _status_trace(prompt: str, answer: str) -> Trace:
    return _trace(
        prompt,
        [
            _navigated(0, f"{SITE}/status", "Service status"),
            _step(1, "browser_read_page", {}, STATUS),
        ],
        answer,
    )


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        (f"Open {SITE}/status and answer yes if every service is operational, otherwise no.", "no"),
        (f"Open {SITE}/status and tell me if water supply is operational or down.", "operational"),
        (f"Read {SITE}/status; report OK when all services are up, else report ALERT.", "ALERT"),
    ],
)  # fmt: skip
def test_a_verdict_between_named_answers_is_decided_again_from_the_page(
    prompt: str, answer: str
) -> None:
    trace = _status_trace(prompt, answer)
    executor = compiled(trace)
    assert kinds(executor) == ["tool:browser_navigate", "tool:browser_read_page", "result:llm"]
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.variables == ["step_1"]
    prompts: dict[int, str] = {}
    simulate(executor, trace, prompts=prompts)
    assert "Parking permits: down" in prompts[result.index]  # today's page, for today's verdict


def test_an_answer_the_prompt_fixes_stays_a_constant() -> None:
    trace = _status_trace(
        f"Open {SITE}/status and, once it loads, take a screenshot and answer done.", "done"
    )
    trace.steps.append(_step(2, "browser_screenshot", {}, {"sha256": "ab" * 32}))
    executor = compiled(trace)
    assert kinds(executor) == [
        "tool:browser_navigate",
        "tool:browser_screenshot",
        "result:template",
    ]
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.template == "done"


# --- one of the options the prompt names, chosen by the page --------------------------

PRODUCTS = [
    {"name": "Widget", "price": "$12.00"},
    {"name": "Gadget", "price": "$8.50"},
    {"name": "Gizmo", "price": "$3.50"},
]


def _shop_trace(prompt: str) -> Trace:
    return _trace(
        prompt,
        [
            _navigated(0, f"{SITE}/shop", "Shop"),
            _step(1, "browser_extract", {"selector": ".product", "fields": {}}, PRODUCTS),
            _step(
                2,
                "browser_click",
                {"text": "Gizmo"},
                {"url": f"{SITE}/p/gizmo", "title": "Gizmo - Shop"},
                http_status=200,
            ),
            _step(3, "browser_extract", {"selector": ".stock"}, ["In stock: 14"]),
        ],
        "In stock: 14",
    )


@pytest.mark.parametrize(
    "prompt",
    [
        f"On {SITE}/shop, of Widget, Gadget and Gizmo click the cheapest one and report its stock.",
        f"On {SITE}/shop click Widget or Gizmo, whichever costs less, and report its stock.",
    ],
)  # fmt: skip
def test_an_option_the_prompt_names_is_picked_again_from_the_extract(prompt: str) -> None:
    trace = _shop_trace(prompt)
    executor = compiled(trace)
    assert kinds(executor) == [
        "tool:browser_navigate",
        "tool:browser_extract",
        "condition",
        "llm",  # pick the product again from today's list
        "templated:browser_click",
        "tool:browser_extract",
        "result:template",
    ]
    pick, click = executor.steps[3], executor.steps[4]
    assert isinstance(pick, LlmStep) and pick.expect == [InList(ref="{{step_1}}", path=["name"])]
    assert isinstance(click, ToolStep) and click.input == {"text": "{{step_3}}"}
    assert simulate(executor, trace, {3: "Gizmo"}) == trace.answer
    # Gadget is cheaper another day: the click follows the pick, not last time's name.
    fresh: Any = copy.deepcopy(trace)
    fresh.steps[2].input = {"text": "Gadget"}
    simulate(executor, fresh, {3: "Gadget"})


@pytest.mark.parametrize(
    "prompt",
    [
        f"On {SITE}/shop click Gizmo and report its stock.",
        f"Open {SITE}/shop and click 'Gizmo'; report its stock.",
        f"On {SITE}/shop, of Widget, Gadget and Gizmo click Gizmo and report its stock.",
    ],
)
def test_a_label_the_prompt_fixes_stays_a_deterministic_click(prompt: str) -> None:
    executor = compiled(_shop_trace(prompt))
    assert kinds(executor) == [
        "tool:browser_navigate",
        "tool:browser_click",
        "tool:browser_extract",
        "result:template",
    ]
    click = executor.steps[1]
    assert isinstance(click, ToolStep) and click.input == {"text": "Gizmo"}
    assert executor.stats.llm_steps == 0


# --- a title that states a condition is content, not the page's name ------------------


def _monitor_trace(title: str) -> Trace:
    return _trace(
        f"Check {SITE}/status and tell me whether anything is down.",
        [
            _navigated(0, f"{SITE}/status", title),
            _step(1, "browser_extract", {"selector": ".svc"}, ["Water: up", "Parking: up"]),
        ],
        "Nothing is down: Water: up, Parking: up",
    )


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("All systems operational", None),  # the next outage would fail every replay
        ("Status: All systems operational", "Status"),
        ("Service status", "Service status"),  # the page's name: still checked
        ("Town Hall", "Town Hall"),
    ],
)
def test_a_title_that_states_a_condition_is_not_expected(title: str, expected: str | None) -> None:
    executor = compiled(_monitor_trace(title))
    nav = executor.steps[0]
    assert isinstance(nav, ToolStep)
    texts = [HttpStatus(status=200)] + ([ContainsText(text=expected)] if expected else [])
    assert nav.expect == texts
