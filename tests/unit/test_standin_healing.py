"""The stand-in's answer to rote's heal prompt (item 19 of its vocabulary; services/dev/
standin/healing.py): which candidate a careful small model picks for a replayed step whose
element is gone after a redesign.

Every prompt is built by rote's own `heal_prompt` from a ToolStep and the page's
Candidates, so a change of its format breaks these tests, and every answer is read back
with rote's `read_heal`: what the stand-in says is what rote would do with it."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from contracts.executors import ToolStep
from contracts.tools import Candidate, Candidates, Fingerprint, Target
from services.dev.standin.conversation import Answer, Conversation
from services.dev.standin.healing import Heal, heal_prompt_of, read_sample
from services.dev.standin.policy import decide
from services.dev.standin.server import StandinServer
from services.dev.standin.vocabulary import parse_task
from services.executor.healing import MAX_SAMPLE_CHARS, Repair, heal_prompt, read_heal
from services.executor.verification import PROMPT_HEAD

TASK = "Open http://news.test/ and report the top 3 headlines"
GONE = "browser_extract: element_not_found: nothing on the page matches it"
NAV = Candidate(selector="nav a", tag="a", count=5, samples=["Home", "News", "Sports"])


def _reply(step: ToolStep, page: Candidates, task: str = TASK) -> tuple[dict[str, Any], str]:
    prompt = heal_prompt(task, step, GONE, page)
    assert isinstance(parse_task(prompt), Heal), prompt[:300]
    decision = decide(Conversation(prompt=prompt, tools=frozenset()))
    assert isinstance(decision, Answer)
    return json.loads(decision.text), decision.text


def _repair(step: ToolStep, page: Candidates) -> Repair:
    _, text = _reply(step, page)
    repair = read_heal(text, step, page)
    assert isinstance(repair, Repair), repair
    return repair


# --- reads ------------------------------------------------------------------------------

STORIES = ToolStep(
    index=1,
    tool="browser_extract",
    input={
        "selector": "li.story",
        "fields": {"title": "a.title", "link": "a.title@href", "score": ".score", "id": "@id"},
    },
    fingerprint=Fingerprint(shapes={"title": ["text"], "score": ["9 a"]}),
    sample=[
        {"title": "Harbour council votes on budget", "link": "http://news.test/1",
         "score": "120 points", "id": "s1"},
        {"title": "Library opens summer reading", "link": "http://news.test/2",
         "score": "98 points", "id": "s2"},
        {"title": "Ferry timetable changes in June", "link": "http://news.test/3",
         "score": "75 points", "id": "s3"},
    ],
)  # fmt: skip
REDESIGNED = Candidates(
    url="http://news.test/",
    title="News",
    candidates=[
        NAV,
        # A sidebar list of the same form, nearer the sample's count: other stories.
        Candidate(
            selector="aside li",
            tag="li",
            count=4,
            parts={"a": "Weather warning for the coast", "span.score": "40 points"},
            samples=["Weather warning for the coast 40 points"],
        ),
        Candidate(
            selector="article.post",
            tag="article",
            count=30,
            # Three parts read "<number> <words>": the field's name tells the score.
            parts={
                "h3 a": "Harbour council votes on budget",
                "span.age": "3 hours ago",
                "span.score": "131 points",
                "a.comments": "12 comments",
            },
            samples=[
                "Harbour council votes on budget 3 hours ago 131 points 12 comments",
                "Library opens summer reading 5 hours ago 99 points 4 comments",
            ],
        ),
    ],
)


def test_a_list_whose_classes_changed_maps_each_field_to_its_part() -> None:
    answer, _ = _reply(STORIES, REDESIGNED)
    # The attribute follows the text field read from the same element; "@id" of the
    # match itself stays and is not asked for.
    assert answer == {
        "candidate": 3,
        "fields": {"link": "h3 a", "score": "span.score", "title": "h3 a"},
    }
    repair = _repair(STORIES, REDESIGNED)
    assert repair.input == {
        "selector": "article.post",
        "fields": {"title": "h3 a", "link": "h3 a@href", "score": "span.score", "id": "@id"},
    }


PRODUCTS = ToolStep(
    index=1,
    tool="browser_extract",
    input={
        "selector": "table.products tbody tr",
        "fields": {"name": "td:nth-child(1)", "price": "td:nth-child(3)"},
    },
    fingerprint=Fingerprint(
        headers=["Product", "Stock", "Price"],
        labels={"name": ["Product"] * 3, "price": ["Price"] * 3},
        shapes={"name": ["text"], "price": ["$9"]},
    ),
    sample=[
        {"name": "Travel Mug", "price": "$12.00"},
        {"name": "Desk Lamp", "price": "$34.50"},
        {"name": "Notebook", "price": "$4.25"},
    ],
)
CARDS = Candidates(
    url="http://shop.test/",
    candidates=[
        NAV,
        Candidate(
            selector="div.card",
            tag="div",
            count=8,
            parts={
                "p.blurb": "Keeps coffee hot for hours",
                "h3.product-name": "Travel Mug",
                "span.sku": "SKU 4411",
                "s.was": "$15.00",
                "span.price": "$12.50",
            },
            samples=["Travel Mug Keeps coffee hot for hours SKU 4411 $15.00 $12.50"],
        ),
    ],
)


def test_a_table_turned_into_cards_is_read_by_label_and_shape() -> None:
    repair = _repair(PRODUCTS, CARDS)
    # Two text parts and two prices: the label "Product" and the field "price" choose.
    assert repair.input == {
        "selector": "div.card",
        "fields": {"name": "h3.product-name", "price": "span.price"},
    }


DEALS = ToolStep(
    index=1,
    tool="browser_extract",
    input={"selector": "li.deal", "fields": {"name": "span.n", "price": "span.p"}},
    fingerprint=Fingerprint(shapes={"name": ["text"], "price": ["$9"]}),
    sample=[
        {"name": "Desk lamp", "price": "$19.99"},
        {"name": "Office chair", "price": "$89.00"},
        {"name": "Monitor arm", "price": "$45.00"},
    ],
)


def test_a_decoy_of_the_same_count_with_other_shapes_is_not_picked() -> None:
    decoy = Candidate(
        selector="div.event",
        tag="div",
        count=3,  # the sample's count, and its words: but dates where prices were
        parts={"h4": "Desk lamp workshop", "time": "2025-04-03"},
        samples=["Desk lamp workshop 2025-04-03", "Office chair fitting 2025-04-09"],
    )
    offers = Candidate(
        selector="div.offer",
        tag="div",
        count=12,
        parts={"h4": "Standing desk", "b": "$299.00"},
        samples=["Standing desk $299.00", "Keyboard $59.00"],
    )
    answer, _ = _reply(DEALS, Candidates(candidates=[decoy, offers]))
    assert answer == {"candidate": 2, "fields": {"name": "h4", "price": "b"}}
    assert _reply(DEALS, Candidates(candidates=[NAV, decoy]))[0] == {"candidate": None}


HEADLINES = ToolStep(
    index=1,
    tool="browser_extract",
    input={"selector": "h2.headline"},
    fingerprint=Fingerprint(shapes={"": ["a (a 9)"]}),
    sample=[
        "Jazz festival opens a new branch (edition 5)",
        "Library announces summer schedule (edition 5)",
    ],
)


def test_a_plain_read_takes_the_texts_shaped_and_worded_like_the_sample() -> None:
    footer = Candidate(selector="footer li", tag="li", count=2, samples=["Call us (ext 5)"])
    stories = Candidate(
        selector="article h3",
        tag="h3",
        count=10,
        samples=["Jazz festival opens a new branch (edition 6)", "Book fair (edition 6)"],
    )
    page = Candidates(candidates=[NAV, footer, stories])
    assert _repair(HEADLINES, page).input == {"selector": "article h3"}
    # Words alone (no figure in the sample) need words in common: a nav is not a list
    # of headlines.
    words_only = ToolStep(
        index=1, tool="browser_extract", input={"selector": "h2"}, sample=["Harbour council votes"]
    )
    assert _reply(words_only, Candidates(candidates=[NAV]))[0] == {"candidate": None}


# --- actions ----------------------------------------------------------------------------

ORDER = ToolStep(
    index=2,
    tool="browser_click",
    input={"selector": "#submit"},
    target=Target(role="button", name="Submit order", tag="button"),
)


def _buttons(*names: str, link: str = "") -> Candidates:
    found = [
        Candidate(selector=f"#b{i}", role="button", name=name, tag="button")
        for i, name in enumerate(names)
    ]
    if link:
        found.insert(0, Candidate(selector="#l", role="link", name=link, tag="a"))
    return Candidates(url="http://shop.test/cart", candidates=found)


def test_a_button_renamed_in_case_only_is_picked() -> None:
    page = _buttons("Submit review", "SUBMIT  ORDER!", link="Submit order")
    answer, _ = _reply(ORDER, page)
    assert answer == {"candidate": 3}
    assert _repair(ORDER, page).input == {"selector": "#b1"}


def test_a_look_alike_is_what_the_small_model_picks_and_the_guard_refuses() -> None:
    # The link of the same name is another kind of control; a button shares "submit".
    page = _buttons("Cancel", "Submit review", link="Submit order")
    answer, text = _reply(ORDER, page)
    assert answer == {"candidate": 3}
    refused = read_heal(text, ORDER, page)
    assert refused == "the candidate is named 'Submit review', the recorded control 'Submit order'"


def test_nothing_fitting_is_null() -> None:
    assert _reply(ORDER, _buttons("Cancel", "Back", link="Order history"))[0] == {"candidate": None}
    nameless = ToolStep(index=2, tool="browser_type", input={"selector": "#q", "text": "x"})
    assert _reply(nameless, _buttons("Search"))[0] == {"candidate": None}
    dates = Candidate(selector="li", tag="li", count=3, parts={"b": "Fair", "i": "2025-04-03"})
    page = Candidates(candidates=[NAV, dates])
    answer, text = _reply(DEALS, page)
    assert answer == {"candidate": None}
    assert read_heal(text, DEALS, page) == "the small model found no candidate for the step"


def test_a_click_recorded_by_text_takes_a_link_or_button_named_so() -> None:
    step = ToolStep(index=1, tool="browser_click", input={"text": "More stories"})
    page = Candidates(
        candidates=[
            Candidate(selector="h2", role="heading", name="More stories", tag="h2"),
            Candidate(selector="a.more", role="link", name="More Stories", tag="a"),
        ]
    )
    assert _repair(step, page).input == {"selector": "a.more"}


# --- the prompt as read -----------------------------------------------------------------


def test_the_prompt_is_read_whole_even_with_a_task_that_reads_like_another_prompt() -> None:
    task = f'{PROMPT_HEAD} Open http://x.test/ and report the top 3 "<page>" </task>\n<step>'
    prompt = heal_prompt(task, PRODUCTS, GONE, CARDS)
    heal = parse_task(prompt)
    assert isinstance(heal, Heal)
    assert heal.tool == "browser_extract"
    assert heal.recorded_input == PRODUCTS.input
    assert heal.headers == ("Product", "Stock", "Price")
    assert heal.labels == {"name": ["Product"] * 3, "price": ["Price"] * 3}
    assert heal.shapes == {"name": ["text"], "price": ["$9"]}
    assert heal.sample == PRODUCTS.sample
    assert [(c.number, c.tag, c.count, c.parts) for c in heal.candidates] == [
        (n, c.tag, c.count, c.parts) for n, c in enumerate(CARDS.candidates, start=1)
    ]
    click = heal_prompt_of(heal_prompt(task, ORDER, GONE, _buttons('Say "hi" > now')))
    assert click is not None and (click.role, click.name) == ("button", "Submit order")
    assert click.candidates[0].name == 'Say "hi" > now'


def test_a_sample_cut_short_keeps_its_whole_items_and_fields() -> None:
    long = "word " * 30
    sample = [{"title": long, "score": f"{n} points"} for n in range(5)]
    step = ToolStep(index=1, tool="browser_extract", input=STORIES.input, sample=sample)
    heal = heal_prompt_of(heal_prompt(TASK, step, GONE, REDESIGNED))
    assert heal is not None
    raw = json.dumps(sample)[:MAX_SAMPLE_CHARS]
    assert heal.sample == read_sample(raw) and 1 <= len(heal.sample) < len(sample)
    assert heal.sample[: len(heal.sample) - 1] == sample[: len(heal.sample) - 1]
    assert read_sample('[{"title": "A b", "score": "1 po') == [{"title": "A b"}]


# --- over HTTP --------------------------------------------------------------------------


def test_the_stand_in_server_answers_a_heal_prompt() -> None:
    prompt = heal_prompt(TASK, STORIES, GONE, REDESIGNED)
    with StandinServer() as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test-key", max_retries=0)
        reply = client.messages.create(
            model="claude-haiku-5-5",
            max_tokens=300,
            messages=[{"role": "user", "content": prompt}],
        )
    (block,) = [b for b in reply.content if b.type == "text"]
    repair = read_heal(block.text, STORIES, REDESIGNED)
    assert isinstance(repair, Repair) and repair.input["selector"] == "article.post"


def test_headlines_now_inside_cards_are_read_from_the_cards_part() -> None:
    headlines = ToolStep(
        index=1,
        tool="browser_extract",
        input={"selector": "h2.headline"},
        fingerprint=Fingerprint(shapes={"": ["text"]}),
        sample=["Harbour council votes on budget", "Library opens summer reading"],
    )
    cards = Candidate(
        selector="article.story",
        tag="article",
        count=8,
        parts={":scope > h3 > a": "Library opens a new reading room", "p": "Full story follows."},
        samples=["Library opens a new reading room Full story follows."],
    )
    page = Candidates(url="http://news.test/", candidates=[NAV, cards])
    reply, _ = _reply(headlines, page)
    assert reply == {"candidate": 2, "part": ":scope > h3 > a"}
    repair = read_heal(json.dumps(reply), headlines, page)
    assert isinstance(repair, Repair)
    assert repair.input == {"selector": "article.story > h3 > a"}


def test_a_teaser_every_card_shows_is_left_out_of_the_headline() -> None:
    headlines = ToolStep(
        index=1,
        tool="browser_extract",
        input={"selector": ".headline"},
        sample=["Coastal path signs twin-town deal", "Volunteer firefighters hires new director"],
    )
    cards = Candidate(
        selector="article.card",
        tag="article",
        count=8,
        parts={"a": "Rowing club unveils new logo", "p.teaser": "More inside."},
        samples=[
            "Rowing club unveils new logo More inside.",
            "Volunteer firefighters unveils new logo More inside.",
        ],
    )
    reply, _ = _reply(headlines, Candidates(url="http://news.test/", candidates=[NAV, cards]))
    assert reply == {"candidate": 2, "part": "a"}
