"""Golden cases for services.compiler.dataflow.templates: a value found in earlier
outputs, exactly or as literal text around output strings. Templates are written as text
with each reference in braces (`show`); an open part lists every item holding its text."""

from __future__ import annotations

import pytest

from services.compiler.dataflow.sources import Context, Source
from services.compiler.dataflow.templates import embeddable, find_exact, find_template
from services.executor.toolkinds import Kind
from tests.unit.dataflow_show import extract, navigated, read, show

ORIGIN = "http://127.0.0.1:8765"
HEADLINES = extract(1, ["Alpha", "Beta", "Gamma"])
COMPONENTS = extract(
    1,
    [
        {"name": "API", "state": "OK"},
        {"name": "DB", "state": "OK"},
        {"name": "Queue", "state": "Down"},
    ],
)
RANKED = extract(1, [{"rank": "1", "title": "Alpha"}, {"rank": "2", "title": "Beta"}])
TEN = ["Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta", "Eta", "Theta", "Iota", "Kappa"]
RANKED_TEN = extract(1, [{"rank": str(n), "title": t} for n, t in enumerate(TEN, 1)])
TEN_LINES = "\n".join(f"{n}. {t}" for n, t in enumerate(TEN, 1))


def _ctx(*constants: str) -> Context:
    ctx = Context("Open the first story")
    for value in constants:
        ctx.add_constant(value)
    return ctx


@pytest.mark.parametrize(
    ("leaf", "kind", "expected"),
    [
        ("abc", "data", True),
        ("42", "data", True),
        ("OK", "data", False),
        ("--", "data", False),
        ("/s/a", "url", True),
        ("a?b", "generic", True),
        ("abcdefgh", "url", True),
        ("abc", "url", False),
    ],
    ids=[
        "three-letters-in-text",
        "two-digits-in-text",
        "two-letters-in-text",
        "no-letter-or-digit",
        "a-path-in-a-url",
        "a-query-in-a-command",
        "eight-characters-in-a-url",
        "a-short-word-in-a-url",
    ],
)
def test_embeddable(leaf: str, kind: Kind, expected: bool) -> None:
    assert embeddable(leaf, kind) is expected


@pytest.mark.parametrize(
    ("value", "sources", "constants", "expected"),
    [
        ("Alpha", [HEADLINES], (), "{1[0]}"),
        ("Alpha", [extract(1, ["Alpha"]), extract(3, ["Alpha", "Beta"])], (), "{3[0]}"),
        (
            "Operational",
            [extract(1, [{"n": "API", "s": "Operational"}, {"n": "Web", "s": "Operational"}])],
            (),
            "{1[0].s / 1[1].s}",
        ),
        ("OK", [COMPONENTS], (), None),
        ("Alpha", [HEADLINES], ("Alpha",), None),
    ],
    ids=[
        "an-extracted-item",
        "the-latest-output-holding-it",
        "several-items-hold-it-open",
        "a-short-value-says-nothing",
        "a-constant-is-not-looked-for",
    ],
)
def test_find_exact(
    value: str, sources: list[Source], constants: tuple[str, ...], expected: str | None
) -> None:
    assert show(find_exact(value, sources, _ctx(*constants))) == expected


@pytest.mark.parametrize(
    ("value", "sources", "constants", "kind", "expected"),
    [
        ("Top: Alpha, Beta", [HEADLINES], (), "data", "Top: {1[0]}, {1[1]}"),
        (
            "Weather: 22°C in Paris",
            [read(1, {"temp": "22°C", "city": "Paris"})],
            (),
            "data",
            "Weather: {1.temp} in {1.city}",
        ),
        (
            "API: OK, Queue: Down",
            [COMPONENTS],
            (),
            "data",
            "{1[0].name}: {1[0].state / 1[1].state}, {1[2].name}: {1[2].state}",
        ),
        (
            f"{ORIGIN}/s/a",
            [navigated(0, f"{ORIGIN}/", "News"), extract(1, [{"title": "A", "href": "/s/a"}])],
            (ORIGIN,),
            "url",
            ORIGIN + "{1[0].href}",
        ),
        (
            "1. Alpha\n2. Beta",
            [RANKED],
            (),
            "data",
            "1. {1[0].title}\n2. {1[1].title}",
        ),
        (
            TEN_LINES,
            [RANKED_TEN],
            (),
            "data",
            "\n".join(f"{n}. {{1[{n - 1}].title}}" for n in range(1, 11)),
        ),
        ("Alpha has 2 new", [RANKED], (), "data", "{1[0].title} has 2 new"),
        (
            "Web: Operational; API: Operational",
            [read(1, "Operational"), navigated(2, "http://x.test/api"), read(3, "Operational")],
            (),
            "data",
            "Web: {1}; API: {3}",
        ),
        (
            "Web: Operational; API: Operational",
            [read(1, "Operational")],
            (),
            "data",
            "Web: {1}; API: {1}",
        ),
        (
            "cat /var/log/app-2024.log",
            [read(1, {"stdout": "/var/log/app-2024.log"}, "shell_exec")],
            (),
            "generic",
            "cat {1.stdout}",
        ),
        ("/tmp/abc/report", [read(1, {"dir": "abc"}, "shell_exec")], (), "generic", None),
        ("Top: Alpha, Beta", [HEADLINES], ("Beta",), "data", "Top: {1[0]}, Beta"),
        ("Alphabet soup", [HEADLINES], (), "data", None),
        ("Alpha", [HEADLINES], (), "data", None),
    ],
    ids=[
        "extracted-items-in-a-sentence",
        "fields-of-a-read",
        "a-short-word-several-items-hold-is-open",
        "the-extracted-href-wins-over-the-longer-page-url",
        "numbering-marks-are-not-the-rank-field",
        "a-two-digit-line-number-is-not-the-rank-field-either",
        "a-one-digit-number-is-no-part",
        "two-reads-saying-the-same-are-shown-in-turn",
        "one-read-shown-twice",
        "a-path-a-command-printed",
        "a-short-name-in-a-command-is-no-part",
        "a-constant-stays-text",
        "never-half-a-word",
        "the-whole-value-is-find_exact-s",
    ],
)
def test_find_template(
    value: str,
    sources: list[Source],
    constants: tuple[str, ...],
    kind: Kind,
    expected: str | None,
) -> None:
    assert show(find_template(value, sources, _ctx(*constants), kind)) == expected
