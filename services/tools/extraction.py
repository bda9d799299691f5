"""How browser_extract reads a field spec, and how page text is made readable.

A field spec is one of:
    "css"       the trimmed visible text of the first rendered element matching css
                inside the match
    "@attr"     the attribute `attr` of the match itself
    "css@attr"  the attribute `attr` of the first element matching css inside the match
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.tools.fingerprints import FINGERPRINT_JS

# An attribute name at the very end, after an "@". A CSS selector may contain "@" only
# inside a quoted attribute value (`a[href*="@"]`), which always ends with `]`, so
# it never matches here.
_ATTR_SUFFIX = re.compile(r"^(?P<css>.*)@(?P<attr>[A-Za-z_:][-A-Za-z0-9_:.]*)$", re.DOTALL)


@dataclass(frozen=True)
class FieldSpec:
    css: str | None  # None: the matched element itself
    attr: str | None  # None: its text

    def as_js(self) -> dict[str, str | None]:
        return {"css": self.css, "attr": self.attr}


def parse_field_spec(spec: str) -> FieldSpec:
    spec = spec.strip()
    match = _ATTR_SUFFIX.match(spec)
    if match:
        css = match.group("css").strip()
        return FieldSpec(css=css or None, attr=match.group("attr"))
    return FieldSpec(css=spec or None, attr=None)


# Runs in the page: one round trip for every match and field.
# - Matches not rendered (display:none, hidden by an ancestor, visibility:hidden) are
#   left out, for text and attributes alike, so a list of texts and a list of hrefs from
#   one selector stay aligned. (innerText of such an element would fall back to its
#   whole textContent: text no one sees on the page.)
# - Elements never rendered by nature are kept: <head> content (<meta>, <link>),
#   JSON-LD <script>, <template>, input[type=hidden], an <option> of a shown <select>.
#   What they hold is data, not hidden page text.
# - Inside a match, a field takes the first rendered element matching its css (a hidden
#   duplicate, like an old price, is skipped); an attribute falls back to a hidden one.
# - URL attributes come back absolute (against document.baseURI), as browser_navigate
#   takes them and as a person following the link would get them.
# - The drift fingerprint of what was read (fingerprints.py) is taken in the same
#   evaluate: no round trip of its own, and of the very elements the values came from.
EXTRACT_JS = """
(els, args) => {
  const URL_ATTRS = new Set(["href", "src", "action", "formaction", "poster", "cite", "data"]);
  const NEVER_RENDERED = "head, script, style, template, noscript, datalist, map, "
    + "input[type=hidden]";
  const contents = (el) => getComputedStyle(el).display === "contents";
  // Nor has a display:contents element (a grid's row wrapper): it shows where its
  // parent does, unless it hides itself.
  const visible = (el) => {
    let box = el;
    for (; box && contents(box); box = box.parentElement) {
      if (getComputedStyle(box).visibility !== "visible") return false;
    }
    return !box?.checkVisibility || box.checkVisibility({visibilityProperty: true});
  };
  const shown = (el) => {
    if (el.closest(NEVER_RENDERED)) return true;
    return visible(el.closest("select") ?? el);  // an option has no box of its own
  };
  // innerText of a display:contents element would be all its textContent, hidden
  // parts too: what its shown children show instead.
  const inner = (el) => !contents(el)
    ? (el.innerText ?? el.textContent ?? "")
    : [...el.childNodes].map((n) => n.nodeType === Node.TEXT_NODE ? n.data
        : n.nodeType === Node.ELEMENT_NODE && visible(n) ? ` ${inner(n)} ` : "").join("");
  const text = (el) => inner(el).replace(/\\s+/g, " ").trim();
  const attr = (el, name) => {
    const value = el.getAttribute(name);
    if (value === null || !URL_ATTRS.has(name.toLowerCase()) || value.trim() === "") {
      return value;
    }
    try {
      return new URL(value.trim(), document.baseURI).href;
    } catch {
      return value;  // not a URL after all: as written
    }
  };
  // The element a field reads in a match (null: none).
  const target = (el, spec) => {
    if (!spec.css) return el;
    const found = [...el.querySelectorAll(spec.css)].find(shown);
    return found ?? (spec.attr ? el.querySelector(spec.css) : null);
  };
  const read = (el, spec) => !el ? null : spec.attr ? attr(el, spec.attr) : text(el);
  // Without `fields`, the match itself is read: the field "" of the fingerprint.
  const specs = Object.entries(args.fields ?? {"": {css: null, attr: args.attribute}});
  const matches = els.filter(shown);
  const out = [];
  const picked = [];  // the elements read, for the fingerprint of the first matches
  for (const el of matches.slice(0, args.limit)) {
    const row = {};
    for (const [name, spec] of specs) row[name] = target(el, spec);
    const values = specs.map(([name, spec]) => [name, read(row[name], spec)]);
    out.push(args.fields ? Object.fromEntries(values) : values[0][1]);
    if (picked.length < args.fingerprint.items) {
      picked.push(Object.fromEntries(specs.slice(0, args.fingerprint.fields)
        .map(([name]) => [name, row[name]])));
    }
  }
  const fingerprint = FINGERPRINT_JS;
  return [matches.length, out, fingerprint(matches, picked, text, args.fingerprint)];
}
""".replace("FINGERPRINT_JS", FINGERPRINT_JS.strip())

_BLANK_RUN = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\u00a0]+")


def readable_text(raw: str) -> str:
    """Visible page text with runs of spaces and blank lines collapsed."""
    lines = (_SPACES.sub(" ", line).strip() for line in raw.splitlines())
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip()


# Runs in the page: its visible text. innerText leaves out what open shadow roots render
# (web components), so on a page that has some, the path down to each is walked by hand
# (slots resolved to what they show) and innerText used below it. A page without shadow
# roots gets exactly innerText, as before.
READ_PAGE_JS = """
() => {
  const body = document.body ?? document.documentElement;
  if (!body) return "";
  // Open shadow hosts and the slots in their roots (innerText misses what either
  // shows), and all their ancestors.
  const onPath = new Set();
  const mark = (el) => {
    for (let n = el; n && !onPath.has(n);) {
      onPath.add(n);
      const up = n.parentNode;
      n = up instanceof ShadowRoot ? up.host : n.parentElement;
    }
  };
  const find = (root) => {
    for (const el of root.querySelectorAll("*")) {
      if (el instanceof HTMLSlotElement && root instanceof ShadowRoot) mark(el);
      if (!el.shadowRoot) continue;
      mark(el);
      find(el.shadowRoot);
    }
  };
  find(document);
  if (!onPath.size) return body.innerText ?? "";
  const SKIP = new Set(["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT", "HEAD"]);
  const walk = (node) => {
    if (node.nodeType === Node.TEXT_NODE) return node.data.replace(/\\s+/g, " ");
    if (node.nodeType !== Node.ELEMENT_NODE || SKIP.has(node.tagName)) return "";
    if (node instanceof HTMLSlotElement) {
      const shown = node.assignedNodes({flatten: true});
      return [...(shown.length ? shown : node.childNodes)].map(walk).join("");
    }
    const style = getComputedStyle(node);
    if (style.display === "none") return "";
    const block = !style.display.startsWith("inline") && style.display !== "contents";
    const text = !onPath.has(node)
      ? (node.innerText ?? "")
      : [...(node.shadowRoot ?? node).childNodes].map(walk).join("");
    return block ? `\\n${text}\\n` : text;
  };
  return walk(body);
}
"""
