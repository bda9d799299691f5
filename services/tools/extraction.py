"""How browser_extract reads a field spec, and how page text is made readable.

A field spec is one of:
    "css"       the trimmed visible text of the first element matching css inside the match
    "@attr"     the attribute `attr` of the match itself
    "css@attr"  the attribute `attr` of the first element matching css inside the match
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


# Runs in the page: one round trip for every match and field. innerText is the rendered
# text (hidden elements contribute nothing); textContent is the fallback for elements
# that are not rendered at all.
EXTRACT_JS = """
(els, args) => {
  const text = (el) => (el.innerText ?? el.textContent ?? "").replace(/\\s+/g, " ").trim();
  const pick = (el, spec) => {
    const target = spec.css ? el.querySelector(spec.css) : el;
    if (!target) return null;
    return spec.attr ? target.getAttribute(spec.attr) : text(target);
  };
  const out = [];
  for (const el of els.slice(0, args.limit)) {
    if (args.fields) {
      const row = {};
      for (const [name, spec] of Object.entries(args.fields)) row[name] = pick(el, spec);
      out.push(row);
    } else {
      out.push(args.attribute ? el.getAttribute(args.attribute) : text(el));
    }
  }
  return [els.length, out];
}
"""

_BLANK_RUN = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\u00a0]+")


def readable_text(raw: str) -> str:
    """Visible page text with runs of spaces and blank lines collapsed."""
    lines = (_SPACES.sub(" ", line).strip() for line in raw.splitlines())
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip()
