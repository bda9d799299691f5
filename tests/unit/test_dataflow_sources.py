"""Golden cases for services.compiler.dataflow.sources: how an earlier output is indexed
(`Source.of`) and which record a pointer reads (`record_of`)."""

from __future__ import annotations

from typing import Any

import pytest

from services.compiler.dataflow.sources import (
    Context,
    Pointer,
    Source,
    Template,
    item_index,
    record_of,
    several_records,
)
from services.executor.references import Path


@pytest.mark.parametrize(
    ("tool", "output", "reads", "expected"),
    [
        (
            "browser_read_page",
            "API: OK\nQueue: up\nTotal: 3",
            True,
            {"numbers": set(), "shorts": set(), "said": {"ok", "up"}},
        ),
        (
            "browser_extract",
            [
                {"name": "API", "state": "OK", "n": "3"},
                {"name": "DB", "state": " ok ", "n": " 12 "},
            ],
            True,
            {"numbers": {"3", "12"}, "shorts": {"ok", "db"}, "said": {"ok"}},
        ),
        (
            "browser_navigate",
            {"url": "http://x.test/up", "title": "OK"},
            False,
            {"numbers": set(), "shorts": {"ok"}, "said": set()},
        ),
        (
            "shell_exec",
            {"stdout": "no\n", "exit_code": 0},
            True,
            {"numbers": set(), "shorts": {"no"}, "said": {"no"}},
        ),
    ],
    ids=[
        "a-page-says-its-states-in-its-text",
        "extracted-fields-are-numbers-and-short-words-trimmed",
        "a-navigation-says-nothing-it-is-no-content",
        "a-command-that-prints-one-short-word",
    ],
)
def test_an_output_is_indexed_by_its_whole_values(
    tool: str, output: Any, reads: bool, expected: dict[str, set[str]]
) -> None:
    source = Source.of(1, tool, output, reads=reads)
    found = {"numbers": source.numbers, "shorts": source.shorts, "said": source.said}
    assert found == expected


def test_every_path_of_a_text_is_indexed_once() -> None:
    source = Source.of(1, "browser_extract", [{"s": "Up"}, {"s": "Up"}, {"s": "Down"}], reads=True)
    assert dict(source.paths) == {"Up": ((0, "s"), (1, "s")), "Down": ((2, "s"),)}
    assert source.tokens == {"down"}


@pytest.mark.parametrize(
    ("path", "record", "index"),
    [
        ((0, "name"), (0,), 0),
        (("groups", 0, "items", 1, "state"), ("groups", 0, "items", 1), 1),
        ((0, "price", "amount"), (0,), 0),
        ((2, 3), (2,), 2),
        ((2,), (2,), 2),
        (("title",), (), None),
        ((), (), None),
    ],
    ids=[
        "a-field-of-a-list-item",
        "the-deepest-item-of-a-nested-list",
        "a-field-of-an-object-inside-an-item",
        "a-table-cell-reads-its-row",
        "a-string-of-a-list-of-strings-is-its-own-record",
        "a-field-of-a-plain-object",
        "the-whole-output",
    ],
)
def test_record_of(path: Path, record: Path, index: int | None) -> None:
    found = record_of(Pointer(1, path))
    assert found == (1, record)
    assert item_index(found) == index


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ([(0, "state"), (0, "note")], False),
        ([(0, "state"), (1, "state")], True),
    ],
    ids=["two-fields-of-one-item", "the-same-field-of-two-items"],
)
def test_several_records(paths: list[Path], expected: bool) -> None:
    assert several_records([Pointer(1, p) for p in paths]) is expected


def test_a_template_s_literal_text_and_pointers() -> None:
    a, b = Pointer(1, (0, "name")), Pointer(1, (1, "name"))
    template = Template(("Top: ", a, " and ", b))
    assert (template.exact, template.pointers, template.literal) == (
        False,
        [a, b],
        "Top:   and ",
    )
    assert Template((a,)).exact
    assert template.with_pointers({a: b}).parts == ("Top: ", b, " and ", b)


def test_the_context_allows_the_prompt_s_and_the_constants_words() -> None:
    ctx = Context("Report the top 3 headlines")
    ctx.add_constant("http://news.test/")
    assert ctx.allowed_tokens == {"report", "the", "top", "3", "headlines", "http", "news", "test"}
    assert ctx.constants == {"http://news.test/"}
