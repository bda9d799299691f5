"""Answers that are verdicts on what the run read (a status check, an ops command), and
what a replay checks of a page it reads.

A monitoring task's answer is often made of the prompt's own words ("Alert me if any
service is down" -> "No service is down."), yet the page decided it: compiled as a fixed
answer, every replay would say all is well whatever the page says. Each test replays the
executor on a day when the content changed and looks at what the answer is written from.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contracts.executors import Executor, MinItems, ResultStep, Skip, ToolStep
from contracts.traces import Trace
from services.compiler.compile import compile
from services.compiler.dataflow.prompt import asks_verdict
from services.executor import expectations
from tests.unit.test_compile import SITE, _navigated, _step, _trace, kinds, load, simulate

UP = "Service status\nWater: up\nParking: up\nLibraries: up\nA local site."
DOWN = UP.replace("Water: up", "Water: DOWN")


def _compiled(trace: Trace) -> Executor:
    result = compile(trace.task, trace)
    assert isinstance(result, Executor), result
    return result


def _status(prompt: str, answer: str) -> Trace:
    return _trace(
        prompt,
        [_navigated(0, f"{SITE}/status", "Service status"), _step(1, "browser_read_page", {}, UP)],
        answer,
    )


def _replayed_prompt(executor: Executor, trace: Trace, **outputs: Any) -> str:
    """The result step's prompt as a replay renders it on a day when trace step N
    answered outputs["step_N"]."""
    today = copy.deepcopy(trace)
    for name, output in outputs.items():
        today.steps[int(name.removeprefix("step_"))].output = output
    prompts: dict[int, str] = {}
    simulate(executor, today, prompts=prompts)
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.mode == "llm"
    return prompts[result.index]


# --- 1. a verdict is not a constant -----------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        (f"Check {SITE}/status. Alert me if any service is down.", "No service is down."),
        (f"Check {SITE}/status and tell me whether the API is up.", "The API is up."),
        (f"Open {SITE}/status. Are there any new messages?", "There are no new messages."),
        (f"Open {SITE}/status and tell me whether the shop is open.", "The shop is open."),
        (f"Open {SITE}/status and reply OK if every service is operational.", "OK"),
        # No condition, but "up" is the run's word, not the task's.
        (f"Open {SITE}/status and report the services' status.", "Services: up."),
    ],
)  # fmt: skip
def test_a_verdict_made_of_the_prompts_words_is_decided_again_from_the_page(
    prompt: str, answer: str
) -> None:
    trace = _status(prompt, answer)
    executor = _compiled(trace)
    # The page is read on every replay, and the answer written from it: not a template
    # that says last time's verdict whatever the page says today.
    assert kinds(executor) == ["tool:browser_navigate", "tool:browser_read_page", "result:llm"]
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.variables == ["step_1"]
    assert result.example == answer
    assert "Water: DOWN" in _replayed_prompt(executor, trace, step_1=DOWN)


def test_a_verdict_stated_around_extracted_data_is_written_again() -> None:
    trace = _trace(
        f"Check {SITE}/status and tell me whether the first service is up.",
        [
            _navigated(0, f"{SITE}/status", "Service status"),
            _step(1, "browser_extract", {"selector": ".svc"}, ["Water: up", "Parking: up"]),
        ],
        "Yes: Water: up",
    )
    executor = _compiled(trace)
    result = executor.steps[-1]
    # As a template, the replay would answer "Yes: Water: DOWN".
    assert isinstance(result, ResultStep) and result.mode == "llm"
    assert result.variables == ["step_1"]
    assert "Water: DOWN" in _replayed_prompt(executor, trace, step_1=["Water: DOWN", "Parking: up"])


def test_a_check_of_two_pages_is_written_from_both() -> None:
    trace = _trace(
        f"Check {SITE}/a and {SITE}/b. Alert me if any service is down.",
        [
            _navigated(0, f"{SITE}/a", "A"),
            _step(1, "browser_read_page", {}, "Service A\nWater: up"),
            _navigated(2, f"{SITE}/b", "B"),
            _step(3, "browser_read_page", {}, "Service B\nParking: up"),
        ],
        "No service is down.",
    )
    executor = _compiled(trace)
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.mode == "llm"
    assert result.variables == ["step_1", "step_3"]  # page A's outage counts too
    rendered = _replayed_prompt(executor, trace, step_1="Service A\nWater: DOWN")
    assert "Water: DOWN" in rendered and "Parking: up" in rendered


@pytest.mark.parametrize(
    ("prompt", "steps", "answer"),
    [
        # A fixed confirmation after a form submit, nothing read.
        (
            f"Open {SITE}/signup, fill the form with name=Ada and submit; say Signed up.",
            [
                _navigated(0, f"{SITE}/signup", "Sign up"),
                _step(
                    1,
                    "browser_fill_form",
                    {"fields": {"#name": "Ada"}, "submit": True},
                    {"url": f"{SITE}/thanks", "title": "Thanks"},
                ),
            ],
            "Signed up.",
        ),
        # A condition, but nothing read to decide it from: the load itself is checked.
        (
            f"Open {SITE}/ping and say OK if it loads.",
            [
                _navigated(0, f"{SITE}/ping", "Ping"),
                _step(1, "browser_screenshot", {}, {"sha256": "ab" * 32, "path": "/tmp/x.png"}),
            ],
            "OK",
        ),
        # Content read, but the task fixes the answer and asks no verdict.
        (
            f"Open {SITE}/status and, once it loads, take a screenshot and answer done.",
            [
                _navigated(0, f"{SITE}/status", "Status"),
                _step(1, "browser_read_page", {}, UP),
                _step(2, "browser_screenshot", {}, {"sha256": "ab" * 32}),
            ],
            "done",
        ),
    ],
)
def test_an_answer_the_task_fixes_stays_a_constant(prompt: str, steps: list, answer: str) -> None:
    executor = _compiled(_trace(prompt, steps, answer))
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.mode == "template"
    assert result.template == answer and result.variables == []
    assert executor.stats.llm_steps == 0


@pytest.mark.parametrize(
    ("prompt", "asks"),
    [
        ("Check http://x/status. Alert me if any service is down.", "check"),
        ("Run `df -h /` and tell me whether disk usage is above 90%", "whether"),
        ("Open http://x/inbox. Any new messages?", "?"),
        ("Open http://x/news and report the top 3 headlines", None),
        ("Open http://x/search?q=if and report the first result", None),  # inside the URL
        # A message to type is a value, not a question to the run.
        ('Open http://x/contact, fill message="Is the pool open, and until when?" and '
         "report the confirmation", None),
    ],
)  # fmt: skip
def test_which_tasks_ask_for_a_verdict(prompt: str, asks: str | None) -> None:
    assert asks_verdict(prompt) == asks


# --- 2. a command's output is content ---------------------------------------------------

DF = "Filesystem Size Used Avail Use% Mounted on\n/dev/sda1 100G 42G 58G 42% /"
DF_FULL = DF.replace("42G 58G 42%", "97G 3G 97%")


def _shell(i: int, command: str, stdout: str) -> Any:
    output = {"exit_code": 0, "stdout": stdout, "stderr": ""}
    return _step(i, "shell_exec", {"command": command}, output, exit_code=0)


@pytest.mark.parametrize(
    ("prompt", "answer", "variables"),
    [
        # A verdict: written from everything the run read.
        ("Run `df -h /` and tell me whether disk usage is above 90%", "No — / is at 42%.",
         ["step_0", "step_1"]),
        # A figure: written from the command that printed it.
        ("Run `df -h /` and report how full the root filesystem is", "/ is at 42%.", ["step_0"]),
    ],
)  # fmt: skip
def test_an_answer_from_a_commands_output_is_written_from_todays_output(
    prompt: str, answer: str, variables: list[str]
) -> None:
    trace = _trace(prompt, [_shell(0, "df -h /", DF), _shell(1, "hostname", "web-1")], answer)
    executor = _compiled(trace)
    assert kinds(executor) == ["tool:shell_exec", "tool:shell_exec", "result:llm"]
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.variables == variables
    assert "(none)" not in (result.prompt or "")
    today = {"exit_code": 0, "stdout": DF_FULL, "stderr": ""}
    assert "97%" in _replayed_prompt(executor, trace, step_0=today)


def test_an_unknown_tools_output_is_content() -> None:
    trace = _trace(
        "Look up the weather in Lisbon and tell me if I need an umbrella.",
        [
            _step(0, "weather_lookup", {"city": "Lisbon"}, {"forecast": "rain", "temp_c": 14}),
            _step(1, "browser_screenshot", {}, {"sha256": "ab" * 32, "path": "/tmp/x.png"}),
        ],
        "Yes, take an umbrella.",
    )
    executor = _compiled(trace)
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.mode == "llm"
    assert result.variables == ["step_0"]
    sunny = {"forecast": "sunny", "temp_c": 25}
    assert "sunny" in _replayed_prompt(executor, trace, step_0=sunny)


def test_an_answer_needing_the_model_with_no_data_is_not_compiled() -> None:
    trace = _trace(
        f"Open {SITE}/notes and save this week's summary to notes.txt.",
        [
            _step(0, "browser_scroll", {"direction": "down"}, None),
            _step(1, "file_write", {"path": "notes.txt", "content": "summary"}, None),
        ],
        "Wrote the weekly summary on Tuesday.",
    )
    result = compile(trace.task, trace)
    # A small model with no data could only say "Tuesday" again, every week.
    assert isinstance(result, Skip)
    assert "no step's output gives it data" in result.reason


# --- 3. a page read must have text ------------------------------------------------------


def test_a_status_page_read_fails_on_an_empty_or_placeholder_page() -> None:
    trace = load("status_page")
    executor = _compiled(trace)
    read = executor.steps[1]
    assert isinstance(read, ToolStep) and read.tool == "browser_read_page"
    assert read.expect == [MinItems(count=5)]
    day2 = str(trace.steps[1].output).replace("closed for the holiday", "operational")
    for page in ("", "Loading...", "502 Bad Gateway\nnginx"):
        reason = expectations.check_all(read.expect, page)
        assert reason is not None and "non-blank lines" in reason, page
    assert expectations.check_all(read.expect, day2) is None  # another day's statuses


def test_a_short_page_read_must_still_not_be_empty() -> None:
    trace = _status(f"Open {SITE}/status and report the services' status.", "Services: up.")
    trace.steps[1].output = "Water: up"
    read = _compiled(trace).steps[1]
    assert isinstance(read, ToolStep) and read.expect == [MinItems(count=1)]
    assert expectations.check_all(read.expect, "Water: DOWN") is None
    assert expectations.check_all(read.expect, " \n\n") is not None
