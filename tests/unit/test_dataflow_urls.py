"""Golden cases for services.compiler.dataflow.urls and urlparts: references inside a
URL's parts, encoded on replay as the part is written; links a read found that resolve
to the URL opened; a URL's parts and their percent-decoding."""

from __future__ import annotations

import pytest

from services.compiler.dataflow import urlparts
from services.compiler.dataflow.sources import Context, Source
from services.compiler.dataflow.templates import find_exact, find_template
from services.compiler.dataflow.urls import resolved_link, url_template
from tests.unit.dataflow_show import extract, navigated, pointer, show

SHOP = "http://shop.test"
ORIGIN = "http://127.0.0.1:8765"
WIDGET = extract(1, [{"name": "Acme Widget"}])
STATES = extract(1, [{"n": "A", "s": "Operational"}, {"n": "B", "s": "Operational"}])


def _ctx(*constants: str) -> Context:
    ctx = Context("Search the shop")
    for value in constants:
        ctx.add_constant(value)
    return ctx


@pytest.mark.parametrize(
    ("url", "sources", "expected"),
    [
        (f"{SHOP}/search?q=Acme%20Widget", [WIDGET], SHOP + "/search?q={1[0].name|url}"),
        (f"{SHOP}/search?q=Acme+Widget", [WIDGET], SHOP + "/search?q={1[0].name|form}"),
        (
            f"{SHOP}/search?q=AT%26T%20%231",
            [extract(1, [{"name": "AT&T #1"}])],
            SHOP + "/search?q={1[0].name|url}",
        ),
        (
            f"{SHOP}/search?q=caf%C3%A9%20Acme%20Widget",
            [WIDGET],
            SHOP + "/search?q=caf%C3%A9%20{1[0].name|url}",
        ),
        (
            f"{SHOP}/p/crimson-sneaker",
            [extract(1, [{"slug": "crimson-sneaker"}])],
            SHOP + "/p/{1[0].slug|url}",
        ),
        (
            f"{SHOP}/p/crimson-sneaker",
            [extract(1, [{"href": "/p/crimson-sneaker"}])],
            SHOP + "{1[0].href}",
        ),
        (f"{SHOP}/p/item%201", [extract(1, [{"slug": "item%201"}])], SHOP + "/p/{1[0].slug}"),
        (
            f"{SHOP}/search?q=Operational%20now",
            [STATES],
            SHOP + "/search?q={1[0].s / 1[1].s|url}%20now",
        ),
        (f"{SHOP}/search?q=red%20shoes", [WIDGET], None),
        (f"{SHOP}/search?q=%FF%20Acme%20Widget", [WIDGET], None),
        (
            f"{SHOP}/search?q=Up%20Up",
            [extract(1, [{"n": "A", "s": "Up"}, {"n": "B", "s": "Up"}])],
            None,
        ),
    ],
    ids=[
        "a-value-written-percent-encoded",
        "a-value-written-form-encoded",
        "reserved-characters-decoded-then-encoded-again",
        "decoded-text-around-the-value-stays-as-written",
        "a-value-filling-a-path-segment",
        "an-href-spanning-segments-is-not-encoded",
        "a-value-that-went-in-already-encoded",
        "an-open-part-inside-a-query",
        "nothing-an-output-holds",
        "bad-utf-8-decodes-to-nothing",
        "short-words-are-no-parts-of-a-url",
    ],
)
def test_url_template(url: str, sources: list[Source], expected: str | None) -> None:
    ctx = _ctx(SHOP)
    plain = find_template(url, sources, ctx, "url")
    assert show(url_template(url, sources, ctx, plain)) == expected


@pytest.mark.parametrize(
    ("url", "sources", "constants", "expected"),
    [
        (
            f"{ORIGIN}/news/s/a",
            [navigated(0, f"{ORIGIN}/news/list/"), extract(1, [{"href": "../s/a"}])],
            (f"{ORIGIN}/news/list/",),
            "1[0].href",
        ),
        (
            f"{ORIGIN}/news/s/a",
            [navigated(0, f"{ORIGIN}/news/list/"), extract(1, [{"href": "../s/a"}])],
            (),
            "1[0].href",
        ),
        (f"{ORIGIN}/news/s/a", [extract(1, [{"href": "../s/a"}])], (), None),
        (f"{ORIGIN}/s/a", [extract(1, [{"href": "/s/a"}])], (f"{ORIGIN}/",), None),
        (f"{ORIGIN}/s/b", [extract(1, [{"href": "/s/a"}])], (f"{ORIGIN}/",), None),
    ],
    ids=[
        "a-relative-link-against-the-task-s-url",
        "a-relative-link-against-the-page-a-navigation-reported",
        "no-page-to-resolve-against",
        "a-reference-already-reads-the-link",
        "the-link-goes-elsewhere",
    ],
)
def test_resolved_link(
    url: str, sources: list[Source], constants: tuple[str, ...], expected: str | None
) -> None:
    ctx = _ctx(*constants)
    template = find_exact(url, sources, ctx) or find_template(url, sources, ctx, "url")
    template = url_template(url, sources, ctx, template)
    link = resolved_link(url, sources, ctx, template)
    assert (pointer(link) if link else None) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "http://h.test/a/b?x=1&y#f",
            [("a", "path"), ("b", "path"), ("x", "query"), ("1", "query"), ("y", "query")],
        ),
        ("/search?q=red+shoes", [("search", "path"), ("q", "query"), ("red+shoes", "query")]),
        ("http://h.test/?a=&=b", [("a", "query"), ("b", "query")]),
        ("http://h.test", []),
    ],
    ids=[
        "segments-names-and-values-never-the-fragment",
        "a-path-from-the-root",
        "empty-names-and-values-are-no-parts",
        "an-origin-alone",
    ],
)
def test_parts(url: str, expected: list[tuple[str, str]]) -> None:
    assert [(url[p.start : p.end], p.kind) for p in urlparts.parts(url)] == expected


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        ("Acme+Widget", "query", ("Acme Widget", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])),
        ("Acme+Widget", "path", ("Acme+Widget", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])),
        ("Acme%20Widget", "path", ("Acme Widget", [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13])),
        ("%E6%9D%B1%E4%BA%AC", "path", ("東京", [0, 9, 18])),
        ("100%", "query", ("100%", [0, 1, 2, 3, 4])),
        ("%FF", "query", None),
    ],
    ids=[
        "plus-is-a-space-in-a-query",
        "plus-is-a-plus-in-a-path",
        "an-escaped-space-spans-three-characters",
        "utf-8-escapes-decode-to-one-character-each",
        "a-lone-percent-stays",
        "bad-utf-8",
    ],
)
def test_decode(raw: str, kind: urlparts.PartKind, expected: tuple[str, list[int]] | None) -> None:
    assert urlparts.decode(raw, kind) == expected


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [("Acme+Widget", "query", "form"), ("Acme%20Widget", "query", "url"), ("a+b", "path", "url")],
    ids=["plus-in-a-query-is-form-style", "escapes-are-url-style", "plus-in-a-path-is-a-plus"],
)
def test_encoding_of(raw: str, kind: urlparts.PartKind, expected: str) -> None:
    assert urlparts.encoding_of(raw, kind) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://x.test", True),
        ("HTTPS://X.TEST/a", True),
        ("/search?q=1", True),
        ("//cdn.test/x", False),
        ("search", False),
        ("mailto:x", False),
    ],
    ids=[
        "absolute",
        "any-case-scheme",
        "a-path-from-the-root",
        "scheme-relative-is-not",
        "a-word",
        "a-scheme-without-slashes",
    ],
)
def test_looks_like_url(value: str, expected: bool) -> None:
    assert urlparts.looks_like_url(value) is expected
