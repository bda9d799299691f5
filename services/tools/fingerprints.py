"""The drift fingerprint of a browser_extract (contracts.tools.Fingerprint): what gives
the values it read their meaning on the page, taken in the extraction's own call.

A page can keep every selector an executor reads and change what the values mean: a
column moved, a unit, a currency or a scale changed, a list reversed, a price struck
through, a page in another language or a stale copy. Nothing here knows those kinds:
the fingerprint records what a person reads the values by (the labels beside them, the
headers above them, the short texts around them, the page's language, whether they
are struck through, where they sit and how they are written), so that a replay can
compare it with the recording (services/executor/drift.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from contracts.tools import MAX_FINGERPRINT_ITEMS, Fingerprint
from services.executor.drift import value_shapes
from services.tools.bounds import well_formed_value

# The fields of one extract that get a fingerprint: far more than any table a person
# reads, and a bound on its size (fields x items x label chars).
MAX_FINGERPRINT_FIELDS = 20
# A label or header longer than this is cut: a label names, it does not tell.
MAX_LABEL_CHARS = 80
# Notes: at most so many, each at most so long (a longer text is content, not a note).
MAX_NOTES = 30
MAX_NOTE_CHARS = 200

# What EXTRACT_JS is given for the fingerprint (its `args.fingerprint`); `items` also
# bounds the headers kept.
FINGERPRINT_LIMITS = {
    "items": MAX_FINGERPRINT_ITEMS,
    "fields": MAX_FINGERPRINT_FIELDS,
    "labelChars": MAX_LABEL_CHARS,
    "notes": MAX_NOTES,
    "noteChars": MAX_NOTE_CHARS,
}

# Runs in the page, inside EXTRACT_JS's evaluate (no round trip of its own), as
#   fingerprint(matches, picked, text, limits)
# `matches`: the shown matches; `picked`: for each of the first MAX_FINGERPRINT_ITEMS
# matches, {field: the element the field read, or null}; `text`: EXTRACT_JS's visible
# text of an element; `limits`: FINGERPRINT_LIMITS. Returns {lang, notes, headers,
# labels, struck, paths}.
FINGERPRINT_JS = """
(matches, picked, text, limits) => {
  const LABEL_CHARS = limits.labelChars;
  const MAX_NOTES = limits.notes;
  const NOTE_CHARS = limits.noteChars;
  const cut = (s) => s.length > LABEL_CHARS ? s.slice(0, LABEL_CHARS) : s;
  const said = new Map();  // header cells are read once per match: their text once
  const textOf = (el) => {
    if (!said.has(el)) said.set(el, cut(text(el)));
    return said.get(el);
  };
  const kind = (el) => `${el.tagName}.${el.getAttribute("class") ?? ""}`;

  // A table's header row, which labels its columns by cell index: the last row of its
  // <thead>, else a first row holding <th> cells.
  const headRow = (table) => {
    const head = table.tHead?.rows;
    if (head?.length) return head[head.length - 1];
    const first = table.rows[0];
    return first && [...first.cells].some((c) => c.tagName === "TH") ? first : null;
  };
  // A CSS grid or flex table has no <th>: its head is its first row, followed by two
  // rows or more of one kind with as many cells, and itself of another kind (class or
  // tag) or made of columnheaders. A list of look-alike items is no table (its first
  // item is no head), nor are a page's blocks (a <nav> before them is no head row).
  const gridHead = (row) => {
    const parent = row?.parentElement;
    if (!parent || row === document.body || row.tagName === "TR") return null;
    const head = parent.firstElementChild;
    const next = head.nextElementSibling;
    const other = head === row ? next : row;
    const n = head.childElementCount;
    const alike = (el) => el && kind(el) === kind(other) && el.childElementCount === n;
    if (n < 2 || !other || row.childElementCount !== n || !alike(next)
        || !alike(next.nextElementSibling)) return null;
    const columnheaders = [...head.children].every(
      (c) => c.getAttribute("role") === "columnheader");
    return columnheaders || kind(head) !== kind(other) ? head : null;
  };
  // The cell of a grid row `el` is, or sits in (two levels up at most, and no higher
  // than `top`: the match), with the row's head.
  const gridCell = (el, top) => {
    for (let cell = el, up = 0; cell && up < 3; cell = cell.parentElement, up++) {
      const head = gridHead(cell.parentElement);
      if (head) return {head, index: [...cell.parentElement.children].indexOf(cell)};
      if (cell === top) break;
    }
    return null;
  };
  const tableHeaders = (table) => {
    const cells = table.tHead ? [...table.tHead.querySelectorAll("th")]
      : [...(headRow(table)?.cells ?? [])].filter((c) => c.tagName === "TH");
    return cells.map(textOf);
  };
  // The headers of the table or grid the first match's values sit in.
  const headersOf = (match, elements) => {
    for (const el of [...elements, match, match.firstElementChild]) {
      const table = el?.closest("table");
      if (table && headRow(table)) return tableHeaders(table);
      const grid = el && gridCell(el, el === match.firstElementChild ? el : match);
      if (grid) return [...grid.head.children].map(textOf);
    }
    return [];
  };
  // What a person reads a value by, tried in turn: the header of its column (a table
  // or a grid), the <dt> before its <dd>, the item at the same place of a parallel list
  // of plain texts before its own, its aria-label or <label>; else besideOf.
  const labelOf = (el, match) => {
    if (!el) return null;
    const cell = el.closest("td, th");
    const table = cell?.closest("table");
    const row = table && headRow(table);
    if (row?.cells[cell.cellIndex]) return textOf(row.cells[cell.cellIndex]);
    const grid = gridCell(el, match);
    if (grid) return textOf(grid.head.children[grid.index]);
    const dd = el.closest("dd");
    if (dd) {
      let dt = dd.previousElementSibling;
      while (dt && dt.tagName !== "DT") dt = dt.previousElementSibling;
      if (dt) return textOf(dt);
    }
    const li = el.closest("li");
    const list = li?.parentElement;
    const before = list?.previousElementSibling;
    if (before && /^(UL|OL)$/.test(before.tagName)
        && before.childElementCount === list.childElementCount) {
      const paired = before.children[[...list.children].indexOf(li)];
      if (!paired.childElementCount) return textOf(paired);
    }
    const aria = el.getAttribute("aria-label")?.trim();
    if (aria) return cut(aria.replace(/\\s+/g, " "));
    return el.labels?.length ? textOf(el.labels[0]) : null;
  };
  // A short label-like element just before it: of another kind (not the previous item
  // of a list) and without digits (a neighbouring value is no label). A <dt> is a
  // label itself.
  const besideOf = (el) => {
    const prev = el?.previousElementSibling;
    if (!prev || el.tagName === "DT" || kind(prev) === kind(el)) return null;
    const shown = textOf(prev);
    return shown && shown.length <= 40 && !/\\d/.test(shown) ? shown : null;
  };
  // A field's labels in the first matches. A text beside a value is its label only
  // when it is the same beside every value: one that differs is a neighbouring value
  // (a product's name beside its price), which changes with every edition.
  const labelsOf = (elements) => {
    const found = elements.map((el, i) => labelOf(el, matches[i]));
    const beside = elements.map((el, i) => found[i] === null ? besideOf(el) : null);
    const same = new Set(beside.filter((b) => b !== null)).size <= 1;
    return found.map((label, i) => label ?? (same ? beside[i] : null));
  };
  // Struck through: <s>, <del>, <strike> around it, a line-through on it or an
  // ancestor within the match (text-decoration is not inherited, so each is looked
  // at), or inside it: a price struck in its cell, <td><s>34.00</s></td>.
  const STRUCK = "s, del, strike";
  const lined = (el) => getComputedStyle(el).textDecorationLine.includes("line-through");
  const struckOf = (el, match) => {
    if (!el) return false;
    if (el.closest(STRUCK) || el.querySelector(STRUCK)) return true;
    for (let up = el; up; up = up.parentElement) {
      if (lined(up)) return true;
      if (up === match) break;
    }
    return [...el.querySelectorAll("*")].slice(0, 8).some(lined);
  };
  // Tag names from the match's container (two levels above it) down to the element.
  const pathOf = (el, match) => {
    const top = match.parentElement?.parentElement ?? match.parentElement ?? match;
    const tags = [];
    for (let up = el; up && tags.length < 6; up = up.parentElement) {
      tags.unshift(up.tagName.toLowerCase());
      if (up === top) break;
    }
    return tags.join(">");
  };
  // Notes: the short texts a person reads the values by (a caption, a unit line, an
  // "Updated" line, a footnote, a heading), never the values themselves nor the site's
  // navigation. One querySelectorAll; the nearest kept when there are many: those
  // sharing the deepest ancestor with the first match, then the closest in page order.
  const NOTE_TAGS = "p, caption, figcaption, small, h1, h2, h3, h4, h5, h6, time, "
    + "legend, [role=note], [role=status]";
  const notesNear = (anchor) => {
    const matched = new Set(matches);
    const holding = new Set();  // the matches' ancestors: a block holding a value
    for (const m of matches) {
      for (let up = m.parentElement; up && !holding.has(up); up = up.parentElement) {
        holding.add(up);
      }
    }
    const inMatch = (el) => {
      for (let up = el; up; up = up.parentElement) if (matched.has(up)) return true;
      return false;
    };
    const blocks = [...document.querySelectorAll(NOTE_TAGS)].filter((el) =>
      !holding.has(el) && !el.parentElement?.closest(NOTE_TAGS)
      && !el.closest("nav, [role=navigation], a") && !inMatch(el)
      && el.textContent.length <= 4 * NOTE_CHARS);
    const depth = new Map();
    let level = 0;
    for (let up = anchor; up; up = up.parentElement) depth.set(up, level--);
    const shared = (el) => {
      for (let up = el; up; up = up.parentElement) if (depth.has(up)) return depth.get(up);
      return -Infinity;
    };
    let after = 0;  // where the anchor stands among the blocks
    if (anchor) {
      let hi = blocks.length;
      while (after < hi) {
        const mid = (after + hi) >> 1;
        const follows = anchor.compareDocumentPosition(blocks[mid])
          & Node.DOCUMENT_POSITION_FOLLOWING;
        if (follows) hi = mid; else after = mid + 1;
      }
    }
    const ranked = blocks.map((el, i) => ({el, i, near: shared(el), far: Math.abs(i - after)}))
      .sort((a, b) => (b.near - a.near) || (a.far - b.far));
    const kept = [];
    for (const {el, i} of ranked) {
      if (kept.length >= MAX_NOTES) break;
      if (el.checkVisibility && !el.checkVisibility({visibilityProperty: true})) continue;
      const shown = text(el);
      if (!shown || shown.length > NOTE_CHARS) continue;
      const link = el.querySelector("a");  // a headline that is a link is content
      if (link && text(link) === shown) continue;
      kept.push({i, shown});
    }
    return kept.sort((a, b) => a.i - b.i).map((k) => k.shown);
  };
  const labels = {}, struck = {}, paths = {};
  for (const name of Object.keys(picked[0] ?? {})) {
    const elements = picked.map((row) => row[name]);
    labels[name] = labelsOf(elements);
    struck[name] = elements.map((el, i) => struckOf(el, matches[i]));
    const first = elements.findIndex((el) => el);
    if (first >= 0) paths[name] = pathOf(elements[first], matches[first]);
  }
  return {
    lang: document.documentElement.lang ?? "",
    notes: notesNear(matches[0]),
    headers: matches.length
      ? headersOf(matches[0], Object.values(picked[0] ?? {})).slice(0, limits.items) : [],
    labels, struck, paths,
  };
}
"""


def fingerprint_of(found: Any, items: list[Any], fields: list[str] | None) -> Fingerprint:
    """The fingerprint FINGERPRINT_JS `found`, with the shapes of the `items` read (per
    field; "" for the matches themselves when there are no `fields`)."""
    # A page's text may hold a lone surrogate (an emoji cut by a script): JSON cannot.
    fingerprint = msgspec.convert(well_formed_value(found), Fingerprint)
    if not items:
        return fingerprint
    if fields is None:
        fingerprint.shapes = {"": value_shapes(items)}
    else:
        rows = [item for item in items if isinstance(item, dict)]
        fingerprint.shapes = {
            name: value_shapes([row.get(name) for row in rows])
            for name in fields[:MAX_FINGERPRINT_FIELDS]
        }
    return fingerprint
