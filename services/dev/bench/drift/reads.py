"""A drift page's reads as a replay's verification sees them (services/executor/
verification.py Read): what an extract finds on a page state, with a fingerprint of what
gives its values their meaning, taken from the page's DOM (the oracle's small DOM):

- `notes`: the short visible texts of the page outside the matches, in page order
  (paragraphs, headings, captions; not the navigation or the footer): "Today is ...",
  "Temperatures in °F.", "Newest first.", "* Discontinued: no longer sold.", "Updated ...";
- `headers`: the header labels of the table (or grid) the matches sit in;
- `labels`: per field, the label of its element in each match: its column's header, the
  <dt> before a <dd>, the item at the same place in a paired list of keys, an aria-label;
- `struck`: per field, whether its element is (or holds) struck-through text.

`paths` and `shapes` are left empty: no check of the benchmark reads them. This is the
benchmark's own reading of its pages, for tests that build verification prompts the way
rote would; the tools process takes real fingerprints in the browser.
"""

from __future__ import annotations

from typing import Any

from contracts.tools import MAX_FINGERPRINT_ITEMS, Fingerprint
from services.dev.bench.corpus_oracle import Node, parse, select
from services.dev.bench.drift.oracle import ORIGIN, extract
from services.dev.bench.drift.sites import SITES
from services.dev.bench.drift.state import PageState
from services.dev.bench.drift.tasks import DriftTask
from services.executor.verification import Read

_NOTE_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "caption", "figcaption"}
_OUTSIDE = {"nav", "footer", "head"}
MAX_NOTE_CHARS = 200  # a note is short; a longer paragraph is content, not a note


def _elements(node: Node) -> list[Node]:
    return [c for c in node.children if isinstance(c, Node)]


def _ancestors(node: Node) -> list[Node]:
    out = []
    at = node.parent
    while at is not None:
        out.append(at)
        at = at.parent
    return out


def _field_nodes(match: Node, fields: dict[str, Any] | None) -> dict[str, Node | None]:
    """Each field's element in one match: "" is the match itself."""
    if not isinstance(fields, dict):
        return {"": match}
    found: dict[str, Node | None] = {}
    for name, spec in fields.items():
        spec = str(spec)
        nodes = [match] if spec.startswith("@") else select(match, spec)
        found[name] = nodes[0] if nodes else None
    return found


def _table_head(node: Node) -> tuple[Node | None, list[Node]]:
    """The header cells of the table or grid `node` sits in, and the row it sits in
    (None when it sits in no such row)."""
    for at in [node, *_ancestors(node)]:
        parent = at.parent
        if at.tag == "tr" and parent is not None:
            table = next((a for a in _ancestors(at) if a.tag == "table"), None)
            heads = select(table, "thead th") if table is not None else []
            return (at if parent.tag != "thead" else None), heads
        classes = at.attrs.get("class", "").split()
        if "head" in classes:  # a grid's header cells themselves
            return None, _elements(at)
        if "row" in classes and parent is not None:
            head = next(
                (c for c in _elements(parent) if "head" in c.attrs.get("class", "").split()), None
            )
            return at, (_elements(head) if head is not None else [])
    return None, []


def _position(node: Node) -> int:
    assert node.parent is not None
    return next(i for i, c in enumerate(_elements(node.parent)) if c is node)


def label_of(node: Node) -> str | None:
    """The page's label of a value's element (see the module's docstring); None when it
    has none (a header cell, a whole row, an unlabelled item)."""
    if node.attrs.get("aria-label"):
        return node.attrs["aria-label"]
    row, heads = _table_head(node)
    if row is not None and node is not row:
        cell = next(a for a in [node, *_ancestors(node)] if a.parent is row)
        at = _position(cell)
        return heads[at].text if at < len(heads) else None
    parent = node.parent
    if node.tag == "dd" and parent is not None:
        before = _elements(parent)[: _position(node)]
        terms = [e for e in before if e.tag == "dt"]
        return terms[-1].text if terms else None
    if node.tag == "li" and parent is not None and parent.parent is not None:
        lists = _elements(parent.parent)
        at = next(i for i, e in enumerate(lists) if e is parent)
        if at > 0 and lists[at - 1].tag in ("ul", "ol"):
            keys = _elements(lists[at - 1])
            if len(keys) == len(_elements(parent)):
                return keys[_position(node)].text
    return None


def _struck(node: Node | None) -> bool:
    if node is None:
        return False
    return node.tag in ("s", "del", "strike") or any(
        n.tag in ("s", "del", "strike") for n in node.walk()
    )


def notes_of(doc: Node, matches: list[Node]) -> list[str]:
    """The page's short visible texts outside the matches, in page order."""
    inside = {id(n) for m in matches for n in [m, *m.walk()]}
    notes = []
    for node in doc.walk():
        if node.tag not in _NOTE_TAGS or id(node) in inside:
            continue
        if any(a.tag in _OUTSIDE for a in _ancestors(node)):
            continue
        text = node.text
        if text and len(text) <= MAX_NOTE_CHARS:
            notes.append(text)
    return notes


def fingerprint_of(doc: Node, tool_input: dict[str, Any]) -> Fingerprint:
    """What gives the values of an extract their meaning on the page `doc`."""
    matches = select(doc, str(tool_input["selector"]))
    per_match = [_field_nodes(m, tool_input.get("fields")) for m in matches]
    shown = per_match[:MAX_FINGERPRINT_ITEMS]
    names = list(shown[0]) if shown else []
    labels: dict[str, list[str | None]] = {}
    for name in names:
        found = [label_of(n) if (n := fields[name]) is not None else None for fields in shown]
        if any(label is not None for label in found):
            labels[name] = found
    struck = {name: [_struck(fields[name]) for fields in shown] for name in names}
    html = next((n for n in doc.walk() if n.tag == "html"), None)
    _, heads = _table_head(matches[0]) if matches else (None, [])
    return Fingerprint(
        lang=html.attrs.get("lang", "") if html is not None else "",
        notes=notes_of(doc, matches),
        headers=[h.text for h in heads],
        labels=labels,
        struck={name: flags for name, flags in struck.items() if any(flags)},
    )


def page_doc(task: DriftTask, state: PageState) -> Node:
    status, body = SITES[task.site].render(task.path, state)
    assert status == 200, f"{task.task_id}: {task.path} answered {status}"
    return parse(body)


def page_reads(
    task: DriftTask, state: PageState, inputs: list[dict[str, Any]], *, text: bool = False
) -> list[Read]:
    """What the extracts `inputs` read on `state`, as a verification is given them; with
    `text`, the page's text first (an executor that kept the run's browser_read_page)."""
    doc = page_doc(task, state)
    url = ORIGIN + task.path
    reads = [Read(1, "browser_read_page", "\n".join(doc.lines()), url=url)] if text else []
    for tool_input in inputs:
        reads.append(
            Read(
                len(reads) + 1,
                "browser_extract",
                extract(doc, tool_input),
                url=url,
                selector=str(tool_input["selector"]),
                fingerprint=fingerprint_of(doc, tool_input),
            )
        )
    return reads
