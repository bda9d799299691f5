"""Golden cases for services.compiler.dataflow.answer: the run's answer, where a verdict
on what the run read is a judgement even when it is made of the prompt's words."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.answer import answer_provenance
from services.compiler.dataflow.sources import Context, Source
from tests.unit.dataflow_show import extract, navigated, read, show

SITE = "http://site.test"
NAVIGATED = navigated(0, f"{SITE}/status", "Service status")
STATUS = read(1, "Service status\nWater: up\nParking: up\nLibraries: up\nA local site.")
HEADLINES = extract(1, ["Alpha", "Beta", "Gamma"])
ALERT_IF_DOWN = f"Check {SITE}/status. Alert me if any service is down."


@pytest.mark.parametrize(
    ("prompt", "answer", "sources", "content", "expected"),
    [
        (
            ALERT_IF_DOWN,
            "No service is down.",
            [NAVIGATED, STATUS],
            [1],
            ("judgement", "a verdict on what the run read (the task asks 'check')", (1,), None),
        ),
        (
            f"Open {SITE}/status and report the services' status.",
            "Services: up.",
            [NAVIGATED, STATUS],
            [1],
            ("judgement", "the run's own words ('up') on what it read", (1,), None),
        ),
        (
            f"Open {SITE}/news and tell me whether anything is down: Alpha, Beta",
            "Nothing is down: Alpha, Beta",
            [NAVIGATED, HEADLINES],
            [1],
            ("judgement", "its text states a verdict ('down') on what the run read", (1,), None),
        ),
        (
            f"Open {SITE}/news and report the top 2 headlines.",
            "Monday: Alpha, Beta",
            [NAVIGATED, HEADLINES],
            [1],
            (
                "judgement",
                "its text names a weekday ('monday') that changes with the date",
                (1,),
                None,
            ),
        ),
        (
            f"Check {SITE}/news and {SITE}/status: is anything down?",
            "Nothing is down.",
            [NAVIGATED, STATUS, read(2, "News: all fine")],
            [1, 2],
            ("judgement", "appears in no earlier output nor in the task prompt", (1, 2), None),
        ),
        (
            ALERT_IF_DOWN,
            "No service is down.",
            [NAVIGATED],
            [],
            ("constant", "made of the task prompt's words", (), None),
        ),
        (
            f"Open {SITE}/status and report that you are done.",
            "done",
            [NAVIGATED, STATUS],
            [1],
            ("constant", "from the task prompt", (), None),
        ),
        (
            f"Open {SITE}/news and report Monday's top 2 headlines.",
            "Monday: Alpha, Beta",
            [NAVIGATED, HEADLINES],
            [1],
            ("template", "built from earlier outputs", (1,), "Monday: {1[0]}, {1[1]}"),
        ),
        (
            f"Open {SITE}/news and tell me whether the top headlines changed.",
            "Top: Alpha, Beta",
            [NAVIGATED, HEADLINES],
            [1],
            ("template", "built from earlier outputs", (1,), "Top: {1[0]}, {1[1]}"),
        ),
    ],
    ids=[
        "a-verdict-in-the-prompt-s-words-when-the-task-asks-for-one",
        "the-run-s-own-state-word",
        "a-template-whose-text-states-a-verdict",
        "a-weekday-the-run-wrote-itself",
        "a-verdict-is-written-from-every-read",
        "nothing-read-a-fixed-confirmation-stays",
        "a-word-the-task-fixes",
        "a-weekday-the-task-names",
        "a-template-stating-no-verdict-stays",
    ],
)
def test_answer_provenance(
    prompt: str,
    answer: str,
    sources: list[Source],
    content: list[int],
    expected: tuple[str, str, tuple[int, ...], str | None],
) -> None:
    found = answer_provenance(answer, sources, Context(prompt), content)
    assert (found.kind, found.why, found.sources, show(found.template)) == expected
