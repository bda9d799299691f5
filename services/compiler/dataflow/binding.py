"""Text several list items hold: which item a reference reads (`bind`).

"API: Operational\nWeb app: Operational": three components are "Operational", and the
template found for the answer leaves that part open (`Template.open`). The references
beside it say whose it is: the name before it in its clause, or the item the rest of its
line, its block or its value reads. When nothing says, the value is a judgement: the
small model reads it again rather than every replay reading the first item.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from services.compiler.dataflow.sources import Pointer, Provenance, Record, Template, record_of
from services.executor import references

_Key = TypeVar("_Key", bound=Hashable)

# A line that starts an item of its own: a bullet or a number ("- ", "2. ").
_BULLET = re.compile(r"(?:[-*+\u2022]|\d+[.)]|#\d+)(?:\s|$)")

Scope = tuple[object, ...]  # (value,), (value, "line", n) or (value, "block", n)
Place = tuple[int, int, int]  # (clause, line, block)


def places(template: Template) -> list[Place]:
    """Where each part starts: (clause, line, block) of the value, counted from 0. A
    clause ends at a comma, a semicolon, a table's bar, a sentence's end or a line's; a
    block (one item's lines: "Name: API\nState: Operational") ends at a blank line or
    before a line that starts with a bullet or a number."""
    clause = line = block = 0
    content = False  # the line so far holds something
    blank_before = False  # the line before this one was blank
    starting = False  # no content on this line yet, after a line break
    found: list[Place] = []
    for part in template.parts:
        if isinstance(part, Pointer):
            if starting:
                block += blank_before
                starting = False
            found.append((clause, line, block))
            content = True
            continue
        found.append((clause, line, block))
        for k, ch in enumerate(part):
            if ch == "\n":
                line += 1
                clause += 1
                blank_before, content, starting = not content, False, True
            elif not ch.isspace():
                if starting:
                    block += blank_before or _BULLET.match(part, k) is not None
                    starting = False
                content = True
                if ch in ",;|" or (ch in ".!?" and part[k + 1 : k + 2].isspace()):
                    clause += 1
    return found


def bind(values: Mapping[_Key, Provenance]) -> dict[_Key, Provenance]:
    """Decide, for every open part (text several records hold: "Operational" is the
    state of items 0, 1 and 3; a short word such as "OK"), which record it reads: the
    record of the nearest reference before it in its clause ("API (Operational), Web app
    (Operational)"), else the one a reference reads in the narrowest of these with one
    holding the text, and whose references account for all its open parts: its line,
    its block ("Name: Web app\nState: Operational"), the whole value; else another value
    of the same input (a form's other field). When none does, or two records there hold
    it, the value is a judgement: the small model reads it again rather than every
    replay reading the first record. `values` are the values of one step's input, or the
    answer alone."""
    survey = _survey(values)
    bound: dict[_Key, Provenance] = {}
    for key, prov in values.items():
        template = prov.template
        if template is None or not template.open:
            bound[key] = prov
        else:
            bound[key] = _bind_value(key, prov, template, survey)
    return bound


@dataclass
class _Survey:
    """Where the references and open parts of one input's values stand."""

    anchors: dict[Scope, set[Record]] = field(default_factory=dict)  # read in each scope
    before: dict[tuple[Hashable, int], list[tuple[int, Record]]] = field(
        default_factory=dict
    )  # by (value, clause): the records read there, in order
    inside: dict[Scope, list[int]] = field(default_factory=dict)  # open parts' texts
    places: dict[Hashable, list[Place]] = field(default_factory=dict)
    holders: dict[int, dict[Record, Pointer]] = field(default_factory=dict)  # by id(pointers)
    fields: dict[int, dict[Record, int]] = field(default_factory=dict)  # fields holding it
    accounted: dict[Scope, bool] = field(default_factory=dict)

    def accounts(self, scope: Scope) -> bool:
        """Do the records the scope's references read hold every open part in it, each
        text as many times as it appears? "Up - Gamma, Up - Up" has one "Up" of Gamma's
        and two of an item no reference reads: which is which, none can tell."""
        if scope not in self.accounted:
            near = self.anchors.get(scope, set())
            needed: dict[int, int] = {}
            for text in self.inside.get(scope, ()):
                needed[text] = needed.get(text, 0) + 1
            self.accounted[scope] = all(
                sum(self.fields[text].get(r, 0) for r in near) >= n for text, n in needed.items()
            )
        return self.accounted[scope]

    def choose(self, key: Hashable, i: int, held: Mapping[Record, Pointer]) -> list[Record]:
        """The records that may be the one part `i` of value `key` reads."""
        clause, line, block = self.places[key][i]
        earlier = [r for n, r in self.before.get((key, clause), []) if n < i]
        if earlier and earlier[-1] in held:
            return [earlier[-1]]
        for scope in ((key, "line", line), (key, "block", block), (key,)):
            hits = [r for r in self.anchors.get(scope, ()) if r in held]
            if hits and self.accounts(scope):
                return hits
        return sorted(
            {r for k in self.places if k != key for r in self.anchors.get((k,), ()) if r in held},
            key=repr,
        )


def _survey(values: Mapping[_Key, Provenance]) -> _Survey:
    survey = _Survey()
    for key, prov in values.items():
        if prov.template is None:
            continue
        survey.places[key] = places(prov.template)
        opened = dict(prov.template.open)
        for i, part in enumerate(prov.template.parts):
            if not isinstance(part, Pointer):
                continue
            clause, line, block = survey.places[key][i]
            scopes: tuple[Scope, ...] = ((key, "line", line), (key, "block", block), (key,))
            pointers = opened.get(i)
            if pointers is None:
                record = record_of(part)
                survey.before.setdefault((key, clause), []).append((i, record))
                for scope in scopes:
                    survey.anchors.setdefault(scope, set()).add(record)
                continue
            for scope in scopes:
                survey.inside.setdefault(scope, []).append(id(pointers))
            if id(pointers) not in survey.holders:
                held: dict[Record, Pointer] = {}
                count: dict[Record, int] = {}
                for pointer in pointers:
                    record = record_of(pointer)
                    held.setdefault(record, pointer)
                    count[record] = count.get(record, 0) + 1
                survey.holders[id(pointers)], survey.fields[id(pointers)] = held, count
    return survey


def _bind_value(key: Hashable, prov: Provenance, template: Template, survey: _Survey) -> Provenance:
    """The value with each open part pointing at the record it reads, or a judgement
    when one part's record cannot be told."""
    parts = list(template.parts)
    for i, pointers in template.open:
        held = survey.holders[id(pointers)]
        hits = survey.choose(key, i, held)
        if len(hits) != 1:
            paths = ", ".join(references.format_path(r[1]) or "the output" for r in held)
            holds, whose = ("hold", "which one") if len(held) > 1 else ("holds", "whether")
            why = (
                f"{paths} in the output of step {pointers[0].step} {holds} the text, and "
                f"no reference beside it says {whose} it is the one read"
            )
            return Provenance("judgement", why, sources=prov.sources)
        was = template.parts[i]
        # The item is decided; how the place it stands in encodes it is not.
        encoding = was.encoding if isinstance(was, Pointer) else None
        parts[i] = replace(held[hits[0]], encoding=encoding)
    return replace(prov, template=Template(tuple(parts)))
