"""What the stand-in model's full run answers on a corpus page state, computed offline.

The cost benchmark's corpus (services/dev/bench/corpus/) is read with a small DOM
(html.parser) and a matcher for the simple selectors the stand-in uses (tags, classes,
[attr], the descendant combinator); the stand-in's own policy functions (candidate
lists, cheapest, detail and confirmation lines, list formatting) turn what they find into
the answer. The unit tests check the corpus with it; the benchmark checks the full runs'
answers against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlsplit

from services.dev.bench.corpus.site import Layout
from services.dev.bench.corpus.tasks import SITES, CorpusTask, SiteServer
from services.dev.standin.reading import cheapest, confirmation_line, detail_value, format_list
from services.dev.standin.scripts import (
    CANDIDATE_RECORDS,
    CANDIDATE_SELECTORS,
    READ_LINES,
    Cheapest,
    Extract,
    FillForm,
    ReadPage,
    TopN,
)
from services.dev.standin.vocabulary import parse_task

ORIGIN = "http://127.0.0.1:8000"

# --- a small DOM ----------------------------------------------------------------------------

_VOID = {"input", "br", "meta", "img", "hr", "link", "source", "wbr"}
_BLOCK = {"html", "body", "p", "li", "div", "h1", "h2", "h3", "h4", "tr", "nav", "footer",
          "header", "legend", "fieldset", "article", "section", "main", "ul", "ol", "table",
          "thead", "tbody", "form", "dl", "dt", "dd"}  # fmt: skip
_HIDDEN = {"head", "title", "script", "style", "template"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node | str] = field(default_factory=list)

    def walk(self) -> list[Node]:
        out: list[Node] = []
        for child in self.children:
            if isinstance(child, Node):
                out.append(child)
                out += child.walk()
        return out

    @property
    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text for c in self.children]
        return " ".join(" ".join(parts).split())

    def lines(self) -> list[str]:
        """Roughly innerText: block elements start new lines."""
        out: list[str] = []
        current: list[str] = []
        for child in self.children:
            if isinstance(child, Node) and child.tag in _HIDDEN:
                continue
            if isinstance(child, Node) and child.tag in _BLOCK:
                if current:
                    out.append(" ".join(" ".join(current).split()))
                    current = []
                out += child.lines()
            else:
                current.append(child if isinstance(child, str) else child.text)
        if current:
            out.append(" ".join(" ".join(current).split()))
        return [line for line in out if line]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.at = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in _VOID:
            self.at = node

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.at
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"unbalanced </{tag}>"
        self.at = node.parent

    def handle_data(self, data: str) -> None:
        self.at.children.append(data)


def parse(html: bytes) -> Node:
    builder = _Builder()
    builder.feed(html.decode())
    builder.close()
    assert builder.at is builder.root, f"unclosed <{builder.at.tag}>"
    return builder.root


_COMPOUND = re.compile(
    r"^(?P<tag>[a-z][a-z0-9]*)?(?P<classes>(?:\.[\w-]+)*)(?:\[(?P<attr>[\w-]+)\])?"
    r"(?::nth-child\((?P<nth>\d+)\))?$"
)


def _position(node: Node) -> int:
    """1-based, among its parent's element children (CSS :nth-child)."""
    if node.parent is None:
        return 1
    siblings = [c for c in node.parent.children if isinstance(c, Node)]
    return next(i for i, c in enumerate(siblings, 1) if c is node)


def _matches(node: Node, compound: str) -> bool:
    m = _COMPOUND.match(compound)
    assert m, f"selector part {compound!r} is beyond this test's matcher"
    if m["tag"] and node.tag != m["tag"]:
        return False
    classes = set(node.attrs.get("class", "").split())
    if any(c not in classes for c in m["classes"].split(".")[1:]):
        return False
    if m["nth"] and _position(node) != int(m["nth"]):
        return False
    return not (m["attr"] and m["attr"] not in node.attrs)


def select(root: Node, selector: str) -> list[Node]:
    parts = selector.split()
    out = []
    for node in root.walk():
        if not _matches(node, parts[-1]):
            continue
        ancestor, rest = node.parent, parts[:-1]
        while rest and ancestor is not None:
            if _matches(ancestor, rest[-1]):
                rest = rest[:-1]
            ancestor = ancestor.parent
        if not rest:
            out.append(node)
    return out


def field_value(node: Node, spec: str) -> str | None:
    if spec.startswith("@"):
        return node.attrs.get(spec[1:])
    found = select(node, spec)
    return found[0].text if found else None


# --- what a full run by the stand-in would see ----------------------------------------------


@dataclass
class Visit:
    server: SiteServer
    path: str

    def get(self, path: str) -> Node:
        status, body = self.server.render(path)
        assert status == 200, f"{self.server.site.name} {path} answered {status}"
        self.path = path
        return parse(body)


def path_of(task: CorpusTask) -> str:
    parsed = parse_task(task.prompt_for(ORIGIN))
    assert parsed is not None and hasattr(parsed, "url")
    url = parsed.url
    assert url.startswith(ORIGIN)
    return urlsplit(url).path


def click_target(doc: Node, text: str) -> str:
    links = [a for a in select(doc, "a") if a.text == text]
    assert links, f"no link reads {text!r}"
    return links[0].attrs["href"]


def list_page(task: CorpusTask, server: SiteServer) -> tuple[Node, TopN]:
    parsed = parse_task(task.prompt_for(ORIGIN))
    assert isinstance(parsed, TopN)
    visit = Visit(server, "")
    doc = visit.get(path_of(task))
    if parsed.click is not None:
        doc = visit.get(click_target(doc, parsed.click))
    return doc, parsed


def found_list(task: CorpusTask, server: SiteServer) -> tuple[str, list[str]]:
    """The candidate selector a full run settles on, and the items it extracts."""
    doc, parsed = list_page(task, server)
    for selector in CANDIDATE_SELECTORS:
        items = [n.text for n in select(doc, selector) if n.text]
        if len(items) >= parsed.n:
            return selector, items
    raise AssertionError(f"{task.task_id}: no candidate selector finds {parsed.n} items")


def records(doc: Node, selector: str, fields: dict[str, str]) -> list[dict[str, str | None]]:
    return [
        {k: field_value(row, spec) for k, spec in fields.items()} for row in select(doc, selector)
    ]


def found_records(task: CorpusTask, server: SiteServer) -> tuple[str, list[dict[str, str | None]]]:
    doc = Visit(server, "").get(path_of(task))
    for selector, fields in CANDIDATE_RECORDS:
        rows = records(doc, selector, fields)
        if cheapest(rows) is not None:
            return selector, rows
    raise AssertionError(f"{task.task_id}: no candidate record finds a priced item")


def expected_answer(task: CorpusTask, server: SiteServer) -> str:
    """What the stand-in's full run answers on the server's current page state."""
    parsed = parse_task(task.prompt_for(ORIGIN))
    if isinstance(parsed, TopN):
        _, items = found_list(task, server)
        return format_list(f"Top {parsed.n} {parsed.things}:", items[: parsed.n])
    if isinstance(parsed, Cheapest):
        _, rows = found_records(task, server)
        best = cheapest(rows)
        assert best is not None
        answer = f"Cheapest {parsed.thing}: {best['name']} at {best['price']}"
        if parsed.detail is None:
            return answer
        visit = Visit(server, "")
        doc = visit.get(path_of(task))
        detail = visit.get(click_target(doc, str(best["name"])))
        value = detail_value("\n".join(detail.lines()), parsed.detail)
        assert value, f"{task.task_id}: the detail page has no {parsed.detail}"
        return f"{answer}; {parsed.detail}: {value}"
    if isinstance(parsed, FillForm):
        doc = Visit(server, "").get(path_of(task))
        names = {n.attrs.get("name") for n in select(doc, "form")[0].walk()}
        missing = set(parsed.fields) - names
        assert not missing, f"{task.task_id}: the form has no field {missing}"
        action = select(doc, "form")[0].attrs["action"]
        status, body = server.render(action, dict(parsed.fields))
        assert status == 200
        line = confirmation_line("\n".join(parse(body).lines()))
        assert line, f"{task.task_id}: no confirmation on {action}"
        return f"Confirmation: {line}"
    if isinstance(parsed, ReadPage):
        lines = Visit(server, "").get(path_of(task)).lines()
        return "\n".join(["The page reads:", *lines[:READ_LINES]])
    if isinstance(parsed, Extract):
        doc = Visit(server, "").get(path_of(task))
        items = [n.text for n in select(doc, parsed.selector)]
        assert items, f"{task.task_id}: {parsed.selector} matches nothing"
        return format_list(f"Items matching {parsed.selector}:", items)
    raise AssertionError(f"{task.task_id}: unexpected task {parsed!r}")


def state(task: CorpusTask, layout: Layout, edition: int) -> SiteServer:
    """A server object at a page state, rendered in-process (never started)."""
    return SiteServer(SITES[task.site], layout=layout, edition=edition)
