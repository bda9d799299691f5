"""The {{step_N.path}} reference syntax: parse, format, resolve, render, escape."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.executor import references as r
from services.executor.references import Ref
from tests.strategies import json_values

OUTPUTS: dict[int, Any] = {
    0: {"url": "https://example.test/news", "status": 200, "title": "News"},
    1: [
        {"title": "Alpha", "href": "/story/1", "meta": {"score": 12, "tags": ["x", "y"]}},
        {"title": "Beta", "href": "/story/2", "meta": {"score": 3, "tags": []}},
    ],
    2: ["one", "two", "three"],
    3: {"odd key": {"a.b": True}, "n": None},
}


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("{{step_0}}", Ref(0)),
        ("{{step_1[0].href}}", Ref(1, (0, "href"))),
        ("{{ step_1[-1].meta.tags[1] }}", Ref(1, (-1, "meta", "tags", 1))),
        ('{{step_3["odd key"]["a.b"]}}', Ref(3, ("odd key", "a.b"))),
        ("{{step_12.url}}", Ref(12, ("url",))),
    ],
)
def test_parse_and_format(text: str, ref: Ref) -> None:
    assert r.parse(text) == ref
    assert r.parse(ref.format()) == ref


@pytest.mark.parametrize(
    "text", ["{{step_}}", "{{step_1.}}", "{{step_1[x]}}", "{{name}}", "step_1", "{step_1}"]
)
def test_not_references(text: str) -> None:
    with pytest.raises(r.ReferenceSyntaxError):
        r.parse(text)
    assert r.find(text) == []
    assert r.render(text, OUTPUTS) == text  # left alone, not an error


def test_exact_reference_keeps_the_json_type() -> None:
    assert r.render("{{step_1[0].meta}}", OUTPUTS) == {"score": 12, "tags": ["x", "y"]}
    assert r.render("{{step_1[0].meta.score}}", OUTPUTS) == 12
    assert r.render("{{step_2}}", OUTPUTS) == ["one", "two", "three"]
    assert r.render("{{step_3.n}}", OUTPUTS) is None
    assert r.render('{{step_3["odd key"]["a.b"]}}', OUTPUTS) is True


def test_embedded_references_become_text() -> None:
    template = "https://example.test{{step_1[1].href}}?s={{step_1[0].meta.score}}"
    rendered = r.render(template, OUTPUTS)
    assert rendered == "https://example.test/story/2?s=12"
    assert r.render("tags: {{step_1[0].meta.tags}}", OUTPUTS) == 'tags: ["x","y"]'
    assert r.render("last: {{step_2[-1]}}", OUTPUTS) == "last: three"


def test_render_text_always_gives_text() -> None:
    assert r.render_text("{{step_2}}", OUTPUTS) == '["one","two","three"]'
    assert r.render_text("{{step_1[0].meta.score}}", OUTPUTS) == "12"
    assert r.render_text("Top: {{step_2[0]}}", OUTPUTS) == "Top: one"


def test_render_walks_nested_inputs() -> None:
    value = {"fields": {"#q": "{{step_2[0]}}", "#n": 5}, "list": ["{{step_0.title}}", True]}
    assert r.render(value, OUTPUTS) == {"fields": {"#q": "one", "#n": 5}, "list": ["News", True]}
    assert r.find(value) == [Ref(2, (0,)), Ref(0, ("title",))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{step_9}}", "no output from step 9"),
        ("{{step_2[3]}}", "index [3] out of range (list of 3)"),
        ("{{step_0.missing}}", "no field 'missing'"),
        ("{{step_0[0]}}", "index [0] into an object"),
        ("{{step_2.title}}", "field 'title' of a list"),
        ("x {{step_1[0].title.more}}", "field 'more' of a string"),
    ],
)
def test_unresolved_references_say_why(text: str, message: str) -> None:
    with pytest.raises(r.UnresolvedReference) as caught:
        r.render(text, OUTPUTS)
    assert message in str(caught.value)


def test_escaped_references_are_literal() -> None:
    assert r.render("\\{{step_0}}", OUTPUTS) == "{{step_0}}"
    # Backslashes before a reference pair up: each pair is one backslash of text, an odd
    # one left over makes the reference text.
    assert r.render("\\\\\\{{step_0.title}}", OUTPUTS) == "\\{{step_0.title}}"
    assert r.render("C:\\\\{{step_0.title}}", OUTPUTS) == "C:\\" + OUTPUTS[0]["title"]
    assert r.find("\\{{step_0}} {{step_2[0]}}") == [Ref(2, (0,))]
    assert r.escape("see {{step_1}} and {{x}}") == "see \\{{step_1}} and {{x}}"


# --- properties -------------------------------------------------------------------------

_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)
_path_item = st.one_of(st.integers(-5, 20), _ident, st.text(max_size=6))
_refs = st.builds(Ref, st.integers(0, 10_000), st.lists(_path_item, max_size=5).map(tuple))


@given(_refs)
def test_format_then_parse_is_identity(ref: Ref) -> None:
    assert r.parse(ref.format()) == ref


@given(st.text(alphabet=st.sampled_from(list('{}\\step_0123.[]" ax')), max_size=40))
def test_render_of_escape_is_identity(text: str) -> None:
    assert r.render(r.escape(text), {}) == text


@given(st.text(max_size=60))
def test_render_of_escape_is_identity_for_any_text(text: str) -> None:
    assert r.render(r.escape(text), {}) == text


@given(st.text(alphabet=st.sampled_from(list('{}\\step_0123.[]" ax')), max_size=30))
def test_text_escaped_before_a_reference_keeps_its_last_backslashes(text: str) -> None:
    # A Windows path before a file name: "C:\\dir\\" + {{step_0.name}}.
    template = r.escape(text, before_reference=True) + "{{step_9}}"
    assert r.render(template, {9: "v"}) == text + "v"
    assert r.find(template) == [Ref(9)]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*path, i))
    return found


@given(json_values, st.data())
def test_a_reference_to_any_path_renders_the_value_there(value: Any, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(_paths(value)))
    ref = Ref(4, path)
    assert r.render(ref.format(), {4: value}) == r.lookup(value, path)


@given(json_values)
def test_every_found_path_leads_back_to_its_string(value: Any) -> None:
    for path, leaf in r.leaves(value):
        assert path in r.paths_to(value, leaf)
        assert r.render(Ref(0, path).format(), {0: value}) == leaf
        assert r.render(f"<{Ref(0, path).format()}>", {0: value}) == f"<{leaf}>"


# --- command lines -------------------------------------------------------------------------

HOSTILE = {0: {"title": "Rates up; rm -rf ~ \"quoted\" 'single' --force $(id)"}}


@pytest.mark.parametrize(
    "template",
    [
        'log-title "{{step_0.title}}" --to news.log',
        "log-title {{step_0.title}} --to news.log",
        "log-title '{{step_0.title}}' --to news.log",
    ],
)
def test_a_value_filled_into_a_command_stays_one_argument(template: str) -> None:
    """Page text with spaces, quotes, `;` or a leading `--`: split like the tools
    service splits the line, it is still the one argument the recorded run had."""
    line = r.render_command(template, HOSTILE)
    assert shlex.split(line) == ["log-title", HOSTILE[0]["title"], "--to", "news.log"]


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1))
def test_any_text_survives_a_command_as_one_argument(text: str) -> None:
    line = r.render_command("echo {{step_0}} done", {0: text.replace("\x00", "")})
    assert shlex.split(line) == ["echo", text.replace("\x00", ""), "done"]


def test_a_command_without_references_is_sent_as_recorded() -> None:
    assert r.render_command('echo "a  b"', OUTPUTS) == 'echo "a  b"'
    # An escaped reference stays literal (splitting would unescape it): rendered as text.
    assert r.render_command("echo \\{{step_0}} {{step_2[0]}}", OUTPUTS) == "echo {{step_0}} one"
