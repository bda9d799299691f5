"""The stand-in's policy on canned tool results: each vocabulary item, probing, the
misbehaviour markers, and reading tool results out of a Messages API request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts.tools import SESSION_LOST as RUNNER_SESSION_LOST
from services.dev.standin.conversation import (
    Answer,
    ApiFailure,
    Conversation,
    Decision,
    Step,
    ToolCall,
    read_conversation,
)
from services.dev.standin.policy import MAX_SESSION_RESTARTS, STUCK_CALL, decide
from services.dev.standin.reading import parse_price
from services.dev.standin.scripts import CANDIDATE_RECORDS, CANDIDATE_SELECTORS
from services.dev.standin.vocabulary import parse_fields
from services.executor.quality import Verdict, parse_verdict, quality_prompt

BROWSER = frozenset(
    {
        "browser_navigate",
        "browser_extract",
        "browser_click",
        "browser_fill_form",
        "browser_read_page",
        "browser_scroll",
    }
)
NAV_OK = {"url": "http://site.test/", "status": 200, "title": "Site"}


def step(call: ToolCall, output: Any = None, ok: bool = True, error: str | None = None) -> Step:
    return Step(name=call.name, input=call.input, ok=ok, output=output, error=error)


def play(prompt: str, tool_outputs: Any, tools: frozenset[str] = BROWSER) -> list[Decision]:
    """Run the policy to its end. `tool_outputs(call)` gives (ok, output) for a call."""
    steps: list[Step] = []
    decisions: list[Decision] = []
    for _ in range(30):
        decision = decide(Conversation(prompt=prompt, tools=tools, steps=tuple(steps)))
        decisions.append(decision)
        if not isinstance(decision, ToolCall):
            return decisions
        ok, output = tool_outputs(decision)
        steps.append(step(decision, output if ok else None, ok, None if ok else str(output)))
    raise AssertionError("the policy never finished")


def calls(decisions: list[Decision]) -> list[tuple[str, dict[str, Any]]]:
    return [(d.name, d.input) for d in decisions if isinstance(d, ToolCall)]


# --- 1 and 2: top N ---------------------------------------------------------------------


def test_top_n_takes_the_first_candidate_that_has_enough_items() -> None:
    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_navigate":
            return True, NAV_OK
        return True, (
            ["Alpha", "Beta  news", "Gamma", "Delta"]
            if call.input["selector"] == ".headline"
            else []
        )

    decisions = play("Open http://site.test/ and report the top 3 headlines.", tools)
    assert calls(decisions) == [
        ("browser_navigate", {"url": "http://site.test/"}),
        ("browser_extract", {"selector": ".headline"}),
    ]
    assert decisions[-1] == Answer("Top 3 headlines:\n1. Alpha\n2. Beta news\n3. Gamma")
    assert decisions[0].preface == "Let me open http://site.test/."  # type: ignore[union-attr]


def test_top_n_probes_in_order_and_keeps_short_probes_in_the_conversation() -> None:
    matches = {"li.item": ["one", "two", "three"], "article .title": ["only one"]}

    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_navigate":
            return True, NAV_OK
        return True, matches.get(call.input["selector"], [])

    decisions = play("open http://site.test/list and report the top two stories", tools)
    assert calls(decisions)[1:] == [
        ("browser_extract", {"selector": ".headline"}),
        ("browser_extract", {"selector": "article .title"}),
        ("browser_extract", {"selector": "li.item"}),
    ]
    assert decisions[-1] == Answer("Top 2 stories:\n1. one\n2. two")
    prefaces = [d.preface for d in decisions if isinstance(d, ToolCall)]
    assert prefaces[1] is None and prefaces[2] == prefaces[3] is not None


def test_top_n_gives_up_after_every_candidate() -> None:
    decisions = play(
        "Open http://site.test/ and report the top 3 headlines",
        lambda c: (True, NAV_OK if c.name == "browser_navigate" else []),
    )
    probes = [i["selector"] for n, i in calls(decisions) if n == "browser_extract"]
    assert probes == CANDIDATE_SELECTORS
    assert isinstance(decisions[-1], Answer) and "could not find 3 headlines" in decisions[-1].text


def test_click_then_top_n() -> None:
    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_extract":
            return True, ["x", "y"]
        return True, NAV_OK

    prompt = 'Open http://site.test/, click "Older posts", and report the top 2 posts.'
    decisions = play(prompt, tools)
    assert calls(decisions)[:3] == [
        ("browser_navigate", {"url": "http://site.test/"}),
        ("browser_click", {"text": "Older posts"}),
        ("browser_extract", {"selector": ".headline"}),
    ]
    assert decisions[-1] == Answer("Top 2 posts:\n1. x\n2. y")


def test_failed_navigation_and_click_end_with_an_explanation() -> None:
    nav = play(
        "Open http://down.test/ and report the top 3 headlines",
        lambda c: (False, "net::ERR_CONNECTION_REFUSED"),
    )
    assert nav[-1] == Answer("I could not open http://down.test/: net::ERR_CONNECTION_REFUSED")
    click = play(
        "Open http://site.test/, click Next, and report the top 3 headlines",
        lambda c: (c.name != "browser_click", NAV_OK if c.name != "browser_click" else "no match"),
    )
    assert isinstance(click[-1], Answer) and "could not click 'Next'" in click[-1].text


# --- 3: forms ---------------------------------------------------------------------------


def test_fill_form_reports_the_confirmation_line() -> None:
    page = "Newsletter\n\n  Thanks,   Ada!  Your subscription is confirmed.\nFooter"

    def tools(call: ToolCall) -> tuple[bool, Any]:
        return True, page if call.name == "browser_read_page" else NAV_OK

    prompt = (
        "Open http://site.test/signup, fill the form with name=Ada Lovelace, "
        'email=ada@example.com, note="hi, there" and report the confirmation.'
    )
    decisions = play(prompt, tools)
    assert calls(decisions) == [
        ("browser_navigate", {"url": "http://site.test/signup"}),
        (
            "browser_fill_form",
            {"fields": {"name": "Ada Lovelace", "email": "ada@example.com", "note": "hi, there"}},
        ),
        ("browser_read_page", {}),
    ]
    assert decisions[-1] == Answer("Confirmation: Thanks, Ada! Your subscription is confirmed.")


def test_fill_form_without_a_confirmation() -> None:
    decisions = play(
        "Open http://site.test/f, fill the form with q=1 and report the confirmation",
        lambda c: (True, "Nothing here" if c.name == "browser_read_page" else NAV_OK),
    )
    assert decisions[-1] == Answer("The form was submitted, but the page shows no confirmation.")


def test_parse_fields() -> None:
    assert parse_fields("a=1, b = two words ,#c='x, y'") == {
        "a": "1",
        "b": "two words",
        "#c": "x, y",
    }


# --- 4: judgement -----------------------------------------------------------------------

PRODUCTS = [
    {"name": "Kettle", "price": "$24.00"},
    {"name": "Toaster", "price": "$1,019.50"},
    {"name": "Mug", "price": "$4.50"},
    {"name": "Cup", "price": "$4.50"},
    {"name": None, "price": "$0.10"},
]


def test_cheapest_probes_records_and_names_the_cheapest() -> None:
    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_navigate":
            return True, NAV_OK
        return True, PRODUCTS if call.input["selector"] == "li.item" else []

    decisions = play("Open http://shop.test/ and report the cheapest product.", tools)
    extracts = [i for n, i in calls(decisions) if n == "browser_extract"]
    assert extracts == [{"selector": s, "fields": f} for s, f in CANDIDATE_RECORDS[:2]]
    assert decisions[-1] == Answer("Cheapest product: Mug at $4.50")


def test_open_the_cheapest_and_report_a_detail() -> None:
    detail_page = "Mug\nPrice: $4.50\nShipping time: 3 days\n"

    def tools(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_extract":
            return True, PRODUCTS
        if call.name == "browser_read_page":
            return True, detail_page
        return True, NAV_OK

    prompt = "Open http://shop.test/, open the cheapest product and report its shipping time."
    decisions = play(prompt, tools)
    assert calls(decisions)[2:] == [("browser_click", {"text": "Mug"}), ("browser_read_page", {})]
    assert decisions[-1] == Answer("Cheapest product: Mug at $4.50; shipping time: 3 days")


def test_judgement_prompt_for_replay_steps() -> None:
    prompt = (
        "Pick the cheapest product from this JSON and answer with its name only:\n"
        + json.dumps(PRODUCTS)
    )
    assert decide(Conversation(prompt=prompt, tools=frozenset())) == Answer("Mug")
    by_price = prompt.replace("its name only", "its price only")
    assert decide(Conversation(prompt=by_price, tools=frozenset())) == Answer("$4.50")


def test_parse_price() -> None:
    assert parse_price("$1,299.00") == 1299.0
    assert parse_price("EUR 3") == 3.0
    assert parse_price(".5") == 0.5
    assert parse_price("free") is None
    assert parse_price(7) == 7.0


# --- the smaller items ------------------------------------------------------------------


def test_extract_title_and_read() -> None:
    extract = play(
        "Open http://site.test/ and extract `ul.links a`",
        lambda c: (True, ["a", "b"] if c.name == "browser_extract" else NAV_OK),
    )
    assert calls(extract)[1] == ("browser_extract", {"selector": "ul.links a"})
    assert extract[-1] == Answer("Items matching ul.links a:\n1. a\n2. b")
    title = play("Open http://site.test/ and report its title", lambda c: (True, NAV_OK))
    assert title[-1] == Answer("Title: Site")
    read = play(
        "Open http://site.test/ and read the page",
        lambda c: (True, "One\n\nTwo" if c.name == "browser_read_page" else NAV_OK),
    )
    assert read[-1] == Answer("The page reads:\nOne\nTwo")


def test_unknown_prompts_and_missing_tools_get_an_honest_answer() -> None:
    unknown = decide(Conversation(prompt="Write me a poem", tools=BROWSER))
    assert isinstance(unknown, Answer)
    assert "stand-in" in unknown.text and "report the top <N> <things>" in unknown.text
    no_tools = decide(
        Conversation(prompt="Open http://x.test/ and report the top 3 headlines", tools=frozenset())
    )
    assert isinstance(no_tools, Answer) and "browser_navigate" in no_tools.text


# --- markers ----------------------------------------------------------------------------


def test_stuck_repeats_the_same_failing_call() -> None:
    prompt = "Open http://site.test/ and report the top 3 headlines [standin:stuck]"
    steps: list[Step] = []
    seen = []
    for _ in range(4):
        decision = decide(Conversation(prompt=prompt, tools=BROWSER, steps=tuple(steps)))
        assert isinstance(decision, ToolCall)
        seen.append((decision.name, decision.input))
        steps.append(step(decision, ok=False, error="no element matches"))
    assert seen == [(STUCK_CALL[0], STUCK_CALL[1])] * 4


def test_endless_never_ends_and_varies_its_input() -> None:
    prompt = "[standin:endless] keep going"
    steps: list[Step] = []
    inputs = []
    for _ in range(25):
        decision = decide(Conversation(prompt=prompt, tools=BROWSER, steps=tuple(steps)))
        assert isinstance(decision, ToolCall) and decision.name == "browser_scroll"
        inputs.append(decision.input["amount"])
        steps.append(step(decision, {"scroll_y": 0}))
    assert len(set(inputs)) == 25


@pytest.mark.parametrize(
    ("marker", "status", "kind"),
    [
        ("[standin:fail]", 500, "api_error"),
        ("[standin:fail:529]", 529, "overloaded_error"),
        ("[standin:fail:400]", 400, "invalid_request_error"),
    ],
)
def test_fail_marker_answers_an_api_error(marker: str, status: int, kind: str) -> None:
    decision = decide(Conversation(prompt=f"do it {marker}", tools=BROWSER))
    assert isinstance(decision, ApiFailure)
    assert (decision.status, decision.error_type) == (status, kind)


def test_redacted_marker_flags_tool_calls() -> None:
    prompt = "Open http://site.test/ and report the top 3 headlines [standin:redacted]"
    decision = decide(Conversation(prompt=prompt, tools=BROWSER))
    assert isinstance(decision, ToolCall) and decision.redacted
    assert decision.input == {"url": "http://site.test/"}


def test_unsupported_marker_flags_answers_only() -> None:
    answer = decide(Conversation(prompt="hello [standin:unsupported]", tools=BROWSER))
    assert isinstance(answer, Answer) and answer.unsupported
    assert "stand-in" in answer.text  # the usual answer, marker left out
    prompt = "Open http://site.test/ and report the top 3 headlines [standin:unsupported]"
    call = decide(Conversation(prompt=prompt, tools=BROWSER))
    assert isinstance(call, ToolCall)  # tool turns go back to the API: left as they are


# --- reading a request ------------------------------------------------------------------


def test_read_conversation_pairs_calls_with_results() -> None:
    body = {
        "tools": [{"name": "browser_navigate", "input_schema": {}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Open it"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "s"},
                    {
                        "type": "tool_use",
                        "id": "a",
                        "name": "browser_navigate",
                        "input": {"url": "u"},
                    },
                    {"type": "tool_use", "id": "b", "name": "browser_extract", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "b",
                        "content": "boom",
                        "is_error": True,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "a",
                        "content": [
                            {"type": "text", "text": json.dumps({"ok": True, "output": [1]})}
                        ],
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "x", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c", "content": "plain text"}],
            },
        ],
    }
    conv = read_conversation(body)
    assert conv.prompt == "Open it"
    assert conv.tools == frozenset({"browser_navigate"})
    assert conv.steps == (
        Step(name="browser_navigate", input={"url": "u"}, ok=True, output=[1]),
        Step(name="browser_extract", input={}, ok=False, error="boom"),
        Step(name="x", input={}, ok=True, output="plain text"),
    )
    failed = read_conversation(
        {
            "messages": [
                {"role": "user", "content": "p"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "z", "name": "t", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "z",
                            "content": json.dumps(
                                {
                                    "ok": False,
                                    "output": None,
                                    "error": {"code": "x", "message": "gone"},
                                }
                            ),
                        }
                    ],
                },
            ]
        }
    )
    assert failed.steps[0].ok is False and failed.steps[0].error == "gone"


def test_a_truncation_note_after_json_output_is_ignored() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "p"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "browser_extract", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": '["a", "b"]\n[output truncated]',
                    }
                ],
            },
        ]
    }
    assert read_conversation(body).steps[0].output == ["a", "b"]


def test_answer_again_prompt_answers_from_todays_data() -> None:
    # The compiler's llm result step for a form task: the stand-in must answer in the
    # same form as the full run, from the fresh page text it is given.
    from services.dev.standin.conversation import Answer, Conversation
    from services.dev.standin.policy import decide

    prompt = (
        "Task (for context): Open <url>, fill the form with name=Ada, plan=pro and report "
        "the confirmation\n\n"
        "Answer the task again from today's data, in exactly the same form as this earlier "
        "answer (same structure, wording and formatting; only the data may differ):\n"
        "<example>\nConfirmation: Thank you, Bob! Your basic plan is confirmed.\n</example>\n"
        "Reply with only the answer.\n\n"
        "Today's data:\nstep_2 (browser_read_page): Welcome\n"
        "Thank you, Ada! Your pro plan is confirmed.\nWe wrote to ada@example.com."
    )
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert decision == Answer("Confirmation: Thank you, Ada! Your pro plan is confirmed.")

    shop = (
        "Task (for context): Open <url>, open the cheapest gadget and report its description"
        "\n\nAnswer the task again from today's data, in exactly the same form.\n\n"
        "Today's data:\n"
        'step_1 (browser_extract): [{"name":"Mug","price":"$9.00"},'
        '{"name":"Pot","price":"$4.50"}]\n'
        "step_3 (browser_read_page): Pot\n$4.50\nDescription: Small and sturdy."
    )
    decision = decide(Conversation(prompt=shop, tools=frozenset()))
    assert decision == Answer("Cheapest gadget: Pot at $4.50; description: Small and sturdy.")


# --- 11: quality check of a replayed answer ---------------------------------------------

EARLIER = "Top 3 headlines:\n1. Bridge approved\n2. Team wins\n3. Storm warning"


@pytest.mark.parametrize(
    ("new", "verdict"),
    [
        ("Top 3 headlines:\n1. Market opens\n2. Fair ends\n3. Road closed", "PASS"),
        ("Top 3 headlines:\n1. Loading…\n2. Loading…\n3. Loading…", "FAIL: listed items repeat"),
        ("Top 3 headlines:\n1. Market opens\n2.\n3. Road closed", "FAIL: a listed item is empty"),
        ("Top 3 headlines:\n1. Market opens", "FAIL: it has 2 lines"),
        ("Sorry, nothing found", "FAIL: it does not begin like"),
        ("", "FAIL: the new answer is empty"),
    ],
)
def test_quality_check_prompt_judges_the_form_of_a_replayed_answer(new: str, verdict: str) -> None:
    # The prompt exactly as the runner writes it; it quotes a task the stand-in also
    # knows, which must not be mistaken for that task.
    prompt = quality_prompt("Open http://x.test/news and report the top 3 headlines", EARLIER, new)
    answer = decide(Conversation(prompt=prompt, tools=BROWSER))
    assert isinstance(answer, Answer) and answer.text.startswith(verdict)
    assert parse_verdict(answer.text).ok is (verdict == "PASS")


def test_verdicts_that_do_not_say_pass_or_fail_fail() -> None:
    assert parse_verdict("PASS: fine") == Verdict(True, "fine")
    assert parse_verdict("fail: items repeat") == Verdict(False, "items repeat")
    unclear = parse_verdict("The answer looks mostly fine to me.")
    assert not unclear.ok and "unreadable verdict" in unclear.reason
    assert not parse_verdict("PASSING grade, mostly").ok


@pytest.mark.parametrize(
    ("said", "verdict"),
    [
        ("**PASS**: same list of headlines", Verdict(True, "same list of headlines")),
        ("PASS.", Verdict(True, "pass")),
        ("Fail - the items are placeholders", Verdict(False, "the items are placeholders")),
        ("## FAIL\nthe list is empty", Verdict(False, "the list is empty")),
    ],
)
def test_verdicts_dressed_in_markdown_or_punctuation_are_read(said: str, verdict: Verdict) -> None:
    # Small models decorate their verdicts; a readable PASS must not fail a good replay
    # (and supersede its executor after three).
    assert parse_verdict(said) == verdict


# --- a session lost mid-run -------------------------------------------------------------

# What the model reads when the runner refuses a browser call whose tools process died
# (services/kernel/tools_client.py), as the runner shows PortError(SESSION_LOST, ...).
LOST = (
    f"{RUNNER_SESSION_LOST}: the browser session was lost (its tools service stopped); the"
    " page is blank now: navigate again"
)


def play_dying(
    prompt: str, tool_outputs: Any, die_before: set[int], tools: frozenset[str] = BROWSER
) -> tuple[list[Decision], list[Step]]:
    """`play`, with the tools process dying just before the calls numbered in
    `die_before` (from 0): as the runner does, every browser call but a navigate is then
    refused with session_lost until the model navigates again."""
    steps: list[Step] = []
    decisions: list[Decision] = []
    lost = False
    for k in range(40):
        decision = decide(Conversation(prompt=prompt, tools=tools, steps=tuple(steps)))
        decisions.append(decision)
        if not isinstance(decision, ToolCall):
            return decisions, steps
        lost = lost or k in die_before
        if lost and decision.name != "browser_navigate":
            steps.append(step(decision, ok=False, error=LOST))
            continue
        lost = False
        ok, output = tool_outputs(decision)
        steps.append(step(decision, output if ok else None, ok, None if ok else str(output)))
    raise AssertionError("the policy never finished")


HEADLINES = ["Alpha", "Beta", "Gamma", "Delta"]


def news(call: ToolCall) -> tuple[bool, Any]:
    if call.name != "browser_extract":
        return True, NAV_OK
    return True, HEADLINES if call.input["selector"] == "li.item" else []


TOP3 = Answer("Top 3 headlines:\n1. Alpha\n2. Beta\n3. Gamma")
NEWS_PROMPT = "Open http://site.test/news and report the top 3 headlines."


def test_a_session_lost_right_after_navigating_navigates_again() -> None:
    decisions, steps = play_dying(NEWS_PROMPT, news, die_before={1})
    assert steps[1].error == LOST
    again = decisions[2]
    assert isinstance(again, ToolCall)
    assert (again.name, again.input) == ("browser_navigate", {"url": "http://site.test/news"})
    assert again.preface is not None and "session was lost" in again.preface
    assert calls(decisions) == [
        ("browser_navigate", {"url": "http://site.test/news"}),
        ("browser_extract", {"selector": ".headline"}),  # refused: session_lost
        ("browser_navigate", {"url": "http://site.test/news"}),
        ("browser_extract", {"selector": ".headline"}),
        ("browser_extract", {"selector": "article .title"}),
        ("browser_extract", {"selector": "li.item"}),
    ]
    assert decisions[-1] == TOP3


def test_a_session_lost_after_some_probes_starts_the_probing_over() -> None:
    # .headline and article .title found nothing on the old page; li.item is refused.
    decisions, _ = play_dying(NEWS_PROMPT, news, die_before={3})
    made = calls(decisions)
    assert made[3] == ("browser_extract", {"selector": "li.item"})
    assert made[4] == ("browser_navigate", {"url": "http://site.test/news"})
    # The probes before the loss do not count: the fresh page is probed from the start.
    assert [i["selector"] for _, i in made[5:]] == [".headline", "article .title", "li.item"]
    assert decisions[-1] == TOP3


def test_a_session_lost_after_a_click_clicks_again_on_the_fresh_page() -> None:
    prompt = "Open http://site.test/, click News, and report the top 3 headlines"
    decisions, _ = play_dying(prompt, news, die_before={2})
    assert [name for name, _ in calls(decisions)] == [
        "browser_navigate", "browser_click", "browser_extract",  # refused
        "browser_navigate", "browser_click",
        "browser_extract", "browser_extract", "browser_extract",
    ]  # fmt: skip
    assert decisions[-1] == TOP3


FORM_PROMPT = (
    "Open http://site.test/signup, fill the form with name=Ada, plan=pro and report the "
    "confirmation."
)


def signup(call: ToolCall) -> tuple[bool, Any]:
    if call.name == "browser_read_page":
        return True, "Signup\nThank you, Ada! Your pro plan is confirmed."
    return True, NAV_OK


@pytest.mark.parametrize("die_before", [1, 2])  # at the fill, or at the read after it
def test_a_form_whose_session_is_lost_is_filled_again_on_a_fresh_page(die_before: int) -> None:
    decisions, _ = play_dying(FORM_PROMPT, signup, die_before={die_before})
    made = calls(decisions)
    assert made[die_before + 1] == ("browser_navigate", {"url": "http://site.test/signup"})
    assert made[die_before + 1 :] == [
        ("browser_navigate", {"url": "http://site.test/signup"}),
        ("browser_fill_form", {"fields": {"name": "Ada", "plan": "pro"}}),
        ("browser_read_page", {}),
    ]
    assert decisions[-1] == Answer("Confirmation: Thank you, Ada! Your pro plan is confirmed.")


def test_the_other_browsing_scripts_navigate_again_too() -> None:
    def shop(call: ToolCall) -> tuple[bool, Any]:
        if call.name == "browser_extract":
            return True, PRODUCTS
        if call.name == "browser_read_page":
            return True, "Mug\nShipping time: 3 days"
        return True, NAV_OK

    prompt = "Open http://shop.test/, open the cheapest product and report its shipping time."
    decisions, _ = play_dying(prompt, shop, die_before={3})  # at the read_page
    assert [name for name, _ in calls(decisions)] == [
        "browser_navigate", "browser_extract", "browser_click", "browser_read_page",
        "browser_navigate", "browser_extract", "browser_click", "browser_read_page",
    ]  # fmt: skip
    assert decisions[-1] == Answer("Cheapest product: Mug at $4.50; shipping time: 3 days")

    extract, _ = play_dying(
        "Open http://site.test/ and extract `li a`",
        lambda c: (True, ["a", "b"] if c.name == "browser_extract" else NAV_OK),
        die_before={1},
    )
    assert calls(extract)[2] == ("browser_navigate", {"url": "http://site.test/"})
    assert extract[-1] == Answer("Items matching li a:\n1. a\n2. b")

    read, _ = play_dying(
        "Open http://site.test/ and read the page",
        lambda c: (True, "One\nTwo" if c.name == "browser_read_page" else NAV_OK),
        die_before={1},
    )
    assert calls(read)[2] == ("browser_navigate", {"url": "http://site.test/"})
    assert read[-1] == Answer("The page reads:\nOne\nTwo")


def test_a_session_lost_again_and_again_ends_with_an_answer() -> None:
    decisions, steps = play_dying(NEWS_PROMPT, news, die_before={1, 3, 5, 7})
    navigations = [i for n, i in calls(decisions) if n == "browser_navigate"]
    assert len(navigations) == 1 + MAX_SESSION_RESTARTS
    assert sum(s.error == LOST for s in steps) == MAX_SESSION_RESTARTS + 1
    assert decisions[-1] == Answer(
        f"The browser session was lost {MAX_SESSION_RESTARTS + 1} times; "
        "I could not finish the task."
    )


def test_other_errors_do_not_start_the_script_over() -> None:
    nav = ToolCall("browser_navigate", {"url": "http://site.test/news"})
    extract = ToolCall("browser_extract", {"selector": ".headline"})
    for error in ("timeout: the tool took too long", "no element: session_lost: not a code"):
        steps = (step(nav, NAV_OK), step(extract, ok=False, error=error))
        decision = decide(Conversation(prompt=NEWS_PROMPT, tools=BROWSER, steps=steps))
        assert isinstance(decision, ToolCall)
        assert (decision.name, decision.input) == (
            "browser_extract",
            {"selector": "article .title"},
        )


def test_the_runners_session_lost_tool_result_is_read_as_one() -> None:
    # As the model sees it over the Messages API: a plain-text tool_result with is_error.
    body = {
        "tools": [{"name": name, "input_schema": {}} for name in sorted(BROWSER)],
        "messages": [
            {"role": "user", "content": NEWS_PROMPT},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t0",
                        "name": "browser_navigate",
                        "input": {"url": "http://site.test/news"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t0", "content": json.dumps(NAV_OK)}
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "browser_extract",
                        "input": {"selector": ".headline"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": LOST, "is_error": True}
                ],
            },
        ],
    }
    decision = decide(read_conversation(body))
    assert isinstance(decision, ToolCall)
    assert (decision.name, decision.input) == ("browser_navigate", {"url": "http://site.test/news"})
